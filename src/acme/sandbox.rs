//! The ACME worker's walls, narrower than the server's in what they let
//! it read and wider in one thing, the network (`docs/security.md`):
//!
//! - no capabilities and no_new_privs (the user switch, `--user`, was made
//!   by the supervisor before it started the worker);
//! - Landlock: the state folder read and written; the system's trust store
//!   and the resolver's files read (the `--acme-ca-root` bundle was read
//!   before, from a descriptor the supervisor opened); nothing else, so
//!   nothing of the packs; TCP connections only to the CA's port
//!   (and 53, DNS over TCP), no TCP bind; no signal or abstract socket
//!   outside the domain;
//! - with the state in a bucket: also TCP to the store's port and to 80
//!   (the instance metadata service, for credentials), and a web
//!   identity token file read; with `--sites`, that folder read (the
//!   names of its packs).
//!
//! The worker is single-threaded when it enters (its tokio runtime and
//! the resolver threads start afterwards, inside).

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use landlock::{
    Access, AccessFs, AccessNet, NetPort, PathBeneath, PathFd, RulesetCreatedAttr, RulesetStatus,
};

use crate::confine::{LANDLOCK_ABI, deny_all_ruleset, landlock_error};

/// Where TLS clients find the system's trust store (the places
/// rustls-native-certs, through openssl-probe, looks), and where those
/// files' links lead on Debian and Fedora.
pub(crate) const TRUST_STORE: &[&str] = &[
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/usr/share/ca-certificates",
    "/usr/local/share/ca-certificates",
    "/usr/lib/ssl",
    "/usr/local/ssl",
    "/etc/openssl",
];

/// What the C library's resolver reads at each lookup.
pub(crate) const RESOLVER_FILES: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/host.conf",
];

/// What the worker may touch.
pub struct WorkerPlan<'a> {
    /// The state folder.
    pub dir: &'a Path,
    /// The TCP port of the CA's directory URL.
    pub ca_port: u16,
    /// `--acme-dir s3://…`: where the store is.
    pub store: Option<&'a crate::store::EndpointArgs>,
    /// `--sites`: the folder of sites whose names are managed.
    pub sites: Option<&'a Path>,
}

/// A path and, when it is a symbolic link, the file it leads to now
/// (Landlock checks the resolved file).
pub(crate) fn with_target(path: &Path) -> Vec<PathBuf> {
    let mut paths = vec![path.to_path_buf()];
    if let Ok(resolved) = std::fs::canonicalize(path)
        && resolved != path
    {
        paths.push(resolved);
    }
    paths
}

/// Enters the worker's sandbox; see the module's text.
pub fn enter(plan: &WorkerPlan<'_>) -> anyhow::Result<()> {
    let uid = crate::confine::drop_privileges()?;
    let fail = landlock_error;
    let abi = LANDLOCK_ABI;
    let mut ruleset = deny_all_ruleset()?;
    let state = AccessFs::from_all(abi) & !AccessFs::Execute;
    let dir = PathFd::new(plan.dir)
        .map_err(|e| anyhow!("sandbox: cannot open {}: {e}", plan.dir.display()))?;
    ruleset = ruleset
        .add_rule(PathBeneath::new(dir, state))
        .map_err(fail)?;
    let mut read: Vec<PathBuf> = Vec::new();
    for path in TRUST_STORE.iter().chain(RESOLVER_FILES) {
        read.extend(with_target(Path::new(path)));
    }
    if let Some(sites) = plan.sites {
        read.extend(with_target(sites));
    }
    let token = plan.store.map(|_| "AWS_WEB_IDENTITY_TOKEN_FILE");
    for var in ["SSL_CERT_FILE", "SSL_CERT_DIR"].into_iter().chain(token) {
        if let Some(value) = std::env::var_os(var) {
            read.extend(std::env::split_paths(&value).flat_map(|p| with_target(&p)));
        }
    }
    ruleset = ruleset
        .add_rules(landlock::path_beneath_rules(read, AccessFs::from_read(abi)))
        .map_err(fail)?;
    let store_ports = plan
        .store
        .map(|endpoint| [crate::store::sandbox::store_port(endpoint), 80]);
    for port in [plan.ca_port, 53]
        .into_iter()
        .chain(store_ports.into_iter().flatten())
    {
        ruleset = ruleset
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(fail)?;
    }
    let status = ruleset.restrict_self().map_err(fail)?;
    let enforced = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced (an older kernel)",
        RulesetStatus::NotEnforced => "not enforced by this kernel",
    };
    tracing::info!(
        "acme: sandbox: uid {uid} without capabilities; Landlock {enforced}: {} read-write, TCP to port {}{} only",
        plan.dir.display(),
        plan.ca_port,
        store_ports.map_or(String::new(), |[store, imds]| format!(
            ", {store} (the store) and {imds}"
        ))
    );
    Ok(())
}
