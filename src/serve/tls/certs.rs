//! Certificates: PEM pairs read and checked at start and at every reload
//! (readable, parseable, in date, key matching the certificate), the
//! certificate of each connection chosen by SNI against the names each one
//! carries, and the in-memory self-signed certificate of `--tls-self-signed`.
//! Under `--acme`, the managed pairs come after the user's own (which win
//! for a name both cover), a managed name without a certificate yet is
//! refused rather than served another name's, and a ClientHello that
//! offers only `acme-tls/1` gets the name's RFC 8737 challenge
//! certificate.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::aws_lc_rs::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A certificate chain and its key, as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairPaths {
    /// `--tls-cert`: the PEM chain, leaf first.
    pub cert: PathBuf,
    /// `--tls-key`: the PEM private key (PKCS#8, SEC1 or PKCS#1).
    pub key: PathBuf,
}

/// Where certificates come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Files, re-read at every reload.
    Files(Vec<PairPaths>),
    /// A certificate made in memory at start for these names and
    /// addresses; a reload keeps it.
    SelfSigned(Vec<String>),
}

/// One loaded certificate with the names it is served for.
#[derive(Clone, Debug)]
struct Entry {
    /// DNS names from the subject alternative names (or the common name
    /// when there are none), lower case; `*.example.com` for wildcards.
    names: Vec<String>,
    /// The chain and signing key rustls serves.
    key: Arc<CertifiedKey>,
    /// The files it was read from (`None`: made in memory).
    paths: Option<PairPaths>,
}

/// Chooses a certificate by SNI: an exact name first, then a wildcard
/// covering exactly one leftmost label, else the first pair (under
/// `--acme`: none for a managed name, see [`Acme`]).
#[derive(Debug)]
pub struct SniResolver {
    /// In command-line order, then the managed pairs; never empty without
    /// `--acme` (with it, the server may start before any certificate
    /// was issued).
    entries: Vec<Entry>,
    /// What `--acme` adds.
    acme: Option<Acme>,
}

/// What `--acme` adds to the choice of a certificate.
#[derive(Clone, Debug, Default)]
pub struct Acme {
    /// The names kiln obtains certificates for. A ClientHello for one of
    /// them that no certificate covers yet is refused (rustls answers
    /// with a fatal `access_denied` alert): the fallback pair is another
    /// name's, which a browser would warn about and a user might click
    /// through.
    pub managed: Vec<String>,
    /// RFC 8737 challenge certificates by name, served only to a
    /// ClientHello whose one ALPN protocol is `acme-tls/1`.
    pub challenges: Vec<(String, Arc<CertifiedKey>)>,
}

/// The longest DNS name (RFC 1035 §2.3.4, without the root's dot); rustls
/// refuses a longer SNI name.
const MAX_DNS_NAME: usize = 253;

/// `name` in lower case, written into `buf`: no allocation in the
/// handshake. `None` when it is longer than a DNS name can be.
fn lower_case<'b>(name: &str, buf: &'b mut [u8; MAX_DNS_NAME]) -> Option<&'b str> {
    let lowered = buf.get_mut(..name.len())?;
    lowered.copy_from_slice(name.as_bytes());
    let lowered = std::str::from_utf8_mut(lowered).ok()?;
    lowered.make_ascii_lowercase();
    Some(lowered)
}

