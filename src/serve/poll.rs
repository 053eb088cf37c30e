//! `--poll SECONDS`: what the control thread's inotify watch looks for,
//! looked for again every SECONDS by `stat`, for a network filesystem
//! (NFS, SMB, FUSE) whose other clients' writes inotify never reports.
//! Each scan compares the identity of every watched file (device, inode,
//! size, modification and change times) and every name of each watched
//! folder with the scan before, and hands what differs to the reloads
//! inotify's events go to (`control::Changes`), so a change is reloaded
//! exactly as an event for it would have been; a scan that finds nothing
//! does nothing and says nothing.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::control::{Changes, Role};

/// What tells one version of a file from another.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// The stamp of `path`, following links (a certificate's `live/` link
/// into `archive/`); `None` when there is nothing readable there.
fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// What a scan saw of one watched path.
enum Seen {
    /// A file: its stamp.
    File(Option<Stamp>),
    /// A folder: each name in it and its stamp.
    Folder(BTreeMap<OsString, Option<Stamp>>),
}

/// Every name in `dir` and its stamp (none for a folder that cannot be
/// read: its names then all count as gone, and come back with it).
fn folder_stamps(dir: &Path) -> BTreeMap<OsString, Option<Stamp>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .map(|e| (e.file_name(), stamp(&e.path())))
        .collect()
}

/// One watched path and what the last scan saw of it.
struct Polled {
    path: PathBuf,
    role: Role,
    seen: Seen,
}

impl Polled {
    fn look(path: &Path, role: Role) -> Seen {
        if role.is_folder() {
            Seen::Folder(folder_stamps(path))
        } else {
            Seen::File(stamp(path))
        }
    }
}

/// The scans: what to look at, how often, and what was seen last.
pub struct Poll {
    every: Duration,
    /// When the next scan is due.
    pub next: Instant,
    polled: Vec<Polled>,
}

impl Poll {
    /// Scans of `files` (the paths and roles of the inotify watch) every
    /// `every`, starting from what is there now.
    pub fn new(files: &[(&Path, Role)], every: Duration) -> Poll {
        let polled = files
            .iter()
            .map(|&(path, role)| Polled {
                path: path.to_path_buf(),
                role,
                seen: Polled::look(path, role),
            })
            .collect();
        Poll {
            every,
            next: Instant::now() + every,
            polled,
        }
    }

    /// Looks again at every path, sets the next scan `every` after `now`,
    /// and returns what changed since the scan before.
    pub fn scan(&mut self, now: Instant) -> Changes {
        self.next = now + self.every;
        let mut changes = Changes::default();
        for polled in &mut self.polled {
            let seen = Polled::look(&polled.path, polled.role);
            match (&polled.seen, &seen) {
                (Seen::File(before), Seen::File(after)) if before != after => match polled.role {
                    Role::Pack => changes.pack = true,
                    _ => changes.certificate = true,
                },
                (Seen::Folder(before), Seen::Folder(after)) => {
                    let differ = |name: &OsString| before.get(name) != after.get(name);
                    let mut names: Vec<OsString> = before
                        .keys()
                        .chain(after.keys())
                        .filter(|n| differ(n))
                        .cloned()
                        .collect();
                    names.sort();
                    names.dedup();
                    if !names.is_empty() {
                        match polled.role {
                            Role::Folder => changes.in_folder.extend(names),
                            Role::AcmeHttp01 => changes.http01 = true,
                            Role::AcmeTlsAlpn01 => changes.tls_alpn01 = true,
                            _ => changes.certificate = true,
                        }
                    }
                }
                _ => {}
            }
            polled.seen = seen;
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_names_what_changed_since_the_one_before_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("sites");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("a.pack"), b"a").unwrap();
        std::fs::write(folder.join("b.pack"), b"b").unwrap();
        let cert = dir.path().join("site.crt");
        std::fs::write(&cert, b"cert").unwrap();
        let mut poll = Poll::new(
            &[(&folder, Role::Folder), (&cert, Role::Certificate)],
            Duration::from_secs(1),
        );
        let now = Instant::now();
        assert!(!poll.scan(now).any());
        // Replaced by rename, added, removed.
        std::fs::write(dir.path().join("new"), b"a, again").unwrap();
        std::fs::rename(dir.path().join("new"), folder.join("a.pack")).unwrap();
        std::fs::write(folder.join("c.pack"), b"c").unwrap();
        std::fs::remove_file(folder.join("b.pack")).unwrap();
        let changes = poll.scan(now);
        assert_eq!(changes.in_folder, ["a.pack", "b.pack", "c.pack"]);
        assert!(!changes.certificate && !changes.pack);
        assert!(poll.next > now);
        assert!(!poll.scan(now).any(), "said once");
        std::fs::remove_file(&cert).unwrap();
        let changes = poll.scan(now);
        assert!(changes.certificate && changes.in_folder.is_empty());
    }

    #[test]
    fn a_single_pack_replaced_is_a_pack_change() {
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("site.pack");
        std::fs::write(&pack, b"one").unwrap();
        let mut poll = Poll::new(&[(&pack, Role::Pack)], Duration::from_secs(1));
        let now = Instant::now();
        assert!(!poll.scan(now).any());
        std::fs::write(dir.path().join("new"), b"two").unwrap();
        std::fs::rename(dir.path().join("new"), &pack).unwrap();
        let changes = poll.scan(now);
        assert!(changes.pack && !changes.certificate);
        assert!(!poll.scan(now).any());
    }
}
