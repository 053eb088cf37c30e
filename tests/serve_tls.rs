//! HTTPS: certificates chosen by SNI, bad pairs (and bad QUIC host keys)
//! refused at start with one line, certificates reloaded (a bad new pair
//! keeps the old one), the self-signed mode, protocol versions and ALPN,
//! `--redirect-https`, HSTS only on TLS, and a stalled handshake cut by the header deadline. (The
//! whole HTTP/1 suite also runs over TLS: `KILN_TEST_TLS=1`.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// A certificate for `names` and its key, as PEM files in `dir`.
fn write_pair(dir: &Path, stem: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2001, 1, 1);
        params.not_after = rcgen::date_time_ymd(2002, 1, 1);
    }
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.join(format!("{stem}.crt"));
    let key_path = dir.join(format!("{stem}.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

/// The DNS names of the certificate the server presented on `client`.
fn served_names(client: &Client) -> Vec<String> {
    let Client::Tls(s) = client else {
        panic!("not a TLS connection")
    };
    let der = &s.conn.peer_certificates().expect("a certificate")[0];
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    let san = cert.subject_alternative_name().unwrap().expect("SAN");
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
        .collect()
}

fn connect_tls(server: &Server, sni: &str, alpn: &[&[u8]]) -> Client {
    let tcp = TcpStream::connect(("127.0.0.1", server.tls_port.expect("a TLS port"))).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tls_client(tcp, sni, insecure_client_config(alpn))
}

fn get_over(client: &mut Client, path: &str) -> Response {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
    client.write_all(raw.as_bytes()).unwrap();
    read_response(client, false).expect("a response")
}

fn serve_with_pairs(dir: &Path, pairs: &[(PathBuf, PathBuf)], extra: &[&str]) -> Server {
    let pack = sample_pack(dir);
    let mut args: Vec<String> = vec![
        pack.to_str().unwrap().into(),
        "--threads".into(),
        "1".into(),
        "--listen-tls".into(),
        "127.0.0.1:0".into(),
    ];
    for (cert, key) in pairs {
        args.push("--tls-cert".into());
        args.push(cert.to_str().unwrap().into());
        args.push("--tls-key".into());
        args.push(key.to_str().unwrap().into());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(&args)
}

#[test]
fn certificates_are_chosen_by_sni() {
    let dir = tempfile::tempdir().unwrap();
    let pairs = [
        write_pair(dir.path(), "first", &["first.test"], false),
        write_pair(dir.path(), "wild", &["*.wild.test"], false),
        write_pair(dir.path(), "exact", &["www.wild.test", "exact.test"], false),
    ];
    let server = serve_with_pairs(dir.path(), &pairs, &[]);
    for (sni, expected) in [
        ("first.test", "first.test"),
        ("exact.test", "exact.test"),
        ("www.wild.test", "www.wild.test"),
        ("img.wild.test", "*.wild.test"),
        ("a.b.wild.test", "first.test"),
        ("unknown.test", "first.test"),
    ] {
        let mut c = connect_tls(&server, sni, &[b"http/1.1"]);
        assert!(
            served_names(&c).iter().any(|n| n == expected),
            "{sni}: {:?}",
            served_names(&c)
        );
        assert_eq!(get_over(&mut c, "/hello.txt").body, HELLO);
    }
}

/// Runs `kiln serve` with `args` and returns its exit status and stderr.
fn refused(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("serve")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_pairs_are_refused_at_start_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let pack = pack.to_str().unwrap();
    let (good_cert, good_key) = write_pair(dir.path(), "good", &["good.test"], false);
    let (old_cert, old_key) = write_pair(dir.path(), "old", &["old.test"], true);
    let (_, other_key) = write_pair(dir.path(), "other", &["other.test"], false);
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = dir.path().join("missing.pem");
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let cases: Vec<(Vec<String>, String, &str)> = vec![
        (
            vec![path(&old_cert), path(&old_key)],
            path(&old_cert),
            "expired",
        ),
        (
            vec![path(&good_cert), path(&other_key)],
            path(&other_key),
            "does not belong",
        ),
        (
            vec![path(&missing), path(&good_key)],
            path(&missing),
            "cannot read",
        ),
        (
            vec![path(&garbage), path(&good_key)],
            path(&garbage),
            "CERTIFICATE",
        ),
        (
            vec![path(&good_cert), path(&garbage)],
            path(&garbage),
            "private key",
        ),
    ];
    for (pair, names_file, reason) in cases {
        let (ok, stderr) = refused(&[
            pack,
            "--listen-tls",
            "127.0.0.1:0",
            "--tls-cert",
            &pair[0],
            "--tls-key",
            &pair[1],
        ]);
        assert!(!ok, "{pair:?} was accepted");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(lines[0].contains(&names_file), "{stderr}");
        assert!(lines[0].contains(reason), "{reason}: {stderr}");
    }
    let (ok, stderr) = refused(&[pack, "--listen-tls", "127.0.0.1:0"]);
    assert!(!ok && stderr.contains("--tls-cert"), "{stderr}");
    let (ok, stderr) = refused(&[
        pack,
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-cert",
        &path(&good_cert),
    ]);
    assert!(!ok && stderr.contains("pairs"), "{stderr}");
}

/// `--quic-host-key` and `--tls-ticket-keys` read their secret by the same
/// rules (`serve::secret`): each flag is held to them.
#[test]
fn bad_secret_key_files_are_refused_at_start_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let short = dir.path().join("short.key");
    std::fs::write(&short, [7u8; 31]).unwrap();
    let long = dir.path().join("long.key");
    std::fs::write(&long, [7u8; 4097]).unwrap();
    let missing = dir.path().join("missing.key");
    let folder = dir.path().to_path_buf();
    for flag in ["--quic-host-key", "--tls-ticket-keys"] {
        for (file, reason) in [
            (&short, "31 bytes, fewer than the 32 a key needs"),
            (&long, "more than 4096 bytes"),
            (&missing, "cannot read"),
            (&folder, "cannot read"),
        ] {
            let (ok, stderr) = refused(&[
                pack.to_str().unwrap(),
                "--listen-tls",
                "127.0.0.1:0",
                "--tls-self-signed",
                flag,
                file.to_str().unwrap(),
            ]);
            assert!(!ok, "{flag} {file:?} was accepted");
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 1, "one line: {stderr}");
            let named = format!("kiln: error: {flag} {}: ", file.display());
            assert!(lines[0].starts_with(&named), "{stderr}");
            assert!(lines[0].contains(reason), "{reason}: {stderr}");
        }
    }
    // The keys are HTTP/3's: a key with HTTP/3 off is a mistake.
    let (ok, stderr) = refused(&[
        pack.to_str().unwrap(),
        "--no-http3",
        "--quic-host-key",
        short.to_str().unwrap(),
    ]);
    assert!(!ok && stderr.contains("--no-http3"), "{stderr}");
}

/// Waits until a new connection is served `expected`.
fn wait_for_certificate(server: &Server, expected: &str) {
    let start = Instant::now();
    loop {
        let c = connect_tls(server, "anything.test", &[b"http/1.1"]);
        if served_names(&c).iter().any(|n| n == expected) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still not {expected}: {}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn certificates_reload_and_a_bad_new_pair_keeps_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    std::fs::create_dir(&live).unwrap();
    let staging = dir.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    let (cert, key) = write_pair(&live, "site", &["one.test"], false);
    let server = serve_with_pairs(dir.path(), &[(cert.clone(), key.clone())], &[]);
    let mut kept = connect_tls(&server, "one.test", &[b"http/1.1"]);
    assert_eq!(get_over(&mut kept, "/hello.txt").body, HELLO);

    // Replaced by rename, key first then certificate, as a deploy does.
    let (new_cert, new_key) = write_pair(&staging, "site", &["two.test"], false);
    std::fs::rename(&new_key, &key).unwrap();
    std::fs::rename(&new_cert, &cert).unwrap();
    wait_for_certificate(&server, "two.test");
    // The connection opened before keeps its session.
    assert_eq!(get_over(&mut kept, "/hello.txt").body, HELLO);

    // A broken pair (an expired certificate) is refused; SIGHUP too.
    let (old_cert, old_key) = write_pair(&staging, "old", &["three.test"], true);
    std::fs::rename(&old_key, &key).unwrap();
    std::fs::rename(&old_cert, &cert).unwrap();
    server.signal(libc::SIGHUP);
    let start = Instant::now();
    while !server
        .stderr_text()
        .contains("reloaded 0 of 1 TLS certificate pairs; 1 failed (above)")
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The failure is not followed by a line that reads as a success.
    let log = server.stderr_text();
    let failed = log.find("still serving the previous certificate").unwrap();
    assert!(
        log[..failed].contains("reloaded TLS certificates (1 pairs)"),
        "{log}"
    );
    assert!(
        !log[failed..].contains("reloaded TLS certificates"),
        "{log}"
    );
    let c = connect_tls(&server, "two.test", &[b"http/1.1"]);
    assert!(served_names(&c).iter().any(|n| n == "two.test"));
}

#[test]
fn self_signed_mode_prints_the_fingerprint_it_serves_and_writes_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let exported = dir.path().join("kiln-ca.pem");
    let server = Server::start(&[
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
        "--tls-self-signed-out",
        exported.to_str().unwrap(),
    ]);
    let log = server.stderr_text();
    let first = log
        .lines()
        .find(|l| l.starts_with("kiln: self-signed certificate for "))
        .unwrap_or_else(|| panic!("{log}"));
    let fingerprint = first
        .split("SHA-256 ")
        .nth(1)
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{first}"));
    assert!(first.contains("localhost"), "{first}");
    assert!(
        log.contains(&format!(
            "kiln: self-signed certificate written to {}",
            exported.display()
        )),
        "{log}"
    );
    let port = server.tls_port.unwrap();
    // A client told to trust the file verifies the server with it.
    let url = format!("https://localhost:{port}/hello.txt");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&exported)
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1"), &url])
        .output()
        .expect("curl");
    assert_eq!(
        out.stdout,
        HELLO,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its subject says what it is.
    let subject = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-in"])
        .arg(&exported)
        .output()
        .expect("openssl");
    let subject = String::from_utf8_lossy(&subject.stdout);
    assert!(
        subject.contains("kiln self-signed for localhost 127.0.0.1"),
        "{subject}"
    );
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let Client::Tls(s) = tls_client(tcp, "localhost", insecure_client_config(&[])) else {
        unreachable!()
    };
    let der = &s.conn.peer_certificates().unwrap()[0];
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    let hex: Vec<String> = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(fingerprint, hex.join(":"));
}

#[test]
fn tls_1_3_and_1_2_with_alpn_h2_then_http_1_1() {
    let dir = tempfile::tempdir().unwrap();
    let pair = write_pair(dir.path(), "site", &["site.test"], false);
    let server = serve_with_pairs(dir.path(), &[pair], &[]);
    for (version, name) in [
        (&rustls::version::TLS13, "TLSv1_3"),
        (&rustls::version::TLS12, "TLSv1_2"),
    ] {
        let tcp = TcpStream::connect(("127.0.0.1", server.tls_port.unwrap())).unwrap();
        let config = insecure_client_config_for(&[version], &[b"http/1.1"]);
        let mut c = tls_client(tcp, "site.test", config);
        let Client::Tls(s) = &c else { unreachable!() };
        assert_eq!(format!("{:?}", s.conn.protocol_version().unwrap()), name);
        assert_eq!(s.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        // Offered both, kiln prefers HTTP/2 (tests/http2.rs speaks it).
        let tcp = TcpStream::connect(("127.0.0.1", server.tls_port.unwrap())).unwrap();
        let config = insecure_client_config_for(&[version], &[b"http/1.1", b"h2"]);
        let Client::Tls(s) = tls_client(tcp, "site.test", config) else {
            unreachable!()
        };
        assert_eq!(s.conn.alpn_protocol(), Some(&b"h2"[..]), "{name}");
        let suite = format!("{:?}", s.conn.negotiated_cipher_suite().unwrap().suite());
        assert!(
            suite.contains("GCM") || suite.contains("CHACHA20_POLY1305"),
            "{suite}"
        );
        let r = get_over(&mut c, "/big.bin");
        assert_eq!(r.body, big_body(), "{name}");
    }
}

#[test]
fn redirect_https_sends_cleartext_to_the_tls_port_except_acme() {
    let dir = tempfile::tempdir().unwrap();
    let pair = write_pair(dir.path(), "site", &["site.test"], false);
    let server = serve_with_pairs(dir.path(), &[pair], &["--redirect-https", "--hsts"]);
    let tls_port = server.tls_port.unwrap();
    let cases = [
        (
            "/hello.txt?x=1",
            "example.com",
            format!("https://example.com:{tls_port}/hello.txt?x=1"),
        ),
        (
            "/",
            "example.com:8080",
            format!("https://example.com:{tls_port}/"),
        ),
        ("/a", "[::1]:80", format!("https://[::1]:{tls_port}/a")),
    ];
    for (path, host, location) in cases {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let mut c = server.connect_plain();
        c.write_all(raw.as_bytes()).unwrap();
        let r = read_response(&mut c, false).unwrap();
        assert_eq!(r.status, 308, "{}", r.head);
        assert_eq!(r.header("Location").as_deref(), Some(location.as_str()));
        assert_eq!(
            r.header("Strict-Transport-Security"),
            None,
            "no HSTS over http"
        );
    }
    // ACME challenges are still answered from the pack (a 404 here: the
    // sample site has none), not redirected.
    let mut c = server.connect_plain();
    c.write_all(
        b"GET /.well-known/acme-challenge/token HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut c, false).unwrap().status, 404);
    // Over TLS the site is served, with HSTS.
    let mut c = connect_tls(&server, "site.test", &[b"http/1.1"]);
    let r = get_over(&mut c, "/hello.txt");
    assert_eq!(r.body, HELLO);
    assert!(
        r.header("Strict-Transport-Security").is_some(),
        "{}",
        r.head
    );
}

#[test]
fn a_stalled_handshake_is_cut_by_the_header_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let pair = write_pair(dir.path(), "site", &["site.test"], false);
    let server = serve_with_pairs(dir.path(), &[pair], &["--header-timeout", "1"]);
    let mut tcp = TcpStream::connect(("127.0.0.1", server.tls_port.unwrap())).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The first bytes of a ClientHello record, then nothing.
    tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    let start = Instant::now();
    let mut rest = Vec::new();
    let r = tcp.read_to_end(&mut rest);
    assert!(
        r.is_ok() || start.elapsed() < Duration::from_secs(9),
        "{r:?}"
    );
    assert!(rest.is_empty(), "no answer to half a handshake: {rest:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
    // Garbage instead of a handshake gets an alert and a close.
    let mut tcp = TcpStream::connect(("127.0.0.1", server.tls_port.unwrap())).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
    assert_eq!(
        answer.first(),
        Some(&0x15),
        "a TLS alert record: {answer:?}"
    );
}

/// A ClientHello record offering TLS 1.0 or 1.1 only, as an old client
/// sends it: `legacy_version`, two CBC suites, SNI, and for `listed` a
/// supported_versions list too.
fn old_client_hello(legacy_version: u16, listed: &[u16]) -> Vec<u8> {
    let mut extensions = vec![0, 0, 0, 14, 0, 12, 0, 0, 9];
    extensions.extend_from_slice(b"site.test");
    if !listed.is_empty() {
        extensions.extend_from_slice(&[0, 43, 0, 1 + 2 * listed.len() as u8]);
        extensions.push(2 * listed.len() as u8);
        for v in listed {
            extensions.extend_from_slice(&v.to_be_bytes());
        }
    }
    let mut body = legacy_version.to_be_bytes().to_vec();
    body.extend_from_slice(&[0x42; 32]);
    body.extend_from_slice(&[0, 0, 4, 0x00, 0x2f, 0x00, 0x35, 1, 0]);
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend_from_slice(&extensions);
    let mut record = vec![0x16, 3, 1];
    record.extend_from_slice(&(body.len() as u16 + 4).to_be_bytes());
    record.extend_from_slice(&[1, 0]);
    record.extend_from_slice(&(body.len() as u16).to_be_bytes());
    record.extend_from_slice(&body);
    record
}

#[test]
fn tls_1_0_and_1_1_clients_get_the_protocol_version_alert() {
    let dir = tempfile::tempdir().unwrap();
    let pair = write_pair(dir.path(), "site", &["site.test"], false);
    let server = serve_with_pairs(dir.path(), &[pair], &[]);
    for (hello, record_version, split) in [
        (old_client_hello(0x0301, &[]), 0x0301u16, false),
        (old_client_hello(0x0302, &[]), 0x0302, true),
        (old_client_hello(0x0303, &[0x0302, 0x0301]), 0x0303, false),
    ] {
        let mut tcp = TcpStream::connect(("127.0.0.1", server.tls_port.unwrap())).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.set_nodelay(true).unwrap();
        if split {
            // The hello in pieces: judged once its record is whole.
            for piece in hello.chunks(7) {
                tcp.write_all(piece).unwrap();
            }
        } else {
            tcp.write_all(&hello).unwrap();
        }
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer).unwrap();
        let [major, minor] = record_version.to_be_bytes();
        // A fatal protocol_version (70) alert, not handshake_failure (40),
        // and the connection closed after it.
        assert_eq!(answer, [0x15, major, minor, 0, 2, 2, 70]);
    }
    // TLS 1.2 and 1.3 clients still get through.
    let mut client = connect_tls(&server, "site.test", &[]);
    assert_eq!(get_over(&mut client, "/hello.txt").status, 200);
}
