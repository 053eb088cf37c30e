//! Walks a source directory in sorted order, subdirectories in parallel.
//! Symbolic links are followed when they resolve inside the tree (a file
//! or directory under the root); one that resolves outside it is skipped
//! with a warning naming `--follow-external-links` (which follows it: the
//! ignore rules, the key screening and the loop check still apply to what
//! it leads to) and counted, as an archive's is: `ln -s /etc/passwd
//! site/passwd.txt` must not publish the password file (nor `ln -s .git
//! repo` the repository the ignore rules keep out), and a directory
//! and a tar of it make the same pack. A skip rather than an error, so that
//! a tree holding such links (a `node_modules`-style folder linked to a
//! store elsewhere) still builds and previews, without them. A link back
//! to a directory already on the current chain is a loop, skipped with a
//! warning. The output pack itself is never read, wherever it lies. Files are only listed here, with their size and mtime,
//! and read later by the build in bounded batches, so the size of a
//! directory source is not capped.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::{Context, bail};
use rayon::prelude::*;

use super::ignore::{Why, why_ignored_entry};
use super::{Content, ReadOptions, Source, SourceFile};

/// Links followed in a chain before giving up.
const MAX_LINK_HOPS: usize = 40;
/// Directories climbed from a link's target before giving up on finding
/// the root above it.
const MAX_DEPTH: usize = 256;

/// (device, inode): a file's identity.
pub type FileId = (u64, u64);

/// What a directory holds, in name order: runs of files (and warnings), and
/// subdirectories, walked in parallel.
enum Part {
    /// Files and warnings of the directory itself.
    Here(Source),
    /// A subdirectory to walk: its path, its path below the root, its id.
    Below(PathBuf, String, FileId),
}

/// Reads every kept regular file under `root`.
pub fn read_dir_source(root: &Path, opts: &ReadOptions) -> anyhow::Result<Source> {
    let meta = fs::metadata(root).with_context(|| format!("{}: cannot read", root.display()))?;
    let exclude = opts
        .exclude
        .as_ref()
        .and_then(|p| fs::metadata(p).ok())
        .map(|m| (m.dev(), m.ino()));
    let how = Walk {
        exclude,
        leave_out_unreadable: opts.leave_out_unreadable,
        follow_external_links: opts.follow_external_links,
    };
    walk(root, "", &[(meta.dev(), meta.ino())], &how)
}

/// What every directory of a walk is listed with.
struct Walk {
    /// The output pack, never read.
    exclude: Option<FileId>,
    /// `ReadOptions::leave_out_unreadable`.
    leave_out_unreadable: bool,
    /// `ReadOptions::follow_external_links`.
    follow_external_links: bool,
}

impl Walk {
    /// Whether `e`, met listing or looking at an entry, leaves it out
    /// rather than failing the walk.
    fn left_out_unreadable(&self, e: &std::io::Error) -> bool {
        self.leave_out_unreadable && e.kind() == std::io::ErrorKind::PermissionDenied
    }
}

/// What is left of an entry that cannot be read: a warning naming it, and
/// `rel` (with a trailing '/' for a folder) left out.
fn unreadable(path: &Path, rel: String, e: &std::io::Error) -> Source {
    Source {
        warnings: vec![format!(
            "{}: left out: cannot read it ({e})",
            path.display()
        )],
        left_out: vec![(rel, Why::Unreadable)],
        ..Source::default()
    }
}

/// Where a symbolic link of the source leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkTarget {
    /// To a file or directory under the root (or the root itself): followed.
    Inside,
    /// Out of the source: skipped.
    Outside,
    /// Under the root, but to (or through) a name the build leaves out,
    /// such as `.git`: skipped too, or `ln -s .git repo` would publish
    /// what the ignore rules keep out.
    LeftOut,
}

