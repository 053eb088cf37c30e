//! Which of the client's request streams were taken, in whatever order
//! their first bytes arrive: loss or reordering can bring stream 8's first
//! packet before stream 4's, and stream 4 is a request all the same.
//!
//! Every stream below a low mark was taken; of the `WINDOW` streams from
//! the mark on, a bit says which. Fixed size, no allocation: QUIC lets a
//! client hold at most `max_concurrent_bidi_streams` (100) streams open,
//! so a stream not opened while `WINDOW` later ones were is one the client
//! holds back; it is then given up (refused, so that QUIC frees it).

/// Stream indexes the window holds beyond the low mark.
pub const WINDOW: u64 = 256;

const WORDS: usize = (WINDOW / 64) as usize;

#[derive(Debug, Default)]
pub struct Taken {
    /// Every stream index below this one was taken.
    low: u64,
    /// Bit `n`: index `low + n` was taken (bit 0 never is: `low` would
    /// have moved past it).
    bits: [u64; WORDS],
}

impl Taken {
    /// Whether client-initiated bidirectional stream `id` was taken.
    pub fn contains(&self, id: u64) -> bool {
        let index = id >> 2;
        if index < self.low {
            return true;
        }
        let n = index - self.low;
        n < WINDOW && self.bits[(n / 64) as usize] & (1 << (n % 64)) != 0
    }

    /// Takes stream `id` (not taken yet). `give_up` gets each stream not
    /// taken that falls below the window as it moves.
    pub fn take(&mut self, id: u64, mut give_up: impl FnMut(u64)) {
        let index = id >> 2;
        debug_assert!(!self.contains(id));
        let mut n = index - self.low;
        if n >= WINDOW {
            let past = n - (WINDOW - 1);
            for k in 0..past.min(WINDOW) {
                if self.bits[(k / 64) as usize] & (1 << (k % 64)) == 0 {
                    give_up((self.low + k) << 2 | (id & 3));
                }
            }
            // Beyond the window, none was taken: all are given up.
            for index in self.low + WINDOW..self.low + past {
                give_up(index << 2 | (id & 3));
            }
            self.shift(past);
            n = WINDOW - 1;
        }
        self.bits[(n / 64) as usize] |= 1 << (n % 64);
        let mut run = 0;
        for word in self.bits {
            run += u64::from(word.trailing_ones());
            if word != u64::MAX {
                break;
            }
        }
        self.shift(run);
    }

    /// Moves the low mark up by `by`.
    fn shift(&mut self, by: u64) {
        self.low += by;
        if by >= WINDOW {
            self.bits = [0; WORDS];
            return;
        }
        let words = (by / 64) as usize;
        let bits = by % 64;
        for i in 0..WORDS {
            let lo = self.bits.get(i + words).copied().unwrap_or(0);
            let hi = self.bits.get(i + words + 1).copied().unwrap_or(0);
            self.bits[i] = if bits == 0 {
                lo
            } else {
                lo >> bits | hi << (64 - bits)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(ids: &[u64]) -> (Taken, Vec<u64>) {
        let mut taken = Taken::default();
        let mut given_up = Vec::new();
        for &id in ids {
            taken.take(id, |id| given_up.push(id));
        }
        (taken, given_up)
    }

    #[test]
    fn streams_taken_out_of_order_are_each_taken_once() {
        let (taken, given_up) = taken(&[8, 0, 20]);
        assert!(given_up.is_empty());
        for (id, was) in [(0, true), (4, false), (8, true), (12, false), (20, true)] {
            assert_eq!(taken.contains(id), was, "stream {id}");
        }
        assert_eq!(taken.low, 1);
        let (taken, _) = self::taken(&[8, 0, 20, 4, 12, 16]);
        assert_eq!((taken.low, taken.bits), (6, [0; WORDS]));
        assert!(taken.contains(20) && !taken.contains(24));
    }

    #[test]
    fn a_run_across_words_moves_the_low_mark_past_it() {
        let ids: Vec<u64> = (1..200).chain([0]).map(|index| index << 2).collect();
        let (taken, given_up) = taken(&ids);
        assert!(given_up.is_empty());
        assert_eq!((taken.low, taken.bits), (200, [0; WORDS]));
    }

    #[test]
    fn a_stream_held_back_past_the_window_is_given_up_once() {
        // Stream 0 never opened while 1..=WINDOW were.
        let ids: Vec<u64> = (1..=WINDOW).map(|index| index << 2).collect();
        let (mut taken, given_up) = taken(&ids);
        assert_eq!(given_up, [0]);
        assert_eq!(taken.low, WINDOW + 1);
        assert!(taken.contains(0), "given up: its late bytes are ignored");
        // A jump of more than two windows: every stream that falls below
        // the window, in it or beyond it, is given up.
        let mut later = Vec::new();
        let far = taken.low + 2 * WINDOW + 3;
        taken.take(far << 2, |id| later.push(id));
        let expected: Vec<u64> = (WINDOW + 1..far - WINDOW + 1).map(|i| i << 2).collect();
        assert_eq!(later, expected);
        assert!(taken.contains(far << 2) && !taken.contains((far - 1) << 2));
    }
}
