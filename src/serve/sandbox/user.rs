//! The user the server runs as: `--user` resolved at start
//! ([`resolve_user`]), the switch to it with every capability dropped
//! ([`switch_user`]), and a warning for each file it cannot read again.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use rustix::fs::Access as FileAccess;
use rustix::process::{Gid, Uid, getegid, geteuid};
use rustix::thread;

use super::capabilities::{drop_capabilities, kept};
use super::{Held, Plan};
use crate::build::source::private_key::named_as_key;
use crate::sys;

/// The user the server runs as once started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The user's name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Found in the user database, which then lists its other groups;
    /// otherwise (a bare `UID[:GID]`) it gets its primary group only.
    pub listed: bool,
}

/// The passwd entry of `name`, if there is one.
fn lookup_user(name: &str) -> anyhow::Result<Option<Identity>> {
    let c_name = CString::new(name).map_err(|_| anyhow!("--user {name:?}: NUL in the name"))?;
    listed(sys::passwd_by_name(&c_name))
}

/// The passwd entry of `uid`, if there is one.
fn lookup_uid(uid: u32) -> anyhow::Result<Option<Identity>> {
    listed(sys::passwd_by_uid(uid))
}

/// The identity of a user database entry.
fn listed(entry: std::io::Result<Option<sys::Passwd>>) -> anyhow::Result<Option<Identity>> {
    let entry = entry.map_err(|e| anyhow!("cannot read the user database: {e}"))?;
    Ok(entry.map(|user| Identity {
        name: user.name,
        uid: user.uid,
        gid: user.gid,
        listed: true,
    }))
}

/// `UID` or `UID:GID` given as `--user` where no user database names it (a
/// container image without /etc/passwd); the group is the user id when
/// not given, as for `nobody` (65534:65534).
fn numeric_user(value: &str) -> Option<Identity> {
    let (uid, gid) = match value.split_once(':') {
        Some((uid, gid)) => (uid.parse().ok()?, gid.parse().ok()?),
        None => {
            let uid = value.parse().ok()?;
            (uid, uid)
        }
    };
    Some(Identity {
        name: value.to_string(),
        uid,
        gid,
        listed: false,
    })
}

/// The user to run as: `--user NAME` if given, else `nobody` when started
/// as root (kiln refuses to serve as root unless `--user root` says so),
/// else the user kiln runs as, the only one a process without privileges
/// can be.
pub fn resolve_user(asked: Option<&str>) -> anyhow::Result<Identity> {
    let (euid, egid) = (geteuid().as_raw(), getegid().as_raw());
    let current = || -> anyhow::Result<Identity> {
        Ok(lookup_uid(euid)?.unwrap_or(Identity {
            name: euid.to_string(),
            uid: euid,
            gid: egid,
            listed: false,
        }))
    };
    let named = |name: &str| -> anyhow::Result<Identity> {
        if let Some(found) = lookup_user(name)? {
            return Ok(found);
        }
        numeric_user(name).ok_or_else(|| anyhow!("--user {name}: no such user"))
    };
    match (euid, asked) {
        (0, Some(name)) => named(name),
        (0, None) => lookup_user("nobody")?.ok_or_else(|| {
            anyhow!(
                "started as root and there is no user `nobody` to switch to: \
                 name one with --user NAME (or serve as root with --user root)"
            )
        }),
        (_, None) => current(),
        (_, Some(name)) => {
            let asked = named(name)?;
            let current = current()?;
            if asked.uid != current.uid {
                bail!(
                    "--user {name}: kiln runs as {} and only root can switch users",
                    current.name
                );
            }
            Ok(current)
        }
    }
}

/// Switches to `identity` (supplementary groups, group, then user: each
/// later step needs the privileges the user switch gives up) and drops
/// every capability, also when staying root.
pub fn switch_user(identity: &Identity) -> anyhow::Result<()> {
    let keep = kept();
    if geteuid().is_root() && identity.uid != 0 {
        let name = CString::new(identity.name.as_bytes()).context("NUL in the user name")?;
        let fail = |what: &str, e: std::io::Error| {
            anyhow!("cannot switch to user {}: {what}: {e}", identity.name)
        };
        // Each applies to the calling thread, the only one here (`enter`
        // waited for that); threads started afterwards inherit it.
        let gid = Gid::from_raw(identity.gid);
        let uid = Uid::from_raw(identity.uid);
        let groups = if identity.listed {
            sys::init_groups(&name, identity.gid)
        } else {
            thread::set_thread_groups(&[gid]).map_err(Into::into)
        };
        groups.map_err(|e| fail("setgroups", e))?;
        thread::set_thread_res_gid(gid, gid, gid).map_err(|e| fail("setgid", e.into()))?;
        // The permitted set survives the switch, to keep CAP_LEASE from
        // it below; nothing else of it is kept.
        thread::set_keep_capabilities(!keep.is_empty())
            .map_err(|e| fail("keeping capabilities", e.into()))?;
        thread::set_thread_res_uid(uid, uid, uid).map_err(|e| fail("setuid", e.into()))?;
        if thread::set_thread_uid(Uid::ROOT).is_ok() {
            bail!(
                "switched to user {} but could switch back to root",
                identity.name
            );
        }
    }
    drop_capabilities(keep)?;
    thread::set_keep_capabilities(false).map_err(|e| {
        anyhow!(
            "cannot clear keep-capabilities: {}",
            std::io::Error::from(e)
        )
    })
}

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
