//! `kiln serve --acme`, the server's half, without a CA: the tests write
//! the state folder's files by hand, as the ACME client would
//! (`kiln::acme::layout`: beside the final name, then renamed), and check
//! what the server makes of them over real sockets: HTTP-01 tokens,
//! TLS-ALPN-01 certificates, managed pairs served by SNI (and the user's
//! own winning), handshakes refused before a name's first certificate,
//! the ACME client process started with its arguments and its end
//! leaving the server serving, and the status in `/metrics`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use kiln::acme::layout;

/// A state folder and a folder of sites with `a.example.pack` and
/// `b.example.pack` (and a `_default.pack`, which is never managed).
struct Fixture {
    _tmp: tempfile::TempDir,
    sites: PathBuf,
    state: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let sites = tmp.path().join("sites");
        std::fs::create_dir(&sites).unwrap();
        let pack = sample_pack(tmp.path());
        for host in ["a.example", "b.example", "_default"] {
            std::fs::copy(&pack, sites.join(format!("{host}.pack"))).unwrap();
        }
        let state = tmp.path().join("acme");
        Fixture {
            _tmp: tmp,
            sites,
            state,
        }
    }

    /// The single pack, for `--acme-domain`.
    fn pack(&self) -> PathBuf {
        self.sites.join("a.example.pack")
    }

    /// Starts `kiln serve SITE --acme` with a cleartext and a TLS listener.
    fn start(&self, site: &Path, flags: &[&str]) -> Server {
        let mut args = vec![
            site.to_str().unwrap(),
            "--acme",
            "--acme-dir",
            self.state.to_str().unwrap(),
            // No CA is reached: the client fails, the server serves on.
            "--acme-ca",
            "https://127.0.0.1:9/directory",
            "--listen-tls",
            "127.0.0.1:0",
        ];
        args.extend_from_slice(flags);
        Server::start(&args)
    }
}

/// Writes `bytes` to `path` as the ACME client does: beside it, renamed.
fn put(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let temp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_str().unwrap()
    ));
    std::fs::write(&temp, bytes).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

/// Waits for `done` to hold (a file the server watches was written), for
/// at most ten seconds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A cleartext `GET target` with `Host: host`: status, headers, body.
fn get_plain(server: &Server, target: &str, host: &str) -> (u16, String, String) {
    let mut s = server.connect_plain();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not a whole response: {text:?}; {}", server.stderr_text()));
    let status = head[9..12].parse().unwrap();
    (status, head.to_string(), body.to_string())
}

const TOKEN: &str = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA";

fn challenge_path(token: &str) -> String {
    format!("/.well-known/acme-challenge/{token}")
}

fn key_authorization(token: &str) -> String {
    format!("{token}.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI")
}

/// HTTP-01 answered from the state folder on the cleartext listener: for
/// a folder of sites and for one pack, with and without
/// `--redirect-https`; for any host, a site's or none (a folder without
/// a fallback would say 421), before and after start, 404 once removed.
#[test]
fn http01_tokens_are_answered_for_any_host_as_the_folder_changes() {
    let f = Fixture::new();
    std::fs::remove_file(f.sites.join("_default.pack")).unwrap();
    let one_pack = f.pack();
    let cases: [(&Path, &[&str]); 4] = [
        (&f.sites, &[]),
        (&f.sites, &["--redirect-https"]),
        (&one_pack, &["--acme-domain", "a.example"]),
        (
            &one_pack,
            &["--acme-domain", "a.example", "--redirect-https"],
        ),
    ];
    for (site, flags) in cases {
        let _ = std::fs::remove_dir_all(&f.state);
        let early = "early-token_1";
        put(
            &layout::http01_dir(&f.state).join(early),
            key_authorization(early).as_bytes(),
        );
        let server = f.start(site, flags);
        let case = format!("{} {flags:?}", site.display());
        for host in ["a.example", "nosite.example", "a.example:80"] {
            let (status, head, body) = get_plain(&server, &challenge_path(early), host);
            assert_eq!(status, 200, "{case} {host}: {head}");
            assert_eq!(body, key_authorization(early), "{case}");
            assert!(head.contains("Content-Type: text/plain\r\n"), "{head}");
            assert!(head.contains("Cache-Control: no-store\r\n"), "{head}");
        }
        let unknown = get_plain(&server, &challenge_path("unknown"), "a.example");
        assert_eq!(unknown.0, 404, "{case}");
        let http01 = layout::http01_dir(&f.state);
        put(&http01.join(TOKEN), key_authorization(TOKEN).as_bytes());
        eventually("the new token answered", || {
            get_plain(&server, &challenge_path(TOKEN), "b.example").0 == 200
        });
        let (_, _, body) = get_plain(&server, &challenge_path(TOKEN), "b.example");
        assert_eq!(body, key_authorization(TOKEN), "{case}");
        std::fs::remove_file(http01.join(TOKEN)).unwrap();
        eventually("the removed token 404", || {
            get_plain(&server, &challenge_path(TOKEN), "b.example").0 == 404
        });
        let (status, head, _) = get_plain(&server, "/", "a.example");
        let expected = if flags.contains(&"--redirect-https") {
            308
        } else {
            200
        };
        assert_eq!(status, expected, "{case}: other paths as before: {head}");
    }
}

