//! `kiln acme`: its subcommands and their flags.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::bail;

use super::args::AcmeArgs;

/// `kiln acme …`.
#[derive(clap::Args, Debug)]
pub struct AcmeCommand {
    #[command(subcommand)]
    pub action: AcmeAction,
}

/// What `kiln acme` does.
#[derive(clap::Subcommand, Debug)]
pub enum AcmeAction {
    /// Obtain and renew certificates for the given names, writing them to
    /// the state folder (what `kiln serve --acme` starts; runnable on its
    /// own). It restarts its worker when that dies, and stops with its
    /// parent process or on SIGTERM / SIGINT.
    Run(RunArgs),
    /// The worker `run` supervises: the ACME conversation itself, in its
    /// own sandbox.
    #[command(hide = true)]
    Worker(RunArgs),
    /// List each managed name: certificate expiry, next attempt, last error.
    Status(StatusArgs),
}

/// How the CA checks control of a name.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// HTTP-01: `http://NAME/.well-known/acme-challenge/TOKEN` on port 80.
    #[value(name = "http-01")]
    Http01,
    /// TLS-ALPN-01 (RFC 8737): a handshake with ALPN `acme-tls/1` on 443.
    #[value(name = "tls-alpn-01")]
    TlsAlpn01,
}

impl Challenge {
    /// The name used on the command line and in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Challenge::Http01 => "http-01",
            Challenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// The flags of `kiln acme run` (and of its worker).
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// A name to obtain a certificate for (repeatable; one certificate
    /// per name).
    #[arg(
        long = "domain",
        value_name = "NAME",
        required_unless_present = "sites"
    )]
    pub domains: Vec<String>,
    /// Also obtain one for each HOST.pack of this folder of sites (not
    /// _default, IP addresses, names without a dot, or a HOST.pack with a
    /// HOST.crt beside it), looked at every few seconds: a site that
    /// appears gets its certificate without a restart.
    #[arg(long = "sites", value_name = "DIR")]
    pub sites: Option<PathBuf>,
    /// A name of --sites not to manage (it has its own certificate;
    /// repeatable).
    #[arg(long = "not-managed", value_name = "NAME", requires = "sites")]
    pub not_managed: Vec<String>,
    /// The store's endpoint, with --acme-dir s3://…
    #[command(flatten)]
    pub store: crate::store::EndpointArgs,
    /// A challenge the server can answer, in order of preference
    /// (repeatable); the next is tried when one fails [default: http-01,
    /// then tls-alpn-01].
    #[arg(long = "challenge", value_name = "TYPE")]
    pub challenges: Vec<Challenge>,
    /// Run as this user (the state folder is created for, or handed to,
    /// it). Default: the user kiln runs as.
    #[arg(long, value_name = "NAME", env = "KILN_USER")]
    pub user: Option<String>,
    #[command(flatten)]
    pub acme: AcmeArgs,
    /// The worker's: the `--acme-ca-root` bundle is read from standard
    /// input, a descriptor of the file the supervisor opened before it
    /// switched users (the path only names it in messages).
    #[arg(long, hide = true, requires = "ca_root")]
    pub ca_root_on_stdin: bool,
}

/// The flags of `kiln acme status`.
#[derive(clap::Args, Clone, Debug)]
pub struct StatusArgs {
    /// The state folder.
    #[arg(
        long = "acme-dir",
        value_name = "DIR",
        default_value = "/var/lib/kiln/acme",
        env = "KILN_ACME_DIR"
    )]
    pub dir: PathBuf,
}

impl RunArgs {
    /// The challenges in order of preference.
    pub fn challenge_order(&self) -> Vec<Challenge> {
        if self.challenges.is_empty() {
            return vec![Challenge::Http01, Challenge::TlsAlpn01];
        }
        let mut order = Vec::new();
        for c in &self.challenges {
            if !order.contains(c) {
                order.push(*c);
            }
        }
        order
    }

