//! Many sites from one folder: `kiln serve SITES/` with `HOST.pack` per
//! host and `_default.pack` for the rest. Requests go to the site of their
//! host (without case, port or trailing dot; the authority of an
//! absolute-form target first), several hosts on one connection each get
//! their own site, a host no site serves gets 421 without a default, and
//! each site is added, replaced and removed on its own while the others
//! keep serving; certificates beside the packs are chosen by SNI and
//! reloaded pair by pair; a change lost to an overflowed inotify queue is
//! caught by reloading everything; where inotify sees nothing (refused
//! here, as a network filesystem never reports another machine's writes),
//! `--poll` finds each change, and says nothing when nothing changed.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// A folder with `a.example`, `b.example` and (with `default`) a
/// `_default` site, each saying its name at `/version.txt`.
fn folder(dir: &Path, default: bool) {
    version_pack(&dir.join("a.example.pack"), "a");
    version_pack(&dir.join("b.example.pack"), "b");
    if default {
        version_pack(&dir.join("_default.pack"), "default");
    }
}

/// `GET target` with `host` (no Host line when `None`): status and body.
fn ask(server: &Server, target: &str, host: Option<&str>) -> (u16, String) {
    let host_line = host.map_or(String::new(), |h| format!("Host: {h}\r\n"));
    let version = if host.is_some() { "1.1" } else { "1.0" };
    let mut s = server.connect();
    write!(
        s,
        "GET {target} HTTP/{version}\r\n{host_line}Connection: close\r\n\r\n"
    )
    .unwrap();
    let r = read_response(&mut s, false).expect("a response");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

fn version_of(server: &Server, host: &str) -> String {
    let (status, body) = ask(server, "/version.txt", Some(host));
    format!("{status} {body}")
}

/// Waits (bounded) until `host` answers `want` ("200 a").
fn wait_for(server: &Server, host: &str, want: &str) {
    let start = Instant::now();
    loop {
        let got = version_of(server, host);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{host} still answers {got:?}, not {want:?}; stderr:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for_log(server: &Server, text: &str) {
    let start = Instant::now();
    while !server.stderr_text().contains(text) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no {text:?} in:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn requests_go_to_the_site_of_their_host() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = Server::start(&[dir.path().to_str().unwrap()]);
    assert!(
        server.startup.contains("serving 3 sites from"),
        "{}",
        server.startup
    );
    for (host, site) in [
        ("a.example", "a"),
        ("A.Example", "a"),
        ("a.example:8080", "a"),
        ("a.example.", "a"),
        ("B.EXAMPLE.:443", "b"),
        ("c.example", "default"),
        ("127.0.0.1", "default"),
        ("[::1]:80", "default"),
        // Longer than any host name: no site's, so the default's.
        (&"x".repeat(300), "default"),
    ] {
        assert_eq!(version_of(&server, host), format!("200 {site}"), "{host}");
    }
    // HTTP/1.0 without Host: the default site.
    assert_eq!(ask(&server, "/version.txt", None), (200, "default".into()));
    // The authority of an absolute-form target wins over Host.
    assert_eq!(
        ask(&server, "http://b.example/version.txt", Some("a.example")),
        (200, "b".into())
    );
}

#[test]
fn bad_host_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = Server::start(&[dir.path().to_str().unwrap()]);
    for host_lines in [
        "Host: a.example\r\nHost: b.example\r\n",
        "Host: a example\r\n",
        "Host: a.example/x\r\n",
        "Host: user@a.example\r\n",
        "Host: [::1\r\n",
    ] {
        let r = server.raw(&format!(
            "GET /version.txt HTTP/1.1\r\n{host_lines}Connection: close\r\n\r\n"
        ));
        assert!(r.starts_with("HTTP/1.1 400 "), "{host_lines:?}: {r}");
    }
    // HTTP/1.1 requires a Host.
    let r = server.raw("GET /version.txt HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
}

#[test]
fn one_connection_asks_several_sites() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = Server::start(&[dir.path().to_str().unwrap(), "--threads", "1"]);
    // Pipelined in one write: the answers leave in one batch whose bodies
    // come from three packs.
    let mut s = server.connect();
    let mut batch = String::new();
    for host in ["a.example", "b.example", "other", "a.example"] {
        batch.push_str(&format!(
            "GET /version.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"
        ));
    }
    s.write_all(batch.as_bytes()).unwrap();
    let bodies: Vec<String> = (0..4)
        .map(|_| {
            let r = read_response(&mut s, false).expect("a response");
            String::from_utf8(r.body).unwrap()
        })
        .collect();
    assert_eq!(bodies, ["a", "b", "default", "a"]);
}

#[test]
fn http2_requests_go_to_the_site_of_their_authority() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = Server::start(&[dir.path().to_str().unwrap()]);
    let url = format!("http://127.0.0.1:{}/version.txt", server.port);
    for (host, site) in [
        ("b.example", "b"),
        ("A.EXAMPLE:1", "a"),
        ("nobody", "default"),
    ] {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--http2-prior-knowledge"])
            .args([
                "-H",
                &format!("Host: {host}"),
                "-w",
                " %{http_version}",
                &url,
            ])
            .output()
            .expect("curl");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{site} 2"),
            "{host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn without_a_default_other_hosts_are_misdirected() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), false);
    let server = Server::start(&[dir.path().to_str().unwrap(), "--threads", "1"]);
    assert_eq!(version_of(&server, "a.example"), "200 a");
    // 421, and the connection goes on: the next request is answered.
    let mut s = server.connect();
    s.write_all(
        b"GET /version.txt HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n\
          GET /version.txt HTTP/1.1\r\nHost: b.example\r\n\r\n",
    )
    .unwrap();
    let misdirected = read_response(&mut s, false).unwrap();
    assert_eq!(misdirected.status, 421, "{}", misdirected.head);
    assert!(
        misdirected
            .head
            .starts_with("HTTP/1.1 421 Misdirected Request\r\n")
    );
    assert_eq!(read_response(&mut s, false).unwrap().body, b"b");
    assert_eq!(ask(&server, "/version.txt", None).0, 421);
}

#[test]
fn each_site_is_replaced_added_and_removed_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = Server::start(&[dir.path().to_str().unwrap()]);
    // Replaced by rename (as `kiln build -o` does): only a changes.
    version_pack(&dir.path().join("a.example.pack"), "a2");
    wait_for(&server, "a.example", "200 a2");
    assert_eq!(version_of(&server, "b.example"), "200 b");

    // A corrupt pack for b: refused, b keeps its pack, a keeps serving.
    let incoming = dir.path().join(".incoming");
    std::fs::write(&incoming, b"KILNPACK but not really a pack at all").unwrap();
    std::fs::rename(&incoming, dir.path().join("b.example.pack")).unwrap();
    wait_for_log(&server, "site b.example: reload failed");
    wait_for_log(&server, "still serving its previous pack");
    assert_eq!(version_of(&server, "b.example"), "200 b");
    assert_eq!(version_of(&server, "a.example"), "200 a2");

    // A new host.
    assert_eq!(version_of(&server, "c.example"), "200 default");
    version_pack(&dir.path().join("c.example.pack"), "c");
    wait_for(&server, "c.example", "200 c");

    // A removed host falls back to the default site.
    std::fs::remove_file(dir.path().join("a.example.pack")).unwrap();
    wait_for(&server, "a.example", "200 default");
    assert_eq!(version_of(&server, "c.example"), "200 c");

    // A copy made in place (created empty, then written) is taken once
    // it is closed, and is no failed load on the way.
    std::fs::copy(
        dir.path().join("c.example.pack"),
        dir.path().join("d.example.pack"),
    )
    .unwrap();
    wait_for(&server, "d.example", "200 c");
    assert!(
        !server
            .stderr_text()
            .contains("site d.example: reload failed"),
        "{}",
        server.stderr_text()
    );
}

#[test]
fn sighup_reads_the_whole_folder_again() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = Server::start(&[dir.path().to_str().unwrap()]);
    // A new modification time is no event the server watches: only the
    // rescan at SIGHUP sees that the file changed.
    let pack = dir.path().join("a.example.pack");
    // (Opened read-only: closing a file opened for writing is an event.)
    let file = std::fs::File::open(&pack).unwrap();
    file.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(86_400))
        .unwrap();
    drop(file);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!server.stderr_text().contains("site a.example: reloaded"));
    server.signal(libc::SIGHUP);
    wait_for_log(&server, "site a.example: reloaded");
    assert!(
        !server.stderr_text().contains("site b.example: reloaded"),
        "an unchanged pack is kept: {}",
        server.stderr_text()
    );
    assert_eq!(version_of(&server, "a.example"), "200 a");
    assert_eq!(version_of(&server, "b.example"), "200 b");
    // A SIGHUP that changes nothing says so, as a single pack's does.
    server.signal(libc::SIGHUP);
    wait_for_log(
        &server,
        "reloaded: no pack changed; 3 sites served as they were",
    );
}

