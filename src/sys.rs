//! The system calls and kernel types rustix does not cover, the only place
//! `libc` is named. Everything else goes through `rustix`: this module
//! holds what is left, each with why it is here and its SAFETY note.

/// The iovec the io_uring crate's `Writev` takes (its API is in `libc`
/// types): one per segment of a ring's `writev`.
pub type Iovec = libc::iovec;

/// The iovec of `slice`, for a `writev` on a ring: the caller keeps
/// `slice` alive until the operation completes.
pub fn iovec(slice: &[u8]) -> Iovec {
    Iovec {
        iov_base: slice.as_ptr() as *mut libc::c_void,
        iov_len: slice.len(),
    }
}
