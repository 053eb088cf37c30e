//! What a build says about its compression while it runs: what it reuses
//! and what it compresses, a bar on a terminal or a line every
//! `LINE_EVERY` elsewhere, the time left, and a note suggesting
//! `--compression fast` when the compression looks long.
//!
//! The counter (`Counter`) is an `indicatif::ProgressBar` (hidden unless
//! on a terminal) whose length is the cost of the compression, each
//! encoding counted at its cost per byte (`cost`: brotli 11 costs about
//! thirty times gzip 9 per byte), and beside it the source bytes, for the
//! lines: the bodies the base gives, or a content already encoded, are not
//! work and are taken off its length, never added to its position.
//! Estimates come from the rate of this build's own first bodies in cost
//! units, so that the cheap bodies made first or beside a large brotli
//! body do not make the rest look quick, and only once there is enough of
//! it (`ESTIMATE_AFTER` and `ESTIMATE_AFTER_SHARE`): the first bodies of a
//! build are no guide to the whole in their first seconds.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::Progress;

/// Compression time after which a build starts writing progress lines.
const FIRST_LINE: Duration = Duration::from_secs(1);
/// Time between two progress lines.
const LINE_EVERY: Duration = Duration::from_secs(10);
/// Compression time and share of the work done before the time left is
/// estimated.
const ESTIMATE_AFTER: Duration = Duration::from_secs(10);
const ESTIMATE_AFTER_SHARE: f64 = 0.02;
/// An estimated compression time left above which a build suggests
/// `--compression fast`.
const LONG_BUILD: Duration = Duration::from_secs(60);

/// What the compression has to do, as planned before it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Encoded bodies copied from the base pack, and their source bytes.
    pub reused_bodies: u64,
    pub reused_bytes: u64,
    /// Encoded bodies to make (a file too large for a batch counted with
    /// all its encodings: whether the base holds them is known when it is
    /// read), and their source bytes.
    pub compressed_bodies: u64,
    pub compressed_bytes: u64,
    /// The cost of making them (`cost::body`): the counter's length.
    pub compressed_cost: u64,
}

impl Work {
    /// "reusing 2,092 bodies (120.0 MiB), compressing 4 (5.8 MiB)".
    pub fn said(&self) -> String {
        let bodies = |n: u64| match n {
            1 => "1 body".to_owned(),
            n => format!("{} bodies", thousands(n)),
        };
        let compressed = mib(self.compressed_bytes);
        match self.reused_bodies {
            0 => format!(
                "compressing {} ({compressed} MiB)",
                bodies(self.compressed_bodies)
            ),
            n => format!(
                "reusing {} ({} MiB), compressing {} ({compressed} MiB)",
                bodies(n),
                mib(self.reused_bytes),
                thousands(self.compressed_bodies)
            ),
        }
    }
}

/// `n` with a comma every three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1 << 20))
}

/// The time left at the rate so far, once `elapsed` and `done` of `total`
/// are enough to tell.
pub fn time_left(elapsed: Duration, done: u64, total: u64) -> Option<Duration> {
    let enough = elapsed >= ESTIMATE_AFTER && done as f64 >= total as f64 * ESTIMATE_AFTER_SHARE;
    (enough && done > 0).then(|| elapsed.mul_f64(total.saturating_sub(done) as f64 / done as f64))
}

/// "about 40 s", "about 3 min".
fn shown(left: Duration) -> String {
    match left.as_secs() {
        s if s < 100 => format!("about {s} s"),
        s => format!("about {} min", s.div_ceil(60)),
    }
}

/// The count of a compression: its cost on the bar (position and
/// length, in `cost` units), its source bytes beside, for the lines.
pub struct Counter {
    /// Hidden until `show` gives it its work.
    pub bar: ProgressBar,
    /// Source bytes compressed, each encoding counted.
    bytes: AtomicU64,
    /// Source bytes to compress, each encoding counted.
    total_bytes: AtomicU64,
}

