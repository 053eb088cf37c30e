//! Capabilities: every one dropped when the sandbox goes up, also when
//! staying root, but CAP_LEASE where the process had it: a read lease on
//! each pack a reload opens (`serve::in_place`) needs the file's owner or
//! that capability, and it lets a process do nothing else than hold
//! another's `open` for writing back for `lease-break-time` at most.

use anyhow::anyhow;
use rustix::thread::{self, CapabilitySet};

/// What is kept: CAP_LEASE when the process has it (started as root),
/// else nothing.
pub(super) fn kept() -> CapabilitySet {
    match thread::capabilities(None) {
        Ok(sets) if sets.permitted.contains(CapabilitySet::LEASE) => CapabilitySet::LEASE,
        _ => CapabilitySet::empty(),
    }
}

/// Empties the effective, permitted and inheritable sets (and so the
/// ambient one), but for `keep`. The bounding set matters only at
/// execve, which the filter refuses.
pub(super) fn drop_capabilities(keep: CapabilitySet) -> anyhow::Result<()> {
    let sets = thread::CapabilitySets {
        effective: keep,
        permitted: keep,
        inheritable: CapabilitySet::empty(),
    };
    thread::set_capabilities(None, sets)
        .map_err(|e| anyhow!("cannot drop capabilities: {}", std::io::Error::from(e)))
}