/// Waits (bounded) until every thread of the server is stopped (state T
/// in /proc), as SIGSTOP reaches them asynchronously.
fn wait_stopped(server: &Server) {
    let tasks = format!("/proc/{}/task", server.child.id());
    let stopped = || {
        std::fs::read_dir(&tasks).unwrap().flatten().all(|task| {
            // A thread gone meanwhile reads nothing either. The state
            // follows the command name, which is in parentheses.
            std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T'))
            })
        })
    };
    let start = Instant::now();
    while !stopped() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{tasks}: not stopped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_change_lost_to_an_overflowed_event_queue_reloads_everything() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = Server::start(&[dir.path().to_str().unwrap()]);
    // Read, not changed: the kernel's queue of events per inotify instance.
    let queued: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Stopped, the server reads no event: a scratch file renamed back and
    // forth (two events a rename, none merged) fills the queue, and the
    // real change after it is dropped by the kernel.
    server.signal(libc::SIGSTOP);
    wait_stopped(&server);
    let (here, there) = (dir.path().join(".scratch-1"), dir.path().join(".scratch-2"));
    std::fs::write(&here, b"").unwrap();
    for _ in 0..queued / 2 + 1 {
        std::fs::rename(&here, &there).unwrap();
        std::fs::rename(&there, &here).unwrap();
    }
    version_pack(&dir.path().join("a.example.pack"), "a2");
    server.signal(libc::SIGCONT);
    wait_for(&server, "a.example", "200 a2");
    wait_for_log(&server, "the inotify event queue overflowed");
    assert_eq!(version_of(&server, "b.example"), "200 b");
}

