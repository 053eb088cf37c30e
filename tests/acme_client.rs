//! `kiln acme`, the ACME client, against a real CA: Pebble, Let's
//! Encrypt's test CA, with `pebble-challtestsrv` as its DNS (every name is
//! 127.0.0.1), all on loopback (`common/pebble.rs`). The server half is not used: each test
//! answers the challenges from the state folder itself, as `kiln serve`
//! does (a small HTTP responder for HTTP-01, a rustls server for
//! TLS-ALPN-01), on the ports Pebble validates on.
//!
//! Each test has its own Pebble (it starts in milliseconds), so they run
//! in parallel. Pebble refuses 5 % of nonces, as it does by default: the
//! client must cope. The tests skip, saying so, where Pebble is not
//! installed (`./test` installs it with `go install`).

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::pebble::*;
use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

const KILN: &str = env!("CARGO_BIN_EXE_kiln");
/// Answers HTTP-01 from `DIR/challenges/http-01/`, as the server does;
/// while `hold` is set, requests wait (an order caught in flight).
fn http01_responder(dir: &Path, hold: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tokens = dir.join("challenges/http-01");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let tokens = tokens.clone();
            let hold = Arc::clone(&hold);
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let start = Instant::now();
                while hold.load(Ordering::SeqCst) && start.elapsed() < PATIENCE {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let head = String::from_utf8_lossy(&head);
                let target = head.split(' ').nth(1).unwrap_or("");
                let body = target
                    .strip_prefix("/.well-known/acme-challenge/")
                    .filter(|t| !t.contains('/') && !t.is_empty())
                    .and_then(|token| std::fs::read(tokens.join(token)).ok());
                let response = match body {
                    Some(body) => [
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes(),
                        body,
                    ]
                    .concat(),
                    None => {
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = stream.write_all(&response);
            });
        }
    });
    port
}

/// The TLS-ALPN-01 certificates of `DIR/challenges/tls-alpn-01/`, for a
/// ClientHello with ALPN `acme-tls/1`, as the server chooses them.
#[derive(Debug)]
struct AlpnChallenges(PathBuf);

impl ResolvesServerCert for AlpnChallenges {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if !hello.alpn()?.any(|p| p == b"acme-tls/1") {
            return None;
        }
        let pem = std::fs::read(self.0.join(format!("{}.pem", hello.server_name()?))).ok()?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        let key = PrivateKeyDer::from_pem_slice(&pem).ok()?;
        let key = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key).ok()?;
        Some(Arc::new(CertifiedKey::new(chain, key)))
    }
}

/// Answers TLS-ALPN-01 from `DIR/challenges/tls-alpn-01/`: the handshake
/// only, then closes.
fn tls_alpn01_responder(dir: &Path) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(AlpnChallenges(dir.join("challenges/tls-alpn-01"))));
    config.alpn_protocols = vec![b"acme-tls/1".to_vec()];
    let config = Arc::new(config);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let mut conn = rustls::ServerConnection::new(config).unwrap();
                while conn.is_handshaking() {
                    if conn.complete_io(&mut stream).is_err() {
                        return;
                    }
                }
                conn.send_close_notify();
                let _ = conn.complete_io(&mut stream);
            });
        }
    });
    port
}

/// Which challenge answers a test provides.
#[derive(Clone, Copy, PartialEq)]
enum Answers {
    Both,
    Http01Only,
    TlsAlpn01Only,
}

/// A CA and the responders for one state folder.
struct Setup {
    _work: tempfile::TempDir,
    dir: PathBuf,
    ca: Ca,
    hold: Arc<AtomicBool>,
}

fn setup(tools: &Tools, answers: Answers, validity: u64) -> Setup {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("acme");
    let hold = Arc::new(AtomicBool::new(false));
    // A port where nothing answers stands for the listener a server does
    // not have.
    let http_port = match answers {
        Answers::TlsAlpn01Only => free_port(),
        _ => http01_responder(&dir, Arc::clone(&hold)),
    };
    let tls_port = match answers {
        Answers::Http01Only => free_port(),
        _ => tls_alpn01_responder(&dir),
    };
    let ca = start_ca(tools, work.path(), http_port, tls_port, validity);
    Setup {
        _work: work,
        dir,
        ca,
        hold,
    }
}

