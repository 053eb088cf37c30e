//! A pack written in place under the server (`cp new.pack site.pack`:
//! the file opened with `O_TRUNC` and written, where a deploy should
//! rename a new file over it). The mapping every response points into
//! would shrink and then fill with the new pack's bytes: reads past the
//! new end fault (SIGBUS, which ended the server), reads before it mix
//! two packs. Two ways to survive it, per pack:
//!
//! - **A read lease** (`freeze.rs`), taken when the pack is opened: the
//!   kernel holds the writer's `open` back and sends SIGIO, which the
//!   control thread reads from its signalfd; it copies the pack into an
//!   in-memory file, maps the copy over the same addresses and puts it
//!   at the same descriptor number (for `sendfile` and `splice`), which
//!   closes the file and so lets the lease go. Responses in flight finish
//!   from the copy, which keeps serving until the new pack is whole and
//!   verifies (the close of the writer's file reloads it, as a rename
//!   does). The copy costs the pack's size in memory meanwhile, and a
//!   loop that drops a pack waits for a copy being made (the lock).
//! - **Without a lease** (not the file's owner and no CAP_LEASE, a
//!   filesystem without leases, a writer that had the file open already;
//!   `KILN_DEBUG_REFUSE_LEASES=1` in debug builds): the first change
//!   (inotify's `IN_MODIFY`, read by the control thread) or the first
//!   fault (`fault.rs`: a zero page mapped over the faulting one so that
//!   the read completes) marks the pack *stale*: its site answers 503
//!   with `Retry-After`, and output still to be sent from it fails its
//!   connection (the backing gives no bytes for it, see `stack.rs`; an
//!   HTTP/2 stream is reset), so
//!   that no zero page goes out as content, until the new pack is whole
//!   and reloaded. That mark comes a moment after the write; what keeps
//!   a response from completing with bytes read before and after it is
//!   the last byte of each body, held back (`Seg::Checked`) until
//!   everything before it was read and [`Guard::unchanged`] finds the
//!   file's size and modification time as they were at open (what it does
//!   not cover: `docs/deploy.md`).
//!
//! Either way one warning per event names the file and the fix: deploy
//! by rename. Packs are tracked in a fixed table that the SIGBUS handler
//! reads without a lock ([`MAPPINGS`]) and, for the control thread, in a
//! list under a lock ([`TRACKED`]) that a pack's drop also takes, so that
//! its descriptor stays open while it is copied.

mod fault;
mod freeze;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

pub use self::fault::install_fault_handler;
use crate::pack::Pack;
use crate::sys;

/// Packs tracked at once (a folder of sites has one per site, and a
/// reload holds two for a moment); more are served without this guard,
/// said once.
const MAX_PACKS: usize = 4096;

/// One pack's mapping, as the SIGBUS handler sees it: `len` 0 when the
/// entry is free.
struct Mapping {
    start: AtomicUsize,
    len: AtomicUsize,
    /// Written in place without a lease: not to be served from.
    stale: AtomicBool,
}

/// Every tracked mapping, at its index.
static MAPPINGS: [Mapping; MAX_PACKS] = [const {
    Mapping {
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        stale: AtomicBool::new(false),
    }
}; MAX_PACKS];

/// What the control thread knows of a tracked pack.
struct Tracked {
    /// The pack's descriptor number (the pack owns it).
    fd: RawFd,
    /// The path it was opened at, as named.
    path: PathBuf,
    /// Its file's device and inode: a path inotify names is matched by
    /// them (`./site.pack` and `site.pack`, a link to it).
    file: (u64, u64),
    /// Holds a read lease.
    leased: bool,
    /// Serves a copy of itself since a writer broke its lease.
    frozen: bool,
    /// Its warning was logged.
    said: bool,
}

/// The tracked packs, at their index in [`MAPPINGS`].
static TRACKED: Mutex<Vec<Option<Tracked>>> = Mutex::new(Vec::new());

fn tracked() -> MutexGuard<'static, Vec<Option<Tracked>>> {
    TRACKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pack tracked for writes in place while it is served; dropped (before
/// the pack is unmapped and closed) it is no longer.
#[derive(Debug)]
pub struct Guard {
    index: usize,
    /// Without a lease: the file's size and modification time when it was
    /// opened, which `unchanged` compares with the file's now. `None` with
    /// a lease (a writer is held back until the pack is copied).
    opened_as: Option<Written>,
}

/// What a write in place changes at once, in the writer's own system call
/// and before any of its bytes can be read: the size (`O_TRUNC` makes it
/// 0) and the modification time (set before the data is copied). Since
/// Linux 6.13 (ext4, XFS, Btrfs, tmpfs) a time that was read by a `stat`
/// is never given again to a later change ("multigrain" time stamps), so
/// the comparison cannot miss one; before, a change within the clock
/// tick of the pack's previous one (about 4 ms) keeps the time, and only
/// the size or inotify tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    size: u64,
    modified: (i64, i64),
}

