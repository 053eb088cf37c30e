//! `kiln serve --acme`: the server's half of automatic certificates. The
//! ACME client is another process (`kiln acme run`, [`crate::acme`]),
//! started here before the sandbox; the server only reads what it writes
//! in the state folder (`--acme-dir`, [`layout`]): the managed pairs,
//! served by SNI and reloaded like any pair; the HTTP-01 key
//! authorizations and TLS-ALPN-01 certificates, published to the loops;
//! each name's status, for `/metrics`.

use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use super::handler::Http01;
use super::handler::challenges;
use super::tls::{self, PairPaths};
use crate::acme::args::AcmeArgs;
use crate::acme::layout;

/// The HTTP-01 challenge: the CA fetches the token over cleartext HTTP.
pub const HTTP_01: &str = "http-01";
/// The TLS-ALPN-01 challenge: the CA connects with ALPN `acme-tls/1`.
pub const TLS_ALPN_01: &str = "tls-alpn-01";

/// The names kiln manages, and where their state is.
#[derive(Debug)]
pub struct Managed {
    /// The local state folder: `--acme-dir`, or the mirror of its bucket.
    pub dir: PathBuf,
    /// At start: lower case, sorted, without duplicates.
    pub names: Vec<String>,
    /// A folder of sites served: a site that appears in it is managed
    /// too (the client orders it, told by the same folder).
    pub sites: Option<PathBuf>,
    /// Names of the folder with their own certificate at start.
    pub not_managed: Vec<String>,
    /// The names the last resolver was built with ([`Self::resolver_acme`]).
    pub known: std::sync::Mutex<Vec<String>>,
}