/// Where the symbolic link at `link` leads with respect to the directory
/// `root`.
///
/// Resolved by identity, following the chain of links with `readlink`
/// and then climbing `..` from the target's directory until the root or
/// the filesystem's root: no path is made absolute, so the walk needs no
/// current directory (a preview rebuilds inside the sandbox). On the way
/// up, each directory's name is looked up in its parent (links are rare,
/// so the listing this costs is too) and checked against the ignore rules.
pub fn resolve_link(link: &Path, root: FileId) -> std::io::Result<LinkTarget> {
    let mut at = link.to_path_buf();
    for _ in 0..MAX_LINK_HOPS {
        if !fs::symlink_metadata(&at)?.file_type().is_symlink() {
            let (mut dir, file_name) = if fs::metadata(&at)?.is_dir() {
                (at, None)
            } else {
                let name = at.file_name().map(|n| n.to_os_string());
                let dir = at
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
                (dir, name)
            };
            // Each directory climbed through, with its parent: named only
            // once the root is found above them, as only then are the
            // parents inside the tree (and readable in the sandbox).
            let mut climbed: Vec<(PathBuf, FileId)> = Vec::new();
            for _ in 0..MAX_DEPTH {
                let here = fs::metadata(&dir)?;
                let id = (here.dev(), here.ino());
                if id == root {
                    return names_left_out(file_name.as_deref(), &climbed);
                }
                let up = dir.join("..");
                let parent = fs::metadata(&up)?;
                if (parent.dev(), parent.ino()) == id {
                    return Ok(LinkTarget::Outside);
                }
                climbed.push((up.clone(), id));
                dir = up;
            }
            return Ok(LinkTarget::Outside);
        }
        let target = fs::read_link(&at)?;
        at = match at.parent() {
            Some(dir) => dir.join(target),
            None => target,
        };
    }
    Ok(LinkTarget::Outside)
}

/// Whether a link that resolves under the root leads to (or through) a
/// name the build leaves out: the target file's own `file_name`, and each
/// directory of `climbed` (from the target's up to the root's child, each
/// with its parent) looked up by identity in its parent.
fn names_left_out(
    file_name: Option<&std::ffi::OsStr>,
    climbed: &[(PathBuf, FileId)],
) -> std::io::Result<LinkTarget> {
    let left_out = |name: &std::ffi::OsStr, at_root: bool| {
        name.to_str()
            .is_none_or(|n| why_ignored_entry(at_root, n).is_some())
    };
    if let Some(name) = file_name
        && left_out(name, climbed.is_empty())
    {
        return Ok(LinkTarget::LeftOut);
    }
    for (depth, (parent, id)) in climbed.iter().enumerate() {
        let at_root = depth + 1 == climbed.len();
        if let Some(name) = name_in(parent, *id)?
            && left_out(&name, at_root)
        {
            return Ok(LinkTarget::LeftOut);
        }
    }
    Ok(LinkTarget::Inside)
}

/// The name of the entry of directory `dir` whose identity is `id`, if it
/// is listed there (a mount point's listed inode is not its root's).
fn name_in(dir: &Path, id: FileId) -> std::io::Result<Option<std::ffi::OsString>> {
    use std::os::unix::fs::DirEntryExt;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.ino() == id.1 {
            return Ok(Some(entry.file_name()));
        }
    }
    Ok(None)
}

