//! The endpoint's connection timers, ordered by deadline: the ones due
//! and the next one are found without looking at every connection.
//!
//! quinn-proto gives each connection one deadline at a time (its
//! `poll_timeout`: the earliest of its loss, ACK, pacing, idle and close
//! timers), and it moves after almost every packet. A binary heap of
//! `(deadline, slot, generation)` with lazy deletion holds them: a moved
//! deadline is pushed anew and the entry it replaces is left in place,
//! stale, recognised by its slot's generation when it reaches the top
//! (or dropped by a compaction once the stale entries outnumber the live
//! ones, so the heap stays within about twice the connections and its
//! capacity, once grown, is reused: no allocation in steady state).
//!
//! Chosen over a hashed timer wheel: the deadlines span microseconds
//! (pacing) to the idle timeout (tens of seconds), which a wheel covers
//! only with a resolution to choose and a hierarchy or overflow list,
//! each re-slotting its entries as time passes; the heap keeps quinn's
//! exact `Instant`s, costs O(log n) per moved deadline and O(1) to read
//! the next one.
//!
//! It replaced a scan of every connection each loop turn (for the due
//! ones, then for the next deadline). With 1,000 idle connections beside
//! 2,000 requests/s (`bench/idle_load.sh`, one thread, epoll), that scan
//! was 19.3 % of the server's CPU by perf, and the timers' whole share is
//! now 1.2 %.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A deadline as the heap holds it. Ordered by time first; the slot and
/// generation only break ties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: Instant,
    slot: u32,
    generation: u32,
}

/// A slot's current deadline. Every change bumps `generation`, so that
/// exactly one entry of the heap (the last pushed) can be live for it.
#[derive(Clone, Copy, Default)]
struct Slot {
    at: Option<Instant>,
    generation: u32,
}

/// Stale entries allowed beyond the live ones before a compaction: a few,
/// so that a handful of connections does not compact at every change.
const SLACK: usize = 64;

/// Deadlines by connection slot (quinn's `ConnectionHandle`).
#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    slots: Vec<Slot>,
    /// Slots with a deadline: the live entries of the heap.
    live: usize,
}

impl Timers {
    /// Slot `slot`'s deadline is now `at` (`None`: it has none).
    pub fn set(&mut self, slot: usize, at: Option<Instant>) {
        if self.slots.len() <= slot {
            if at.is_none() {
                return;
            }
            self.slots.resize(slot + 1, Slot::default());
        }
        let current = &mut self.slots[slot];
        if current.at == at {
            return;
        }
        match (current.at, at) {
            (None, Some(_)) => self.live += 1,
            (Some(_), None) => self.live -= 1,
            _ => {}
        }
        current.at = at;
        // Wrapping is harmless: a compaction drops every stale entry long
        // before 2^32 changes of one slot could make one look current.
        current.generation = current.generation.wrapping_add(1);
        let Some(at) = at else {
            return;
        };
        self.heap.push(Reverse(Entry {
            at,
            slot: slot as u32,
            generation: current.generation,
        }));
        if self.heap.len() > 2 * self.live + SLACK {
            let slots = &self.slots;
            self.heap.retain(|Reverse(e)| is_live(slots, e));
        }
    }

    /// Slot `slot` was freed (its connection is gone): its deadline goes,
    /// and the slot's next connection starts with none.
    pub fn remove(&mut self, slot: usize) {
        self.set(slot, None);
    }

    /// A slot whose deadline is at or before `now`, taken off (its
    /// connection sets its next one once its timeout is handled); `None`
    /// once no deadline is due.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let Reverse(first) = *self.first_live()?;
        if first.at > now {
            return None;
        }
        self.heap.pop();
        self.slots[first.slot as usize].at = None;
        self.live -= 1;
        Some(first.slot as usize)
    }

    /// The earliest deadline.
    pub fn next(&mut self) -> Option<Instant> {
        self.first_live().map(|Reverse(e)| e.at)
    }

    /// The heap's top once the stale entries above the first live one are
    /// dropped.
    fn first_live(&mut self) -> Option<&Reverse<Entry>> {
        while let Some(Reverse(top)) = self.heap.peek() {
            if is_live(&self.slots, top) {
                break;
            }
            self.heap.pop();
        }
        self.heap.peek()
    }
}

