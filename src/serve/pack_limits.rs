//! What packs may hold of the process's limits: descriptors and
//! mappings.
//!
//! How many packs keep their descriptor. A pack is served from its
//! mapping, which needs no open descriptor; the descriptor is what
//! `sendfile`, `splice` and a read lease (`in_place`) need. A folder of
//! more sites than the process may open files would otherwise run out of
//! descriptors (for its packs, then its listeners and connections), so
//! packs keep theirs within a budget set at start from RLIMIT_NOFILE
//! (`serve::pack_descriptor_budget`), and a pack opened beyond it is mapped and
//! its descriptor closed: its bodies go out of the mapping (`writev`), and
//! its guard against a write in place checks the file by its path
//! (`in_place::Guard::unchanged`).

//!
//! How many packs may be mapped at all: a process has at most
//! `vm.max_map_count` mappings (65,530 by default), and one more than that
//! fails every `mmap`, the allocator's too, which ends the process. Packs
//! are mapped within that count less a reserve for the rest of the process
//! (`set_map_budget`); a pack beyond is refused, its site not served, with
//! a line that says which setting to raise.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many packs may keep their descriptor; no bound until start-up sets
/// one (tests, the fuzz targets).
static BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// How many do now.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Sets the budget, at start, before any pack is opened.
pub fn set_descriptor_budget(packs: usize) {
    BUDGET.store(packs, Ordering::Relaxed);
}

/// How many packs keep their descriptor now.
pub fn held() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// One pack's place in the budget, given back when dropped (with its
/// site, as its pack's descriptor is closed).
#[derive(Debug)]
pub struct Held(());

impl Held {
    /// A place for one more pack's descriptor; `None` when the budget is
    /// spent.
    pub fn take() -> Option<Held> {
        let budget = BUDGET.load(Ordering::Relaxed);
        HELD.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            (held < budget).then_some(held + 1)
        })
        .ok()
        .map(|_| Held(()))
    }
}

/// Keeps `pack`'s descriptor when the budget has room (the place it
/// holds returned), else closes it.
pub fn keep_or_close(pack: &mut crate::pack::Pack) -> Option<Held> {
    let held = pack.file().and_then(|_| Held::take());
    if held.is_none() {
        pack.close_file();
    }
    held
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many packs may be mapped; no bound until start-up sets one.
static MAP_BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Packs mapped now (each site's, counted by `Mapped`).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// The mappings the rest of the process may need (its code, thread stacks,
/// the allocator's arenas, rings and buffers, a reload's second mapping of
/// a pack), out of `vm.max_map_count`.
fn map_reserve(max: usize) -> usize {
    (max / 8).max(4096)
}

/// Sets the mapping budget from `vm.max_map_count` (read at start,
/// before the sandbox; left unbounded when it cannot be read).
pub fn set_map_budget() {
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok());
    if let Some(max) = max {
        MAP_BUDGET.store(max.saturating_sub(map_reserve(max)), Ordering::Relaxed);
    }
}

/// One pack's place among the mapped ones, given back when dropped.
#[derive(Debug)]
pub struct Mapped(());

impl Mapped {
    /// A place for one more mapped pack; an error naming the setting to
    /// raise when the budget is spent.
    pub fn take() -> Result<Mapped, String> {
        let budget = MAP_BUDGET.load(Ordering::Relaxed);
        MAPPED
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mapped| {
                (mapped < budget).then_some(mapped + 1)
            })
            .map(|_| Mapped(()))
            .map_err(|mapped| {
                format!(
                    "{mapped} packs are mapped, as many as vm.max_map_count allows with room for the rest of \
                     the process: raise it (sysctl vm.max_map_count=262144) to serve more sites"
                )
            })
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        MAPPED.fetch_sub(1, Ordering::Relaxed);
    }
}
