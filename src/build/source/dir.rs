//! Walks a source directory in sorted order. Symbolic links are followed,
//! also when they point outside the tree (as kawipiko does); a link back to a
//! directory already on the current chain is a loop, skipped with a warning.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use anyhow::{Context, bail};

use super::ignore::{is_ignored_name, is_well_known};
use super::{Source, SourceFile};

/// Reads every kept regular file under `root`.
pub fn read_dir_source(root: &Path) -> anyhow::Result<Source> {
    let mut source = Source::default();
    let meta = fs::metadata(root).with_context(|| format!("{}: cannot read", root.display()))?;
    let mut chain = HashSet::new();
    chain.insert((meta.dev(), meta.ino()));
    walk(root, "", &mut chain, &mut source)?;
    Ok(source)
}

/// `rel` is the '/'-separated path of `dir` below the root ("" for the root);
/// `chain` holds (device, inode) of the directories from the root to `dir`.
fn walk(
    dir: &Path,
    rel: &str,
    chain: &mut HashSet<(u64, u64)>,
    source: &mut Source,
) -> anyhow::Result<()> {
    let entries =
        fs::read_dir(dir).with_context(|| format!("{}: cannot list directory", dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("{}: cannot list directory", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            bail!("{}: file name is not UTF-8", entry.path().display());
        };
        names.push(name.to_owned());
    }
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if is_ignored_name(&name) && !is_well_known(&child_rel) && !is_well_known(rel) {
            continue;
        }
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) => {
                source.warnings.push(format!(
                    "{}: broken symbolic link skipped ({e})",
                    path.display()
                ));
                continue;
            }
            Err(e) => bail!("{}: cannot read: {e}", path.display()),
        };
        if meta.is_dir() {
            let id = (meta.dev(), meta.ino());
            if !chain.insert(id) {
                source
                    .warnings
                    .push(format!("{}: symbolic link loop skipped", path.display()));
                continue;
            }
            walk(&path, &child_rel, chain, source)?;
            chain.remove(&id);
        } else if meta.is_file() {
            let bytes =
                fs::read(&path).with_context(|| format!("{}: cannot read", path.display()))?;
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs() as i64);
            source.files.push(SourceFile {
                path: child_rel,
                bytes,
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