/// Whether `e` is its slot's current deadline.
fn is_live(slots: &[Slot], e: &Entry) -> bool {
    slots
        .get(e.slot as usize)
        .is_some_and(|s| s.at == Some(e.at) && s.generation == e.generation)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    /// Every slot due at `now`, in the order they come off.
    fn due(timers: &mut Timers, now: Instant) -> Vec<usize> {
        std::iter::from_fn(|| timers.pop_due(now)).collect()
    }

    #[test]
    fn deadlines_set_out_of_order_come_due_in_order() {
        let base = Instant::now();
        let mut timers = Timers::default();
        for (slot, ms) in [(3, 30), (0, 50), (7, 10), (1, 40), (2, 20)] {
            timers.set(slot, Some(at(base, ms)));
        }
        assert_eq!(timers.next(), Some(at(base, 10)));
        assert_eq!(due(&mut timers, at(base, 5)), Vec::<usize>::new());
        assert_eq!(due(&mut timers, at(base, 30)), vec![7, 2, 3]);
        assert_eq!(timers.next(), Some(at(base, 40)));
        assert_eq!(due(&mut timers, at(base, 100)), vec![1, 0]);
        assert_eq!(timers.next(), None);
    }

    #[test]
    fn a_deadline_moved_earlier_or_later_counts_only_where_it_is_now() {
        let base = Instant::now();
        let mut timers = Timers::default();
        timers.set(0, Some(at(base, 50)));
        timers.set(1, Some(at(base, 30)));
        // Earlier: slot 0 now comes first, and only once.
        timers.set(0, Some(at(base, 10)));
        assert_eq!(timers.next(), Some(at(base, 10)));
        assert_eq!(due(&mut timers, at(base, 20)), vec![0]);
        assert_eq!(due(&mut timers, at(base, 60)), vec![1]);

        // Later: not due at its old time, due at its new one.
        timers.set(0, Some(at(base, 20)));
        timers.set(0, Some(at(base, 80)));
        assert_eq!(timers.next(), Some(at(base, 80)));
        assert_eq!(due(&mut timers, at(base, 70)), Vec::<usize>::new());
        assert_eq!(due(&mut timers, at(base, 80)), vec![0]);

        // Moved away and back: the old entry's time is current again, but
        // it fires once.
        timers.set(0, Some(at(base, 100)));
        timers.set(0, Some(at(base, 200)));
        timers.set(0, Some(at(base, 100)));
        assert_eq!(due(&mut timers, at(base, 300)), vec![0]);
        assert_eq!(timers.next(), None);
    }

    #[test]
    fn a_reused_slot_does_not_inherit_the_last_connections_deadline() {
        let base = Instant::now();
        let mut timers = Timers::default();
        timers.set(4, Some(at(base, 10)));
        timers.remove(4);
        assert_eq!(timers.next(), None);
        // The slot's next connection, with a later deadline and then the
        // very one its predecessor had.
        timers.set(4, Some(at(base, 40)));
        assert_eq!(due(&mut timers, at(base, 20)), Vec::<usize>::new());
        timers.remove(4);
        timers.set(4, Some(at(base, 10)));
        assert_eq!(due(&mut timers, at(base, 50)), vec![4]);
        assert_eq!(timers.next(), None);
    }

    #[test]
    fn removal_takes_a_deadline_off_and_leaves_the_others() {
        let base = Instant::now();
        let mut timers = Timers::default();
        for slot in 0..4 {
            timers.set(slot, Some(at(base, 10 * slot as u64 + 10)));
        }
        timers.remove(0);
        timers.remove(2);
        // A slot never used and one already removed: nothing happens.
        timers.remove(9);
        timers.remove(2);
        assert_eq!(timers.next(), Some(at(base, 20)));
        assert_eq!(due(&mut timers, at(base, 100)), vec![1, 3]);
    }

    #[test]
    fn a_fired_deadline_is_gone_until_set_again() {
        let base = Instant::now();
        let mut timers = Timers::default();
        timers.set(0, Some(at(base, 10)));
        assert_eq!(due(&mut timers, at(base, 10)), vec![0]);
        assert_eq!(due(&mut timers, at(base, 10)), Vec::<usize>::new());
        // The connection gives the same deadline again (its timeout did
        // not move it): it is due again.
        timers.set(0, Some(at(base, 10)));
        assert_eq!(due(&mut timers, at(base, 10)), vec![0]);
    }

    #[test]
    fn stale_entries_are_compacted_and_the_heap_stops_growing() {
        let base = Instant::now();
        let mut timers = Timers::default();
        let connections = 100;
        let mut capacity = 0;
        for round in 0..50u64 {
            for slot in 0..connections {
                // Every deadline moves later each round, as an idle timer
                // pushed by traffic does: the old entries never come due.
                timers.set(slot, Some(at(base, 1000 * round + slot as u64)));
            }
            assert!(timers.heap.len() <= 2 * connections + SLACK + 1);
            if round == 10 {
                capacity = timers.heap.capacity();
            }
        }
        assert_eq!(timers.heap.capacity(), capacity, "the heap grew again");
        let fired = due(&mut timers, at(base, 1000 * 50));
        assert_eq!(fired, (0..connections).collect::<Vec<_>>());
    }
}
