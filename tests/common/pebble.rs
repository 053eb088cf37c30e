//! Pebble, Let's Encrypt's test CA, and its DNS stub
//! (`pebble-challtestsrv`, every name 127.0.0.1), on loopback for the
//! ACME tests (`acme_client.rs`, `acme.rs`); and readers of the state
//! folder the ACME client writes. Each test starts its own Pebble (it
//! starts in milliseconds), so they run in parallel; a test skips, saying
//! so, where Pebble is not installed (`./test` installs it with
//! `go install`).

use std::io::{BufRead as _, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// How long anything a test waits for may take on a busy machine.
pub const PATIENCE: Duration = Duration::from_secs(45);

/// Pebble and its DNS stub, if installed.
pub struct Tools {
    pub pebble: PathBuf,
    pub dns: PathBuf,
}

pub fn tools() -> Option<Tools> {
    let find = super::go_tool;
    match (find("pebble"), find("pebble-challtestsrv")) {
        (Some(pebble), Some(dns)) => Some(Tools { pebble, dns }),
        _ => {
            eprintln!(
                "skipped:  pebble and pebble-challtestsrv are not installed \
                 (go install github.com/letsencrypt/pebble/v2/cmd/pebble@latest and \
                 .../cmd/pebble-challtestsrv@latest)"
            );
            None
        }
    }
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Lines a process writes, gathered by a thread.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<String>>);

impl Log {
    pub fn of(stream: impl std::io::Read + Send + 'static) -> Log {
        let log = Log::default();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let mut text = lines.0.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        log
    }

    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    pub fn count(&self, needle: &str) -> usize {
        self.text().matches(needle).count()
    }

    /// Waits until `done` holds for the text; panics with it otherwise.
    pub fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) {
        let start = Instant::now();
        while !done(&self.text()) {
            assert!(
                start.elapsed() < PATIENCE,
                "no {what} after {PATIENCE:?}; log:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until `done` holds; panics naming `what` otherwise.
pub fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "no {what} after {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The CA's own TLS: a root made for the test and Pebble's certificate
/// for 127.0.0.1 signed by it; the root is what `--acme-ca-root` names.
pub struct Pki {
    pub root: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn pki(dir: &Path) -> Pki {
    let root_key = KeyPair::generate().unwrap();
    let mut root = CertificateParams::new(Vec::<String>::new()).unwrap();
    root.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    root.distinguished_name
        .push(DnType::CommonName, "kiln tests: Pebble's TLS root");
    let root_cert = root.self_signed(&root_key).unwrap();
    let issuer = Issuer::new(root, root_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let pki = Pki {
        root: dir.join("ca-root.pem"),
        cert: dir.join("pebble.pem"),
        key: dir.join("pebble.key"),
    };
    std::fs::write(&pki.root, root_cert.pem()).unwrap();
    std::fs::write(&pki.cert, cert.pem()).unwrap();
    std::fs::write(&pki.key, key.serialize_pem()).unwrap();
    pki
}

/// A running Pebble with its DNS stub.
pub struct Ca {
    /// The ACME directory.
    pub url: String,
    /// The root of Pebble's own TLS (`--acme-ca-root`).
    pub root: PathBuf,
    /// Pebble's management interface (`/roots/0`: the root of the
    /// certificates it issues), over the same TLS.
    pub management: String,
    pub log: Log,
    /// The DNS stub's management interface (`/add-a`), plain HTTP.
    pub dns_management: String,
    /// Killed to take the CA away.
    pub pebble: Process,
    _dns: Process,
}

/// Starts Pebble, validating HTTP-01 on `http_port` and TLS-ALPN-01 on
/// `tls_port`, issuing certificates valid for `validity` seconds (or
/// half as long, but at least 20 s, under its other profile).
pub fn start_ca(tools: &Tools, work: &Path, http_port: u16, tls_port: u16, validity: u64) -> Ca {
    let pki = pki(work);
    let dns_port = free_port();
    let dns_management = format!("127.0.0.1:{}", free_port());
    let dns = Command::new(&tools.dns)
        .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
        .args(["-management", &dns_management])
        .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
        .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dns = Process(dns);
    let acme_port = free_port();
    let management = format!("127.0.0.1:{}", free_port());
    let config = serde_json::json!({
        "pebble": {
            "listenAddress": format!("127.0.0.1:{acme_port}"),
            "managementListenAddress": management,
            "certificate": pki.cert,
            "privateKey": pki.key,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "retryAfter": { "authz": 1, "order": 1 },
            "keyAlgorithm": "ecdsa",
            // Two profiles: Pebble picks one at random for an order that
            // names none, as kiln's do.
            "profiles": {
                "default": { "description": "kiln tests", "validityPeriod": validity },
                "shorter": { "description": "kiln tests", "validityPeriod": (validity / 2).max(20) }
            }
        }
    });
    let config_path = work.join("pebble.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let mut pebble = Command::new(&tools.pebble)
        .arg("-config")
        .arg(&config_path)
        .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = Log::of(pebble.stdout.take().unwrap());
    let ca = Ca {
        url: format!("https://127.0.0.1:{acme_port}/dir"),
        root: pki.root,
        management: format!("https://{management}"),
        log,
        dns_management: format!("http://{dns_management}"),
        pebble: Process(pebble),
        _dns: dns,
    };
    ca.log
        .wait_for("Pebble start", |t| t.contains("ACME directory available"));
    wait_until("Pebble's listener", || {
        TcpStream::connect(("127.0.0.1", acme_port)).is_ok()
    });
    wait_until("the DNS stub", || {
        TcpStream::connect(("127.0.0.1", dns_port)).is_ok()
    });
    ca
}

impl Ca {
    /// Has the DNS stub resolve `name` to `ip` (instead of 127.0.0.1):
    /// the CA validates `name` there.
    pub fn resolve(&self, name: &str, ip: &str) {
        let body = serde_json::json!({ "host": format!("{name}."), "addresses": [ip] });
        let out = Command::new("curl")
            .args(["--silent", "--show-error", "--fail", "-X", "POST", "-d"])
            .arg(body.to_string())
            .arg(format!("{}/add-a", self.dns_management))
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "add-a {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The managed pair of `name`: its leaf's serial and notAfter, after
/// checking that the key is the certificate's and the leaf is for `name`.
pub fn pair(dir: &Path, name: &str) -> (Vec<u8>, i64) {
    let chain = std::fs::read(dir.join(format!("certs/{name}.crt"))).unwrap();
    let key = std::fs::read_to_string(dir.join(format!("certs/{name}.key"))).unwrap();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain)
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        certs.len() >= 2,
        "a chain, leaf then issuer: {} certificates",
        certs.len()
    );
    let (_, leaf) = x509_parser::parse_x509_certificate(certs[0].as_ref()).unwrap();
    let names: Vec<String> = leaf
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(names, [format!("DNSName({name})")]);
    let key = KeyPair::from_pem(&key).unwrap();
    assert_eq!(
        key.public_key_raw(),
        leaf.public_key().subject_public_key.data.as_ref(),
        "the key is not the certificate's"
    );
    assert_eq!(
        leaf.public_key().algorithm.algorithm.to_id_string(),
        "1.2.840.10045.2.1",
        "not an EC key"
    );
    (
        leaf.raw_serial().to_vec(),
        leaf.validity().not_after.timestamp(),
    )
}

/// The serial of `name`'s certificate, if it has one.
pub fn serial(dir: &Path, name: &str) -> Option<Vec<u8>> {
    let chain = std::fs::read(dir.join(format!("certs/{name}.crt"))).ok()?;
    let leaf = CertificateDer::pem_slice_iter(&chain).next()?.ok()?;
    let (_, leaf) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(leaf.raw_serial().to_vec())
}

/// The status file of `name`.
pub fn status(dir: &Path, name: &str) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join(format!("status/{name}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Waits until `name` has a certificate pair and a status saying so.
pub fn wait_for_certificate(dir: &Path, name: &str) {
    wait_until(&format!("certificate for {name}"), || {
        status(dir, name).is_some_and(|s| s["not_after"].is_i64())
    });
}
