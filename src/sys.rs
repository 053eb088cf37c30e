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

/// Blocks `signals` in the calling thread (and so in every thread it
/// spawns afterwards) and returns a signalfd that reads them: rustix has
/// neither `pthread_sigmask` (the C library's, which keeps its own
/// signals) nor `signalfd`.
pub fn block_signals_into_signalfd(
    signals: &[rustix::process::Signal],
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: the set is a local, initialised by sigemptyset before use;
    // pthread_sigmask and signalfd read it and the results are checked;
    // the descriptor signalfd returns is fresh and owned from here.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in signals {
            libc::sigaddset(&mut set, signal.as_raw());
        }
        let errno = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if errno != 0 {
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(std::os::fd::OwnedFd::from_raw_fd(fd))
    }
}

/// What one read of a signalfd returns per signal (`signalfd_siginfo`);
/// its first four bytes are the signal's number.
pub const SIGNALFD_SIGINFO_BYTES: usize = std::mem::size_of::<libc::signalfd_siginfo>();

/// Starts writing back `len` bytes of `file` from `offset`, without
/// waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which rustix lacks).
/// A failure only means the final sync does all the work.
pub fn start_writeback(file: std::os::fd::BorrowedFd<'_>, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on a descriptor the caller holds open;
    // it touches no memory of ours.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Returns the allocator's free memory to the system (glibc's
/// `malloc_trim`; other C libraries have nothing to call).
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}
