//! How many packs keep their descriptor. A pack is served from its
//! mapping, which needs no open descriptor; the descriptor is what
//! `sendfile`, `splice` and a read lease (`in_place`) need. A folder of
//! more sites than the process may open files would otherwise run out of
//! descriptors (for its packs, then its listeners and connections), so
//! packs keep theirs within a budget set at start from RLIMIT_NOFILE
//! (`serve::descriptor_budgets`), and a pack opened beyond it is mapped and
//! its descriptor closed: its bodies go out of the mapping (`writev`), and
//! its guard against a write in place checks the file by its path
//! (`in_place::Guard::unchanged`).

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many packs may keep their descriptor; no bound until start-up sets
/// one (tests, the fuzz targets).
static BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);

/// How many do now.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Sets the budget, at start, before any pack is opened.
pub fn set_budget(packs: usize) {
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

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::Relaxed);
    }
}
