//! `--tls-ticket-keys s3://BUCKET/KEY` and `--quic-host-key s3://…`: a
//! secret kept in the store (a real MinIO on loopback,
//! tests/common/minio.rs; skipped, saying so, without it). Two separate
//! nodes given the same object resume each other's TLS 1.3 sessions over
//! real sockets; an object that cannot be fetched (absent, too short)
//! stops the server at start with one line naming it.

mod common;

use std::path::Path;
use std::process::Command;

use common::minio::Minio;
use common::*;

const TICKET_KEYS: &str = "s3://sites/secrets/ticket.key";

/// A server of the sample pack on a TLS port, self-signed, with its
/// ticket keys (and `extra`) from the store of `minio`.
fn node(minio: &Minio, dir: &Path, extra: &[&str]) -> Server {
    let pack = sample_pack(dir);
    let endpoint = minio.endpoint();
    let mut args = vec![
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
        "--tls-ticket-keys",
        TICKET_KEYS,
        "--store-endpoint",
        &endpoint,
    ];
    args.extend_from_slice(extra);
    Server::launch(
        &args,
        Launch {
            env: minio.env(),
            ..Launch::default()
        },
    )
}

/// `kiln serve` with `args` run to its end: its failure's stderr.
fn refused(minio: &Minio, dir: &Path, args: &[&str]) -> String {
    let pack = sample_pack(dir);
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("serve")
        .arg(&pack)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store-endpoint",
            &minio.endpoint(),
        ])
        .args(args)
        .envs(minio.env())
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn nodes_given_the_same_object_resume_each_others_sessions() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("ticket.key");
    std::fs::write(&secret, b"thirty-two bytes of test secret!").unwrap();
    minio.put_raw("secrets/ticket.key", &secret);
    minio.put_raw("secrets/quic.key", &secret);
    let quic = ["--quic-host-key", "s3://sites/secrets/quic.key"];
    let (one, two) = (
        node(&minio, dir.path(), &quic),
        node(&minio, dir.path(), &[]),
    );
    let config = insecure_client_config_for(&[&rustls::version::TLS13], &[b"http/1.1"]);
    assert!(!resumed(&one, &config), "the first handshake is full");
    assert!(resumed(&two, &config), "node 2 resumes node 1's session");
    assert!(resumed(&one, &config), "node 1 resumes node 2's session");
}

#[test]
fn a_secret_that_cannot_be_fetched_stops_the_server_in_one_line() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let absent = refused(
        &minio,
        dir.path(),
        &["--tls-ticket-keys", "s3://sites/secrets/absent.key"],
    );
    assert_eq!(absent.lines().count(), 1, "{absent}");
    assert!(
        absent.contains(
            "--tls-ticket-keys s3://sites/secrets/absent.key: cannot fetch it: no such object"
        ),
        "{absent}"
    );
    let short = dir.path().join("short.key");
    std::fs::write(&short, b"too short").unwrap();
    minio.put_raw("secrets/short.key", &short);
    let text = refused(
        &minio,
        dir.path(),
        &["--quic-host-key", "s3://sites/secrets/short.key"],
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("--quic-host-key s3://sites/secrets/short.key: 9 bytes, fewer than the 32"),
        "{text}"
    );
}
