//! Many connections at once: 1,000 concurrent keep-alive clients, and the
//! `--max-connections` cap pausing accepts instead of failing.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::*;

#[test]
fn a_thousand_keep_alive_clients() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let server = Server::start(&[pack.to_str().unwrap(), "--threads", "2"]);
    let port = server.port;
    let workers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conns: Vec<TcpStream> = (0..250)
                    .map(|_| {
                        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
                        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                        c
                    })
                    .collect();
                for round in 0..3 {
                    for c in &mut conns {
                        c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                            .unwrap();
                    }
                    for c in &mut conns {
                        let r = read_response(c, false).expect("response");
                        assert_eq!((r.status, r.body.as_slice()), (200, HELLO), "round {round}");
                    }
                }
                conns.len()
            })
        })
        .collect();
    let total: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(total, 1000);
}

#[test]
fn max_connections_pauses_accepting() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let server = Server::start(&[
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--max-connections",
        "4",
    ]);
    let mut first: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut c = server.connect_plain();
            c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            assert_eq!(read_response(&mut c, false).unwrap().body, HELLO);
            c
        })
        .collect();
    let mut extra = server.connect_plain();
    extra
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    extra
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut probe = [0u8; 1];
    assert!(
        std::io::Read::read(&mut extra, &mut probe).is_err(),
        "the fifth connection must wait"
    );
    drop(first.pop());
    extra
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let r = read_response(&mut extra, false).expect("served once a slot is free");
    assert_eq!(r.body, HELLO);
}

/// A slot freed at the cap admits one of the connections that queued
/// meanwhile, not all of them: at the end of the pause io_uring's
/// multishot accept takes the whole queue at once, and the ones beyond the
/// cap must wait as they do in the kernel's queue with epoll.
#[test]
fn a_freed_slot_admits_one_waiting_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let server = Server::start(&[
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--max-connections",
        "2",
    ]);
    let request = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n";
    let mut first: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut c = server.connect_plain();
            c.write_all(request).unwrap();
            assert_eq!(read_response(&mut c, false).unwrap().body, HELLO);
            c
        })
        .collect();
    let mut waiting: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut c = server.connect_plain();
            c.write_all(request).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            c
        })
        .collect();
    drop(first.pop());
    let start = std::time::Instant::now();
    let admitted = loop {
        let mut probe = [0u8; 1];
        if let Some(i) = waiting.iter().position(|c| c.peek(&mut probe).is_ok()) {
            break waiting.remove(i);
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no waiting connection was served once a slot was free"
        );
    };
    // The pause ends every sweep (a few times a second): the others would
    // have been admitted within this if the cap let them in.
    std::thread::sleep(Duration::from_secs(1));
    for c in &waiting {
        c.set_nonblocking(true).unwrap();
        let mut probe = [0u8; 1];
        assert!(
            c.peek(&mut probe).is_err(),
            "a connection beyond the cap was served"
        );
        c.set_nonblocking(false).unwrap();
    }
    drop(admitted);
    for c in &mut waiting {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    drop(first);
    for mut c in waiting {
        let r = read_response(&mut c, false).expect("served once slots are free");
        assert_eq!(r.body, HELLO);
    }
}

#[test]
fn descriptor_exhaustion_pauses_accepting() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    // The cap is set above the descriptor limit so that accept(2) itself
    // fails with EMFILE (the default cap would stay below the limit).
    let server = Server::start_with_fd_limit(
        &[
            pack.to_str().unwrap(),
            "--threads",
            "1",
            "--max-connections",
            "1000",
        ],
        Some(32),
    );
    let conns: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut c = server.connect_plain();
            c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            c
        })
        .collect();
    let start = std::time::Instant::now();
    while !server.stderr_text().contains("pausing accepts") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Each connection is answered once earlier ones go away.
    for mut c in conns {
        let r = read_response(&mut c, false).expect("answered eventually");
        assert_eq!(r.body, HELLO);
    }
    assert_eq!(server.get("/hello.txt", "").body, HELLO);
}

#[test]
fn default_cap_follows_the_descriptor_limit() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    // 300 descriptors: the default cap leaves a reserve and admits the rest,
    // so 200 idle keep-alive clients do not lock a new one out.
    let server =
        Server::start_with_fd_limit(&[pack.to_str().unwrap(), "--threads", "1"], Some(300));
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut c = server.connect_plain();
            c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            assert_eq!(read_response(&mut c, false).unwrap().body, HELLO);
            c
        })
        .collect();
    assert_eq!(server.get("/hello.txt", "").body, HELLO);
    assert!(
        !server.stderr_text().contains("pausing accepts"),
        "{}",
        server.stderr_text()
    );
    drop(idle);
}
