//! Deadlines, wired into the back end under test (`KILN_TEST_IO`): a head
//! that does not arrive whole in time gets a 408 (trickling does not extend
//! it), an idle keep-alive connection closes, a client that stops reading
//! is dropped, each counted by its kind. Which deadline applies when, what
//! moves it and what its passing does are unit-tested with a fake clock in
//! `src/serve/net/conn.rs`; these check the wiring, and wait for what the
//! server counted rather than sleep.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

/// A one-thread server with `extra` flags and a metrics listener: the
/// server and its metrics port.
fn server(extra: &[&str]) -> (tempfile::TempDir, Server, u16) {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let mut args = vec![
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--metrics",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    let port = server.metrics_port();
    (dir, server, port)
}

/// How many connections the server closed by a deadline of `kind`.
fn timeouts(metrics_port: u16, kind: &str) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n")
        .unwrap();
    let text = read_all(&mut s);
    let line = format!("kiln_timeouts_total{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line:?} in {text}"))
}

/// Waits until the server counted `n` timeouts of `kind`.
fn wait_timeouts(metrics_port: u16, kind: &str, n: u64) {
    let start = Instant::now();
    loop {
        let counted = timeouts(metrics_port, kind);
        if counted == n {
            return;
        }
        assert!(
            counted < n && start.elapsed() < Duration::from_secs(20),
            "{counted} {kind} timeouts, expected {n}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_all(s: &mut impl Read) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn stalled_clients_are_cut_off_and_others_served() {
    // One second: a TLS client's handshake and first bytes must arrive
    // within it on a busy machine.
    let (_dir, s, metrics) = server(&["--header-timeout", "1"]);
    let mut stalled: Vec<Client> = (0..300)
        .map(|_| {
            let mut c = s.connect();
            c.write_all(b"GET /hello.txt HTTP/1.1\r\nHo").unwrap();
            c
        })
        .collect();
    // A normal client is answered while they stall.
    assert_eq!(s.get("/hello.txt", "").body, HELLO);
    for c in &mut stalled {
        let r = read_all(c);
        assert!(r.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{r}");
        assert!(r.contains("\r\nConnection: close\r\n"));
    }
    wait_timeouts(metrics, "header", 300);
}

#[test]
fn trickling_does_not_extend_the_header_deadline() {
    let (_dir, s, metrics) = server(&["--header-timeout", "1"]);
    let mut c = s.connect();
    let head = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    // A byte every 100 ms: each would restart a deadline that later bytes
    // moved, so only one that does not move ends the trickle.
    let mut sent = 0;
    while sent < head.len() && timeouts(metrics, "header") == 0 {
        if c.write_all(&head[sent..sent + 1]).is_err() {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(sent < head.len(), "the whole head went out byte by byte");
    let r = read_all(&mut c);
    assert!(r.starts_with("HTTP/1.1 408 "), "{r}");
    assert_eq!(timeouts(metrics, "header"), 1);
}

#[test]
fn idle_keep_alive_connections_close() {
    let (_dir, s, metrics) = server(&["--keepalive-timeout", "0.5"]);
    let mut c = s.connect();
    c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c, false).unwrap().body, HELLO);
    let mut rest = Vec::new();
    assert_eq!(
        c.read_to_end(&mut rest).unwrap(),
        0,
        "closed without a response"
    );
    wait_timeouts(metrics, "idle", 1);
}

#[test]
fn clients_that_do_not_read_are_dropped() {
    let (_dir, s, metrics) = server(&["--send-timeout", "0.5"]);
    let mut c = s.connect();
    let requests = "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n".repeat(64);
    c.write_all(requests.as_bytes()).unwrap();
    wait_timeouts(metrics, "send", 1);
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(
        got < 64 * big_body().len(),
        "the server should have given up, got {got} bytes"
    );
    // The server is still fine.
    assert_eq!(s.get("/hello.txt", "").body, HELLO);
}
