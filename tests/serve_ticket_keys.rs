//! `--tls-ticket-keys`: two separate servers given the same secret file
//! resume each other's TLS 1.3 sessions, over real sockets, and still do
//! after a rotation of the ticket keys; servers with different files do
//! not; a bad file is refused at start with one line naming it. (The
//! connection layer is whichever `KILN_TEST_IO` picks: the ticket keys
//! are the handshake's, the same for both.)

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;

/// A server of the sample pack on a TLS port, self-signed, with
/// `--tls-ticket-keys key` and `extra`.
fn node(dir: &Path, key: &Path, extra: &[&str]) -> Server {
    let pack = sample_pack(dir);
    let mut args = vec![
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
        "--tls-ticket-keys",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// A client configuration offering TLS 1.3 only, keeping the tickets it
/// is given (by server name: every node is `site.test` to it).
fn client_config() -> Arc<rustls::ClientConfig> {
    insecure_client_config_for(&[&rustls::version::TLS13], &[b"http/1.1"])
}

fn write_secret(dir: &Path, name: &str, secret: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, secret).unwrap();
    path
}

#[test]
fn a_session_from_one_node_resumes_on_another_with_the_same_keys_only() {
    let dir = tempfile::tempdir().unwrap();
    let shared = write_secret(
        dir.path(),
        "shared.key",
        b"thirty-two bytes of test secret!",
    );
    let other = write_secret(dir.path(), "other.key", b"another thirty-two bytes secret!");
    let (one, two) = (
        node(dir.path(), &shared, &[]),
        node(dir.path(), &shared, &[]),
    );
    let stranger = node(dir.path(), &other, &[]);
    let config = client_config();
    assert!(!resumed(&one, &config), "the first handshake is full");
    assert!(resumed(&two, &config), "node 2 resumes node 1's session");
    // Node 2's ticket: node 1 resumes it too.
    assert!(resumed(&one, &config), "node 1 resumes node 2's session");
    // A client holding only tickets of the shared keys.
    let fresh = client_config();
    assert!(!resumed(&one, &fresh));
    assert!(!resumed(&stranger, &fresh), "other keys do not resume");
}

/// Seconds since the Unix epoch, with a fraction.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_ticket_resumes_in_the_next_period_on_another_node() {
    const PERIOD: f64 = 3.0;
    let dir = tempfile::tempdir().unwrap();
    let shared = write_secret(
        dir.path(),
        "shared.key",
        b"thirty-two bytes of test secret!",
    );
    let period = ["--tls-ticket-key-period", "3"];
    let (one, two) = (
        node(dir.path(), &shared, &period),
        node(dir.path(), &shared, &period),
    );
    // A ticket sealed in period n, known to be: the handshake and its
    // ticket fell within one period (tried again when they straddled two).
    let (config, sealed_in) = loop {
        let config = client_config();
        let before = (now() / PERIOD).floor();
        assert!(!resumed(&one, &config));
        if (now() / PERIOD).floor() == before {
            break (config, before);
        }
    };
    // Into period n + 1 (not near its end): node 2 opens it with the
    // previous period's key.
    let next = (sealed_in + 1.0) * PERIOD + 0.2;
    std::thread::sleep(Duration::from_secs_f64((next - now()).max(0.0)));
    assert_eq!((now() / PERIOD).floor(), sealed_in + 1.0, "in period n + 1");
    assert!(
        resumed(&two, &config),
        "a ticket of period n resumes in n + 1"
    );
    // A ticket of period n no longer opens in n + 2. The client offers
    // its newest, from n + 1: drop it by starting over from n's only.
    let old = client_config();
    let later = loop {
        let before = (now() / PERIOD).floor();
        assert!(!resumed(&one, &old));
        if (now() / PERIOD).floor() == before {
            break before;
        }
    };
    let after_next = (later + 2.0) * PERIOD + 0.2;
    std::thread::sleep(Duration::from_secs_f64((after_next - now()).max(0.0)));
    assert!(
        !resumed(&two, &old),
        "a ticket of period n is refused in n + 2"
    );
}
