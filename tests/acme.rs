//! Automatic HTTPS end to end: `kiln serve SITES/ --acme` against Pebble,
//! Let's Encrypt's test CA (`common/pebble.rs`), validating on the
//! server's own listeners: the ACME client the server starts obtains a
//! certificate for each site of a folder, by HTTP-01 and TLS-ALPN-01 each
//! alone, the server picks each pair up, and curl, trusting only the
//! root of the certificates Pebble issues, fetches every site over HTTPS
//! (no `-k`); `/metrics` shows each certificate's expiry. With the CA
//! gone after the first certificates, the server serves on with them and
//! the renewal's error is in the status. Headless Chromium, trusting the
//! CA only through `--ignore-certificate-errors-spki-list` (certificate
//! checks on, no `ignoreHTTPSErrors`), loads a site too.
//!
//! Each case has its own Pebble and server, started together so that the
//! cases wait in parallel. The tests skip, saying so, where Pebble is not
//! installed.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::pebble::{self, Ca, Tools};
use common::{Launch, Server};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// The sites of the folder served, names the DNS stub resolves to
/// 127.0.0.1.
const NAMES: [&str; 2] = ["a.test", "b.test"];

/// The page each site serves at `/version.txt`.
fn page(name: &str) -> String {
    format!("the site {name}")
}

/// The listeners the server has, and the challenges Pebble can validate
/// on them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Validation {
    /// Both listeners, Pebble validating on both.
    Both,
    /// Pebble's TLS-ALPN-01 port is one where nothing listens.
    Http01Only,
    /// No cleartext listener at all.
    TlsAlpn01Only,
}

/// A CA and `kiln serve --acme` on a folder of the two sites.
struct Run {
    validation: Validation,
    work: tempfile::TempDir,
    state: PathBuf,
    ca: Ca,
    server: Server,
    tls_port: u16,
}

/// Starts Pebble (certificates valid for `validity` seconds, or half as
/// long under its other profile) validating on the ports `validation`
/// says, then the server.
fn start(tools: &Tools, validation: Validation, validity: u64) -> Run {
    let work = tempfile::tempdir().unwrap();
    let sites = work.path().join("sites");
    std::fs::create_dir(&sites).unwrap();
    for name in NAMES {
        common::version_pack(&sites.join(format!("{name}.pack")), &page(name));
    }
    let (http_port, tls_port) = (pebble::free_port(), pebble::free_port());
    let validated_http = match validation {
        Validation::TlsAlpn01Only => pebble::free_port(),
        _ => http_port,
    };
    let validated_tls = match validation {
        Validation::Http01Only => pebble::free_port(),
        _ => tls_port,
    };
    let ca = pebble::start_ca(tools, work.path(), validated_http, validated_tls, validity);
    let state = work.path().join("acme");
    let listen_tls = format!("127.0.0.1:{tls_port}");
    let args = [
        sites.to_str().unwrap(),
        "--acme",
        "--acme-ca",
        &ca.url,
        "--acme-ca-root",
        ca.root.to_str().unwrap(),
        "--acme-dir",
        state.to_str().unwrap(),
        "--acme-email",
        "tests@kiln.test",
        "--listen-tls",
        &listen_tls,
        "--metrics",
        "127.0.0.1:0",
    ];
    let listen = match validation {
        Validation::TlsAlpn01Only => Vec::new(),
        _ => vec![format!("127.0.0.1:{http_port}")],
    };
    let server = Server::launch(
        &args,
        Launch {
            listen,
            ..Launch::default()
        },
    );
    Run {
        validation,
        work,
        state,
        ca,
        server,
        tls_port,
    }
}