/// Takes any certificate and signature: rustls' own signature check
/// parses the certificate and refuses the critical `acmeIdentifier`
/// extension of a TLS-ALPN-01 one (a CA checks it, not a browser); the
/// tests compare the certificate served with the file instead.
#[derive(Debug)]
struct TrustAnything;

impl rustls::client::danger::ServerCertVerifier for TrustAnything {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// What a handshake ended with: the server's certificate, the protocol
/// agreed on, and the connection.
type Handshake = (
    Vec<u8>,
    Option<Vec<u8>>,
    rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
);

/// A TLS client for `name` offering `alpn`: the server's certificate and
/// the protocol agreed on, with the stream, or the handshake's error.
fn handshake(port: u16, name: &str, alpn: &[&[u8]]) -> Result<Handshake, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(TrustAnything))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let conn = rustls::ClientConnection::new(Arc::new(config), server_name).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| e.to_string())?;
    }
    let cert = stream.conn.peer_certificates().unwrap()[0].to_vec();
    let agreed = stream.conn.alpn_protocol().map(<[u8]>::to_vec);
    Ok((cert, agreed, stream))
}

/// A certificate for `names` and its key, PEM, and the certificate's DER;
/// with `acme_identifier`, the RFC 8737 extension a TLS-ALPN-01
/// certificate carries.
fn certificate(names: &[&str], acme_identifier: bool) -> (String, String, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    if acme_identifier {
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&[7; 32])];
    }
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

fn tls_port(server: &Server) -> u16 {
    server.tls_port.expect("a TLS listener")
}

/// TLS-ALPN-01: a ClientHello for a managed name offering only
/// `acme-tls/1` gets the challenge certificate once its file is there
/// (refused before), agrees on `acme-tls/1`, and the server closes the
/// connection after the handshake without serving anything.
#[test]
fn tls_alpn01_gets_the_challenge_certificate_and_the_connection_closes() {
    let f = Fixture::new();
    let server = f.start(&f.sites, &[]);
    let port = tls_port(&server);
    let acme = [&b"acme-tls/1"[..]];
    assert!(
        handshake(port, "a.example", &acme).is_err(),
        "no challenge certificate yet: refused"
    );
    let (cert, key, der) = certificate(&["a.example"], true);
    put(
        &layout::tls_alpn01_path(&f.state, "a.example"),
        format!("{cert}{key}").as_bytes(),
    );
    eventually("the challenge certificate served", || {
        handshake(port, "a.example", &acme).is_ok()
    });
    let (served, agreed, mut stream) = handshake(port, "a.example", &acme).unwrap();
    assert_eq!(served, der, "the challenge certificate");
    assert_eq!(agreed.as_deref(), Some(&b"acme-tls/1"[..]));
    // A request would not be answered: the connection ends.
    let _ = stream.write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n");
    let mut rest = Vec::new();
    let end = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "nothing served: {rest:?} ({end:?})");
    // The challenge certificate is for validations only: a browser's
    // ClientHello for the pending name is still refused.
    assert!(handshake(port, "a.example", &[b"h2", b"http/1.1"]).is_err());
    assert!(
        handshake(port, "b.example", &acme).is_err(),
        "no challenge for b"
    );
}

/// The managed pair of a name is served by SNI once the client renames
/// it into place (handshakes for the name are refused before); a user's
/// own pair beside the packs wins: its name is not managed, and a
/// managed pair for it is not even read.
#[test]
fn managed_pairs_are_served_once_they_arrive_and_a_users_own_pair_wins() {
    let f = Fixture::new();
    let (own_cert, own_key, own_der) = certificate(&["b.example"], false);
    std::fs::write(f.sites.join("b.example.crt"), own_cert).unwrap();
    std::fs::write(f.sites.join("b.example.key"), own_key).unwrap();
    let (cert_b, key_b, _) = certificate(&["b.example"], false);
    put(&layout::key_path(&f.state, "b.example"), key_b.as_bytes());
    put(&layout::cert_path(&f.state, "b.example"), cert_b.as_bytes());
    let server = f.start(&f.sites, &[]);
    assert!(
        server
            .stderr_text()
            .contains("b.example have their own certificates, not managed"),
        "{}",
        server.stderr_text()
    );
    let port = tls_port(&server);
    let h1 = [&b"http/1.1"[..]];
    assert_eq!(handshake(port, "b.example", &h1).unwrap().0, own_der);
    let refused = handshake(port, "a.example", &h1).err();
    let refused = refused.expect("a.example has no certificate yet: refused");
    assert!(
        refused.contains("AccessDenied"),
        "a clean refusal: {refused}"
    );

    let (cert_a, key_a, der_a) = certificate(&["a.example"], false);
    put(&layout::key_path(&f.state, "a.example"), key_a.as_bytes());
    put(&layout::cert_path(&f.state, "a.example"), cert_a.as_bytes());
    eventually("a.example's certificate served", || {
        handshake(port, "a.example", &h1).is_ok_and(|(der, ..)| der == der_a)
    });
    let (_, _, mut stream) = handshake(port, "a.example", &h1).unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let response = read_response(&mut stream, false).expect("a response");
    assert_eq!(response.status, 200);
    assert_eq!(handshake(port, "b.example", &h1).unwrap().0, own_der);
}