impl SniResolver {
    /// The certificate for a ClientHello naming `server_name`; `acme_alpn`:
    /// it offers `acme-tls/1` and no other protocol. `None` refuses the
    /// handshake.
    fn choose(&self, server_name: Option<&str>, acme_alpn: bool) -> Option<&Arc<CertifiedKey>> {
        let mut lowered = [0u8; MAX_DNS_NAME];
        let name = server_name.and_then(|n| lower_case(n.trim_end_matches('.'), &mut lowered));
        if let Some(acme) = &self.acme
            && acme_alpn
        {
            // RFC 8737 §3: a validation gets the challenge certificate or
            // nothing, never a certificate that would serve HTTP.
            let name = name?;
            return acme
                .challenges
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, key)| key);
        }
        if let Some(name) = name {
            if let Some(e) = self.covering(name) {
                return Some(&e.key);
            }
            if self
                .acme
                .as_ref()
                .is_some_and(|a| a.managed.iter().any(|m| m == name))
            {
                return None;
            }
        }
        self.entries.first().map(|e| &e.key)
    }

    /// The first certificate for `name` (lower case, no trailing dot): by
    /// exact name, then by a wildcard.
    fn covering(&self, name: &str) -> Option<&Entry> {
        let exact = self
            .entries
            .iter()
            .find(|e| e.names.iter().any(|n| n == name));
        exact.or_else(|| {
            let (_, parent) = name.split_once('.')?;
            self.entries
                .iter()
                .find(|e| e.names.iter().any(|n| n.strip_prefix("*.") == Some(parent)))
        })
    }

    /// Whether a certificate here is for `name` (lower case), by exact
    /// name or wildcard.
    pub fn covers(&self, name: &str) -> bool {
        self.covering(name).is_some()
    }

    /// The same certificates with `acme`'s managed names and challenge
    /// certificates (replacing those it had).
    pub fn with_acme(self, acme: Acme) -> SniResolver {
        SniResolver {
            entries: self.entries,
            acme: Some(acme),
        }
    }

    /// Whether `--acme` is on: the TLS configuration then offers
    /// `acme-tls/1` too.
    pub fn answers_acme(&self) -> bool {
        self.acme.is_some()
    }

    /// Every name of every certificate, for the start-up log.
    pub fn names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .flat_map(|e| e.names.iter().map(String::as_str))
            .collect()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let acme_alpn = client_hello.alpn().is_some_and(|mut offered| {
            offered.next() == Some(super::ACME_TLS_ALPN) && offered.next().is_none()
        });
        self.choose(client_hello.server_name(), acme_alpn)
            .map(Arc::clone)
    }
}

/// Loads every pair of `source`; the error is one line naming the file and
/// what is wrong with it.
pub fn load(source: &Source, now_unix: i64) -> Result<SniResolver, String> {
    let entries = match source {
        Source::Files(pairs) => pairs
            .iter()
            .map(|p| load_pair(p, now_unix))
            .collect::<Result<Vec<_>, _>>()?,
        Source::SelfSigned(names) => vec![self_signed(names)?.0],
    };
    if entries.is_empty() {
        return Err("no certificate given (--tls-cert and --tls-key, or --tls-self-signed)".into());
    }
    Ok(SniResolver {
        entries,
        acme: None,
    })
}

/// Under `--acme`: the user's own pairs `given` (each must load, as at
/// any start), then the managed pairs found (one that fails is left out:
/// the ACME client will write it again), then `acme`. Returns the
/// resolver and one line per managed pair left out.
pub fn load_with_acme(
    given: &[PairPaths],
    managed: &[PairPaths],
    acme: Acme,
    now_unix: i64,
) -> Result<(SniResolver, Vec<String>), String> {
    let mut entries = given
        .iter()
        .map(|p| load_pair(p, now_unix))
        .collect::<Result<Vec<_>, _>>()?;
    let mut failures = Vec::new();
    for pair in managed {
        match load_pair(pair, now_unix) {
            Ok(entry) => entries.push(entry),
            Err(e) => failures.push(format!("{e}; not served")),
        }
    }
    Ok((
        SniResolver {
            entries,
            acme: Some(acme),
        },
        failures,
    ))
}

/// Reads an RFC 8737 challenge file (the certificate, then its key, PEM).
/// Neither its dates nor the key's match are checked: the CA checks the
/// name and the `acmeIdentifier` extension, which RFC 8737 makes
/// critical, and which the parser behind `keys_match` refuses as an
/// unknown critical extension; a wrong key fails the handshake.
pub fn load_challenge(path: &Path) -> Result<Arc<CertifiedKey>, String> {
    let name = path.display();
    let pem = read(path)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{name}: not a PEM certificate ({e})"))?;
    if chain.is_empty() {
        return Err(format!("{name}: no CERTIFICATE block in the file"));
    }
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("{name}: no usable PEM private key ({e})"))?;
    let signing =
        any_supported_type(&key).map_err(|e| format!("{name}: unsupported private key ({e})"))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// Loads every pair of `source` again, each on its own: a pair that now