impl Counter {
    pub fn new() -> Counter {
        Counter {
            bar: ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden()),
            bytes: AtomicU64::new(0),
            total_bytes: AtomicU64::new(0),
        }
    }

    /// `bytes` compressed, at `units` of cost.
    pub fn add(&self, bytes: u64, units: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.bar.inc(units);
    }

    /// `bytes` counted as work, at `units` of cost, that turned out not
    /// to be (reused or already made): taken off the length.
    pub fn forget(&self, bytes: u64, units: u64) {
        let _ = self
            .total_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(bytes))
            });
        self.bar.dec_length(units);
    }

    /// Source bytes compressed so far, and in all.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.total_bytes.load(Ordering::Relaxed),
        )
    }

    /// The share of the work's cost done, 0 to 1.
    pub fn share_done(&self) -> f64 {
        self.bar.position() as f64 / self.bar.length().unwrap_or(0).max(1) as f64
    }
}

impl Default for Counter {
    fn default() -> Self {
        Counter::new()
    }
}

/// Gives `counter` the compression of `work`, drawn as a bar when
/// `progress` says so (else counted all the same: the lines and the note
/// read it). The bar shows the share of the cost done, not bytes: a MiB
/// of brotli takes thirty times a MiB of gzip.
pub fn show(counter: &Counter, progress: Progress, work: &Work) {
    let bar = &counter.bar;
    counter
        .total_bytes
        .store(work.compressed_bytes, Ordering::Relaxed);
    bar.set_length(work.compressed_cost);
    bar.reset_elapsed();
    if progress != Progress::Bar {
        return;
    }
    bar.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {percent:>3} % of the work ({left})")
            .expect("valid template")
            .with_key(
                "left",
                |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let left = time_left(state.elapsed(), state.pos(), state.len().unwrap_or(0));
                    let _ = match left {
                        Some(left) => write!(w, "{} left", shown(left)),
                        None => write!(w, "estimating"),
                    };
                },
            ),
    );
    bar.set_message(work.said());
    bar.set_draw_target(ProgressDrawTarget::stderr());
}

/// Watches a compression until `written` says the bodies are written (or
/// is dropped): with `Progress::Lines`, a line once it has taken
/// `FIRST_LINE`, then one every `LINE_EVERY`, then one with the time
/// taken (a build done sooner writes none); in both shown modes, the note
/// suggesting `--compression fast` (unless `fast` already) once the time
/// left at the rate of the first bodies is more than `LONG_BUILD`. A line
/// that cannot be written is dropped.
pub fn watch(
    counter: &Counter,
    progress: Progress,
    work: &Work,
    fast: bool,
    written: &Receiver<()>,
) {
    let started = Instant::now();
    let bar = &counter.bar;
    let total = work.compressed_cost;
    let lines = progress == Progress::Lines;
    let say = |line: String| match progress {
        Progress::Bar => bar.println(line),
        _ => {
            crate::report::to_stderr(&line);
        }
    };
    let mut noted = fast;
    let mut next_line = started + FIRST_LINE;
    let mut first = true;
    loop {
        let now = Instant::now();
        let done = bar.position();
        let left = time_left(now - started, done, bar.length().unwrap_or(total));
        if !noted && let Some(left) = left {
            noted = true;
            if left > LONG_BUILD {
                let rate = counter.bytes().0 as f64 / (now - started).as_secs_f64() / 1e6;
                say(format!(
                    "kiln: note: at the rate of the first bodies ({rate:.2} MB/s), the compression \
                     takes {} more; --compression fast takes about a hundredth of that, for \
                     bodies about a third larger",
                    shown(left)
                ));
            }
        }
        if lines && now >= next_line {
            if first {
                say(format!(
                    "kiln: {} (each encoding counted), a line every {} s",
                    work.said(),
                    LINE_EVERY.as_secs()
                ));
                first = false;
            }
            let percent = counter.share_done() * 100.0;
            let (bytes, total_bytes) = counter.bytes();
            let left = match left {
                Some(left) => format!(", {} left", shown(left)),
                None => String::new(),
            };
            say(format!(
                "kiln: compressing: {percent:.1} % ({} of {} MiB){left}",
                mib(bytes),
                mib(total_bytes)
            ));
            next_line = now + LINE_EVERY;
        }
        // Woken each second to look for the note's moment.
        match written.recv_timeout(Duration::from_secs(1)) {
            Err(RecvTimeoutError::Timeout) => continue,
            _ => break,
        }
    }
    if lines && !first {
        say(format!(
            "kiln: compressed {} MiB in {:.1} s",
            mib(counter.bytes().0),
            started.elapsed().as_secs_f64()
        ));
    }
}

