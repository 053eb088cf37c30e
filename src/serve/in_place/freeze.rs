//! A leased pack frozen when a writer breaks its lease: its bytes copied
//! into an in-memory file, mapped over the pack's own addresses and put
//! at the pack's descriptor number, before the lease is let go.

use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use rustix::fs::{MemfdFlags, memfd_create};
use rustix::io::DupFlags;
use rustix::mm::{MapFlags, ProtFlags};

/// Copies the `len` bytes mapped at `start` (the pack of `fd`, whose
/// writer is held back by the lease, so they are whole) into an
/// in-memory file; maps it over them, so that every reader, mid-response
/// included, goes on reading the same bytes; puts it at `fd`'s number, so
/// that `sendfile` and `splice` of the pack read the copy too, which
/// closes the file and lets its lease go: the writer proceeds on a file
/// nothing reads any more. On an error before the mapping, the pack is as
/// it was.
pub fn freeze(fd: BorrowedFd<'_>, start: usize, len: usize) -> std::io::Result<()> {
    let copy = memfd_create("kiln-pack-copy", MemfdFlags::CLOEXEC)?;
    rustix::fs::ftruncate(&copy, len as u64)?;
    // SAFETY: the pack's live mapping (its guard is held by the caller's
    // lock), which no writer can change while the lease holds.
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
    let mut done = 0;
    while done < bytes.len() {
        match rustix::io::pwrite(&copy, &bytes[done..], done as u64) {
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero)),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // SAFETY: replaces the pages of our own mapping at the same addresses
    // with pages of the same bytes: every reference into it stays valid
    // and reads what it read. The pack's munmap unmaps the copy later.
    unsafe {
        rustix::mm::mmap(
            start as *mut std::ffi::c_void,
            len,
            ProtFlags::READ,
            MapFlags::SHARED | MapFlags::FIXED,
            &copy,
            0,
        )?;
    }
    // SAFETY: `fd` is the pack's own descriptor, open while the caller
    // holds the lock; dup3 replaces what the number refers to without
    // closing the number, which stays the pack's (never dropped here).
    // The file's last descriptor closed, its lease goes with it: the
    // writer proceeds (`F_UNLCK` would need the file's owner or CAP_LEASE
    // again; closing needs neither).
    let mut at = ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(fd.as_raw_fd()) });
    rustix::io::dup3(&copy, &mut at, DupFlags::CLOEXEC)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn a_frozen_mapping_and_descriptor_keep_their_bytes_when_the_file_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("site.pack");
        let old: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &old).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: the test's own file, mapped read-only.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        freeze(file.as_fd(), map.as_ptr() as usize, map.len()).unwrap();
        // Written in place, shorter: the mapping would fault past 10 bytes.
        let mut writer = std::fs::File::create(&path).unwrap();
        writer.write_all(b"new bytes!").unwrap();
        drop(writer);
        assert_eq!(&map[..], &old[..]);
        let mut read = vec![0u8; old.len()];
        let n = rustix::io::pread(&file, &mut read, 0).unwrap();
        assert_eq!(&read[..n], &old[..], "the descriptor reads the copy");
        assert_eq!(std::fs::read(&path).unwrap(), b"new bytes!");
    }
}