    /// The names, checked and written as the layout wants them (lower
    /// case, no trailing dot), each once.
    pub fn names(&self) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        for d in &self.domains {
            let name = domain_name(d)?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// The names `--sites` asks certificates for now: each `HOST.pack`
    /// whose HOST is a name a CA issues for (not `_default`, an IP
    /// address or a name without a dot), has no `HOST.crt` beside it and
    /// is not `--not-managed`; sorted.
    pub fn site_names(&self) -> Vec<String> {
        match &self.sites {
            Some(dir) => site_names(dir, &self.not_managed),
            None => Vec::new(),
        }
    }

    /// The worker's command line (after the program name): the same
    /// request, with the CA spelled out and without `--user` (the
    /// supervisor has switched already).
    pub fn worker_argv(&self) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec!["acme".into(), "worker".into()];
        for d in &self.domains {
            argv.extend(["--domain".into(), d.into()]);
        }
        if let Some(sites) = &self.sites {
            argv.extend(["--sites".into(), sites.clone().into()]);
        }
        for n in &self.not_managed {
            argv.extend(["--not-managed".into(), n.into()]);
        }
        if let Some(endpoint) = &self.store.endpoint {
            argv.extend(["--store-endpoint".into(), endpoint.into()]);
        }
        for c in self.challenge_order() {
            argv.extend(["--challenge".into(), c.name().into()]);
        }
        if let Some(email) = &self.acme.email {
            argv.extend(["--acme-email".into(), email.into()]);
        }
        argv.extend(["--acme-ca".into(), self.acme.directory_url().into()]);
        if let Some(root) = &self.acme.ca_root {
            argv.extend(["--acme-ca-root".into(), root.into()]);
        }
        argv.extend(["--acme-dir".into(), self.acme.dir.clone().into()]);
        if let Some(cache) = &self.acme.cache_dir {
            argv.extend(["--acme-cache-dir".into(), cache.clone().into()]);
        }
        argv
    }
}

/// The names a folder of sites asks certificates for now: each
/// `HOST.pack` whose HOST is a name a CA issues for (not `_default`, an
/// IP address or a name without a dot), without a `HOST.crt` beside it,
/// and not one of `not_managed`; sorted. Both the ACME client (`--sites`)
/// and the server (which names it manages) read the folder so.
pub fn site_names(dir: &std::path::Path, not_managed: &[String]) -> Vec<String> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let mut names: Vec<String> = entries
        .filter_map(|entry| {
            let file = entry.file_name();
            let host = file.to_str()?.strip_suffix(".pack")?;
            let name = domain_name(host).ok()?;
            let own = dir.join(format!("{host}.crt")).exists();
            let excluded = not_managed.iter().any(|n| n.eq_ignore_ascii_case(&name));
            (!own && !excluded).then_some(name)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `value` as a managed name: an ASCII DNS name (A-labels) with at least
/// one dot, not an IP address, lower-cased, without a trailing dot. It
/// names files, so nothing else passes.
pub fn domain_name(value: &str) -> anyhow::Result<String> {
    let name = value
        .strip_suffix('.')
        .unwrap_or(value)
        .to_ascii_lowercase();
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 || !name.contains('.') || !name.split('.').all(label_ok) {
        bail!(
            "--domain {value:?}: not a DNS name with a dot (letters, digits and hyphens; \
             non-ASCII names as A-labels, xn--…)"
        );
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok()
        || name
            .rsplit('.')
            .next()
            .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        bail!("--domain {value:?}: an IP address, which ACME's DNS challenges do not cover");
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_normalised() {
        assert_eq!(domain_name("Example.COM.").unwrap(), "example.com");
        assert_eq!(
            domain_name("xn--bcher-kva.example").unwrap(),
            "xn--bcher-kva.example"
        );
        for bad in [
            "localhost",
            "127.0.0.1",
            "a..b",
            "../x.y",
            "x/y.z",
            "-a.b",
            "a-.b",
            "bü.cher",
            "",
            ".",
        ] {
            assert!(domain_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn challenges_default_to_both_and_keep_the_order_given() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let parse = |args: &[&str]| Cli::try_parse_from([&["kiln"], args].concat()).unwrap().run;
        let default = parse(&["--domain", "a.test"]);
        assert_eq!(
            default.challenge_order(),
            [Challenge::Http01, Challenge::TlsAlpn01]
        );
        let given = parse(&[
            "--domain",
            "a.test",
            "--challenge",
            "tls-alpn-01",
            "--challenge",
            "http-01",
            "--challenge",
            "tls-alpn-01",
        ]);
        assert_eq!(
            given.challenge_order(),
            [Challenge::TlsAlpn01, Challenge::Http01]
        );
        let again = parse(
            &given
                .worker_argv()
                .iter()
                .skip(2)
                .map(|a| a.to_str().unwrap())
                .collect::<Vec<_>>(),
        );
        assert_eq!(again.challenge_order(), given.challenge_order());
        assert_eq!(again.domains, given.domains);
        assert_eq!(again.acme.directory_url(), given.acme.directory_url());
    }
}