/// A reader that moves a counter by the bytes read through it, at
/// `per_byte` cost units each (`cost::per_byte`).
pub struct CountedReader<'a, R> {
    pub inner: R,
    pub counter: &'a Counter,
    pub per_byte: u64,
}

impl<R: Read> Read for CountedReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.add(n as u64, n as u64 * self.per_byte);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_reused_and_compressed_is_said() {
        let work = Work {
            reused_bodies: 2092,
            reused_bytes: 120 << 20,
            compressed_bodies: 4,
            compressed_bytes: 5_800_000,
            compressed_cost: 0,
        };
        assert_eq!(
            work.said(),
            "reusing 2,092 bodies (120.0 MiB), compressing 4 (5.5 MiB)"
        );
        let clean = Work {
            reused_bodies: 0,
            ..work
        };
        assert_eq!(clean.said(), "compressing 4 bodies (5.5 MiB)");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    /// No estimate before `ESTIMATE_AFTER` nor before
    /// `ESTIMATE_AFTER_SHARE` of the work: a build whose first bodies are
    /// slow is not announced as many times longer than it is.
    #[test]
    fn the_time_left_waits_for_enough_data() {
        let total = 1000;
        assert_eq!(time_left(Duration::from_secs(5), 500, total), None);
        assert_eq!(time_left(Duration::from_secs(30), 10, total), None);
        assert_eq!(
            time_left(Duration::from_secs(30), 100, total),
            Some(Duration::from_secs(270))
        );
        assert_eq!(
            time_left(Duration::from_secs(20), total, total),
            Some(Duration::ZERO)
        );
        assert_eq!(shown(Duration::from_secs(42)), "about 42 s");
        assert_eq!(shown(Duration::from_secs(270)), "about 5 min");
    }

    /// The progress of a 200 MiB text at the default levels, in the order
    /// a build reports it (its gzip body read beside the brotli pieces,
    /// the slow pieces first): the share done only grows, ends at the
    /// whole, and once the gzip body is made (half the bytes) says about
    /// a tenth of the work, not a half, so the time left is not read off
    /// the cheap body's rate.
    #[test]
    fn the_share_done_is_the_cost_not_the_bytes() {
        use crate::build::compress::{CompressOptions, Level, brotli_layout};
        use crate::build::cost;
        use crate::pack::Encoding;

        let opts = CompressOptions::at(Level::High);
        let len: u64 = 200 << 20;
        let counter = Counter::new();
        let cost = cost::body(Encoding::Br, len, &opts) + cost::body(Encoding::Gzip, len, &opts);
        show(
            &counter,
            Progress::Silent,
            &Work {
                compressed_bodies: 2,
                compressed_bytes: 2 * len,
                compressed_cost: cost,
                ..Work::default()
            },
        );
        let gzip = cost::per_byte(Encoding::Gzip, len, &opts);
        let mut shares = vec![counter.share_done()];
        for _ in 0..(len >> 20) {
            counter.add(1 << 20, (1 << 20) * gzip);
            shares.push(counter.share_done());
        }
        assert_eq!(counter.bytes(), (len, 2 * len));
        assert!(counter.share_done() < 0.15, "{}", counter.share_done());
        let mut layout = brotli_layout(len, &opts);
        layout.sort_by_key(|p| p.fast);
        for piece in &layout {
            let per_byte = cost::brotli_piece_per_byte(piece, len, &opts);
            let mut at = piece.start;
            while at < piece.end {
                let n = (piece.end - at).min(256 << 10);
                counter.add(n, n * per_byte);
                shares.push(counter.share_done());
                at += n;
            }
        }
        assert!(shares.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(counter.bar.position(), cost);
        assert_eq!(counter.bytes(), (2 * len, 2 * len));
        // A body found reused is taken off both counts.
        counter.forget(len, cost::body(Encoding::Gzip, len, &opts));
        assert_eq!(counter.bytes(), (2 * len, len));
        assert_eq!(
            counter.bar.length(),
            Some(cost::body(Encoding::Br, len, &opts))
        );
    }
}
