//! The Landlock domain: read beneath the folders of the plan, write
//! nowhere, no TCP bind or connect, no signal outside the domain.

use anyhow::Context as _;
use landlock::{
    AccessFs, LandlockStatus, PathBeneath, PathFd, RulesetCreated, RulesetCreatedAttr,
    RulesetStatus,
};

use super::{Plan, folders_of};
use crate::confine::{LANDLOCK_ABI, deny_all_ruleset, landlock_error};

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
