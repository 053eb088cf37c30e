//! What the user the server switched to cannot read again: a warning for
//! each such file, with advice that suits what it holds.

use std::path::{Path, PathBuf};

use rustix::fs::Access as FileAccess;

use super::{Held, Plan};
use crate::build::source::private_key::named_as_key;

/// Whether the user kiln runs as now may `mode` (`access(2)` bits) `path`;
/// the error says why not.
fn may(path: &Path, mode: FileAccess) -> std::io::Result<()> {
    // access(2) checks the real ids, which are the switched-to user's now.
    Ok(rustix::fs::access(path, mode)?)
}

/// The first directory or file under `root` (itself included) the user
/// kiln runs as now cannot read, with why; symbolic links are not
/// followed (their targets are checked where the build reads them).
fn first_unreadable(root: &Path) -> Option<(PathBuf, std::io::Error)> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if let Err(e) = may(&dir, FileAccess::READ_OK | FileAccess::EXEC_OK) {
            return Some((dir, e));
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => return Some((dir, e)),
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => {
                    if let Err(e) = may(&path, FileAccess::READ_OK) {
                        return Some((path, e));
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// What in a folder of sites the user kiln runs as now cannot read: the
/// folder itself, or a site's pack in it (its keys are checked as the
/// pairs' files; a stray file is never read).
fn unreadable_in_folder_of_sites(dir: &Path) -> Vec<(PathBuf, std::io::Error)> {
    if let Err(e) = may(dir, FileAccess::READ_OK | FileAccess::EXEC_OK) {
        return vec![(dir.to_path_buf(), e)];
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut packs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| crate::serve::load::site_name(&e.file_name(), "pack").is_some())
        .map(|e| e.path())
        .collect();
    packs.sort();
    packs
        .into_iter()
        .filter_map(|pack| may(&pack, FileAccess::READ_OK).err().map(|e| (pack, e)))
        .collect()
}

/// Warns, once for each path, about what the user switched to cannot
/// read: the reloads that need it would fail. The advice depends on what
/// the path holds: a private key is never to be made readable by every
/// user (docs/deploy.md's group), a folder needs listing, a public file
/// reading. `switched`: kiln started as root and switched, so serving as
/// root is the other fix.
pub(super) fn warn_unreachable(plan: &Plan, switched: bool) {
    let mut found: Vec<(PathBuf, std::io::Error, Held)> = Vec::new();
    for (file, held) in &plan.files_read_again {
        if let Err(e) = may(file, FileAccess::READ_OK) {
            found.push((file.clone(), e, *held));
        }
    }
    for (dir, held) in &plan.trees_read_again {
        let unreadable = match held {
            Held::Preview => Vec::new(),
            Held::FolderOfSites => unreadable_in_folder_of_sites(dir),
            _ => first_unreadable(dir).into_iter().collect(),
        };
        found.extend(unreadable.into_iter().map(|(path, e)| {
            let held = if named_as_key(&path.to_string_lossy()) {
                Held::PrivateKey
            } else {
                Held::File
            };
            (path, e, held)
        }));
    }
    let mut said: Vec<PathBuf> = Vec::new();
    for (path, e, held) in found {
        if said.contains(&path) {
            continue;
        }
        tracing::warn!("{}", advice(&path, &e, held, &plan.identity.name, switched));
        said.push(path);
    }
}

/// The warning for `path`, which `user` cannot read (`e`).
fn advice(path: &Path, e: &std::io::Error, held: Held, user: &str, switched: bool) -> String {
    let shown = path.display();
    let or_root = if switched {
        ", or serve as root (--user root)"
    } else {
        ""
    };
    if held == Held::PrivateKey {
        return format!(
            "sandbox: user {user} cannot read the private key {shown} ({e}): certificate reloads \
             will fail; let a group {user} is in read it, and no other user (chgrp kiln-tls {shown} \
             && chmod 640 {shown}: the kiln-tls group of docs/deploy.md){or_root}"
        );
    }
    if path.is_dir() {
        return format!(
            "sandbox: user {user} cannot read the folder {shown} ({e}): reloads that need it \
             will fail; let {user} list it (chmod o+rx {shown}){or_root}"
        );
    }
    format!(
        "sandbox: user {user} cannot read {shown} ({e}): reloads that need it will fail; \
         let {user} read it (chmod o+r {shown}, or a group {user} is in){or_root}"
    )
}