impl Managed {
    /// The names managed now: those of the start, and the folder's sites
    /// that appeared since (read at reloads and scrapes, cold paths).
    pub fn current_names(&self) -> Vec<String> {
        let mut names = self.names.clone();
        if let Some(sites) = &self.sites {
            for name in crate::acme::command::site_names(sites, &self.not_managed) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// Whether a site appeared (or went) since the last resolver was
    /// built: its pair, if the mirror holds it already, is to be loaded.
    pub fn names_changed(&self) -> bool {
        self.sites.is_some() && *self.known.lock().unwrap() != self.current_names()
    }

    /// The managed pairs whose certificate is there now (the client renames
    /// the key into place first: a certificate found has its key).
    pub fn pairs(&self) -> Vec<PairPaths> {
        self.current_names()
            .iter()
            .map(|name| PairPaths {
                cert: layout::cert_path(&self.dir, name),
                key: layout::key_path(&self.dir, name),
            })
            .filter(|pair| pair.cert.exists())
            .collect()
    }

    /// The managed names and the TLS-ALPN-01 certificates there now, for
    /// the resolver; a challenge file that cannot be used is logged and
    /// left out (the CA's validation then fails, and the client retries).
    pub fn resolver_acme(&self) -> tls::certs::Acme {
        let mut challenges = Vec::new();
        let names = self.current_names();
        for name in &names {
            let path = layout::tls_alpn01_path(&self.dir, name);
            if !path.exists() {
                continue;
            }
            match tls::certs::load_challenge(&path) {
                Ok(key) => challenges.push((name.clone(), key)),
                Err(e) => tracing::warn!("ACME TLS-ALPN-01: {e}"),
            }
        }
        self.known.lock().unwrap().clone_from(&names);
        tls::certs::Acme {
            managed: names,
            challenges,
        }
    }

    /// The HTTP-01 key authorizations there now: one file per token,
    /// named by it. Files that are not tokens (the client's temporary
    /// files among them) are skipped.
    pub fn http01(&self) -> Http01 {
        let dir = layout::http01_dir(&self.dir);
        let entries = std::fs::read_dir(&dir).into_iter().flatten().flatten();
        let pairs = entries.filter_map(|entry| {
            let token = entry.file_name().into_encoded_bytes();
            if !challenges::is_token(&token) {
                return None;
            }
            let authorization = std::fs::read(entry.path()).ok()?;
            Some((token, authorization))
        });
        Http01::new(pairs)
    }
}

/// Whether `name` is a DNS name a CA can issue for: letters, digits and
/// hyphens in labels of 1 to 63 characters (no hyphen at either end), at
/// least two labels, 253 characters at most, one trailing dot allowed,
/// and not an IP address. Returns it in lower case.
pub fn dns_name(name: &str) -> Result<String, String> {
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    let why = if lower.parse::<std::net::IpAddr>().is_ok() {
        Some("an IP address (ACME certificates here are for DNS names)")
    } else if lower.len() > 253 {
        Some("longer than 253 characters")
    } else if !lower.contains('.') {
        Some("no dot: not a public DNS name")
    } else if lower.split('.').any(|label| {
        label.is_empty()
            || label.len() > 63
            || label.starts_with('-')
            || label.ends_with('-')
            || !label
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-')
    }) {
        Some("not a DNS name (labels of letters, digits and inner hyphens)")
    } else {
        None
    };
    match why {
        Some(why) => Err(format!("{name:?}: {why}")),
        None => Ok(lower),
    }
}

/// The names a folder of sites asks certificates for: each `HOST.pack`,
/// except `_default`, IP literals and names without a dot (a local name
/// no CA issues for); names that are not DNS names are logged and left
/// out.
pub fn folder_names(folder: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(folder).into_iter().flatten().flatten();
    let mut names = Vec::new();
    for host in entries.filter_map(|e| super::load::site_name(&e.file_name(), "pack")) {
        if host == super::load::DEFAULT_SITE
            || host.parse::<std::net::IpAddr>().is_ok()
            || !host.contains('.')
        {
            continue;
        }
        match dns_name(&host) {
            Ok(name) => names.push(name),
            Err(e) => tracing::warn!("--acme: {host}.pack: no certificate for {e}"),
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The challenges the listeners allow, most preferred first: HTTP-01
/// with a cleartext listener, TLS-ALPN-01 with a TLS one. A CA validates
/// on ports 80 and 443; a listener on another port can only be reached
/// through a forward (or a test CA configured for it), so when both are
/// possible, TLS-ALPN-01 comes first only if a TLS listener is on 443
/// and no cleartext one on 80; else HTTP-01 does.
pub fn challenges(cleartext_ports: &[u16], tls_ports: &[u16]) -> Vec<&'static str> {
    let http = !cleartext_ports.is_empty();
    let tls = !tls_ports.is_empty();
    let tls_first = tls && tls_ports.contains(&443) && !cleartext_ports.contains(&80);
    let mut order = Vec::new();
    if tls && (tls_first || !http) {
        order.push(TLS_ALPN_01);
    }
    if http {
        order.push(HTTP_01);
    }
    if tls && !order.contains(&TLS_ALPN_01) {
        order.push(TLS_ALPN_01);
    }
    order
}

/// The arguments of the ACME client: `acme run`, each name (and the
/// folder of sites new names come from), each challenge in order of
/// preference, the shared flags (with a bucket, the mirror and the
/// store's endpoint), and the user it runs as.
pub fn client_args(
    acme: &AcmeArgs,
    managed: &Managed,
    challenges: &[&str],
    user: Option<&str>,
    store_endpoint: Option<&str>,
) -> Vec<String> {
    let mut args = vec!["acme".to_string(), "run".to_string()];
    for name in &managed.names {
        args.extend(["--domain".to_string(), name.clone()]);
    }
    for challenge in challenges {
        args.extend(["--challenge".to_string(), challenge.to_string()]);
    }
    if let Some(email) = &acme.email {
        args.extend(["--acme-email".to_string(), email.clone()]);
    }
    if let Some(ca) = &acme.ca {
        args.extend(["--acme-ca".to_string(), ca.clone()]);
    }
    if acme.staging {
        args.push("--acme-staging".to_string());
    }
    if let Some(root) = &acme.ca_root {
        args.extend(["--acme-ca-root".to_string(), root.display().to_string()]);
    }
    args.extend(["--acme-dir".to_string(), acme.dir.display().to_string()]);
    if acme.dir != managed.dir {
        args.extend([
            "--acme-cache-dir".to_string(),
            managed.dir.display().to_string(),
        ]);
        if let Some(endpoint) = store_endpoint {
            args.extend(["--store-endpoint".to_string(), endpoint.to_string()]);
        }
    }
    if let Some(sites) = &managed.sites {
        args.extend(["--sites".to_string(), sites.display().to_string()]);
        for name in &managed.not_managed {
            args.extend(["--not-managed".to_string(), name.clone()]);
        }
    }
    if let Some(user) = user {
        args.extend(["--user".to_string(), user.to_string()]);
    }
    args
}

/// The ACME client as started: its process id and a descriptor that
/// becomes readable when it ends (a pidfd), which the control thread
/// polls; `None` when it had ended before it could be opened.
pub struct Client {
    pub pid: u32,
    pub pidfd: Option<OwnedFd>,
}

/// Starts the ACME client: this executable with `args`, its output on the
/// server's stderr (stdout is the access log's). Called while the
/// process has one thread, before the sandbox. The child is reaped by
/// the kernel (`SA_NOCLDWAIT`: the sandboxed server has no `wait` call),
/// and ends with the server (it asks for PDEATHSIG itself). Spawned by
/// `posix_spawn` (no `pre_exec`, no user change here), whose failure
/// needs no `wait` either.
pub fn spawn_client(args: &[String]) -> anyhow::Result<Client> {
    let exe = std::env::current_exe().context("--acme: cannot find kiln's own executable")?;
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .context("--acme: cannot pass stderr to the ACME client")?;
    crate::sys::reap_children_automatically()
        .map_err(|e| anyhow::anyhow!("--acme: cannot have the ACME client reaped: {e}"))?;
    let child = Command::new(&exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stderr))
        .spawn()
        .with_context(|| format!("--acme: cannot start {} acme run", exe.display()))?;
    let pid = child.id();
    let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else {
        bail!("--acme: the ACME client has no process id");
    };
    let pidfd = match rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => Some(fd),
        // Ended (and reaped) already.
        Err(rustix::io::Errno::SRCH) => None,
        Err(e) => bail!("--acme: the ACME client (pid {pid}) cannot be watched: {e}"),
    };
    Ok(Client { pid, pidfd })
}

/// Says that the ACME client ended: once, whenever the server learns it.
pub fn log_client_end(pid: u32) {
    tracing::error!(
        "the ACME client (pid {pid}) ended; serving on with the certificates there are, \
         none obtained or renewed until kiln serve is restarted"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names_are_checked_and_lowered() {
        for (name, ok) in [
            ("Example.COM", Some("example.com")),
            ("www.example.com.", Some("www.example.com")),
            ("a-b.example", Some("a-b.example")),
            ("xn--bcher-kva.example", Some("xn--bcher-kva.example")),
            ("localhost", None),
            ("192.0.2.1", None),
            ("::1", None),
            ("-a.example", None),
            ("a-.example", None),
            ("a..example", None),
            ("*.example.com", None),
            ("a_b.example", None),
            ("bücher.example", None),
        ] {
            assert_eq!(dns_name(name).ok().as_deref(), ok, "{name}");
        }
        assert!(dns_name(&format!("{}.example", "a".repeat(64))).is_err());
        let long = vec!["a".repeat(60); 5].join(".");
        assert!(dns_name(&long).is_err(), "{} characters", long.len());
    }

    #[test]
    fn challenges_follow_the_listeners_and_the_standard_ports() {
        assert_eq!(challenges(&[80], &[443]), [HTTP_01, TLS_ALPN_01]);
        assert_eq!(challenges(&[8080], &[443]), [TLS_ALPN_01, HTTP_01]);
        assert_eq!(challenges(&[8080], &[8443]), [HTTP_01, TLS_ALPN_01]);
        assert_eq!(challenges(&[80], &[]), [HTTP_01]);
        assert_eq!(challenges(&[], &[8443]), [TLS_ALPN_01]);
        assert!(challenges(&[], &[]).is_empty());
    }

    #[test]
    fn the_client_gets_every_name_challenge_and_shared_flag() {
        let acme = AcmeArgs {
            email: Some("ops@example.com".into()),
            ca: Some("https://ca.test/dir".into()),
            staging: false,
            ca_root: Some("/etc/ca.pem".into()),
            dir: "/var/lib/kiln/acme".into(),
            cache_dir: None,
        };
        let managed = Managed {
            dir: acme.dir.clone(),
            names: vec!["a.example".to_string(), "b.example".to_string()],
            sites: None,
            not_managed: Vec::new(),
            known: Default::default(),
        };
        let args = client_args(&acme, &managed, &[TLS_ALPN_01, HTTP_01], Some("www"), None);
        assert_eq!(
            args.join(" "),
            "acme run --domain a.example --domain b.example --challenge tls-alpn-01 \
             --challenge http-01 --acme-email ops@example.com --acme-ca https://ca.test/dir \
             --acme-ca-root /etc/ca.pem --acme-dir /var/lib/kiln/acme --user www"
        );
    }
}