impl Run {
    /// Waits until `done` holds; panics otherwise, with what the server
    /// and the CA logged by then.
    fn wait(&self, what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < pebble::PATIENCE,
                "{:?}: no {what} after {:?}; server:\n{}\nCA:\n{}",
                self.validation,
                pebble::PATIENCE,
                self.server.stderr_text(),
                self.ca.log.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for a certificate for every site, with the server's and the
    /// CA's logs if none comes.
    fn wait_for_certificates(&self) {
        for name in NAMES {
            self.wait(&format!("certificate for {name}"), || {
                pebble::status(&self.state, name).is_some_and(|s| s["not_after"].is_i64())
            });
            pebble::pair(&self.state, name);
        }
    }

    /// The root of the certificates Pebble issues, from its management
    /// interface (over its own TLS), in a file.
    fn issuing_root(&self) -> PathBuf {
        let path = self.work.path().join("issuing-root.pem");
        let out = Command::new("curl")
            .args(["--silent", "--show-error", "--fail", "--cacert"])
            .arg(&self.ca.root)
            .arg("--output")
            .arg(&path)
            .arg(format!("{}/roots/0", self.ca.management))
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        path
    }

    /// `curl --cacert ROOT https://NAME:PORT/version.txt`, NAME resolved to
    /// 127.0.0.1: the body, or curl's error.
    fn curl(&self, root: &Path, name: &str) -> Result<String, String> {
        let port = self.tls_port;
        let out = Command::new("curl")
            .args(["--silent", "--show-error", "--fail", "--max-time", "10"])
            .arg("--cacert")
            .arg(root)
            .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
            .arg(format!("https://{name}:{port}/version.txt"))
            .output()
            .expect("curl");
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    /// Waits until curl, trusting `root` alone, gets every site's page
    /// (the server picks a pair up when the client renames it in).
    fn wait_for_https(&self, root: &Path) {
        for name in NAMES {
            self.wait(&format!("{name} over HTTPS"), || {
                self.curl(root, name).is_ok_and(|body| body == page(name))
            });
        }
    }

    /// The `kiln_acme_*` samples of `/metrics`.
    fn acme_metrics(&self) -> Vec<String> {
        let text = self.server.metrics();
        text.lines()
            .filter(|l| l.starts_with("kiln_acme_"))
            .map(str::to_owned)
            .collect()
    }
}

/// Each site of the folder gets its certificate, whichever challenge the
/// listeners allow: both, HTTP-01 alone, TLS-ALPN-01 alone (no cleartext
/// listener); curl trusting the issuing root alone fetches each over
/// HTTPS, and `/metrics` shows each certificate's expiry.
#[test]
fn every_site_gets_a_certificate_by_either_challenge_and_is_served_over_https() {
    let Some(tools) = pebble::tools() else { return };
    let runs: Vec<Run> = [
        Validation::Both,
        Validation::Http01Only,
        Validation::TlsAlpn01Only,
    ]
    .into_iter()
    .map(|validation| start(&tools, validation, 90 * 86400))
    .collect();
    for run in &runs {
        run.wait_for_certificates();
        // The challenge tried first is the one the case leaves possible.
        let challenge = match run.validation {
            Validation::TlsAlpn01Only => "tls-alpn-01",
            _ => "http-01",
        };
        let log = run.server.stderr_text();
        for name in NAMES {
            let ordered = format!("{name}: ordering a certificate ({challenge})");
            assert!(log.contains(&ordered), "{:?}: {log}", run.validation);
        }
        let root = run.issuing_root();
        run.wait_for_https(&root);
        if run.validation == Validation::Both {
            chromium_loads_a_site(run, &root);
        }
        let expected: Vec<String> = NAMES
            .iter()
            .map(|name| {
                let not_after = pebble::status(&run.state, name).unwrap()["not_after"].clone();
                format!(r#"kiln_acme_certificate_expiry_seconds{{name="{name}"}} {not_after}"#)
            })
            .collect();
        assert_eq!(run.acme_metrics(), expected, "{:?}", run.validation);
    }
}

/// Headless Chromium loads the first site's page over HTTPS with its
/// certificate checks on, the CA trusted only through the SPKI hashes of
/// its root and of the chain the server sends (Chromium stores nothing for
/// a certificate it takes with `ignoreHTTPSErrors`, so this is how a
/// browser meets a private CA here). Skipped without Chromium.
fn chromium_loads_a_site(run: &Run, root: &Path) {
    let Some((node, chromium)) = common::browser::find() else {
        return;
    };
    let name = NAMES[0];
    let mut hashes = common::browser::spki_hashes(root);
    hashes.extend(common::browser::spki_hashes(
        &run.state.join("certs").join(format!("{name}.crt")),
    ));
    let args = format!(
        "--ignore-certificate-errors-spki-list={}\n--host-resolver-rules=MAP {name} 127.0.0.1",
        hashes.join(",")
    );
    let base = format!("https://{name}:{}/", run.tls_port);
    let report = common::browser::run_browser(
        &node,
        &chromium,
        &args,
        common::browser::Certificates::Verified,
        &base,
        &["/version.txt".to_owned()],
    );
    let load = &report["pages"][0];
    let document = load["responses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "document")
        .unwrap_or_else(|| panic!("no document: {load}"));
    assert_eq!(document["status"], 200, "{load}");
    assert!(
        document["tls"]
            .as_str()
            .is_some_and(|t| t.starts_with("TLS")),
        "{load}"
    );
    assert!(load["failed"].as_array().unwrap().is_empty(), "{load}");
}

/// The DER of the first certificate of a PEM file.
fn leaf_of(path: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// The certificate the server presents for `name`, whether still valid
/// or not.
fn served_leaf(port: u16, name: &str) -> Vec<u8> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let client = common::tls_client(tcp, name, common::insecure_client_config(&[b"http/1.1"]));
    let common::Client::Tls(stream) = client else {
        unreachable!("a TLS client")
    };
    stream.conn.peer_certificates().unwrap()[0].to_vec()
}

/// The CA gone after the first certificates (short-lived ones, renewed
/// within seconds): the server serves on with them over HTTPS, and the
/// renewal's failure is in the status file, `/metrics` and `kiln acme
/// status`.
#[test]
fn with_the_ca_gone_the_server_serves_its_certificates_and_the_status_says_why() {
    let Some(tools) = pebble::tools() else { return };
    let mut run = start(&tools, Validation::Both, 30);
    run.wait_for_certificates();
    let root = run.issuing_root();
    run.wait_for_https(&root);
    let _ = run.ca.pebble.0.kill();
    let _ = run.ca.pebble.0.wait();
    for name in NAMES {
        assert_eq!(run.curl(&root, name), Ok(page(name)), "CA gone");
    }
    for name in NAMES {
        run.wait(&format!("renewal error for {name}"), || {
            pebble::status(&run.state, name).is_some_and(|s| s["last_error"].is_string())
        });
        let cert = run.state.join(format!("certs/{name}.crt"));
        assert_eq!(served_leaf(run.tls_port, name), leaf_of(&cert), "{name}");
        let error = format!(r#"kiln_acme_last_error_timestamp_seconds{{name="{name}",error="#);
        let samples = run.acme_metrics();
        assert!(samples.iter().any(|l| l.starts_with(&error)), "{samples:?}");
    }
    let table = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["acme", "status", "--acme-dir"])
        .arg(&run.state)
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    for name in NAMES {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {table}"));
        assert!(!line.ends_with(" -"), "no error shown: {table}");
    }
    assert!(
        run.server.child.try_wait().unwrap().is_none(),
        "the server ended: {}",
        run.server.stderr_text()
    );
}
