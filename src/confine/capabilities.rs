//! Capabilities: every one dropped at the user switch, also when staying
//! root, but those the caller keeps: the server keeps CAP_LEASE where the
//! process had it, since a read lease on each pack a reload opens
//! (`serve::in_place`) needs the file's owner or that capability, and it
//! lets a process do nothing else than hold another's `open` for writing
//! back for `lease-break-time` at most. The ACME worker keeps none.

use anyhow::anyhow;
use rustix::thread::{self, CapabilitySet};

/// CAP_LEASE when the process has it (started as root), else nothing.
pub fn lease_if_held() -> CapabilitySet {
    match thread::capabilities(None) {
        Ok(sets) if sets.permitted.contains(CapabilitySet::LEASE) => CapabilitySet::LEASE,
        _ => CapabilitySet::empty(),
    }
}

/// Empties the effective, permitted and inheritable sets (and so the
/// ambient one), but for `keep`. The bounding set matters only at
/// execve, which the server's filter refuses and the ACME worker never
/// calls.
pub(super) fn drop_capabilities(keep: CapabilitySet) -> anyhow::Result<()> {
    let sets = thread::CapabilitySets {
        effective: keep,
        permitted: keep,
        inheritable: CapabilitySet::empty(),
    };
    thread::set_capabilities(None, sets)
        .map_err(|e| anyhow!("cannot drop capabilities: {}", std::io::Error::from(e)))
}
