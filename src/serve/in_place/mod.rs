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
//! by rename. Packs are tracked in a table that the SIGBUS handler reads
//! without a lock ([`MAPPINGS`]: chunks allocated as the packs grow in
//! number, never freed) and, for the control thread, in a list under a
//! lock ([`TRACKED`]) that a pack's drop also takes, so that its
//! descriptor stays open while it is copied. A pack whose descriptor was
//! closed (`serve::pack_limits`: beyond the budget of descriptors) has no
//! lease; its check reads the file's status by its path instead.

mod fault;
mod freeze;

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

pub use self::fault::install_fault_handler;
use crate::pack::{FileStamp, Pack};
use crate::sys;

/// Entries per chunk of [`MAPPINGS`].
const CHUNK: usize = 4096;

/// Chunks at most: packs tracked at once (a folder of sites has one per
/// site, and a reload holds two for a moment) up to about four million.
const CHUNKS: usize = 1024;

/// One pack's mapping, as the SIGBUS handler sees it: `len` 0 when the
/// entry is free.
struct Mapping {
    start: AtomicUsize,
    len: AtomicUsize,
    /// Written in place without a lease: not to be served from.
    stale: AtomicBool,
}

/// Every tracked mapping, at its index: chunk `index / CHUNK`, allocated
/// by the control thread (under [`TRACKED`]'s lock) when the first index
/// in it is taken, and then never freed, so that the handler can read it
/// at any time; a null chunk and every one after it are not in use.
static MAPPINGS: [AtomicPtr<[Mapping; CHUNK]>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// The entry at `index`, whose chunk exists (the index was handed out).
fn mapping(index: usize) -> &'static Mapping {
    let chunk = MAPPINGS[index / CHUNK].load(Ordering::Acquire);
    // SAFETY: an index is handed out only once its chunk is allocated,
    // and chunks are never freed.
    let chunk = unsafe { &*chunk };
    &chunk[index % CHUNK]
}

/// What the control thread knows of a tracked pack.
struct Tracked {
    /// The pack's descriptor number (the pack owns it); `None` for a pack
    /// whose descriptor was closed.
    fd: Option<RawFd>,
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

/// The tracked packs, at their index in [`MAPPINGS`], and the indices
/// free again.
struct Table {
    entries: Vec<Option<Tracked>>,
    free: Vec<usize>,
}

impl Table {
    /// A free index, its chunk allocated; `None` when every one is taken.
    fn take_index(&mut self) -> Option<usize> {
        if let Some(index) = self.free.pop() {
            return Some(index);
        }
        let index = self.entries.len();
        let chunk = MAPPINGS.get(index / CHUNK)?;
        if chunk.load(Ordering::Acquire).is_null() {
            let entries: Box<[Mapping; CHUNK]> = Box::new(
                [const {
                    Mapping {
                        start: AtomicUsize::new(0),
                        len: AtomicUsize::new(0),
                        stale: AtomicBool::new(false),
                    }
                }; CHUNK],
            );
            chunk.store(Box::into_raw(entries), Ordering::Release);
        }
        self.entries.push(None);
        Some(index)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut Tracked)> {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(index, entry)| Some((index, entry.as_mut()?)))
    }
}

static TRACKED: Mutex<Table> = Mutex::new(Table {
    entries: Vec::new(),
    free: Vec::new(),
});

fn tracked() -> MutexGuard<'static, Table> {
    TRACKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pack tracked for writes in place while it is served; dropped (before
/// the pack is unmapped and closed) it is no longer.
#[derive(Debug)]
pub struct Guard {
    index: usize,
    /// Its entry in [`MAPPINGS`].
    mapping: &'static Mapping,
    /// Without a lease: the file's size and modification time when it was
    /// opened, which `unchanged` compares with the file's now. `None` with
    /// a lease (a writer is held back until the pack is copied).
    opened_as: Option<Written>,
    /// A pack without its descriptor: its path (made once, at load, so
    /// that the check allocates nothing) and its file's device and inode.
    by_path: Option<(CString, (u64, u64))>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish()
    }
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
        rustix::fs::fstat(fd).ok().map(|stat| Written::from(&stat))
    }

    fn from(stat: &rustix::fs::Stat) -> Written {
        let stamp = FileStamp::of(stat);
        Written {
            size: stamp.size,
            modified: stamp.modified,
        }
    }
}

