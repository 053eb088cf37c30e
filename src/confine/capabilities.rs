//! Capabilities: every one dropped at the user switch, also when staying
//! root.

use anyhow::anyhow;
use rustix::thread;

/// Empties the effective, permitted and inheritable sets (and so the
/// ambient one). The bounding set matters only at execve, which the
/// server's filter refuses and the ACME worker never calls.
pub(super) fn drop_capabilities() -> anyhow::Result<()> {
    let none = thread::CapabilitySets {
        effective: thread::CapabilitySet::empty(),
        permitted: thread::CapabilitySet::empty(),
        inheritable: thread::CapabilitySet::empty(),
    };
    thread::set_capabilities(None, none)
        .map_err(|e| anyhow!("cannot drop capabilities: {}", std::io::Error::from(e)))
}