/// fails keeps the certificate `previous` had from the same files (or is
/// left out when it had none), so one bad certificate does not take the
/// others down. Returns the resolver and one line per failure; `None`
/// when no certificate is left at all.
pub fn reload(
    source: &Source,
    previous: &SniResolver,
    now_unix: i64,
) -> (Option<SniResolver>, Vec<String>) {
    let Source::Files(pairs) = source else {
        return (
            Some(SniResolver {
                entries: previous.entries.clone(),
                acme: previous.acme.clone(),
            }),
            Vec::new(),
        );
    };
    let mut failures = Vec::new();
    let entries: Vec<Entry> = pairs
        .iter()
        .filter_map(|p| match load_pair(p, now_unix) {
            Ok(entry) => Some(entry),
            Err(e) => {
                let kept = previous
                    .entries
                    .iter()
                    .find(|old| old.paths.as_ref() == Some(p))
                    .cloned();
                let what = if kept.is_some() {
                    "still serving the previous certificate from these files"
                } else {
                    "not served"
                };
                failures.push(format!("{e}; {what}"));
                kept
            }
        })
        .collect();
    // Under `--acme` no certificate at all is a state the server starts
    // in, not a failure.
    let resolver = (!entries.is_empty() || previous.acme.is_some()).then(|| SniResolver {
        entries,
        acme: previous.acme.clone(),
    });
    (resolver, failures)
}

fn load_pair(paths: &PairPaths, now_unix: i64) -> Result<Entry, String> {
    let cert_name = paths.cert.display();
    let key_name = paths.key.display();
    let cert_pem = read(&paths.cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{cert_name}: not a PEM certificate chain ({e})"))?;
    let Some(leaf) = chain.first() else {
        return Err(format!("{cert_name}: no CERTIFICATE block in the file"));
    };
    let names = check_leaf(leaf, now_unix).map_err(|e| format!("{cert_name}: {e}"))?;
    let key_pem = read(&paths.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("{key_name}: no usable PEM private key ({e})"))?;
    let signing = any_supported_type(&key)
        .map_err(|e| format!("{key_name}: unsupported private key ({e})"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        format!("{key_name}: this key does not belong to the certificate in {cert_name} ({e})")
    })?;
    Ok(Entry {
        names,
        key: Arc::new(certified),
        paths: Some(paths.clone()),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}

/// Checks the validity period and returns the names the leaf is for.
fn check_leaf(leaf: &CertificateDer<'_>, now_unix: i64) -> Result<Vec<String>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("the first certificate cannot be parsed ({e})"))?;
    let validity = cert.validity();
    if validity.not_after.timestamp() < now_unix {
        return Err(format!("the certificate expired on {}", validity.not_after));
    }
    if validity.not_before.timestamp() > now_unix {
        return Err(format!(
            "the certificate is not valid before {}",
            validity.not_before
        ));
    }
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(d) => {
                    names.push(d.trim_end_matches('.').to_ascii_lowercase());
                }
                x509_parser::extensions::GeneralName::IPAddress(ip) => {
                    if let Some(ip) = ip_from_bytes(ip) {
                        names.push(ip);
                    }
                }
                _ => {}
            }
        }
    }
    if names.is_empty() {
        for cn in cert.subject().iter_common_name() {
            if let Ok(cn) = cn.as_str() {
                names.push(cn.to_ascii_lowercase());
            }
        }
    }
    Ok(names)
}

fn ip_from_bytes(b: &[u8]) -> Option<String> {
    match b.len() {
        4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?).to_string()),
        16 => Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?).to_string()),
        _ => None,
    }
}

/// Makes a P-256 certificate for `names` (DNS names or IP addresses) in
/// memory; returns it with its SHA-256 fingerprint (colon-separated hex).
fn self_signed(names: &[String]) -> Result<(Entry, String), String> {
    let failed = |e: rcgen::Error| format!("cannot make a self-signed certificate: {e}");
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(failed)?;
    // The subject a browser's warning and `openssl x509 -subject` show.
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("kiln self-signed for {}", names.join(" ")),
    );
    let signing_key = rcgen::KeyPair::generate().map_err(failed)?;
    let cert = params.self_signed(&signing_key).map_err(failed)?;
    let der = cert.der().clone();
    let fingerprint = fingerprint(&der);
    let key = PrivateKeyDer::try_from(signing_key.serialize_der())
        .map_err(|e| format!("self-signed key: {e}"))?;
    let signing = any_supported_type(&key).map_err(|e| format!("self-signed key: {e}"))?;
    Ok((
        Entry {
            names: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
            key: Arc::new(CertifiedKey::new(vec![der], signing)),
            paths: None,
        },
        fingerprint,
    ))
}

/// SHA-256 of a DER certificate, as browsers show it.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    let mut out = String::with_capacity(95);
    for (i, b) in digest.as_ref().iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{b:02X}");
    }
    out
}