impl Written {
    fn of(fd: BorrowedFd<'_>) -> Option<Written> {
        let stat = rustix::fs::fstat(fd).ok()?;
        Some(Written {
            size: stat.st_size as u64,
            modified: (stat.st_mtime as i64, stat.st_mtime_nsec as i64),
        })
    }
}

impl Guard {
    /// Tracks `pack`, a file on disk, and takes a read lease on it when it
    /// can; `None` for a pack that is no file at its path (a preview in
    /// memory) or when the table is full.
    pub fn track(pack: &Pack) -> Option<Guard> {
        let map = pack.bytes();
        let file = pack.file();
        let on_disk = match (file.metadata(), std::fs::metadata(pack.path())) {
            (Ok(open), Ok(named)) if (open.dev(), open.ino()) == (named.dev(), named.ino()) => {
                Some((open.dev(), open.ino()))
            }
            _ => None,
        };
        let id = on_disk.filter(|_| !map.is_empty())?;
        let mut list = tracked();
        let Some(index) = (0..MAX_PACKS).find(|&i| list.get(i).is_none_or(Option::is_none)) else {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "more than {MAX_PACKS} packs open: {} and those after it are not guarded against a write in place",
                    pack.path().display()
                );
            }
            return None;
        };
        let leased = take_lease(file.as_fd(), pack.path());
        let opened_as = if leased {
            None
        } else {
            match Written::of(file.as_fd()) {
                Some(written) => Some(written),
                None => return None,
            }
        };
        let mapping = &MAPPINGS[index];
        mapping.stale.store(false, Ordering::Release);
        mapping
            .start
            .store(map.as_ptr() as usize, Ordering::Release);
        mapping.len.store(map.len(), Ordering::Release);
        if list.len() <= index {
            list.resize_with(index + 1, || None);
        }
        list[index] = Some(Tracked {
            fd: file.as_raw_fd(),
            path: pack.path().to_path_buf(),
            file: id,
            leased,
            frozen: false,
            said: false,
        });
        Some(Guard { index, opened_as })
    }

    /// Whether the pack has no lease: the last byte of each body from it
    /// is held back until `unchanged` says that what was sent before it
    /// was read from the pack as it was opened (see `Seg::Checked`).
    #[inline]
    pub fn holds_back(&self) -> bool {
        self.opened_as.is_some()
    }

    /// Whether nothing was written to the pack since it was opened, as far
    /// as can be known now: not stale, and (without a lease) the file
    /// `fd`'s size and modification time as they were (one `fstat`). Every
    /// byte read from it before this call is then the pack's own.
    pub fn unchanged(&self, fd: BorrowedFd<'_>) -> bool {
        !self.is_stale()
            && self
                .opened_as
                .is_none_or(|opened| Written::of(fd) == Some(opened))
    }

    /// Whether the pack was written in place without a lease: its site
    /// answers 503 and nothing more is sent from it. One atomic load.
    #[inline]
    pub fn is_stale(&self) -> bool {
        MAPPINGS[self.index].stale.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut list = tracked();
        let mapping = &MAPPINGS[self.index];
        mapping.len.store(0, Ordering::Release);
        mapping.start.store(0, Ordering::Release);
        mapping.stale.store(false, Ordering::Release);
        list[self.index] = None;
    }
}

/// Whether leases are refused on purpose (`KILN_DEBUG_REFUSE_LEASES=1`,
/// debug builds only): the tests' way onto the path without one.
fn leases_refused() -> bool {
    cfg!(debug_assertions) && std::env::var_os("KILN_DEBUG_REFUSE_LEASES").is_some_and(|v| v == "1")
}

/// Takes a read lease on the pack `fd`; when it cannot, says so once per
/// process (the reason is the same for every pack, nearly always).
fn take_lease(fd: BorrowedFd<'_>, path: &Path) -> bool {
    let refused = if leases_refused() {
        Err(std::io::Error::other(
            "refused on purpose (KILN_DEBUG_REFUSE_LEASES=1)",
        ))
    } else {
        take_read_after_writers(fd)
    };
    match refused {
        Ok(()) => true,
        Err(e) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                tracing::info!(
                    "{}: no read lease ({e}): a pack written in place is survived, but its site answers 503 \
                     until the new pack is whole; deploy by rename (mv)",
                    path.display()
                );
            }
            false
        }
    }
}

