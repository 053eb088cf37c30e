//! Graceful shutdown: SIGTERM stops accepting, closes idle connections,
//! lets a response in flight finish, and exits, also when no log line can
//! be written.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

/// A client socket with a tiny receive buffer, so a large response stays in
/// flight while the client reads slowly.
fn slow_client(port: u16) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    socket.connect(&addr.into()).unwrap();
    let s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

#[test]
fn sigterm_finishes_responses_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let mut server = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    let mut idle = server.connect();
    idle.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut idle, false).unwrap().body, HELLO);

    let mut slow = slow_client(server.port);
    slow.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 1000];
    slow.read_exact(&mut first).unwrap();

    server.signal(libc::SIGTERM);
    // The idle connection is closed.
    let mut rest = Vec::new();
    assert_eq!(idle.read_to_end(&mut rest).unwrap_or(0), 0);
    // New connections are refused once the listener is gone.
    std::thread::sleep(Duration::from_millis(300));
    assert!(TcpStream::connect(("127.0.0.1", server.port)).is_err());
    // The slow download still completes, read in small pieces.
    let mut got = first.to_vec();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match slow.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("download broken: {e}"),
        }
        if got.len() % (256 * 1024) < buf.len() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let text_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(got[..text_end].starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(got[text_end..] == big_body(), "body differs");
    let status = server
        .wait_exit(Duration::from_secs(15))
        .expect("server exits");
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigint_with_nothing_in_flight_exits_promptly() {
    let mut server = Server::start(&["--dummy", "--threads", "2"]);
    let _idle = server.connect();
    server.signal(libc::SIGINT);
    let status = server
        .wait_exit(Duration::from_secs(15))
        .expect("server exits");
    assert!(status.success());
}

#[test]
fn sigterm_stops_a_server_whose_logs_cannot_be_written() {
    for (what, stderr) in unwritable_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let pack = sample_pack(dir.path());
        // The access log goes to stdout, closed at start.
        let mut server = Server::launch(
            &[
                pack.to_str().unwrap(),
                "--threads",
                "1",
                "--access-log",
                "-",
            ],
            Launch {
                stderr: Some(stderr),
                drain_stdout: false,
                ..Launch::default()
            },
        );
        assert_eq!(server.get("/hello.txt", "").body, HELLO, "{what}");
        // The log is flushed once a second: let a flush fail, then the
        // loop that logged must still answer.
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(server.get("/hello.txt", "").body, HELLO, "{what}");
        server.signal(libc::SIGTERM);
        let status = server
            .wait_exit(Duration::from_secs(15))
            .unwrap_or_else(|| panic!("stderr to {what}: SIGTERM did not stop the server"));
        assert!(status.success(), "stderr to {what}: {status:?}");
    }
}

/// Whether this test process may set up an io_uring at all.
fn kernel_has_io_uring() -> bool {
    io_uring::IoUring::new(8).is_ok()
}

/// The server's exit status, seen as soon as it exits (polled every
/// millisecond: what is checked is the state right after the exit), or
/// `None` after a generous bound.
fn exit_status(server: &mut Server) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if let Some(status) = server.child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn a_stopped_server_releases_its_port_before_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let mut back_ends = vec!["epoll"];
    if kernel_has_io_uring() {
        back_ends.push("uring");
    }
    for io in back_ends {
        let args = [pack.to_str().unwrap(), "--threads", "2", "--io", io];
        let mut server = Server::start(&args);
        let address = format!("127.0.0.1:{}", server.port);
        // Started again at once on the same port, as a supervisor does:
        // every start must bind (the launcher fails on a server that
        // exits without its start-up line).
        for round in 0..20 {
            assert_eq!(server.get("/hello.txt", "").body, HELLO, "{io} {round}");
            server.signal(libc::SIGTERM);
            let status = exit_status(&mut server)
                .unwrap_or_else(|| panic!("{io} {round}: SIGTERM did not stop the server"));
            assert!(status.success(), "{io} {round}: {status:?}");
            // Nothing listens on the port any more the moment the process
            // is gone: a socket bound without SO_REUSEPORT (as kiln checks
            // a port at start) takes it.
            let probe =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            probe.set_reuse_address(true).unwrap();
            let addr: SocketAddr = address.parse().unwrap();
            if let Err(e) = probe.bind(&addr.into()) {
                panic!("{io} {round}: {address} still taken after the server exited: {e}");
            }
            drop(probe);
            server = Server::launch(
                &args,
                Launch {
                    listen: vec![address.clone()],
                    ..Launch::default()
                },
            );
        }
    }
}
