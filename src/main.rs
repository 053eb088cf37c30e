//! The `kiln` command line: one binary, one subcommand per job.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Show the routes a new pack adds, removes and changes (exit status
    /// 0 when equal, 1 when different, 2 on trouble).
    Diff(kiln::diff::DiffArgs),
    /// Check every checksum and offset of a pack.
    Verify {
        /// The pack file.
        pack: PathBuf,
        /// Earlier packs (or folders of them) holding the dictionaries of
        /// the pack's delta variants: each delta whose dictionary is found
        /// is decoded and compared with its identity body.
        #[arg(long, value_name = "OLD.pack|DIR")]
        base: Vec<PathBuf>,
    },
    /// Serve a pack, a folder of sites or a directory over HTTP/1.1,
    /// HTTP/2, TLS and HTTP/3 (QUIC, on the UDP twin of each TLS port).
    Serve(Box<kiln::serve::ServeArgs>),
    /// Obtain and renew certificates from an ACME CA (what `kiln serve
    /// --acme` runs beside the server), or list their state.
    Acme(kiln::acme::AcmeCommand),
    /// Verify a pack and upload it to an object store
    /// (`s3://BUCKET/PREFIX/HOST.pack`, `gs://…`, `az://…`) in one PUT or
    /// one multipart upload, which the store completes atomically: a node
    /// never reads half of it, and a failed upload leaves the previous
    /// pack in place.
    Publish(kiln::store::publish::PublishArgs),
    /// What a node serving a bucket serves and from where: the store, up
    /// or down and since when, the last listing, and per site its pack's
    /// size and ETag and when it was fetched (read from the cache
    /// folder's state file, or asked of a running server's --metrics).
    Status(kiln::store::status::StatusArgs),
    /// What `kiln serve s3://…` runs beside the server (internal).
    #[command(hide = true)]
    Store(kiln::store::StoreCommand),
}

/// How the command ended, when it did not fail.
enum Outcome {
    /// Success.
    Done,
    /// `kiln diff`: the packs differ (exit status 1, as `diff`).
    Differ,
}

fn run(cli: Cli) -> anyhow::Result<Outcome> {
    let done = |r: anyhow::Result<()>| r.map(|()| Outcome::Done);
    match cli.command {
        Command::Build(args) => done(kiln::build::run(args)),
        Command::Inspect(args) => done(kiln::inspect::run(args)),
        Command::Diff(args) => Ok(match kiln::diff::run(args)? {
            true => Outcome::Differ,
            false => Outcome::Done,
        }),
        Command::Serve(args) => done(kiln::serve::run(*args)),
        Command::Acme(command) => done(kiln::acme::run(command)),
        Command::Publish(args) => done(kiln::store::publish::run(args)),
        Command::Store(command) => done(kiln::store::run(command)),
        Command::Status(args) => done(kiln::store::status::run(args)),
        Command::Verify { pack, base } => {
            let open = |path: &std::path::Path| {
                kiln::pack::Pack::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
            };
            let opened = open(&pack)?;
            let bytes = kiln::pack::verify::verify(&opened)
                .map_err(|e| anyhow::anyhow!("{}: {e}", pack.display()))?;
            let earlier = base
                .iter()
                .flat_map(|p| kiln::build::packs_in(p, &pack))
                .map(|p| open(&p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let earlier: Vec<&kiln::pack::Pack> = earlier.iter().collect();
            let deltas = kiln::pack::verify::verify_deltas(&opened, &earlier)
                .map_err(|e| anyhow::anyhow!("{}: {e}", pack.display()))?;
            let deltas = match deltas {
                d if d.decoded + d.without_dictionary == 0 => String::new(),
                d => format!(
                    "; {} deltas decoded, {} without their dictionary at hand",
                    d.decoded, d.without_dictionary
                ),
            };
            done(kiln::report::to_stdout(&format!(
                "{}: ok ({} routes, {} variants, {bytes} bytes checked{deltas})\n",
                pack.display(),
                opened.route_count(),
                opened.variant_count()
            )))
        }
    }
}

/// Every on/off flag read from a `KILN_*` variable takes what people
/// write in environments (1/0, yes/no, true/false, on/off), and a value
/// that is none of them is refused naming the variable, not the flag: the
/// user wrote the variable.
fn boolish_variables(command: clap::Command) -> Result<clap::Command, String> {
    let mut refused = None;
    let mut command = command.mut_args(|arg| {
        if !matches!(arg.get_action(), ArgAction::SetTrue) {
            return arg;
        }
        let Some(name) = arg.get_env().map(|n| n.to_os_string()) else {
            return arg;
        };
        if let Some(value) = std::env::var_os(&name) {
            // What BoolishValueParser takes.
            let words = [
                "1", "0", "y", "n", "yes", "no", "t", "f", "true", "false", "on", "off",
            ];
            let known = value
                .to_str()
                .is_some_and(|v| words.contains(&v.to_ascii_lowercase().as_str()));
            if !known && refused.is_none() {
                refused = Some(format!(
                    "{}={}: not a yes or no (1/0, yes/no, true/false, on/off)",
                    name.to_string_lossy(),
                    value.to_string_lossy()
                ));
            }
        }
        arg.value_parser(BoolishValueParser::new())
    });
    if let Some(refused) = refused {
        return Err(refused);
    }
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in names {
        let sub = command.find_subcommand(&name).cloned().expect("listed");
        let sub = boolish_variables(sub)?;
        command = command.mut_subcommand(&name, |_| sub);
    }
    Ok(command)
}

fn main() -> ExitCode {
    let cli = match boolish_variables(Cli::command()) {
        Ok(command) => Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit()),
        Err(refused) => {
            kiln::report::to_stderr(&format!("kiln: error: {refused}"));
            return ExitCode::from(2);
        }
    };
    // `kiln diff` exits like `diff`: 1 means "different", so trouble is 2.
    let failure = match cli.command {
        Command::Diff(_) => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    };
    match run(cli) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::Differ) => ExitCode::FAILURE,
        Err(e) => {
            // Not eprintln!: with stderr a closed pipe or a full device it
            // would panic, and the exit status would be the panic's (101)
            // instead of `failure`.
            kiln::report::to_stderr(&format!("kiln: error: {e:#}"));
            failure
        }
    }
}
