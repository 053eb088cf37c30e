//! `kiln store sync`'s walls, as the ACME worker's (`docs/security.md`):
//! no capabilities and no_new_privs; Landlock lets it write only the
//! cache folder, read the trust store, the resolver's files and a web
//! identity token, and connect over TCP only to the store's port, to 80
//! (the instance metadata service, for credentials) and to 53 (DNS).

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use landlock::{
    Access, AccessFs, AccessNet, NetPort, PathBeneath, PathFd, RulesetCreatedAttr, RulesetStatus,
};

use super::EndpointArgs;
use crate::acme::sandbox::{RESOLVER_FILES, TRUST_STORE, with_target};
use crate::confine::{LANDLOCK_ABI, deny_all_ruleset, landlock_error};

/// The TCP port of `--store-endpoint` (443 for AWS).
pub(crate) fn store_port(endpoint: &EndpointArgs) -> u16 {
    let Some(url) = &endpoint.endpoint else {
        return 443;
    };
    let (default, rest) = match url.strip_prefix("http://") {
        Some(rest) => (80, rest),
        None => (443, url.strip_prefix("https://").unwrap_or(url)),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    authority
        .rsplit_once(':')
        .filter(|(host, _)| !host.ends_with(']') || authority.starts_with('['))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(default)
}

/// Enters the sandbox; see the module's text.
pub fn enter(cache: &Path, endpoint: &EndpointArgs) -> anyhow::Result<()> {
    let uid = crate::confine::drop_privileges()?;
    let fail = landlock_error;
    let abi = LANDLOCK_ABI;
    let mut ruleset = deny_all_ruleset()?;
    let dir =
        PathFd::new(cache).map_err(|e| anyhow!("sandbox: cannot open {}: {e}", cache.display()))?;
    ruleset = ruleset
        .add_rule(PathBeneath::new(
            dir,
            AccessFs::from_all(abi) & !AccessFs::Execute,
        ))
        .map_err(fail)?;
    let mut read: Vec<PathBuf> = Vec::new();
    for path in TRUST_STORE.iter().chain(RESOLVER_FILES) {
        read.extend(with_target(Path::new(path)));
    }
    for var in [
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ] {
        if let Some(value) = std::env::var_os(var) {
            read.extend(std::env::split_paths(&value).flat_map(|p| with_target(&p)));
        }
    }
    ruleset = ruleset
        .add_rules(landlock::path_beneath_rules(read, AccessFs::from_read(abi)))
        .map_err(fail)?;
    let port = store_port(endpoint);
    for port in [port, 80, 53] {
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
        "store: sandbox: uid {uid} without capabilities; Landlock {enforced}: {} read-write, TCP to ports {port}, 80 and 53 only",
        cache.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_port_comes_from_the_endpoint() {
        let port = |e: Option<&str>| {
            store_port(&EndpointArgs {
                endpoint: e.map(String::from),
            })
        };
        assert_eq!(port(None), 443);
        assert_eq!(port(Some("http://127.0.0.1:9000")), 9000);
        assert_eq!(port(Some("http://minio.local")), 80);
        assert_eq!(port(Some("https://r2.example/")), 443);
        assert_eq!(port(Some("http://[::1]:9001/")), 9001);
    }
}
