//! One client orders a name at a time, even across servers sharing the
//! state folder on a network volume: `locks/NAME.lock`, as Caddy's file
//! storage does it.
//!
//! A lock file is made whole beside its name (owner line written, the
//! file `flock`ed) and hard-linked into place, which fails if one is
//! there: the create-exclusive step. Its owner keeps its mtime fresh (a
//! heartbeat every [`HEARTBEAT`]) and removes it when done. A lock is
//! taken over when its owner is gone: on this machine the kernel says so
//! (the owner's `flock` went with it, so a killed worker's lock is free at
//! once); from another machine, whose `flock` may not reach here, when its
//! heartbeat is older than [`STALE_AFTER`].

use std::fs::{self, File};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, anyhow};
use rustix::fs::FlockOperation;
use rustix::io::Errno;

/// How often the owner of a lock refreshes it.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// A lock whose heartbeat is older than this is its owner's no more.
pub const STALE_AFTER: Duration = Duration::from_secs(120);

/// A lock held: the name is this client's to order until released.
pub struct NameLock {
    path: PathBuf,
    file: Arc<File>,
}

/// What [`take`] found.
pub enum Taken {
    /// The lock is ours.
    Held(NameLock),
    /// Another client holds it; its owner line.
    Busy(String),
}

/// This machine's name, from `uname` (no file to read in the sandbox).
fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// `flock(LOCK_EX | LOCK_NB)`: whether it was granted.
fn try_flock(file: &File) -> std::io::Result<bool> {
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The owner line this process writes: host, pid, and a random number
/// (two processes of one pid on two machines, or over time, differ).
pub(super) fn owner_line() -> String {
    format!(
        "{} {} {:016x}\n",
        hostname(),
        std::process::id(),
        super::schedule::random_u64()
    )
}

/// Tries to take the lock of `name` in `dir` (the state folder).
pub fn take(dir: &Path, name: &str) -> anyhow::Result<Taken> {
    let locks = dir.join("locks");
    let path = locks.join(format!("{name}.lock"));
    let owner = owner_line();
    let fail = |what: &str, e: std::io::Error| anyhow!("lock {}: {what}: {e}", path.display());
    // A few rounds: each loses only to a lock released or replaced
    // between two steps.
    for _ in 0..4 {
        let temp = locks.join(format!(".{name}.lock.{}.tmp", std::process::id()));
        let _ = fs::remove_file(&temp);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| fail("create", e))?;
        try_flock(&file).map_err(|e| fail("flock", e))?;
        file.write_all(owner.as_bytes())
            .map_err(|e| fail("write", e))?;
        let linked = fs::hard_link(&temp, &path);
        let _ = fs::remove_file(&temp);
        match linked {
            Ok(()) => {
                return Ok(Taken::Held(NameLock {
                    path,
                    file: Arc::new(file),
                }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail("link", e)),
        }
        drop(file);
        let mut there = match fs::OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(fail("open", e)),
        };
        let mut line = String::new();
        let _ = there.read_to_string(&mut line);
        let line = line.trim().to_owned();
        if !try_flock(&there).map_err(|e| fail("flock", e))? {
            return Ok(Taken::Busy(line));
        }
        // Ours by flock; still the file at that name?
        let meta = there.metadata().map_err(|e| fail("stat", e))?;
        match fs::metadata(&path) {
            Ok(named) if named.ino() == meta.ino() && named.dev() == meta.dev() => {}
            _ => continue,
        }
        let age = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .unwrap_or_default();
        let same_host = line.split(' ').next() == Some(hostname().as_str());
        if age < STALE_AFTER && !same_host {
            return Ok(Taken::Busy(line));
        }
        there.set_len(0).map_err(|e| fail("truncate", e))?;
        there.rewind().map_err(|e| fail("seek", e))?;
        there
            .write_all(owner.as_bytes())
            .map_err(|e| fail("write", e))?;
        there
            .set_modified(SystemTime::now())
            .map_err(|e| fail("touch", e))?;
        tracing::info!(
            "acme: {name}: took over the lock of {line:?} (heartbeat {} s old, its owner is gone)",
            age.as_secs()
        );
        return Ok(Taken::Held(NameLock {
            path,
            file: Arc::new(there),
        }));
    }
    Ok(Taken::Busy("(changing hands)".to_owned()))
}

impl NameLock {
    /// What the heartbeat touches: the lock file itself.
    pub fn heartbeat_handle(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Refreshes the heartbeat.
    pub fn beat(file: &File) -> anyhow::Result<()> {
        file.set_modified(SystemTime::now())
            .context("lock heartbeat")
    }
}

impl Drop for NameLock {
    /// Removes the lock file, if it is still this one. Also when an
    /// attempt is abandoned half-way (its future dropped): the name is
    /// free at once rather than after [`STALE_AFTER`].
    fn drop(&mut self) {
        let ours = self.file.metadata().ok().map(|m| (m.dev(), m.ino()));
        let named = fs::metadata(&self.path).ok().map(|m| (m.dev(), m.ino()));
        if ours.is_some() && ours == named {
            super::store::remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_held_once_and_free_again_when_its_owner_drops_it_or_dies() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("locks")).unwrap();
        let Taken::Held(first) = take(dir.path(), "a.test").unwrap() else {
            panic!("a free lock was busy")
        };
        let Taken::Busy(owner) = take(dir.path(), "a.test").unwrap() else {
            panic!("a held lock was taken again")
        };
        assert!(owner.contains(&std::process::id().to_string()), "{owner}");
        assert!(matches!(
            take(dir.path(), "b.test").unwrap(),
            Taken::Held(_)
        ));
        drop(first);
        assert!(!dir.path().join("locks/a.test.lock").exists());
        // An owner on this machine that died without removing its lock:
        // the file is there, fresh, but nobody holds its flock.
        fs::write(
            dir.path().join("locks/a.test.lock"),
            format!("{} 1 0123456789abcdef\n", hostname()),
        )
        .unwrap();
        assert!(matches!(
            take(dir.path(), "a.test").unwrap(),
            Taken::Held(_)
        ));
    }

    #[test]
    fn another_machines_lock_is_taken_over_only_when_its_heartbeat_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("locks")).unwrap();
        let path = dir.path().join("locks/a.test.lock");
        fs::write(&path, "elsewhere 42 0123456789abcdef\n").unwrap();
        assert!(
            matches!(take(dir.path(), "a.test").unwrap(), Taken::Busy(o) if o.starts_with("elsewhere"))
        );
        let old = SystemTime::now() - STALE_AFTER - Duration::from_secs(1);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let taken = take(dir.path(), "a.test").unwrap();
        assert!(matches!(taken, Taken::Held(_)));
        assert!(fs::read_to_string(&path).unwrap().starts_with(&hostname()));
        drop(taken);
        assert!(!path.exists());
    }
}
