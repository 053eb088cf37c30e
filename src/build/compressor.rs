//! Compresses in background threads while the bodies are written: every
//! (content, encoding) a build must make is known before the first body is
//! written (a first pass hashes the compressible files), so the cores
//! compress without pause from the start, in file order, and the writer
//! takes each result when it reaches the file (waiting only if it is not
//! made yet). Without it, a batch would wait for its slowest file, and a
//! rebuild that changes one page would start compressing it only when the
//! writer got there.
//!
//! Memory: a job reserves twice its input (the input and at most as much
//! output) before it starts, and its output stays reserved until the writer
//! takes it; jobs start only within the budget, except the one the writer
//! needs next (so that one job larger than the budget still runs, alone).
//! Jobs start in file order and the writer takes them in file order, so the
//! job it waits for has always started: no deadlock.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex, MutexGuard};

use super::compress::{CompressOptions, encode_if_worth};
use super::cost;
use super::progress::Counter;
use super::source::SourceFile;
use crate::pack::Encoding;
use anyhow::{Context, anyhow, bail};

/// One encoding of one content, to make.
pub struct Job {
    /// The first file, in source order, with the content.
    pub file: usize,
    /// BLAKE3 of the content, as the first pass read it.
    pub hash: [u8; 32],
    /// The encoding to make.
    pub encoding: Encoding,
}

/// What the threads share.
struct State {
    /// The next job to start.
    next: usize,
    /// Jobs the writer took; `first_untaken` is the first one it did not.
    taken: Vec<bool>,
    /// The first job the writer has not taken.
    first_untaken: usize,
    /// Bytes reserved: jobs running, results not taken.
    held: u64,
    /// Results made, not taken, by job index: the body when worth keeping.
    results: HashMap<usize, anyhow::Result<Option<Vec<u8>>>>,
    /// The writer is gone (done or failed): workers stop.
    stopped: bool,
}

/// The background compression of a build (see the module documentation).
pub struct Compressor<'a> {
    /// The source files, read again by the jobs.
    files: &'a [SourceFile],
    /// Encodings and levels.
    opts: &'a CompressOptions,
    /// Advanced by each job's input bytes, at its cost.
    counter: &'a Counter,
    /// The jobs, in file order.
    jobs: Vec<Job>,
    /// Job index by (content, encoding), for the writer.
    index: HashMap<([u8; 32], Encoding), usize>,
    /// Bytes the jobs may hold at once.
    budget: u64,
    /// Shared between the workers and the writer.
    state: Mutex<State>,
    /// Signalled when a result is made, taken, or the writer stops.
    changed: Condvar,
}

impl<'a> Compressor<'a> {
    /// A compressor of `jobs` (in file order) within `budget` bytes.
    pub fn new(
        files: &'a [SourceFile],
        opts: &'a CompressOptions,
        counter: &'a Counter,
        jobs: Vec<Job>,
        budget: u64,
    ) -> Compressor<'a> {
        let index = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| ((j.hash, j.encoding), i))
            .collect();
        Compressor {
            files,
            opts,
            counter,
            state: Mutex::new(State {
                next: 0,
                taken: vec![false; jobs.len()],
                first_untaken: 0,
                held: 0,
                results: HashMap::new(),
                stopped: false,
            }),
            jobs,
            index,
            budget,
            changed: Condvar::new(),
        }
    }

    /// True when there is nothing to compress.
    pub fn is_idle(&self) -> bool {
        self.jobs.is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes a job reserves while it runs.
    fn reserve(&self, job: usize) -> u64 {
        self.files[self.jobs[job].file].len.saturating_mul(2)
    }

    /// A worker: runs jobs until there are none left or the writer stops.
    pub fn work(&self) {
        loop {
            let job = {
                let mut state = self.lock();
                loop {
                    if state.stopped || state.next >= self.jobs.len() {
                        return;
                    }
                    let cost = self.reserve(state.next);
                    if state.held + cost <= self.budget || state.next == state.first_untaken {
                        state.held += cost;
                        state.next += 1;
                        break state.next - 1;
                    }
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                }
            };
            // An encoder that panics fails the build like one that errs,
            // instead of leaving the writer waiting for its result.
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| self.make(&self.jobs[job])))
                .unwrap_or_else(|_| {
                    let file = &self.files[self.jobs[job].file];
                    Err(anyhow!(
                        "{}: {} compression panicked",
                        file.shown(),
                        self.jobs[job].encoding.token()
                    ))
                });
            let made = match &result {
                Ok(Some(bytes)) => bytes.len() as u64,
                _ => 0,
            };
            let mut state = self.lock();
            state.held = state.held - self.reserve(job) + made;
            state.results.insert(job, result);
            self.changed.notify_all();
        }
    }

    /// Reads the job's file, checks it is the content the first pass saw,
    /// and encodes it.
    fn make(&self, job: &Job) -> anyhow::Result<Option<Vec<u8>>> {
        let file = &self.files[job.file];
        let content = file.read()?;
        if *blake3::hash(&content).as_bytes() != job.hash {
            bail!("{}: changed during the build", file.shown());
        }
        let kept = encode_if_worth(&content, job.encoding, self.opts).with_context(|| {
            format!(
                "{}: {} compression failed",
                file.shown(),
                job.encoding.token()
            )
        })?;
        self.counter
            .add(file.len, cost::body(job.encoding, file.len, self.opts));
        Ok(kept)
    }

    /// The result of making `encoding` of the content whose BLAKE3 is
    /// `hash`, waiting for it if need be: the encoded body when worth
    /// keeping. `None` when no job makes it.
    pub fn take(
        &self,
        hash: &[u8; 32],
        encoding: Encoding,
    ) -> Option<anyhow::Result<Option<Vec<u8>>>> {
        let &job = self.index.get(&(*hash, encoding))?;
        let mut state = self.lock();
        loop {
            if let Some(result) = state.results.remove(&job) {
                if let Ok(Some(bytes)) = &result {
                    state.held -= bytes.len() as u64;
                }
                state.taken[job] = true;
                while state.first_untaken < self.jobs.len() && state.taken[state.first_untaken] {
                    state.first_untaken += 1;
                }
                self.changed.notify_all();
                return Some(result);
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Tells the workers to stop when dropped: the writer is done, or
    /// failed.
    pub fn stop_on_drop(&self) -> StopOnDrop<'_, 'a> {
        StopOnDrop(self)
    }
}

/// Stops a compressor's workers when dropped (see `stop_on_drop`).
pub struct StopOnDrop<'c, 'a>(&'c Compressor<'a>);

impl Drop for StopOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.lock().stopped = true;
        self.0.changed.notify_all();
    }
}
