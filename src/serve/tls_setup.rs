//! Start-up's certificates: the pairs given on the command line (or the
//! self-signed mode), those beside the packs of a folder of sites, and
//! the names `--acme` manages (with the ACME client process it starts);
//! and the rustls configuration new TLS connections start from.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use rustls::ServerConfig;

use super::bind::{Activated, Listeners};
use super::listen::Listen;
use super::open::Opened;
use super::tls::{self, SniResolver};
use super::{ServeArgs, acme, control, now_unix, sandbox, say, stack};

/// The certificates given on the command line (or the self-signed mode),
/// when any listener speaks TLS. `in_folder`: a folder of sites holds
/// certificates too, so the command line need not give any.
pub(super) fn given_certificates(
    args: &ServeArgs,
    listens: &[(Listen, u32)],
    has_tls_listener: bool,
    in_folder: bool,
) -> anyhow::Result<Option<tls::Source>> {
    let has_files = !args.tls_cert.is_empty() || !args.tls_key.is_empty();
    if !has_tls_listener {
        if has_files || args.tls_self_signed {
            bail!("TLS certificates given but no --listen-tls address");
        }
        if args.redirect_https {
            bail!("--redirect-https needs a TLS listener (--listen-tls)");
        }
        return Ok(None);
    }
    if args.tls_self_signed {
        let mut names = vec!["localhost".to_string()];
        let tls_addrs = listens.iter().filter(|(_, tag)| *tag == stack::TLS);
        for addr in tls_addrs.flat_map(|(l, _)| &l.addrs) {
            let ip = addr.ip();
            if ip.is_unspecified() {
                names.extend(["127.0.0.1".to_string(), "::1".to_string()]);
            } else {
                names.push(ip.to_string());
            }
        }
        names.dedup();
        return Ok(Some(tls::Source::SelfSigned(names)));
    }
    if args.tls_cert.is_empty() && !in_folder && !args.acme_enabled {
        bail!(
            "--listen-tls needs --tls-cert FILE --tls-key FILE (or --tls-self-signed, or --acme)"
        );
    }
    if args.tls_cert.len() != args.tls_key.len() {
        bail!(
            "--tls-cert and --tls-key come in pairs: {} certificates, {} keys",
            args.tls_cert.len(),
            args.tls_key.len()
        );
    }
    let pairs = args
        .tls_cert
        .iter()
        .zip(&args.tls_key)
        .map(|(cert, key)| tls::PairPaths {
            cert: cert.clone(),
            key: key.clone(),
        })
        .collect();
    Ok(Some(tls::Source::Files(pairs)))
}

/// Loads the certificates of `source`, and writes a self-signed one to
/// `self_signed_out` if given; the error is one line naming the file and
/// the problem.
pub fn load_tls(
    source: &tls::Source,
    self_signed_out: Option<&Path>,
) -> anyhow::Result<(Arc<SniResolver>, Arc<ServerConfig>)> {
    let resolver = Arc::new(tls::certs::load(source, now_unix()).map_err(anyhow::Error::msg)?);
    if let tls::Source::SelfSigned(names) = source {
        if let Some(out) = self_signed_out {
            std::fs::write(out, tls::certs::first_certificate_pem(&resolver)).with_context(
                || {
                    format!(
                        "{}: cannot write the self-signed certificate",
                        out.display()
                    )
                },
            )?;
            say(&format!(
                "kiln: self-signed certificate written to {} (curl --cacert {0})",
                out.display()
            ));
        }
        let fingerprint = tls::certs::first_fingerprint(&resolver);
        say(&format!(
            "kiln: self-signed certificate for {} (SHA-256 {fingerprint})",
            names.join(", ")
        ));
    }
    let config = tls_config(Arc::clone(&resolver))?;
    Ok((resolver, config))
}

/// Under `--acme`: the user's own pairs of `source` (each must load), the
/// managed pairs there are (one that fails is said and left out), the
/// TLS-ALPN-01 certificates; no certificate at all yet is no error.
pub(super) fn load_tls_with_acme(
    source: &tls::Source,
    managed: &acme::Managed,
) -> anyhow::Result<(Arc<SniResolver>, Arc<ServerConfig>)> {
    let own = match source {
        tls::Source::Files(pairs) => pairs.as_slice(),
        tls::Source::SelfSigned(_) => bail!("--acme and --tls-self-signed do not go together"),
    };
    let (resolver, failures) =
        tls::certs::load_with_acme(own, &managed.pairs(), managed.resolver_acme(), now_unix())
            .map_err(anyhow::Error::msg)?;
    for failure in failures {
        tracing::error!("ACME certificate: {failure}");
    }
    let resolver = Arc::new(resolver);
    let config = tls_config(Arc::clone(&resolver))?;
    Ok((resolver, config))
}