/// `kiln acme run`, its stderr gathered.
struct Client {
    process: Process,
    log: Log,
}

fn start_client(dir: &Path, url: &str, root: &Path, names: &[&str], challenges: &[&str]) -> Client {
    let mut command = Command::new(KILN);
    command.args(["acme", "run", "--acme-ca", url]);
    command.arg("--acme-ca-root").arg(root);
    command.arg("--acme-dir").arg(dir);
    command.args(["--acme-email", "tests@kiln.test"]);
    for name in names {
        command.args(["--domain", name]);
    }
    for challenge in challenges {
        command.args(["--challenge", challenge]);
    }
    let mut child = command
        .env_remove("KILN_USER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Log::of(child.stderr.take().unwrap());
    Client {
        process: Process(child),
        log,
    }
}

impl Setup {
    fn client(&self, names: &[&str], challenges: &[&str]) -> Client {
        start_client(&self.dir, &self.ca.url, &self.ca.root, names, challenges)
    }
}

/// The mode bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The files in a folder of the state folder (none before it is made).
fn files_in(dir: &Path, sub: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// SIGTERM to a process, then its exit status.
fn terminate(process: &mut Process) -> std::process::ExitStatus {
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(process.0.id() as libc::pid_t, libc::SIGTERM) };
    let start = Instant::now();
    loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < PATIENCE, "the supervisor ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_names_are_issued_as_the_layout_says_and_the_account_is_reused() {
    let Some(tools) = tools() else { return };
    let setup = setup(&tools, Answers::Both, 90 * 86400);
    let dir = &setup.dir;
    let mut client = setup.client(&["a.kiln.test", "B.kiln.test."], &[]);
    client.log.wait_for("the renewal plans", |t| {
        t.matches("next look in").count() >= 2
    });
    for name in ["a.kiln.test", "b.kiln.test"] {
        // The plan is logged before the status file says it.
        wait_until(&format!("renewal plan of {name} in its status"), || {
            status(dir, name).is_some_and(|s| {
                s["next_attempt"]
                    .as_i64()
                    .is_some_and(|t| t > unix_now() + 86400)
            })
        });
        let (_, not_after) = pair(dir, name);
        let s = status(dir, name).unwrap();
        assert_eq!(s["name"], name);
        assert_eq!(s["ca"], setup.ca.url.as_str());
        assert_eq!(s["not_after"], not_after);
        assert!(s["last_error"].is_null(), "{s}");
        // 90 days: renewed in the CA's window (ARI), weeks from now.
        assert!(
            s["next_attempt"].as_i64().unwrap() > unix_now() + 86400,
            "{s}"
        );
        assert_eq!(mode(&dir.join(format!("certs/{name}.key"))), 0o600);
    }
    assert_eq!(mode(dir), 0o700);
    let account = std::fs::read_dir(dir.join("accounts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<Vec<_>>();
    assert_eq!(account.len(), 1, "{account:?}");
    assert_eq!(mode(&account[0]), 0o600);
    // The challenges are removed once answered; no lock is left.
    assert_eq!(files_in(dir, "challenges/http-01"), Vec::<String>::new());
    assert_eq!(
        files_in(dir, "challenges/tls-alpn-01"),
        Vec::<String>::new()
    );
    assert_eq!(files_in(dir, "locks"), Vec::<String>::new());
    assert!(terminate(&mut client.process).success());

    let table = Command::new(KILN)
        .args(["acme", "status", "--acme-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(table.status.success());
    let table = String::from_utf8(table.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].starts_with("a.kiln.test ") && lines[1].ends_with(" -"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("b.kiln.test ") && lines[2].ends_with(" -"),
        "{table}"
    );

    // A second run, with one more name: the same account, no new one.
    let credentials = std::fs::read(&account[0]).unwrap();
    let second = setup.client(&["a.kiln.test", "b.kiln.test", "c.kiln.test"], &[]);
    wait_for_certificate(dir, "c.kiln.test");
    second.log.wait_for("the account", |t| t.contains("(from "));
    assert!(
        !second.log.text().contains("created account"),
        "{}",
        second.log.text()
    );
    assert_eq!(std::fs::read(&account[0]).unwrap(), credentials);
    assert_eq!(
        setup.ca.log.count("accounts in memory"),
        1,
        "{}",
        setup.ca.log.text()
    );
    assert_eq!(
        setup.ca.log.count("Issued certificate serial"),
        3,
        "{}",
        setup.ca.log.text()
    );
}

#[test]
fn http01_alone_and_tls_alpn01_alone_each_get_a_certificate_falling_back_from_the_other() {
    let Some(tools) = tools() else { return };
    let cases = [
        (
            Answers::Http01Only,
            ["tls-alpn-01", "http-01"],
            "tls-alpn-01: ",
        ),
        (
            Answers::TlsAlpn01Only,
            ["http-01", "tls-alpn-01"],
            "http-01: ",
        ),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|(answers, order, _)| {
            let setup = setup(&tools, *answers, 90 * 86400);
            let client = setup.client(&["solo.kiln.test"], order);
            (setup, client)
        })
        .collect();
    for ((setup, client), (_, order, failed_first)) in runs.iter().zip(&cases) {
        wait_for_certificate(&setup.dir, "solo.kiln.test");
        pair(&setup.dir, "solo.kiln.test");
        let log = client.log.text();
        assert!(
            log.contains(&format!("solo.kiln.test: {failed_first}"))
                && log.contains(&format!("trying {}", order[1])),
            "no fallback from {}: {log}",
            order[0]
        );
    }
}

#[test]
fn a_worker_killed_mid_order_is_restarted_and_gets_the_certificate() {
    let Some(tools) = tools() else { return };
    let setup = setup(&tools, Answers::Http01Only, 90 * 86400);
    setup.hold.store(true, Ordering::SeqCst);
    let client = setup.client(&["killed.kiln.test"], &["http-01"]);
    // The order is in flight: its token is written, the CA is fetching it.
    wait_until("a token", || {
        !files_in(&setup.dir, "challenges/http-01").is_empty()
    });
    let text = client.log.text();
    let pid: i32 = text
        .split("acme: worker ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no worker pid in {text}"));
    // SAFETY: a signal to the worker, a child of the test's child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    client.log.wait_for("the restart", |t| {
        t.contains(&format!("worker {pid} ended (signal: 9")) && t.matches(" started").count() >= 2
    });
    setup.hold.store(false, Ordering::SeqCst);
    wait_for_certificate(&setup.dir, "killed.kiln.test");
    pair(&setup.dir, "killed.kiln.test");
    assert!(
        client.log.text().contains("took over the lock"),
        "{}",
        client.log.text()
    );
}

#[test]
fn an_unreachable_ca_is_retried_after_a_minute_with_the_error_in_the_status() {
    // No CA at all: nothing listens on the port of its URL.
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("acme");
    let root = work.path().join("root.pem");
    unused_root(&root);
    let url = format!("https://127.0.0.1:{}/dir", free_port());
    let client = start_client(&dir, &url, &root, &["down.kiln.test"], &[]);
    wait_until("a status with the error", || {
        status(&dir, "down.kiln.test").is_some_and(|s| s["last_error"].is_string())
    });
    let s = status(&dir, "down.kiln.test").unwrap();
    let failed_at = s["last_error_at"].as_i64().unwrap();
    assert!(s["not_after"].is_null(), "{s}");
    assert!(s["next_attempt"].as_i64().unwrap() >= failed_at + 60, "{s}");
    client.log.wait_for("the failure's line", |t| {
        t.contains("attempt 1 failed, next in 60 s")
    });
    // No tight loop: a second look after a while finds no other attempt.
    std::thread::sleep(Duration::from_secs(2));
    let log = client.log.text();
    assert_eq!(log.matches("failed, next in").count(), 1, "{log}");
    let table = Command::new(KILN)
        .args(["acme", "status", "--acme-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(
        table.contains("down.kiln.test") && table.contains("new account"),
        "{table}"
    );
}

#[test]
fn two_clients_on_one_state_folder_order_each_name_once() {
    let Some(tools) = tools() else { return };
    let setup = setup(&tools, Answers::Both, 90 * 86400);
    let names = ["one.kiln.test", "two.kiln.test"];
    let clients = [setup.client(&names, &[]), setup.client(&names, &[])];
    for name in names {
        wait_for_certificate(&setup.dir, name);
    }
    // Both have looked at both names since they were issued.
    for client in &clients {
        client.log.wait_for("both names settled", |t| {
            names
                .iter()
                .all(|n| t.contains(&format!("{n}: certificate valid until")))
        });
    }
    let obtained: usize = clients
        .iter()
        .map(|c| c.log.count("certificate obtained"))
        .sum();
    assert_eq!(obtained, 2);
    assert_eq!(
        setup.ca.log.count("Added order"),
        2,
        "{}",
        setup.ca.log.text()
    );
    assert_eq!(setup.ca.log.count("Issued certificate serial"), 2);
    // One account file, whichever client created it first.
    assert_eq!(files_in(&setup.dir, "accounts").len(), 1);
}

#[test]
fn renewal_follows_the_cas_window_and_replaces_the_certificate() {
    let Some(tools) = tools() else { return };
    // Twenty-second certificates: Pebble's suggested window is their
    // whole life, so the renewal comes within it (at the latest with 2 s
    // left, a tenth of it).
    let setup = setup(&tools, Answers::Both, 20);
    let client = setup.client(&["renew.kiln.test"], &[]);
    wait_for_certificate(&setup.dir, "renew.kiln.test");
    let first = serial(&setup.dir, "renew.kiln.test").unwrap();
    wait_until("a renewed certificate", || {
        serial(&setup.dir, "renew.kiln.test").is_some_and(|s| s != first)
    });
    let log = client.log.text();
    assert!(log.contains("(ARI)"), "{log}");
    assert!(log.contains(", replacing "), "{log}");
    assert!(
        setup.ca.log.text().contains("is a replacement of"),
        "{}",
        setup.ca.log.text()
    );
}

/// A self-signed root for a CA that is never reached.
fn unused_root(path: &Path) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["ca.kiln.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(path, cert.pem()).unwrap();
}

/// A field of `/proc/PID/status`.
fn proc_status(pid: u32, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
        .trim()
        .to_owned()
}

/// Whether process `pid` is gone (or a zombie no one reaped).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z'))
    })
}

