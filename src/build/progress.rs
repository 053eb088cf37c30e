//! What a build says about its compression while it runs: what it reuses
//! and what it compresses, a bar on a terminal or a line every
//! `LINE_EVERY` elsewhere, the time left, and a note suggesting
//! `--compression fast` when the compression looks long.
//!
//! The counter is an `indicatif::ProgressBar` (hidden unless on a
//! terminal) whose length is the bytes to compress, each encoding
//! counted: the bodies the base gives, or a content already encoded, are
//! not work and are taken off its length, never added to its position,
//! so that the rate it shows is compression's. Estimates come from the
//! rate of this build's own first bodies, and only once there is enough
//! of it (`ESTIMATE_AFTER` and `ESTIMATE_AFTER_SHARE`): the first bodies of
//! a build are no guide to the whole in their first seconds.

use std::io::Read;
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
    /// read), and their source bytes: the counter's length.
    pub compressed_bodies: u64,
    pub compressed_bytes: u64,
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

/// A counter, hidden until `show` gives it its work.
pub fn counter() -> ProgressBar {
    ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden())
}

/// Gives `bar` the compression of `work`, drawn as a bar when `progress`
/// says so (else counted all the same: the lines and the note read it).
pub fn show(bar: &ProgressBar, progress: Progress, work: &Work) {
    bar.set_length(work.compressed_bytes);
    bar.reset_elapsed();
    if progress != Progress::Bar {
        return;
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, {left})",
        )
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
    bar: &ProgressBar,
    progress: Progress,
    work: &Work,
    fast: bool,
    written: &Receiver<()>,
) {
    let started = Instant::now();
    let total = work.compressed_bytes;
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
                let rate = done as f64 / (now - started).as_secs_f64() / 1e6;
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
            let length = bar.length().unwrap_or(total);
            let percent = done as f64 * 100.0 / length.max(1) as f64;
            let left = match left {
                Some(left) => format!(", {} left", shown(left)),
                None => String::new(),
            };
            say(format!(
                "kiln: compressing: {percent:.1} % ({} of {} MiB){left}",
                mib(done),
                mib(length)
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
            mib(bar.position()),
            started.elapsed().as_secs_f64()
        ));
    }
}

/// A reader that moves a counter by the bytes read through it.
pub struct CountedReader<'a, R> {
    pub inner: R,
    pub bar: &'a ProgressBar,
}

impl<R: Read> Read for CountedReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
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
}