/// The names `--acme` obtains certificates for: a folder's sites, or
/// `--acme-domain`; a name a user's own certificate covers (or, in a
/// folder, with a `HOST.crt` beside its pack) is left to it.
pub(super) fn managed_names(
    args: &ServeArgs,
    opened: &Opened,
    own: Option<&tls::Source>,
) -> anyhow::Result<acme::Managed> {
    let sites = match &opened.served {
        control::Served::Folder(folder) => Some(folder.dir().to_path_buf()),
        _ => None,
    };
    let (candidates, folder_pairs) = match &opened.served {
        control::Served::Folder(folder) => {
            if !args.acme_domain.is_empty() {
                bail!(
                    "--acme-domain names the sites of one pack; a folder of sites gets a \
                     certificate for each HOST.pack"
                );
            }
            (acme::folder_names(folder.dir()), folder.certificate_pairs())
        }
        _ => {
            if args.acme_domain.is_empty() {
                bail!(
                    "--acme with one site needs the names to obtain a certificate for: --acme-domain NAME"
                );
            }
            let names = args
                .acme_domain
                .iter()
                .map(|n| acme::dns_name(n).map_err(|e| anyhow::anyhow!("--acme-domain {e}")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            (names, Vec::new())
        }
    };
    let own_pairs = match own {
        Some(tls::Source::Files(pairs)) => pairs.as_slice(),
        _ => &[],
    };
    let (own, _) =
        tls::certs::load_with_acme(own_pairs, &[], tls::certs::Acme::default(), now_unix())
            .map_err(anyhow::Error::msg)?;
    let beside = |name: &str| {
        folder_pairs
            .iter()
            .any(|p| p.cert.file_stem().is_some_and(|stem| stem == name))
    };
    let (theirs, mut names): (Vec<String>, Vec<String>) = candidates
        .into_iter()
        .partition(|name| own.covers(name) || beside(name));
    if !theirs.is_empty() {
        tracing::info!(
            "--acme: {} have their own certificates, not managed",
            theirs.join(", ")
        );
    }
    names.sort();
    names.dedup();
    // A folder of sites may get its first site at run time (a bucket
    // with nothing published yet); one pack needs its names now.
    if names.is_empty() && sites.is_none() {
        bail!(
            "--acme: no name to obtain a certificate for (a folder's HOST.pack, not _default, \
             an IP address or a name without a dot, and without its own certificate)"
        );
    }
    Ok(acme::Managed {
        dir: args.acme.local_dir()?,
        names,
        sites,
        not_managed: theirs,
        known: Default::default(),
    })
}

/// The user kiln switches to when it started as root, if another.
pub(super) fn switched_user(identity: Option<&sandbox::Identity>) -> Option<&sandbox::Identity> {
    let root = rustix::process::geteuid().is_root();
    identity.filter(|i| root && i.uid != 0)
}

/// Starts the ACME client (`kiln acme run`) for `managed`, as the user the
/// server will serve as when kiln started as root (`--user`, or
/// `nobody`), so that it writes what the server can read.
pub(super) fn start_acme_client(
    args: &ServeArgs,
    managed: &acme::Managed,
    challenges: &[&str],
    identity: Option<&sandbox::Identity>,
) -> anyhow::Result<acme::Client> {
    let user = args
        .user
        .clone()
        .or_else(|| switched_user(identity).map(|i| i.name.clone()));
    let client_args = acme::client_args(
        &args.acme,
        managed,
        challenges,
        user.as_deref(),
        args.store.endpoint.as_deref(),
    );
    let client = acme::spawn_client(&client_args)?;
    tracing::info!(
        "ACME: started the client (pid {}): kiln {}",
        client.pid,
        client_args.join(" ")
    );
    Ok(client)
}

/// The server configuration new TLS connections start from.
pub fn tls_config(resolver: Arc<SniResolver>) -> anyhow::Result<Arc<ServerConfig>> {
    // HTTP/2 first: every browser that offers it is better served by it.
    // `acme-tls/1` last: only a validation, which offers nothing else,
    // agrees on it.
    let alpn: &[&[u8]] = if resolver.answers_acme() {
        &[b"h2", b"http/1.1", tls::ACME_TLS_ALPN]
    } else {
        &[b"h2", b"http/1.1"]
    };
    tls::server_config(resolver, alpn).map_err(anyhow::Error::msg)
}

/// The certificates at start, when a listener speaks TLS.
pub(super) struct Certificates {
    /// Some listener (systemd's too) speaks TLS.
    pub(super) tls_listener: bool,
    /// As the command line gives them (or the self-signed mode): what a
    /// reload reads again, and what is watched.
    pub(super) given: Option<tls::Source>,
    /// With those of a folder of sites: what is loaded, and what the
    /// sandbox lets be read again.
    pub(super) source: Option<tls::Source>,
}

/// Checks the TLS flags against the listeners and what is served (a
/// folder of sites may hold its own pairs): after opening what is served,
/// before any port is bound, so that a mistake in the flags is said
/// without taking a port.
pub(super) fn certificates(
    args: &ServeArgs,
    listens: &[(Listen, u32)],
    activated: &Activated,
    served: &control::Served,
) -> anyhow::Result<Certificates> {
    let tls_listener = listens.iter().any(|(_, tag)| *tag == stack::TLS)
        || activated.serving.iter().any(|(_, tag)| *tag == stack::TLS);
    let in_folder =
        matches!(served, control::Served::Folder(f) if !f.certificate_pairs().is_empty());
    let given = given_certificates(args, listens, tls_listener, in_folder)?;
    let source = given
        .as_ref()
        .map(|g| control::certificate_source(g, served));
    Ok(Certificates {
        tls_listener,
        given,
        source,
    })
}

/// Under `--acme`: the names to obtain certificates for, and the state
/// folder prepared (made, and given to the serving user when kiln started
/// as root). Once the certificates given are known (a name with its own is
/// not managed), and before the watches are set on the folder's parts.
pub(super) fn managed_certificates(
    args: &ServeArgs,
    opened: &Opened,
    certificates: &Certificates,
    identity: Option<&sandbox::Identity>,
) -> anyhow::Result<Option<Arc<acme::Managed>>> {
    if !args.acme_enabled {
        return Ok(None);
    }
    let managed = managed_names(args, opened, certificates.source.as_ref())?;
    // Made before the client starts: the server watches its folders from
    // the start, and under a root-owned parent the client, running as the
    // serving user, could not make them.
    crate::acme::store::prepare(
        &managed.dir,
        switched_user(identity).map(|i| (i.uid, i.gid)),
    )?;
    Ok(Some(Arc::new(managed)))
}

/// Under `--acme`: the challenges the listeners allow the CA to validate
/// by, in the order the client tries them; none is an error. Once bound,
/// for the ports the kernel chose.
pub(super) fn acme_challenges(
    managed: Option<&acme::Managed>,
    listeners: &[Listeners],
) -> anyhow::Result<Vec<&'static str>> {
    let Some(_) = managed else {
        return Ok(Vec::new());
    };
    let ports = |tag: u32| -> Vec<u16> {
        listeners[0]
            .iter()
            .filter(|(_, t)| *t == tag)
            .filter_map(|(l, _)| l.local_addr().ok().map(|a| a.port()))
            .collect()
    };
    let challenges = acme::challenges(&ports(stack::CLEARTEXT), &ports(stack::TLS));
    if challenges.is_empty() {
        bail!(
            "--acme needs a listener the CA can validate on: --listen (HTTP-01) or --listen-tls (TLS-ALPN-01)"
        );
    }
    Ok(challenges)
}

/// Loads the certificates (a self-signed one made and said), when a
/// listener speaks TLS, and says whether the kernel offers kTLS: once the
/// server is known to listen, before the sandbox, which lets only the
/// pairs' files be read again.
pub(super) fn load_tls_at_start(
    args: &ServeArgs,
    certificates: &Certificates,
    managed: Option<&acme::Managed>,
) -> anyhow::Result<(Option<control::TlsReload>, Option<Arc<ServerConfig>>)> {
    Ok(match &certificates.source {
        Some(source) => {
            let (resolver, config) = match managed {
                Some(managed) => load_tls_with_acme(source, managed)?,
                None => load_tls(source, args.tls_self_signed_out.as_deref())?,
            };
            // The hand-off of keys to the kernel (tls::ktls) is the cargo
            // feature `ktls`, off by default and never called: no machine
            // here has kTLS to prove it on, so records stay in userspace.
            match tls::kernel_offers_ktls() {
                Ok(true) => tracing::info!(
                    "kTLS: this kernel offers it, but kiln encrypts TLS records in userspace"
                ),
                Ok(false) => tracing::info!(
                    "kTLS: this kernel does not offer it (no tls module loaded); kiln encrypts TLS records in userspace"
                ),
                Err(e) => {
                    tracing::info!("kTLS: unknown ({e}); kiln encrypts TLS records in userspace")
                }
            }
            let given = certificates
                .given
                .clone()
                .expect("given when there is a source");
            (Some(control::TlsReload { given, resolver }), Some(config))
        }
        None => (None, None),
    })
}