#[test]
fn the_worker_runs_sandboxed_as_the_user_given_and_both_stop_with_the_parent() {
    // SAFETY: a plain getter.
    let as_root = unsafe { libc::geteuid() } == 0;
    let work = tempfile::tempdir().unwrap();
    // The user switched to must reach the state folder and the root.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Its parent is made too, passable (as /var/lib/kiln for the default).
    let dir = work.path().join("lib/kiln/acme");
    let root = work.path().join("root.pem");
    unused_root(&root);
    let url = format!("https://127.0.0.1:{}/dir", free_port());
    // The parent, a shell, says the supervisor's pid and waits.
    let user = if as_root {
        "--user=nobody"
    } else {
        "--acme-email=tests@kiln.test"
    };
    let mut parent = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" acme run --domain user.kiln.test --acme-ca "$1" --acme-ca-root "$2" --acme-dir "$3" "$4" & echo $!; wait"#)
        .args([KILN.as_ref(), url.as_ref(), root.as_os_str(), dir.as_os_str(), user.as_ref()])
        .env_remove("KILN_USER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Log::of(parent.stderr.take().unwrap());
    let mut line = String::new();
    BufReader::new(parent.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let supervisor: u32 = line.trim().parse().unwrap();
    let mut parent = Process(parent);
    // The worker wrote its status: it can write the state folder.
    wait_until("the status", || {
        status(&dir, "user.kiln.test").is_some_and(|s| s["last_error"].is_string())
    });
    let text = log.text();
    let worker: u32 = text
        .split("acme: worker ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no worker pid in {text}"));
    assert!(text.contains("Landlock "), "{text}");
    assert_eq!(proc_status(worker, "SigBlk"), "0000000000000000");
    assert_eq!(proc_status(worker, "NoNewPrivs"), "1");
    assert_eq!(proc_status(worker, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(worker, "CapPrm"), "0000000000000000");
    assert_eq!(proc_status(supervisor, "CapEff"), "0000000000000000");
    if as_root {
        let nobody = proc_status(worker, "Uid");
        assert!(
            nobody.split_whitespace().all(|id| id == "65534"),
            "{nobody}"
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&dir).unwrap()),
            65534
        );
    }
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&work.path().join("lib/kiln")), 0o755);
    // The parent dies: the supervisor stops, and its worker with it.
    let _ = parent.0.kill();
    let _ = parent.0.wait();
    wait_until("the supervisor's end", || gone(supervisor));
    wait_until("the worker's end", || gone(worker));
}

