//! What a kiln process does to give up its rights, shared by the server's
//! sandbox (`serve::sandbox`) and the ACME worker's (`acme::sandbox`), so
//! that neither depends on the other: the user switch with every
//! capability dropped (`user.rs`, `capabilities.rs`) and the Landlock
//! ruleset each domain starts from (`landlock.rs`).

mod capabilities;
mod landlock;
mod supervise;
mod user;

pub use self::capabilities::lease_if_held;
pub use self::landlock::{LANDLOCK_ABI, deny_all_ruleset, landlock_error};
pub use self::supervise::{Worker, supervise};
pub use self::user::{Identity, resolve_user, switch_user};

/// Drops every capability, staying the user the process runs as, and
/// sets no_new_privs: the first step of a worker's sandbox (the ACME
/// client's, the store client's), before its Landlock domain. Returns the
/// user id, for the worker's line about its sandbox.
pub fn drop_privileges() -> anyhow::Result<u32> {
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let identity = Identity {
        name: uid.to_string(),
        uid,
        gid,
        listed: false,
    };
    switch_user(&identity, rustix::thread::CapabilitySet::empty())?;
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| anyhow::anyhow!("sandbox: cannot set no_new_privs: {e}"))?;
    Ok(uid)
}
