//! The file a pack is written to before it takes its target's name.
//!
//! It is unnamed (`O_TMPFILE` in the target's folder): a build that is
//! interrupted, by an error, Ctrl-C, SIGTERM or a closed terminal, leaves
//! nothing behind, as the kernel frees an unnamed file with its last
//! descriptor. Once complete it is linked under a temporary name
//! (`linkat` through `/proc/self/fd`, which needs no privilege) and renamed
//! over the target. A filesystem without `O_TMPFILE` (or a system without
//! `/proc`) gets a named file, `.NAME.XXXXXX.tmp`, removed on error but not
//! on a fatal signal.
//!
//! Either way the file is locked (`flock`) for as long as its build runs.
//! A later build of the same target removes the temporary files it
//! recognises as strays: kiln's own name pattern for that target, not
//! locked, and not written for `STRAY_AGE` (a build of an older kiln, which
//! took no lock, is then surely not writing it).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use rustix::rand::GetRandomFlags;

/// Random characters in a temporary name (as the `tempfile` crate, which
/// named the temporary files of earlier kiln versions).
const RANDOM_CHARS: usize = 6;

/// How long a temporary file must have gone unwritten before a later build
/// removes it as a stray.
pub const STRAY_AGE: Duration = Duration::from_secs(60);

/// A pack is public content: a server running as another user must be able
/// to read it from the moment it is renamed into place.
const MODE: u32 = 0o644;

/// The temporary file of one pack; `persist` gives it the target's name.
pub struct PackTemp {
    /// Where the finished pack goes.
    target: PathBuf,
    /// The target's folder.
    dir: PathBuf,
    /// The target's file name.
    name: String,
    /// The file's name in the fallback mode; `None` while it is unnamed.
    named: Option<PathBuf>,
    /// The file, locked for the build's life.
    file: File,
}

impl PackTemp {
    /// Removes the strays of earlier builds of `target`, then creates its
    /// temporary file; also the strays removed.
    pub fn create(target: &Path) -> io::Result<(PackTemp, Vec<PathBuf>)> {
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "pack".into());
        let removed = remove_strays(&dir, &name);
        let (file, named) = match unnamed_file(&dir)? {
            Some(file) => (file, None),
            None => {
                let (file, path) = named_file(&dir, &name)?;
                (file, Some(path))
            }
        };
        rustix::fs::flock(&file, FlockOperation::LockExclusive)?;
        Ok((
            PackTemp {
                target: target.to_path_buf(),
                dir,
                name,
                named,
                file,
            },
            removed,
        ))
    }

    /// The folder the pack goes to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file to write the pack to.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Gives the complete, synced file the target's name, atomically.
    pub fn persist(mut self) -> io::Result<()> {
        let path = match self.named.take() {
            Some(path) => path,
            None => self.link()?,
        };
        if let Err(e) = fs::rename(&path, &self.target) {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        // Make the rename itself durable; not all filesystems allow it.
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Links the unnamed file under a fresh temporary name (`linkat` cannot
    /// replace the target: the rename does).
    fn link(&self) -> io::Result<PathBuf> {
        let from = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        loop {
            let path = self.dir.join(temp_name(&self.name));
            let (cwd, follow) = (rustix::fs::CWD, AtFlags::SYMLINK_FOLLOW);
            match rustix::fs::linkat(cwd, from.as_str(), cwd, &path, follow) {
                Ok(()) => return Ok(path),
                Err(Errno::EXIST) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

impl Drop for PackTemp {
    /// A build that failed removes its named file (an unnamed one needs
    /// nothing).
    fn drop(&mut self) {
        if let Some(path) = &self.named {
            let _ = fs::remove_file(path);
        }
    }
}

/// An unnamed file in `dir`; `None` when the filesystem (or the missing
/// `/proc`, needed to link it at the end) does not allow one. Debug builds
/// take the named fallback when `KILN_DEBUG_NAMED_TEMP` is set, for the
/// tests (tests/build_interrupted.rs).
fn unnamed_file(dir: &Path) -> io::Result<Option<File>> {
    #[cfg(debug_assertions)]
    if std::env::var_os("KILN_DEBUG_NAMED_TEMP").is_some() {
        return Ok(None);
    }
    if !Path::new("/proc/self/fd").is_dir() {
        return Ok(None);
    }
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    match rustix::fs::open(dir, flags, Mode::from_raw_mode(MODE)) {
        Ok(fd) => Ok(Some(File::from(fd))),
        // No O_TMPFILE here: the filesystem (EOPNOTSUPP), or a kernel that
        // reads the flag as O_DIRECTORY (EISDIR) or rejects it (EINVAL).
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// A new named temporary file for `name` in `dir`.
fn named_file(dir: &Path, name: &str) -> io::Result<(File, PathBuf)> {
    loop {
        let path = dir.join(temp_name(name));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(MODE)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `.NAME.XXXXXX.tmp`, with random letters and digits.
fn temp_name(name: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut random = [0u8; RANDOM_CHARS];
    // A short read leaves zeros: a name that exists already is skipped by
    // the callers.
    let _ = rustix::rand::getrandom(&mut random, GetRandomFlags::empty());
    let chars: String = random
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!(".{name}.{chars}.tmp")
}

/// True when `file_name` is a temporary file kiln names for the target
/// `name`.
fn is_temp_name(file_name: &[u8], name: &str) -> bool {
    let Some(rest) = file_name
        .strip_prefix(b".")
        .and_then(|r| r.strip_prefix(name.as_bytes()))
        .and_then(|r| r.strip_prefix(b"."))
        .and_then(|r| r.strip_suffix(b".tmp"))
    else {
        return false;
    };
    rest.len() == RANDOM_CHARS && rest.iter().all(u8::is_ascii_alphanumeric)
}

/// Removes every stray temporary file of the target `name` in `dir` (see
/// the module doc); the paths removed. Anything that fails is left alone.
fn remove_strays(dir: &Path, name: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if !is_temp_name(entry.file_name().as_bytes(), name) {
            continue;
        }
        let path = entry.path();
        if is_stray(&path).unwrap_or(false) && fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed.sort();
    removed
}

/// True when the regular file at `path` is not locked by a build and was
/// not written for `STRAY_AGE`. The lock is taken and held until this
/// returns, so no build can be starting on it meanwhile.
fn is_stray(path: &Path) -> io::Result<bool> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(false);
    }
    let written = SystemTime::UNIX_EPOCH + Duration::from_secs(meta.mtime().max(0) as u64);
    if SystemTime::now()
        .duration_since(written)
        .is_ok_and(|age| age < STRAY_AGE)
    {
        return Ok(false);
    }
    if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Ok(false);
    }
    // Still the file that was checked, not one renamed there since.
    let now = fs::symlink_metadata(path)?;
    Ok((now.dev(), now.ino()) == (meta.dev(), meta.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_for_their_target_only() {
        let name = temp_name("site.pack");
        assert!(is_temp_name(name.as_bytes(), "site.pack"), "{name}");
        assert!(is_temp_name(b".site.pack.aB3xYz.tmp", "site.pack"));
        assert!(!is_temp_name(b".site.pack.aB3xYz.tmp", "other.pack"));
        for other in [
            &b".site.pack.aB3xY.tmp"[..],
            b".site.pack.aB3xYzz.tmp",
            b".site.pack.aB-xYz.tmp",
            b"site.pack.aB3xYz.tmp",
            b".site.pack.aB3xYz.tmp~",
            b".site.pack.tmp",
        ] {
            assert!(
                !is_temp_name(other, "site.pack"),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }
}