/// A CA that answers everything with 429 and `Retry-After: 7200`, over
/// HTTPS with a certificate from `pki`.
fn rate_limiting_ca(pki: &Pki) -> u16 {
    let chain = CertificateDer::pem_file_iter(&pki.cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&pki.key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let body = r#"{"type":"urn:ietf:params:acme:error:rateLimited","detail":"slow down","status":429}"#;
            let _ = write!(
                tls,
                "HTTP/1.1 429 Too Many Requests\r\nretry-after: 7200\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    port
}

#[test]
fn a_ca_answering_429_is_left_alone_as_long_as_its_retry_after_says() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("acme");
    let pki = pki(work.path());
    let port = rate_limiting_ca(&pki);
    let url = format!("https://127.0.0.1:{port}/dir");
    let client = start_client(&dir, &url, &pki.root, &["busy.kiln.test"], &[]);
    wait_until("a status with the error", || {
        status(&dir, "busy.kiln.test").is_some_and(|s| s["last_error"].is_string())
    });
    let s = status(&dir, "busy.kiln.test").unwrap();
    let failed_at = s["last_error_at"].as_i64().unwrap();
    // Two hours, not the first failure's minute.
    let wait = s["next_attempt"].as_i64().unwrap() - failed_at;
    assert!((7190..=7200).contains(&wait), "{s}");
    client.log.wait_for("the failure's line", |t| {
        t.contains("attempt 1 failed, next in 71")
    });
}

/// `--acme-ca-root` in a folder only root may enter (root's home): read
/// before the switch to `nobody`, so the worker, `nobody` in its sandbox,
/// still trusts it, and talks to the CA (here one that answers 429)
/// instead of failing every attempt on the file.
#[test]
fn a_ca_root_only_root_can_read_is_trusted_by_a_worker_that_is_not_root() {
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the switch from root needs the tests to run as root");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = work.path().join("root-home");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let pki = pki(&private);
    let port = rate_limiting_ca(&pki);
    let url = format!("https://127.0.0.1:{port}/dir");
    let dir = work.path().join("acme");
    let mut child = Command::new(KILN)
        .args([
            "acme",
            "run",
            "--domain",
            "busy.kiln.test",
            "--user",
            "nobody",
        ])
        .args(["--acme-ca", &url])
        .arg("--acme-ca-root")
        .arg(&pki.root)
        .arg("--acme-dir")
        .arg(&dir)
        .env_remove("KILN_USER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Log::of(child.stderr.take().unwrap());
    let _process = Process(child);
    wait_until("a status with the error", || {
        status(&dir, "busy.kiln.test").is_some_and(|s| s["last_error"].is_string())
    });
    // The CA's Retry-After came back over TLS checked against the root.
    let s = status(&dir, "busy.kiln.test").unwrap();
    let wait = s["next_attempt"].as_i64().unwrap() - s["last_error_at"].as_i64().unwrap();
    assert!((7190..=7200).contains(&wait), "{s}");
    let text = log.text();
    assert!(!text.contains("Permission denied"), "{text}");
    assert!(text.contains("uid 65534"), "the worker is nobody: {text}");
}