/// The leaf of the first certificate `resolver` serves (the default one):
/// what a client that is told to trust a self-signed server trusts.
pub fn first_certificate(resolver: &SniResolver) -> &CertificateDer<'static> {
    &resolver.entries[0].key.cert[0]
}

/// The first certificate `resolver` serves in PEM, for a client to trust
/// (`curl --cacert`).
pub fn first_certificate_pem(resolver: &SniResolver) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut base64 = Vec::new();
    for chunk in first_certificate(resolver).chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            base64.push(if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize]
            } else {
                b'='
            });
        }
    }
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in base64.chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// The SHA-256 fingerprint of the first certificate `resolver` serves.
pub fn first_fingerprint(resolver: &SniResolver) -> String {
    fingerprint(first_certificate(resolver))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(names: &[&str]) -> Entry {
        let (mut e, _) = self_signed(&[names[0].to_string()]).unwrap();
        e.names = names.iter().map(|n| n.to_string()).collect();
        e
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_first() {
        let r = SniResolver {
            entries: vec![
                entry(&["default.test"]),
                entry(&["*.example.com"]),
                entry(&["www.example.com", "example.com"]),
            ],
            acme: None,
        };
        let pick = |name: Option<&str>| {
            let chosen = r.choose(name, false).unwrap();
            r.entries
                .iter()
                .position(|e| Arc::ptr_eq(&e.key, chosen))
                .unwrap()
        };
        assert_eq!(pick(Some("www.example.com")), 2);
        assert_eq!(pick(Some("WWW.Example.COM.")), 2);
        assert_eq!(pick(Some("example.com")), 2);
        assert_eq!(pick(Some("img.example.com")), 1);
        assert_eq!(
            pick(Some("a.b.example.com")),
            0,
            "a wildcard covers one label"
        );
        assert_eq!(pick(Some("other.test")), 0);
        let too_long = format!("{}.example.com", "a".repeat(MAX_DNS_NAME));
        assert_eq!(pick(Some(&too_long)), 0, "longer than any DNS name");
        assert_eq!(pick(None), 0);
    }

    #[test]
    fn under_acme_a_pending_name_is_refused_and_validations_get_the_challenge() {
        let challenge = entry(&["pending.example"]).key;
        let r = SniResolver {
            entries: vec![entry(&["own.example"]), entry(&["issued.example"])],
            acme: Some(Acme {
                managed: vec!["issued.example".into(), "pending.example".into()],
                challenges: vec![("pending.example".into(), Arc::clone(&challenge))],
            }),
        };
        let pick = |name: &str, acme_alpn: bool| {
            r.choose(Some(name), acme_alpn).map(|chosen| {
                if Arc::ptr_eq(chosen, &challenge) {
                    "challenge".to_string()
                } else {
                    let e = r.entries.iter().find(|e| Arc::ptr_eq(&e.key, chosen));
                    e.unwrap().names[0].clone()
                }
            })
        };
        assert_eq!(
            pick("issued.example", false).as_deref(),
            Some("issued.example")
        );
        assert_eq!(pick("pending.example", false), None, "not the fallback");
        assert_eq!(pick("Pending.Example.", true).as_deref(), Some("challenge"));
        assert_eq!(pick("issued.example", true), None, "no challenge: refused");
        assert_eq!(pick("other.example", false).as_deref(), Some("own.example"));
        let none = SniResolver {
            entries: Vec::new(),
            acme: Some(Acme::default()),
        };
        assert!(none.choose(Some("any.example"), false).is_none());
        assert!(none.choose(None, false).is_none());
    }

    #[test]
    fn the_self_signed_certificate_is_named_and_exported_as_pem() {
        let names = ["localhost".to_string(), "127.0.0.1".to_string()];
        let resolver = load(&Source::SelfSigned(names.to_vec()), 0).unwrap();
        let pem = first_certificate_pem(&resolver);
        let read = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(&read, first_certificate(&resolver));
        let (_, cert) = x509_parser::parse_x509_certificate(&read).unwrap();
        let cn: Vec<&str> = cert
            .subject()
            .iter_common_name()
            .map(|cn| cn.as_str().unwrap())
            .collect();
        assert_eq!(cn, ["kiln self-signed for localhost 127.0.0.1"]);
    }

    #[test]
    fn fingerprint_is_colon_hex() {
        let f = fingerprint(b"abc");
        assert_eq!(f.len(), 32 * 3 - 1);
        assert!(f.starts_with("BA:78:16:BF"), "{f}");
    }
}
