//! `kiln store sync` as the server starts it: a supervisor that keeps one
//! worker (`kiln store sync --worker`, [`super::sync`]) running, as the
//! ACME client's supervisor does: restarted after it dies, 1 s after the
//! first death, doubling up to a minute, back to 1 s once a worker lived
//! ten minutes. It holds no network client and no state; its standard
//! input, the server's pipe, is each worker's. It stops (stopping the
//! worker) on SIGTERM or SIGINT and when its parent, the server, is gone.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use rustix::process::{self, Signal};

use super::sync::SyncArgs;
use crate::confine;

/// The longest wait before a restart (the cache serves on meanwhile).
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);

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
    if let Some(size) = args.cache_size {
        argv.extend(["--cache-size".to_string(), size.to_string()]);
    }
    argv.extend([
        "--parallel-fetches".to_string(),
        args.parallel_fetches.to_string(),
    ]);
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
    let worker = confine::Worker {
        name: "store",
        max_restart_delay: MAX_RESTART_DELAY,
        meanwhile: " (the cache serves on)",
    };
    confine::supervise(&worker, parent, || {
        Command::new("/proc/self/exe")
            .args(worker_argv(args))
            .env_remove("KILN_STORE_ENDPOINT")
            .spawn()
            .context("cannot start the store worker")
    })
}
