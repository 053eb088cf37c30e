//! `tests/http3/h3client.py`, the HTTP/3 client on aioquic's QUIC layer
//! (kiln shares no code with it), for the HTTP/3 tests and the tests of
//! what every protocol does alike (the access log). A test skips, saying
//! so, without Python's `aioquic` (`./test` installs it).

use std::process::Command;

use super::Server;

/// The back ends that serve HTTP/3.
pub const BACKENDS: [&str; 2] = ["epoll", "uring"];

/// A server on `pack` with a TLS listener on `tls` (its UDP twin serves
/// HTTP/3), a self-signed certificate and metrics, on `backend`, with
/// `extra` flags.
pub fn start_server(pack: &std::path::Path, backend: &str, tls: &str, extra: &[&str]) -> Server {
    let mut args = vec![
        pack.to_str().unwrap(),
        "--listen-tls",
        tls,
        "--tls-self-signed",
        "--io",
        backend,
        "--metrics",
        "127.0.0.1:0",
    ];
    args.extend(extra);
    let server = Server::start(&args);
    assert!(server.tls_port.is_some(), "{}", server.startup);
    server
}

/// Whether Python's aioquic (and pylsqpack, which comes with it) is here.
pub fn available() -> bool {
    let found = Command::new(super::python())
        .args(["-c", "import aioquic, pylsqpack"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("Python's aioquic is not installed (./test installs it with pip); skipped");
    }
    found
}

/// Runs the client against UDP `port`: one JSON object per line of its
/// output.
pub fn run(port: u16, args: &[&str]) -> Vec<serde_json::Value> {
    script(port, "tests/http3/h3client.py", args)
}

/// `tests/http3/h3attack.py` against UDP `port`: its JSON line.
pub fn attack(port: u16, args: &[&str]) -> serde_json::Value {
    script(port, "tests/http3/h3attack.py", args)
        .pop()
        .expect("h3attack's JSON line")
}

fn script(port: u16, path: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let output = Command::new(super::python())
        .arg(path)
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("the tests' Python");
    assert!(
        output.status.success(),
        "{path} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}
