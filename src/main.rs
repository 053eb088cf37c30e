//! The `kiln` command line: one binary, one subcommand per job.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "Fire a static site into one pack file and serve it fast"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fire a site (directory or tar archive) into one pack file.
    Build(kiln::build::BuildArgs),
    /// List a pack's routes, variants and sizes.
    Inspect(kiln::inspect::InspectArgs),
    /// Check every checksum and offset of a pack.
    Verify {
        /// The pack file.
        pack: PathBuf,
    },
    /// Serve a pack over HTTP/1.1.
    Serve(kiln::serve::ServeArgs),
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Build(args) => kiln::build::run(args),
        Command::Inspect(args) => kiln::inspect::run(args),
        Command::Serve(args) => kiln::serve::run(args),
        Command::Verify { pack } => {
            let opened = kiln::pack::Pack::open(&pack)
                .map_err(|e| anyhow::anyhow!("{}: {e}", pack.display()))?;
            let bytes = kiln::pack::verify::verify(&opened)
                .map_err(|e| anyhow::anyhow!("{}: {e}", pack.display()))?;
            kiln::report::to_stdout(&format!(
                "{}: ok ({} routes, {} variants, {bytes} bytes checked)\n",
                pack.display(),
                opened.route_count(),
                opened.variant_count()
            ))
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: with stderr a closed pipe or a full device it
            // would panic, and the exit status would no longer be 1.
            let _ = writeln!(std::io::stderr(), "kiln: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
