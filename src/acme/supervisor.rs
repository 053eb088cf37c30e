//! `kiln acme run`: prepares the state folder, opens the `--acme-ca-root`
//! bundle (handed to each worker as its standard input: the user the
//! worker runs as may not be able to open it), becomes `--user`, and
//! keeps one worker running: restarted after it dies, 1 s after the
//! first death, doubling up to 5 minutes, back to 1 s once a worker lived
//! 10 minutes. It stops (stopping the worker) on SIGTERM or SIGINT and
//! when its parent, the server, is gone.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use rustix::process::{self, Signal};

use super::client::CaRoot;
use super::command::RunArgs;
use super::store;
use crate::confine;

/// The longest wait before a restart.
const MAX_RESTART_DELAY: Duration = Duration::from_secs(5 * 60);

/// The variables that set the worker's flags: its command line says all
/// of it, and `KILN_ACME_STAGING` beside the `--acme-ca` it is given
/// would be refused as a conflict.
const FLAG_VARIABLES: [&str; 8] = [
    "KILN_ACME_EMAIL",
    "KILN_ACME_CA",
    "KILN_ACME_STAGING",
    "KILN_ACME_CA_ROOT",
    "KILN_ACME_DIR",
    "KILN_ACME_CACHE_DIR",
    "KILN_STORE_ENDPOINT",
    "KILN_USER",
];

/// The worker's command: this binary again, `acme worker` and the request
/// spelled out, no flag from the environment; the `--acme-ca-root` bundle,
/// opened here, on its standard input.
fn worker_command(args: &RunArgs, ca_root: Option<&File>) -> std::io::Result<Command> {
    let mut command = Command::new("/proc/self/exe");
    command.args(args.worker_argv());
    match ca_root {
        Some(file) => command
            .arg("--ca-root-on-stdin")
            .stdin(Stdio::from(file.try_clone()?)),
        None => command.stdin(Stdio::null()),
    };
    for variable in FLAG_VARIABLES {
        command.env_remove(variable);
    }
    Ok(command)
}

/// Runs the supervisor until told to stop.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    // Everything the worker would refuse is refused here, once, rather
    // than by a worker restarted for ever.
    args.names()?;
    super::worker::ca_endpoint(args.acme.directory_url())?;
    if args.ca_root_on_stdin {
        bail!("--ca-root-on-stdin is the worker's");
    }
    // Opened with the rights kiln started with, before the user switch:
    // the file may lie where the user the worker runs as cannot read (in
    // root's home). Each worker reads it from this descriptor; checked
    // here first, once.
    let ca_root = match &args.acme.ca_root {
        Some(path) => {
            let file =
                File::open(path).with_context(|| format!("--acme-ca-root {}", path.display()))?;
            CaRoot::from_descriptor(path, &file)?;
            Some(file)
        }
        None => None,
    };
    let (euid, egid, parent) = (
        process::geteuid().as_raw(),
        process::getegid().as_raw(),
        process::getppid(),
    );
    let identity = match &args.user {
        Some(user) => confine::resolve_user(Some(user))?,
        None => confine::Identity {
            name: euid.to_string(),
            uid: euid,
            gid: egid,
            listed: false,
        },
    };
    let owner =
        (identity.uid != euid || identity.gid != egid).then_some((identity.uid, identity.gid));
    store::prepare(&args.acme.local_dir()?, owner)?;
    confine::switch_user(&identity, rustix::thread::CapabilitySet::empty())?;
    rustix::thread::set_no_new_privs(true).map_err(|e| anyhow!("cannot set no_new_privs: {e}"))?;
    // After the user switch, which would clear it.
    super::die_with_parent_signal(Signal::TERM, parent)?;
    let worker = confine::Worker {
        name: "acme",
        max_restart_delay: MAX_RESTART_DELAY,
        meanwhile: "",
    };
    confine::supervise(&worker, parent, || {
        worker_command(&args, ca_root.as_ref())
            .and_then(|mut command| command.spawn())
            .context("cannot start the ACME worker")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn the_worker_takes_its_flags_from_its_command_line_alone() {
        let args = Cli::parse_from(["kiln", "--domain", "a.test", "--acme-staging"]).run;
        let command = worker_command(&args, None).unwrap();
        let cleared: Vec<_> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_str().unwrap().to_owned())
            .collect();
        for variable in FLAG_VARIABLES {
            assert!(
                cleared.iter().any(|c| c == variable),
                "{variable} is passed on"
            );
        }
        // Every variable clap reads for these flags is among them.
        let cli = <Cli as clap::CommandFactory>::command();
        for arg in cli.get_arguments() {
            if let Some(env) = arg.get_env() {
                let env = env.to_str().unwrap();
                assert!(FLAG_VARIABLES.contains(&env), "{env} is not cleared");
            }
        }
        let argv: Vec<_> = command.get_args().map(|a| a.to_str().unwrap()).collect();
        assert!(
            argv.windows(2)
                .any(|w| w == ["--acme-ca", crate::acme::args::LETS_ENCRYPT_STAGING]),
            "{argv:?}"
        );
    }
}
