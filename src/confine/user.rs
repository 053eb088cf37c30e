//! The user a process runs as: `--user` resolved at start
//! ([`resolve_user`]) and the switch to it with every capability dropped
//! ([`switch_user`]).

use std::ffi::CString;

use anyhow::{Context as _, anyhow, bail};
use rustix::process::{Gid, Uid, getegid, geteuid};
use rustix::thread::{self, CapabilitySet};

use super::capabilities::drop_capabilities;
use crate::sys;

/// The user a process runs as once started.
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
/// every capability but `keep`, also when staying root.
pub fn switch_user(identity: &Identity, keep: CapabilitySet) -> anyhow::Result<()> {
    if geteuid().is_root() && identity.uid != 0 {
        let name = CString::new(identity.name.as_bytes()).context("NUL in the user name")?;
        let fail = |what: &str, e: std::io::Error| {
            anyhow!("cannot switch to user {}: {what}: {e}", identity.name)
        };
        // Each applies to the calling thread, the only one here (the
        // caller makes sure of it); threads started afterwards inherit it.
        let gid = Gid::from_raw(identity.gid);
        let uid = Uid::from_raw(identity.uid);
        let groups = if identity.listed {
            sys::init_groups(&name, identity.gid)
        } else {
            thread::set_thread_groups(&[gid]).map_err(Into::into)
        };
        groups.map_err(|e| fail("setgroups", e))?;
        thread::set_thread_res_gid(gid, gid, gid).map_err(|e| fail("setgid", e.into()))?;
        // The permitted set survives the switch, to keep `keep` from it
        // below; nothing else of it is kept.
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
