//! The connection layer's choice (`--io auto|uring|epoll`): io_uring where
//! the kernel offers it, epoll where it does not, and a clear error when
//! io_uring is demanded but refused. The rest of the serve suite runs on
//! both back ends (`KILN_TEST_IO`, see tests/common).

mod common;

use std::process::{Command, Stdio};

use common::*;

fn sample() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path()).to_str().unwrap().to_owned();
    (dir, pack)
}

/// Waits (up to 5 s) for the server's stderr to contain `text`, then
/// returns all of it.
fn stderr_with(s: &Server, text: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let log = s.stderr_text();
        if log.contains(text) || std::time::Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The connection layer the server's metrics name (`kiln_build_info`'s
/// `io` label): the one the loops run, as the start-up log says.
fn metrics_io(s: &Server) -> String {
    let text = s.metrics();
    let line = text
        .lines()
        .find(|l| l.starts_with("kiln_build_info{"))
        .unwrap_or_else(|| panic!("no kiln_build_info in {text}"));
    let io = line.split("io=\"").nth(1).and_then(|r| r.split('"').next());
    io.unwrap_or_else(|| panic!("no io label in {line}"))
        .to_owned()
}

/// Whether this test process may set up an io_uring at all.
fn kernel_has_io_uring() -> bool {
    io_uring::IoUring::new(8).is_ok()
}

#[test]
fn auto_picks_io_uring_where_the_kernel_has_it() {
    let (_dir, pack) = sample();
    let s = Server::start(&[
        &pack,
        "--threads",
        "1",
        "--io",
        "auto",
        "--metrics",
        "127.0.0.1:0",
    ]);
    assert_eq!(s.get("/hello.txt", "").status, 200);
    let (expected, io) = if kernel_has_io_uring() {
        ("connection layer: io_uring", "uring")
    } else {
        ("connection layer: epoll", "epoll")
    };
    let log = stderr_with(&s, expected);
    assert!(log.contains(expected), "{log}");
    assert_eq!(metrics_io(&s), io);
}

#[test]
fn auto_serves_with_epoll_where_io_uring_is_refused() {
    let (_dir, pack) = sample();
    let s = Server::launch(
        &[
            &pack,
            "--threads",
            "2",
            "--io",
            "auto",
            "--metrics",
            "127.0.0.1:0",
        ],
        Launch {
            deny_io_uring: true,
            ..Launch::default()
        },
    );
    let r = s.get("/hello.txt", "");
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    let log = stderr_with(&s, "connection layer");
    assert!(log.contains("io_uring is not usable here"), "{log}");
    assert!(log.contains("connection layer: epoll"), "{log}");
    assert_eq!(metrics_io(&s), "epoll");
}

#[test]
fn epoll_is_used_when_asked_for() {
    let (_dir, pack) = sample();
    let s = Server::start(&[
        &pack,
        "--threads",
        "1",
        "--io",
        "epoll",
        "--metrics",
        "127.0.0.1:0",
    ]);
    assert_eq!(s.get("/hello.txt", "").status, 200);
    let log = stderr_with(&s, "connection layer");
    assert!(log.contains("connection layer: epoll"), "{log}");
    assert_eq!(metrics_io(&s), "epoll");
}

#[test]
fn uring_where_io_uring_is_refused_fails_with_one_line() {
    let (_dir, pack) = sample();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    deny_io_uring(&mut command);
    let out = command
        .args(["serve", &pack, "--io", "uring", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .expect("run kiln");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("--io uring: io_uring is not usable here"),
        "{stderr}"
    );
    assert!(!stderr.contains("kiln: serving"), "served anyway: {stderr}");
}

#[test]
fn an_unknown_back_end_is_refused() {
    let (_dir, pack) = sample();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", &pack, "--io", "kqueue"])
        .output()
        .expect("run kiln");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kqueue"));
}
