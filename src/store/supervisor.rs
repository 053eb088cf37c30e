//! `kiln store sync` as the server starts it: a supervisor that keeps one
//! worker (`kiln store sync --worker`, [`super::sync`]) running, as the
//! ACME client's supervisor does: restarted after it dies, 1 s after the
//! first death, doubling up to a minute, back to 1 s once a worker lived
//! ten minutes. It holds no network client and no state; its standard
//! input, the server's pipe, is each worker's. It stops (stopping the
//! worker) on SIGTERM or SIGINT and when its parent, the server, is gone.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use rustix::process::{self, Pid, Signal};

use super::sync::SyncArgs;
use crate::sys::SignalSet;

const FIRST_RESTART_DELAY: Duration = Duration::from_secs(1);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);
/// A worker that lived this long resets the restart delay.
const HEALTHY_LIFE: Duration = Duration::from_secs(10 * 60);
/// How long a worker asked to stop gets before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
const SIGNALS: [Signal; 3] = [Signal::TERM, Signal::INT, Signal::CHILD];

/// Whether to stop: SIGTERM or SIGINT within `timeout`, or the parent gone.
fn told_to_stop(set: &SignalSet, timeout: Duration, parent: Option<Pid>) -> bool {
    let signal = set.wait(timeout);
    signal == Some(Signal::TERM) || signal == Some(Signal::INT) || process::getppid() != parent
}

/// Asks the worker to stop, kills it if it does not, and reaps it.
fn stop(child: &mut Child) {
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

/// The worker's arguments: the request spelled out.
fn worker_argv(args: &SyncArgs) -> Vec<String> {
    let mut argv = vec![
        "store".to_string(),
        "sync".to_string(),
        args.url.clone(),
        "--cache-dir".to_string(),
        args.cache_dir.display().to_string(),
        "--sync-interval".to_string(),
        args.sync_interval.to_string(),
        "--worker".to_string(),
    ];
    if let Some(endpoint) = &args.endpoint.endpoint {
        argv.extend(["--store-endpoint".to_string(), endpoint.clone()]);
    }
    if args.no_sandbox {
        argv.push("--no-sandbox".to_string());
    }
    argv
}

/// Runs the supervisor until told to stop.
pub fn run(args: &SyncArgs) -> anyhow::Result<()> {
    let parent = process::getppid();
    process::set_parent_process_death_signal(Some(Signal::TERM))
        .map_err(|e| anyhow!("cannot ask for the parent's death signal: {e}"))?;
    if process::getppid() != parent {
        return Ok(());
    }
    let set = SignalSet::of(&SIGNALS);
    set.block().context("cannot block signals")?;
    let mut delay = FIRST_RESTART_DELAY;
    loop {
        let mut child = Command::new("/proc/self/exe")
            .args(worker_argv(args))
            .env_remove("KILN_STORE_ENDPOINT")
            .spawn()
            .context("cannot start the store worker")?;
        let started = Instant::now();
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
            "store: the worker {} ended ({status}) after {} s; restarting in {} s (the cache serves on)",
            child.id(),
            started.elapsed().as_secs(),
            delay.as_secs()
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
        delay = (delay * 2).min(MAX_RESTART_DELAY);
    }
}