impl Guard {
    /// Tracks `pack`, a file on disk, and takes a read lease on it when it
    /// has its descriptor and can; `None` for a pack that is no file at
    /// its path (a preview in memory) or when the table is full.
    pub fn track(pack: &Pack) -> Option<Guard> {
        let map = pack.bytes();
        let stamp = pack.stamp();
        let id = (stamp.dev, stamp.ino);
        let named = rustix::fs::stat(pack.path()).ok()?;
        if (named.st_dev, named.st_ino) != id || map.is_empty() {
            return None;
        }
        let mut list = tracked();
        let Some(index) = list.take_index() else {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "more than {} packs open: {} and those after it are not guarded against a write in place",
                    CHUNK * CHUNKS,
                    pack.path().display()
                );
            }
            return None;
        };
        let file = pack.file();
        let leased = file.is_some_and(|file| take_lease(file.as_fd(), pack.path()));
        let opened_as = (!leased).then_some(Written {
            size: stamp.size,
            modified: stamp.modified,
        });
        let by_path = match file {
            Some(_) => None,
            None => match CString::new(pack.path().as_os_str().as_bytes()) {
                Ok(path) => Some((path, id)),
                Err(_) => {
                    list.free.push(index);
                    return None;
                }
            },
        };
        let mapping = self::mapping(index);
        mapping.stale.store(false, Ordering::Release);
        mapping
            .start
            .store(map.as_ptr() as usize, Ordering::Release);
        mapping.len.store(map.len(), Ordering::Release);
        list.entries[index] = Some(Tracked {
            fd: file.map(AsRawFd::as_raw_fd),
            path: pack.path().to_path_buf(),
            file: id,
            leased,
            frozen: false,
            said: false,
        });
        Some(Guard {
            index,
            mapping,
            opened_as,
            by_path,
        })
    }

    /// Whether the pack has no lease: the last byte of each body from it
    /// is held back until `unchanged` says that what was sent before it
    /// was read from the pack as it was opened (see `Seg::Checked`).
    #[inline]
    pub fn holds_back(&self) -> bool {
        self.opened_as.is_some()
    }

    /// Whether nothing was written to the pack since it was opened, as far
    /// as can be known now: not stale, and (without a lease) the file's
    /// size and modification time as they were: one `fstat` of `fd`, or
    /// for a pack without its descriptor one `stat` of its path. A path
    /// that names another file now (or none) was renamed over: the pack's
    /// own file is out of a writer's reach by that name, and the mapping
    /// keeps it whole. Every byte read from the pack before this call is
    /// then the pack's own.
    pub fn unchanged(&self, fd: Option<BorrowedFd<'_>>) -> bool {
        if self.is_stale() {
            return false;
        }
        let Some(opened) = self.opened_as else {
            return true;
        };
        match (fd, &self.by_path) {
            (Some(fd), _) => Written::of(fd) == Some(opened),
            (None, Some((path, id))) => match rustix::fs::stat(path.as_c_str()) {
                Ok(stat) if (stat.st_dev, stat.st_ino) == *id => Written::from(&stat) == opened,
                Ok(_) | Err(rustix::io::Errno::NOENT) => true,
                Err(_) => false,
            },
            (None, None) => false,
        }
    }

    /// Whether the pack was written in place without a lease: its site
    /// answers 503 and nothing more is sent from it. One atomic load.
    #[inline]
    pub fn is_stale(&self) -> bool {
        self.mapping.stale.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut list = tracked();
        let mapping = self.mapping;
        mapping.len.store(0, Ordering::Release);
        mapping.start.store(0, Ordering::Release);
        mapping.stale.store(false, Ordering::Release);
        list.entries[self.index] = None;
        list.free.push(self.index);
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
    for (index, entry) in list.iter_mut() {
        let Some(fd) = entry.fd.filter(|_| entry.leased) else {
            continue;
        };
        // SAFETY: the pack owns the descriptor and cannot close it while
        // the list is locked (its guard's drop takes the lock first, and
        // a pack closes its descriptor only before it is tracked).
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        if !sys::lease::breaking(fd).unwrap_or(false) {
            continue;
        }
        let mapping = self::mapping(index);
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
    let file = rustix::fs::stat(path).ok().map(|m| (m.st_dev, m.st_ino));
    let mut list = tracked();
    for (index, entry) in list.iter_mut() {
        if entry.leased || entry.frozen || Some(entry.file) != file {
            continue;
        }
        self::mapping(index).stale.store(true, Ordering::Release);
        say_stale(entry);
    }
    // A fault marks its pack stale before any event says why: said here.
    for (index, entry) in list.iter_mut() {
        if self::mapping(index).stale.load(Ordering::Acquire) {
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
        assert!(!tracked().entries[guard.index].as_ref().unwrap().leased);
        writer.set_len(0).unwrap();
        let bytes = pack.bytes();
        // SAFETY: a read of our own mapping, which the handler makes good.
        let first = unsafe { std::ptr::read_volatile(bytes.as_ptr()) };
        assert_eq!(first, 0);
        assert!(guard.is_stale());
        drop(guard);
        assert!(tracked().iter_mut().all(|(_, t)| t.path != path));
    }

    #[test]
    fn packs_beyond_the_first_chunk_are_guarded_too() {
        install_fault_handler().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("site.pack");
        PackWriter::create(&path).unwrap().finish().unwrap();
        // Without their descriptors: no lease (whose break would signal
        // this process), the check by path.
        let packs: Vec<(Pack, Guard)> = (0..CHUNK + 4)
            .map(|_| {
                let mut pack = Pack::open(&path).unwrap();
                pack.close_file();
                let guard = Guard::track(&pack).expect("tracked");
                (pack, guard)
            })
            .collect();
        let (last, guard) = packs.last().unwrap();
        assert!(guard.index >= CHUNK);
        assert!(guard.holds_back() && guard.unchanged(None));
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        assert!(!guard.unchanged(None), "the size changed");
        // SAFETY: a read of our own mapping, which the handler makes good.
        let first = unsafe { std::ptr::read_volatile(last.bytes().as_ptr()) };
        assert_eq!(first, 0);
        assert!(guard.is_stale());
    }
}
