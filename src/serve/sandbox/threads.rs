//! The single-thread check: the user switch and Landlock hold for the
//! calling thread and those it starts afterwards, so [`super::enter`]
//! waits until every other thread has left the process.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

/// How long [`enter`] waits for joined threads to leave the process.
const JOINED_THREADS_GRACE: Duration = Duration::from_secs(10);

/// Waits until the calling thread is the only thread of this process, and
/// fails, naming the others, if some are still listed after
/// [`JOINED_THREADS_GRACE`].
///
/// Every thread kiln starts before the sandbox (a preview build's pool and
/// compressors) is joined before `enter` is called, but a join returns when
/// the kernel clears the thread's TID (`CLONE_CHILD_CLEARTID`, early in its
/// exit), and the thread is removed from the thread group, and from
/// `/proc/self/task`, only at the end of its exit: on a busy machine the
/// exiting thread can wait for a CPU between the two for many milliseconds.
/// Counting at once refused a preview in up to half of the starts beside a
/// compiler; waiting for the listing to shrink makes the check hold
/// whatever the load, and a thread that really runs on still fails it.
pub(super) fn wait_until_single_threaded() -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let others = other_threads()
            .map_err(|e| anyhow!("sandbox: cannot list this process's threads: {e}"))?;
        if others.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= JOINED_THREADS_GRACE {
            let names: Vec<String> = others.iter().map(|tid| thread_name(*tid)).collect();
            bail!(
                "sandbox: {} other threads still run after {} s ({}), and the user switch and Landlock would not hold for them",
                others.len(),
                JOINED_THREADS_GRACE.as_secs(),
                names.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The TIDs of this process's threads other than the calling one.
fn other_threads() -> std::io::Result<Vec<u32>> {
    let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    let mut others = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        let tid = entry?.file_name().to_str().and_then(|n| n.parse().ok());
        if let Some(tid) = tid.filter(|t| *t != me) {
            others.push(tid);
        }
    }
    Ok(others)
}

/// A thread's name as the kernel shows it, for an error message.
fn thread_name(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).map_or_else(
        |_| format!("thread {tid}"),
        |n| format!("{} ({tid})", n.trim_end()),
    )
}