#[test]
fn a_bad_pack_at_start_leaves_the_other_sites_serving() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let broken = dir.path().join("broken.example.pack");
    std::fs::write(&broken, b"KILNPACK but not really a pack at all").unwrap();
    let server = Server::start(&[dir.path().to_str().unwrap()]);
    assert!(
        server.stderr_text().contains(&format!(
            "site broken.example: not served: {}: ",
            broken.display()
        )),
        "{}",
        server.stderr_text()
    );
    assert_eq!(version_of(&server, "a.example"), "200 a");
    assert_eq!(version_of(&server, "broken.example"), "200 default");
    // Fixed, it is taken.
    version_pack(&broken, "fixed");
    wait_for(&server, "broken.example", "200 fixed");
}

#[test]
fn a_folder_where_no_pack_loads_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("broken.example.pack"),
        b"KILNPACK but not really a pack at all",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "serve",
            dir.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("kiln: error: no site could be loaded: ")
            && last.contains("broken.example.pack: "),
        "{stderr}"
    );
}

/// A self-signed certificate for `name`, written as `NAME.crt` and
/// `NAME.key` in `dir`; returns its DER.
fn certificate(dir: &Path, file: &str, name: &str) -> Vec<u8> {
    let made = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    write_atomically(
        &dir.join(format!("{file}.key")),
        made.signing_key.serialize_pem().as_bytes(),
    );
    write_atomically(&dir.join(format!("{file}.crt")), made.cert.pem().as_bytes());
    made.cert.der().to_vec()
}

fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("incoming");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The leaf certificate the server presents to a client asking for
/// `name` by SNI.
fn presented(port: u16, name: &str) -> Vec<u8> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let config: Arc<rustls::ClientConfig> = insecure_client_config(&[b"http/1.1"]);
    let mut conn = rustls::ClientConnection::new(config, server_name).unwrap();
    let mut tcp = tcp;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("TLS handshake");
    }
    conn.peer_certificates().unwrap()[0].to_vec()
}