/// How long a load waits for a writer that still holds a whole pack open
/// (a write in place verified before its writer's `close`) to close it.
const WRITER_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A read lease on `fd`, waiting up to `WRITER_CLOSE_WAIT` while a writer
/// still has the file open (`EAGAIN`): a pack written in place is whole
/// and verifies a moment before its writer closes it, and loading it
/// without a lease then would leave it without one for good. Only the
/// control thread loads packs: no serving thread waits.
fn take_read_after_writers(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let start = std::time::Instant::now();
    loop {
        match sys::lease::take_read(fd) {
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && start.elapsed() < WRITER_CLOSE_WAIT =>
            {
                // poll(2) with no descriptor: the sandbox allows it
                // (the control thread's own wait), not nanosleep.
                let pause = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 10_000_000,
                };
                let _ = rustix::event::poll(&mut [], Some(&pause));
            }
            taken => return taken,
        }
    }
}

/// SIGIO: a writer is opening a leased pack. Every leased pack whose
/// lease is being broken is frozen (a standard signal does not queue: one
/// may stand for several packs).
pub fn lease_broken() {
    let mut list = tracked();
    for (index, entry) in list.iter_mut().enumerate() {
        let Some(entry) = entry.as_mut().filter(|e| e.leased) else {
            continue;
        };
        // SAFETY: the pack owns the descriptor and cannot close it while
        // the list is locked (its guard's drop takes the lock first).
        let fd = unsafe { BorrowedFd::borrow_raw(entry.fd) };
        if !sys::lease::breaking(fd).unwrap_or(false) {
            continue;
        }
        let mapping = &MAPPINGS[index];
        let (start, len) = (
            mapping.start.load(Ordering::Acquire),
            mapping.len.load(Ordering::Acquire),
        );
        entry.leased = false;
        match freeze::freeze(fd, start, len) {
            Ok(()) => {
                entry.frozen = true;
                entry.said = true;
                tracing::warn!(
                    "{} was written in place; deploy by rename (mv) instead: serving a copy of the previous pack \
                     until the new one is whole and verifies",
                    entry.path.display()
                );
            }
            Err(e) => {
                // Serve nothing from it; the writer goes on when the lease
                // is let go (as the file's owner or with CAP_LEASE), else
                // when the kernel breaks it (`lease-break-time`).
                mapping.stale.store(true, Ordering::Release);
                let _ = sys::lease::release(fd);
                entry.said = true;
                tracing::warn!(
                    "{} was written in place; deploy by rename (mv) instead: it could not be copied ({e}), \
                     so its site answers 503 until the new one is whole and verifies",
                    entry.path.display()
                );
            }
        }
    }
}

/// inotify: the file at `path` was modified (written or truncated). A
/// pack served from it without a lease is stale from now on; one frozen
/// or leased is not touched (a lease holds every writer back).
pub fn modified(path: &Path) {
    let file = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    let mut list = tracked();
    for (index, entry) in list.iter_mut().enumerate() {
        let Some(entry) = entry
            .as_mut()
            .filter(|e| !e.leased && !e.frozen && Some(e.file) == file)
        else {
            continue;
        };
        MAPPINGS[index].stale.store(true, Ordering::Release);
        say_stale(entry);
    }
    // A fault marks its pack stale before any event says why: said here.
    for (index, entry) in list.iter_mut().enumerate() {
        if let Some(entry) = entry.as_mut()
            && MAPPINGS[index].stale.load(Ordering::Acquire)
        {
            say_stale(entry);
        }
    }
}

/// The warning for a pack written in place without a lease, once.
fn say_stale(entry: &mut Tracked) {
    if !std::mem::replace(&mut entry.said, true) {
        tracing::warn!(
            "{} was written in place; deploy by rename (mv) instead: its site answers 503 \
             until the new one is whole and verifies",
            entry.path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use super::*;
    use crate::pack::PackWriter;

    #[test]
    fn a_read_past_the_end_of_a_shrunk_pack_reads_zeros_and_marks_it_stale() {
        install_fault_handler().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("site.pack");
        PackWriter::create(&path).unwrap().finish().unwrap();
        // Open for writing first: no lease can be taken (a lease's break
        // would signal this test process, which does not handle SIGIO).
        let writer = OpenOptions::new().write(true).open(&path).unwrap();
        let pack = Pack::open(&path).unwrap();
        let guard = Guard::track(&pack).expect("tracked");
        assert!(!guard.is_stale());
        assert!(!tracked()[guard.index].as_ref().unwrap().leased);
        writer.set_len(0).unwrap();
        let bytes = pack.bytes();
        // SAFETY: a read of our own mapping, which the handler makes good.
        let first = unsafe { std::ptr::read_volatile(bytes.as_ptr()) };
        assert_eq!(first, 0);
        assert!(guard.is_stale());
        drop(guard);
        assert!(tracked().iter().flatten().all(|t| t.path != path));
    }
}
