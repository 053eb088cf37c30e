//! Walks a source directory in sorted order. Symbolic links are followed,
//! also when they point outside the tree (as kawipiko does); a link back to a
//! directory already on the current chain is a loop, skipped with a warning.
//! The output pack itself is never read, wherever it lies. Files are only
//! listed here, with their size and mtime, and read later by the build in
//! bounded batches, so the size of a directory source is not capped.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use anyhow::{Context, bail};

use super::ignore::is_ignored_entry;
use super::{Content, ReadOptions, Source, SourceFile};

/// The state of one walk.
struct Walk {
    /// (device, inode) of the directories from the root to the current one.
    chain: HashSet<(u64, u64)>,
    /// (device, inode) of the output pack if it exists: skipped.
    exclude: Option<(u64, u64)>,
    /// What has been read so far.
    source: Source,
}

/// Reads every kept regular file under `root`.
pub fn read_dir_source(root: &Path, opts: &ReadOptions) -> anyhow::Result<Source> {
    let meta = fs::metadata(root).with_context(|| format!("{}: cannot read", root.display()))?;
    let mut state = Walk {
        chain: HashSet::from([(meta.dev(), meta.ino())]),
        exclude: opts
            .exclude
            .as_ref()
            .and_then(|p| fs::metadata(p).ok())
            .map(|m| (m.dev(), m.ino())),
        source: Source::default(),
    };
    walk(root, "", &mut state)?;
    Ok(state.source)
}

/// `rel` is the '/'-separated path of `dir` below the root ("" for the root).
fn walk(dir: &Path, rel: &str, state: &mut Walk) -> anyhow::Result<()> {
    let entries =
        fs::read_dir(dir).with_context(|| format!("{}: cannot list directory", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("{}: cannot list directory", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            bail!("{}: file name is not UTF-8", entry.path().display());
        };
        names.push((name.to_owned(), entry));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, entry) in names {
        if is_ignored_entry(rel.is_empty(), &name) {
            continue;
        }
        let path = dir.join(&name);
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        // Through the directory's descriptor (no walk of the whole path),
        // unless the entry is a link, which is followed.
        let found = match entry.file_type() {
            Ok(t) if !t.is_symlink() => entry.metadata(),
            _ => fs::metadata(&path),
        };
        let meta = match found {
            Ok(m) => m,
            Err(e) if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) => {
                state.source.warnings.push(format!(
                    "{}: broken symbolic link skipped ({e})",
                    path.display()
                ));
                continue;
            }
            Err(e) => bail!("{}: cannot read: {e}", path.display()),
        };
        if meta.is_dir() {
            let id = (meta.dev(), meta.ino());
            if !state.chain.insert(id) {
                state
                    .source
                    .warnings
                    .push(format!("{}: symbolic link loop skipped", path.display()));
                continue;
            }
            walk(&path, &child_rel, state)?;
            state.chain.remove(&id);
        } else if meta.is_file() {
            if state.exclude == Some((meta.dev(), meta.ino())) {
                continue;
            }
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs() as i64);
            state.source.files.push(SourceFile {
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
    Ok(())
}
