//! Hot reload: the pack replaced by rename under continuous keep-alive load
//! loses no request; a corrupt replacement is refused and the old pack keeps
//! serving; SIGHUP reloads, and fires a directory site again, also when no
//! log line can be written; a replaced archive site is fired again.

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

fn version(s: &Server) -> String {
    String::from_utf8(s.get("/version.txt", "").body).unwrap()
}

fn wait_for(s: &Server, want: &str) {
    let start = Instant::now();
    while version(s) != want {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never saw {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn reload_under_load_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("site.pack");
    version_pack(&pack, "v0");
    let server = Server::start(&[pack.to_str().unwrap(), "--threads", "2"]);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, seen, port) = (Arc::clone(&stop), Arc::clone(&seen), server.port);
            std::thread::spawn(move || {
                let mut requests = 0u32;
                let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    conn.write_all(b"GET /version.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                        .unwrap();
                    let r = read_response(&mut conn, false).expect("a response to every request");
                    assert_eq!(r.status, 200);
                    seen.lock()
                        .unwrap()
                        .insert(String::from_utf8(r.body).unwrap());
                    requests += 1;
                    if requests.is_multiple_of(50) {
                        conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                    }
                }
                requests
            })
        })
        .collect();
    // The clients see the first site before any reload (on a loaded
    // machine they may take longer to start than the first reload).
    let started = std::time::Instant::now();
    while !seen.lock().unwrap().contains("v0") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no client got an answer"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for v in 1..=5 {
        std::thread::sleep(Duration::from_millis(150));
        version_pack(&pack, &format!("v{v}"));
        wait_for(&server, &format!("v{v}"));
    }
    // The clients' connections, opened before, see the last site too (on
    // a loaded machine their next request may come a while after ours).
    let reloaded = std::time::Instant::now();
    while !seen.lock().unwrap().contains("v5") {
        assert!(
            reloaded.elapsed() < Duration::from_secs(10),
            "no client saw the last site: {:?}",
            seen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let total: u32 = clients
        .into_iter()
        .map(|c| c.join().expect("client saw no failure"))
        .sum();
    assert!(total > 0);
}

#[test]
fn corrupt_replacement_keeps_the_old_pack() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("site.pack");
    version_pack(&pack, "good");
    let server = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    assert_eq!(version(&server), "good");
    let tmp = dir.path().join("incoming");
    std::fs::write(&tmp, b"KILNPACK but not really a pack at all").unwrap();
    std::fs::rename(&tmp, &pack).unwrap();
    let start = Instant::now();
    while !server
        .stderr_text()
        .contains("still serving the previous pack")
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(version(&server), "good");
    // A good pack after the bad one is taken.
    version_pack(&pack, "better");
    wait_for(&server, "better");
}

#[test]
fn sighup_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("site.pack");
    version_pack(&pack, "one");
    let server = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    let reloads = |s: &Server| s.stderr_text().matches("reloaded").count();
    let before = reloads(&server);
    server.signal(libc::SIGHUP);
    let start = Instant::now();
    while reloads(&server) == before {
        assert!(start.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(version(&server), "one");
}

#[test]
fn sighup_refires_a_directory_site() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("public");
    std::fs::create_dir(&site).unwrap();
    std::fs::write(site.join("version.txt"), "one").unwrap();
    let server = Server::start(&[site.to_str().unwrap(), "--threads", "1"]);
    assert_eq!(version(&server), "one");
    std::fs::write(site.join("version.txt"), "two").unwrap();
    server.signal(libc::SIGHUP);
    wait_for(&server, "two");
    assert!(
        !server.stderr_text().contains("failed"),
        "{}",
        server.stderr_text()
    );
}

#[test]
fn a_replaced_archive_site_is_fired_again_inside_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("public");
    std::fs::create_dir(&site).unwrap();
    let archive = dir.path().join("site.tar");
    let tar = |version: &str| {
        std::fs::write(site.join("version.txt"), version).unwrap();
        let incoming = dir.path().join("incoming.tar");
        tar_contents(&incoming, &site, "-cf");
        std::fs::rename(&incoming, &archive).unwrap();
    };
    tar("one");
    let server = Server::start(&[archive.to_str().unwrap(), "--threads", "1"]);
    assert_eq!(version(&server), "one");
    // Renamed over (inotify): its entries are staged in memory, as the
    // sandbox lets the server write no file.
    tar("two");
    wait_for(&server, "two");
    assert!(
        !server.stderr_text().contains("failed"),
        "{}",
        server.stderr_text()
    );
}

#[test]
fn sighup_reloads_while_logs_cannot_be_written() {
    for (what, stderr) in unwritable_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let site = dir.path().join("public");
        std::fs::create_dir(&site).unwrap();
        std::fs::write(site.join("version.txt"), "one").unwrap();
        let mut server = Server::launch(
            &[site.to_str().unwrap(), "--threads", "1"],
            Launch {
                stderr: Some(stderr),
                ..Launch::default()
            },
        );
        // Each reload logs a line: the second shows the first did not
        // cost the signal handling.
        for v in ["two", "three"] {
            std::fs::write(site.join("version.txt"), v).unwrap();
            server.signal(libc::SIGHUP);
            wait_for(&server, v);
        }
        server.signal(libc::SIGTERM);
        let status = server
            .wait_exit(Duration::from_secs(15))
            .unwrap_or_else(|| panic!("stderr to {what}: SIGTERM did not stop the server"));
        assert!(status.success(), "stderr to {what}: {status:?}");
    }
}