#[test]
fn certificates_beside_the_packs_are_chosen_by_name_and_reloaded_pair_by_pair() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let a = certificate(dir.path(), "a.example", "a.example");
    let b = certificate(dir.path(), "b.example", "b.example");
    let server = Server::start(&[dir.path().to_str().unwrap(), "--listen-tls", "127.0.0.1:0"]);
    let tls_port: u16 = server
        .startup
        .split("https://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a TLS port");
    assert_eq!(presented(tls_port, "a.example"), a);
    assert_eq!(presented(tls_port, "b.example"), b);

    // A new certificate for a is taken.
    let a2 = certificate(dir.path(), "a.example", "a.example");
    let start = Instant::now();
    while presented(tls_port, "a.example") != a2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The pair was renewed by two renames, the key first: the moment
    // between them is no failure.
    assert!(
        !server.stderr_text().contains("failed"),
        "{}",
        server.stderr_text()
    );
    // A broken certificate for b keeps b's old one, and a's new one.
    write_atomically(&dir.path().join("b.example.crt"), b"not a certificate");
    wait_for_log(&server, "b.example.crt: ");
    wait_for_log(&server, "still serving the previous certificate");
    assert_eq!(presented(tls_port, "b.example"), b);
    assert_eq!(presented(tls_port, "a.example"), a2);
}

#[test]
fn a_site_may_be_a_link_to_a_pack_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let (sites, releases) = (dir.path().join("sites"), dir.path().join("releases"));
    std::fs::create_dir(&sites).unwrap();
    std::fs::create_dir(&releases).unwrap();
    folder(&sites, true);
    version_pack(&releases.join("c.pack"), "c1");
    std::os::unix::fs::symlink(releases.join("c.pack"), sites.join("c.example.pack")).unwrap();
    let server = Server::start(&[sites.to_str().unwrap()]);
    assert_eq!(version_of(&server, "c.example"), "200 c1");
    // The pack the link points to is replaced there; the sandbox lets the
    // server read that folder again at the reload.
    version_pack(&releases.join("c.pack"), "c2");
    server.signal(libc::SIGHUP);
    wait_for(&server, "c.example", "200 c2");
}

/// `--poll`: the server's process is refused inotify (`deny_inotify`), so
/// it sees nothing of a change but what its scans find, as on a network
/// filesystem where another machine writes the packs. Without `--poll` a
/// replaced pack is then not taken (the premise); with it, a pack
/// replaced, added or removed is taken within a scan, and scans that
/// find nothing log nothing.
#[test]
fn without_inotify_poll_finds_replaced_added_and_removed_sites() {
    let blind = |extra: &[&str], dir: &Path| {
        let mut args = vec![dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        let server = Server::launch(
            &args,
            Launch {
                deny_inotify: true,
                ..Launch::default()
            },
        );
        wait_for_log(&server, "cannot watch files for replacement");
        server
    };
    let unpolled_dir = tempfile::tempdir().unwrap();
    folder(unpolled_dir.path(), true);
    let unpolled = blind(&[], unpolled_dir.path());
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), true);
    let server = blind(&["--poll", "1"], dir.path());
    wait_for_log(&server, "--poll looks for them");

    version_pack(&unpolled_dir.path().join("a.example.pack"), "a2");
    version_pack(&dir.path().join("a.example.pack"), "a2");
    wait_for(&server, "a.example", "200 a2");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        version_of(&unpolled, "a.example"),
        "200 a",
        "inotify is off"
    );

    version_pack(&dir.path().join("c.example.pack"), "c");
    wait_for(&server, "c.example", "200 c");
    std::fs::remove_file(dir.path().join("a.example.pack")).unwrap();
    wait_for(&server, "a.example", "200 default");
    assert_eq!(version_of(&server, "b.example"), "200 b");

    // Three scans that find nothing add no line.
    let lines = server.stderr_text().lines().count();
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        server.stderr_text().lines().count(),
        lines,
        "{}",
        server.stderr_text()
    );
}
