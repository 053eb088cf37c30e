//! Automatic certificates from an ACME CA (RFC 8555).
//!
//! Two processes meet here and share nothing but files:
//! - the ACME client, `kiln acme run` (a child of `kiln serve --acme`, or
//!   run on its own), which talks to the CA and writes the state folder;
//! - the server, which only reads it: certificate pairs to serve,
//!   HTTP-01 tokens and TLS-ALPN-01 certificates to answer challenges
//!   with, and each name's status for `/metrics`.
//!
//! [`args`] holds the flags both take; [`layout`] is the state folder's
//! layout, the one contract between them.
//!
//! The client is two processes itself: the supervisor ([`supervisor`],
//! `kiln acme run`) and the worker it restarts ([`worker`], `kiln acme
//! worker`), which alone speaks to the CA, inside its own sandbox
//! ([`sandbox`]), with a tokio runtime of one thread.

pub mod args;
mod bucket;
mod client;
pub mod command;
pub mod layout;
mod lock;
mod order;
pub(crate) mod sandbox;
mod schedule;
mod status;
pub mod store;
mod supervisor;
mod worker;

use command::AcmeAction;
pub use command::AcmeCommand;
use rustix::process::{self, Pid, Signal};

/// Runs `kiln acme …`.
pub fn run(command: AcmeCommand) -> anyhow::Result<()> {
    crate::report::init_logging();
    match command.action {
        AcmeAction::Run(args) => supervisor::run(args),
        AcmeAction::Worker(args) => worker::run(args),
        AcmeAction::Status(args) => status::run(args),
    }
}

/// Has `signal` sent to this process when its parent dies, and exits at
/// once if `parent` is already gone (it died before the request).
fn die_with_parent_signal(signal: Signal, parent: Option<Pid>) -> anyhow::Result<()> {
    if let Err(e) = process::set_parent_process_death_signal(Some(signal)) {
        anyhow::bail!("cannot ask for the parent's death signal: {e}");
    }
    if process::getppid() != parent {
        anyhow::bail!("the parent process is gone");
    }
    Ok(())
}

/// The worker's death signal: killed with its supervisor.
fn die_with_parent() -> anyhow::Result<()> {
    die_with_parent_signal(Signal::KILL, process::getppid())
}
