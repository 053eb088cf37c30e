//! The Landlock domain: read beneath the folders of the plan, write
//! nowhere, no TCP bind or connect, no signal outside the domain.

use anyhow::{Context as _, anyhow};
use landlock::{
    ABI, Access, AccessFs, AccessNet, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::{Plan, folders_of};

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

/// Builds the Landlock ruleset of `plan`, opening its folders (with the
/// rights of the user kiln started as).
pub(super) fn landlock_ruleset(plan: &Plan) -> anyhow::Result<RulesetCreated> {
    let fail = landlock_error;
    let mut ruleset = deny_all_ruleset()?;
    let read_files = plan
        .files_read_again
        .iter()
        .flat_map(|(f, _)| folders_of(f));
    let rules = read_files
        .map(|folder| (folder, AccessFs::ReadFile.into()))
        .chain(
            plan.trees_read_again
                .iter()
                .map(|(dir, _)| (dir.clone(), AccessFs::ReadFile | AccessFs::ReadDir)),
        );
    for (folder, access) in rules {
        let fd = PathFd::new(&folder)
            .with_context(|| format!("sandbox: cannot open {}", folder.display()))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(fail)?;
    }
    Ok(ruleset)
}

/// Logs how much of the Landlock domain this kernel enforces.
pub(super) fn log_landlock(status: &landlock::RestrictionStatus) {
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi: Some(kernel),
        } => format!("ABI {effective_abi} (kernel ABI {kernel})"),
        LandlockStatus::Available { effective_abi, .. } => format!("ABI {effective_abi}"),
        LandlockStatus::NotEnabled => "not enabled in this kernel".to_owned(),
        LandlockStatus::NotImplemented => "not built into this kernel".to_owned(),
    };
    match status.ruleset {
        RulesetStatus::FullyEnforced => {
            tracing::info!("sandbox: Landlock {abi}: fully enforced")
        }
        RulesetStatus::PartiallyEnforced => tracing::info!(
            "sandbox: Landlock {abi}: partially enforced (kiln asks for ABI {LANDLOCK_ABI}'s rights)"
        ),
        RulesetStatus::NotEnforced => tracing::warn!(
            "sandbox: Landlock {abi}: not enforced; files are guarded by the user switch and the system call filter alone"
        ),
    }
}
