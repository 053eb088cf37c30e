//! The Landlock basics every kiln domain starts from: the ABI asked for
//! and a ruleset that refuses everything it handles.

use anyhow::anyhow;
use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreated, Scope};

/// The Landlock ABI whose rights kiln asks for: the newest it was tested
/// on (Linux 6.15 and later). An older kernel enforces what it knows (best
/// effort); the start-up log says which.
pub const LANDLOCK_ABI: ABI = ABI::V7;

/// A Landlock error as the sandbox says it.
pub fn landlock_error(e: landlock::RulesetError) -> anyhow::Error {
    anyhow!("sandbox: Landlock: {e}")
}

/// A ruleset that handles every right `LANDLOCK_ABI` knows (files, TCP,
/// scopes) and allows none yet: what a domain does not allow by a rule is
/// refused. The server's domain and the ACME worker's start here.
pub fn deny_all_ruleset() -> anyhow::Result<RulesetCreated> {
    let abi = LANDLOCK_ABI;
    let fail = landlock_error;
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(fail)?
        .scope(Scope::from_all(abi))
        .map_err(fail)?
        .create()
        .map_err(fail)
}
