//! The restart loop of a supervisor that keeps one worker process running
//! (the ACME client's, the store client's): the worker is restarted after
//! it dies, 1 s after the first death, doubling up to the caller's
//! ceiling, back to 1 s once a worker lived [`HEALTHY_LIFE`]. It stops
//! (stopping the worker) on SIGTERM or SIGINT and when the parent the
//! supervisor had at start is gone.

use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustix::process::{self, Pid, Signal};

use crate::sys::SignalSet;

const FIRST_RESTART_DELAY: Duration = Duration::from_secs(1);
/// A worker that lived this long resets the restart delay.
const HEALTHY_LIFE: Duration = Duration::from_secs(10 * 60);
/// How long a worker asked to stop gets before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The signals the supervisor takes synchronously, blocked (the worker
/// inherits the mask and clears it first thing).
const SIGNALS: [Signal; 3] = [Signal::TERM, Signal::INT, Signal::CHILD];

/// The worker a supervisor keeps running.
pub struct Worker<'a> {
    /// Its name in log lines ("acme", "store").
    pub name: &'a str,
    /// The longest wait before a restart.
    pub max_restart_delay: Duration,
    /// What the log line of a death adds (what goes on meanwhile).
    pub meanwhile: &'a str,
}

/// Whether to stop: SIGTERM or SIGINT within `timeout`, or the parent gone.
fn told_to_stop(set: &SignalSet, timeout: Duration, parent: Option<Pid>) -> bool {
    let signal = set.wait(timeout);
    signal == Some(Signal::TERM) || signal == Some(Signal::INT) || process::getppid() != parent
}

/// Asks the worker to stop, kills it if it does not, and reaps it.
fn stop(child: &mut Child) {
    // Our own child, not yet reaped: the pid is still its.
    let _ = process::kill_process(Pid::from_child(child), Signal::TERM);
    let asked = Instant::now();
    while asked.elapsed() < STOP_GRACE {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Keeps a worker from `spawn` running until told to stop; `parent` is
/// the parent the caller had at start.
pub fn supervise(
    worker: &Worker<'_>,
    parent: Option<Pid>,
    mut spawn: impl FnMut() -> anyhow::Result<Child>,
) -> anyhow::Result<()> {
    let set = SignalSet::of(&SIGNALS);
    set.block().context("cannot block signals")?;
    let mut delay = FIRST_RESTART_DELAY;
    loop {
        let mut child = spawn()?;
        let started = Instant::now();
        tracing::info!("{}: worker {} started", worker.name, child.id());
        let status = loop {
            if told_to_stop(&set, Duration::from_secs(1), parent) {
                stop(&mut child);
                return Ok(());
            }
            if let Some(status) = child.try_wait()? {
                break status;
            }
        };
        if started.elapsed() >= HEALTHY_LIFE {
            delay = FIRST_RESTART_DELAY;
        }
        tracing::warn!(
            "{}: worker {} ended ({status}) after {} s; restarting in {} s{}",
            worker.name,
            child.id(),
            started.elapsed().as_secs(),
            delay.as_secs(),
            worker.meanwhile
        );
        let restart = Instant::now() + delay;
        while let Some(left) = restart
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        {
            if told_to_stop(&set, left.min(Duration::from_secs(1)), parent) {
                return Ok(());
            }
        }
        delay = (delay * 2).min(worker.max_restart_delay);
    }
}
