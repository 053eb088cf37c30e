//! HTTP/3 under attack, on both back ends, with the clients of
//! `tests/http3/h3attack.py` (aioquic's QUIC layer): request streams
//! reset before their first byte give their stream credit back; the
//! rapid-reset attack ends the connection with H3_EXCESSIVE_LOAD while a
//! client cancelling now and then is served on. Skips itself, saying so,
//! without Python's `aioquic` (`./test` installs it).

mod common;

use common::Server;
use common::h3client::{attack, available as have_aioquic};

/// The back ends that serve HTTP/3.
const BACKENDS: [&str; 2] = ["epoll", "uring"];

/// A server on the sample site (`/hello.txt`, the 1 MiB `/big.bin`) with
/// a TLS listener, whose UDP twin serves HTTP/3, on `backend`.
fn start(pack: &std::path::Path, backend: &str, extra: &[&str]) -> Server {
    let mut args = vec![
        pack.to_str().unwrap(),
        "--listen-tls",
        "127.0.0.1:0",
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

/// Runs `check` against a server with `extra` flags on each back end;
/// nothing without aioquic (`have_aioquic` says so).
fn on_each_backend(extra: &[&str], mut check: impl FnMut(&str, Server)) {
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = common::sample_pack(dir.path());
    for backend in BACKENDS {
        check(backend, start(&pack, backend, extra));
    }
}

/// Streams reset before they carried a byte were never closed on the
/// server's side, so QUIC never gave their credit back: after 128 of them
/// (the concurrent streams kiln allows) the connection could open no
/// other. 1,000 of them, opened as credit comes back, then a request.
#[test]
fn streams_reset_before_their_first_byte_give_their_credit_back() {
    on_each_backend(&[], |backend, server| {
        let port = server.tls_port.unwrap();
        let result = attack(port, &["resets", "1000"]);
        assert_eq!(result["resets"], 1000, "{backend}: {result}");
        assert_eq!(result["status"], 200, "{backend}: {result}");
    });
}