/// The ACME client process: started with the names, the challenges the
/// listeners allow (HTTP-01 first: no listener on 443 here) and the
/// shared flags; when it ends (until the `acme` subcommand is merged it
/// fails at once; else it is killed here) the server says so and serves
/// on.
#[test]
fn the_acme_client_is_started_with_its_arguments_and_its_end_stops_nothing() {
    let f = Fixture::new();
    let server = f.start(&f.sites, &["--acme-email", "ops@a.example"]);
    let log = server.stderr_text();
    let started = log
        .lines()
        .find_map(|l| {
            l.split_once("ACME: started the client (pid ")
                .map(|(_, r)| r)
        })
        .unwrap_or_else(|| panic!("no start line in {log}"));
    let (pid, command) = started.split_once("): kiln ").unwrap();
    let pid: i32 = pid.parse().unwrap();
    let state = f.state.to_str().unwrap();
    let expected = format!(
        "acme run --domain a.example --domain b.example --challenge http-01 \
         --challenge tls-alpn-01 --acme-email ops@a.example \
         --acme-ca https://127.0.0.1:9/directory --acme-dir {state}"
    );
    assert!(command.starts_with(&expected), "{command}");
    // While it runs, /proc shows the same arguments.
    if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
        let args: Vec<String> = cmdline
            .split(|&c| c == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(args[1..].join(" "), command, "/proc/{pid}/cmdline");
    }
    // SAFETY: a signal to the process the server started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    eventually("the client's end logged", || {
        server.stderr_text().contains(&format!(
            "the ACME client (pid {pid}) ended; serving on with the certificates there are"
        ))
    });
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "reaped, not left a zombie"
    );
    let (status, _, _) = get_plain(&server, "/", "a.example");
    assert_eq!(status, 200);
}

/// `/metrics` reads each managed name's status file at every scrape:
/// its certificate's expiry, and its last error with when it happened.
#[test]
fn metrics_show_each_names_expiry_and_last_error() {
    let f = Fixture::new();
    let server = f.start(&f.sites, &["--metrics", "127.0.0.1:0"]);
    // The sample lines as written: prometheus-parse misreads an escaped
    // quote in a label value, which an error message may hold.
    let scrape = || {
        let body = server.metrics();
        for name in [
            "kiln_acme_certificate_expiry_seconds",
            "kiln_acme_last_error_timestamp_seconds",
        ] {
            assert!(body.contains(&format!("# TYPE {name} gauge\n")), "{body}");
        }
        body.lines()
            .filter(|l| l.starts_with("kiln_acme_"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(scrape().is_empty(), "no status yet, no sample");
    let issued = layout::Status {
        name: "a.example".into(),
        ca: "https://127.0.0.1:9/directory".into(),
        not_after: Some(1_800_000_000),
        next_attempt: Some(1_790_000_000),
        last_error: None,
        last_error_at: None,
    };
    let failing = layout::Status {
        name: "b.example".into(),
        ca: issued.ca.clone(),
        not_after: None,
        next_attempt: Some(1_700_000_600),
        last_error: Some("order: 429 \"rate limited\"".into()),
        last_error_at: Some(1_700_000_000),
    };
    for status in [&issued, &failing] {
        put(
            &layout::status_path(&f.state, &status.name),
            status.to_json().as_bytes(),
        );
    }
    assert_eq!(
        scrape(),
        [
            r#"kiln_acme_certificate_expiry_seconds{name="a.example"} 1800000000"#,
            r#"kiln_acme_last_error_timestamp_seconds{name="b.example",error="order: 429 \"rate limited\""} 1700000000"#,
        ]
    );
}

/// Each misuse of the flags is refused at start with one line saying why.
#[test]
fn acme_flags_are_checked_at_start() {
    let f = Fixture::new();
    let (sites, pack) = (f.sites.to_str().unwrap(), f.pack());
    let pack = pack.to_str().unwrap();
    let state = f.state.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&[pack, "--acme-domain", "a.example"], "--acme"),
        (
            &[pack, "--acme-email", "a@b.example"],
            "--acme-email goes with --acme",
        ),
        (
            &[pack, "--acme"],
            "needs the names to obtain a certificate for",
        ),
        (&[pack, "--acme", "--acme-domain", "localhost"], "no dot"),
        (
            &[pack, "--acme", "--acme-domain", "192.0.2.1"],
            "IP address",
        ),
        (
            &[sites, "--acme", "--acme-domain", "a.example"],
            "a folder of sites gets",
        ),
        (
            &[
                pack,
                "--acme",
                "--acme-domain",
                "a.example",
                "--listen-tls",
                "127.0.0.1:0",
                "--tls-self-signed",
            ],
            "cannot be used with",
        ),
    ];
    for (args, why) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("serve")
            .args(args)
            .args(["--acme-dir", state, "--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started: {stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}
