//! Deadlines: a whole request head must arrive within the header timeout
//! (trickling does not extend it), idle keep-alive connections close, and a
//! client that stops reading is dropped.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;

fn server(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let mut args = vec![
        pack.to_str().unwrap().to_string(),
        "--threads".into(),
        "1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args);
    (dir, server)
}

fn read_all(s: &mut impl Read) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn stalled_clients_are_cut_off_and_others_served() {
    let (_dir, s) = server(&["--header-timeout", "1"]);
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
}

#[test]
fn trickling_does_not_extend_the_header_deadline() {
    let (_dir, s) = server(&["--header-timeout", "1"]);
    let mut c = s.connect();
    let head = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let start = Instant::now();
    let mut sent_all = true;
    for &b in head.iter() {
        if c.write_all(&[b]).is_err() {
            sent_all = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        if start.elapsed() > Duration::from_secs(5) {
            sent_all = false;
            break;
        }
    }
    assert!(!sent_all || start.elapsed() > Duration::from_secs(5));
    let r = read_all(&mut c);
    assert!(r.starts_with("HTTP/1.1 408 "), "{r}");
}

#[test]
fn idle_keep_alive_connections_close() {
    let (_dir, s) = server(&["--keepalive-timeout", "1"]);
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
}

#[test]
fn clients_that_do_not_read_are_dropped() {
    let (_dir, s) = server(&["--send-timeout", "1"]);
    let mut c = s.connect();
    let requests = "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n".repeat(64);
    c.write_all(requests.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(3));
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