/// Lists `dir`, the '/'-separated path `rel` below the root ("" for the
/// root), whose chain of directories from the root (itself included) is
/// `chain`: its files, then those of its subdirectories, in name order,
/// subdirectories walked in parallel, as `how` says. What is left out
/// goes to `left_out`.
fn walk(dir: &Path, rel: &str, chain: &[FileId], how: &Walk) -> anyhow::Result<Source> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if how.left_out_unreadable(&e) && !rel.is_empty() => {
            return Ok(unreadable(dir, format!("{rel}/"), &e));
        }
        Err(e) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("{}: cannot list directory", dir.display()));
        }
    };
    let mut names = Vec::new();
    let mut here_not_utf8 = Source::default();
    for entry in entries {
        let entry = entry.with_context(|| format!("{}: cannot list directory", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            // No route key can hold it; the rest of the site still builds.
            let shown = entry.path();
            here_not_utf8.warnings.push(format!(
                "{}: left out: its name is not UTF-8",
                shown.display()
            ));
            let lossy = name.to_string_lossy();
            let rel_lossy = if rel.is_empty() {
                lossy.into_owned()
            } else {
                format!("{rel}/{lossy}")
            };
            here_not_utf8.left_out.push((rel_lossy, Why::NotUtf8));
            continue;
        };
        names.push((name.to_owned(), entry));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut parts = Vec::new();
    let mut here = here_not_utf8;
    for (name, entry) in names {
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let file_type = entry.file_type();
        if let Some(why) = why_ignored_entry(rel.is_empty(), &name) {
            let slash = if file_type.as_ref().is_ok_and(|t| t.is_dir()) {
                "/"
            } else {
                ""
            };
            here.left_out.push((format!("{child_rel}{slash}"), why));
            continue;
        }
        let path = dir.join(&name);
        let link = file_type.as_ref().map_or(true, |t| t.is_symlink());
        if link && fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            let target =
                || fs::read_link(&path).map_or_else(|e| e.to_string(), |t| t.display().to_string());
            let skipped = match resolve_link(&path, chain[0]) {
                Ok(LinkTarget::Inside) => None,
                Ok(LinkTarget::Outside) if how.follow_external_links => None,
                Ok(LinkTarget::Outside) => Some((
                    "it leads out of the source (--follow-external-links follows it)".to_owned(),
                    Why::OutsideLink,
                )),
                Ok(LinkTarget::LeftOut) => Some((
                    "it leads to a name the build leaves out".to_owned(),
                    Why::LeftOutLink,
                )),
                // A broken link is reported below, as one whose target is
                // missing; any other doubt skips it.
                Err(_) if fs::metadata(&path).is_err() => None,
                Err(e) => Some((
                    format!("cannot tell where it leads ({e})"),
                    Why::OutsideLink,
                )),
            };
            if let Some((why, reason)) = skipped {
                here.warnings.push(format!(
                    "{}: symbolic link to {} skipped, {why}",
                    path.display(),
                    target()
                ));
                here.left_out.push((child_rel, reason));
                continue;
            }
        }
        // Through the directory's descriptor (no walk of the whole path),
        // unless the entry is a link, which is followed.
        let found = match &file_type {
            Ok(t) if !t.is_symlink() => entry.metadata(),
            _ => fs::metadata(&path),
        };
        let meta = match found {
            Ok(m) => m,
            Err(e) if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) => {
                here.warnings.push(format!(
                    "{}: broken symbolic link skipped ({e})",
                    path.display()
                ));
                continue;
            }
            Err(e) if how.left_out_unreadable(&e) => {
                let slash = if file_type.is_ok_and(|t| t.is_dir()) {
                    "/"
                } else {
                    ""
                };
                let part = unreadable(&path, format!("{child_rel}{slash}"), &e);
                here.warnings.extend(part.warnings);
                here.left_out.extend(part.left_out);
                continue;
            }
            Err(e) => bail!("{}: cannot read: {e}", path.display()),
        };
        if meta.is_dir() {
            let id = (meta.dev(), meta.ino());
            if chain.contains(&id) {
                here.warnings
                    .push(format!("{}: symbolic link loop skipped", path.display()));
                continue;
            }
            parts.push(Part::Here(std::mem::take(&mut here)));
            parts.push(Part::Below(path, child_rel, id));
        } else if meta.is_file() {
            if how.exclude == Some((meta.dev(), meta.ino())) {
                continue;
            }
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs() as i64);
            here.files.push(SourceFile {
                path: child_rel,
                content: Content::Disk(path),
                len: meta.len(),
                mtime,
            });
        } else {
            bail!(
                "{}: not a regular file or directory (fifo, socket or device)",
                path.display()
            );
        }
    }
    parts.push(Part::Here(here));
    let walked: Vec<Source> = parts
        .into_par_iter()
        .map(|part| match part {
            Part::Here(source) => Ok(source),
            Part::Below(path, rel, id) => {
                let mut below = chain.to_vec();
                below.push(id);
                walk(&path, &rel, &below, how)
            }
        })
        .collect::<anyhow::Result<_>>()?;
    let mut source = Source::default();
    for part in walked {
        source.files.extend(part.files);
        source.warnings.extend(part.warnings);
        source.left_out.extend(part.left_out);
    }
    Ok(source)
}
