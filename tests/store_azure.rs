//! `az://CONTAINER/PREFIX/`: `kiln publish` and `kiln serve` against
//! Azurite, Microsoft's Azure Blob Storage emulator, on loopback
//! (tests/common/azurite.rs; skipped, saying so, without it): the same
//! client code as `s3://` past the builder, so what is checked here is
//! what differs: the URL, the credentials from the environment, a small
//! pack in one PUT and a large one as a block list, the listing's ETags
//! (a change served, a deletion gone) and Azure's errors on one line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::azurite::{Azurite, CONTAINER};
use common::{Launch, Server, version_pack};

/// How long anything the tests wait for may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// `kiln publish PACK az://sites/KEY` with `env`: its output.
fn publish(
    azurite: &Azurite,
    pack: &Path,
    key: &str,
    env: Vec<(&'static str, String)>,
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("publish")
        .arg(pack)
        .arg(format!("az://{CONTAINER}/{key}"))
        .args(["--store-endpoint", &azurite.endpoint()])
        .envs(env)
        .output()
        .expect("run kiln publish")
}

/// Publishes with the right credentials; the summary line.
fn published(azurite: &Azurite, pack: &Path, key: &str) -> String {
    let out = publish(azurite, pack, key, azurite.env());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "publish {key}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pack whose /version.txt says `version`, in `dir`.
fn pack(dir: &Path, version: &str) -> PathBuf {
    let path = dir.join(format!("{version}.pack"));
    version_pack(&path, version);
    path
}

/// A pack of `bytes` bytes that do not compress (so the pack is as
/// large), at /big.bin, built by `kiln build`.
fn big_pack(dir: &Path, bytes: usize) -> PathBuf {
    let site = dir.join("big-site");
    std::fs::create_dir_all(&site).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let body: Vec<u8> = (0..bytes)
        .map(|_| {
            // xorshift: bytes no encoder shrinks.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(site.join("big.bin"), &body).unwrap();
    let path = dir.join("big.pack");
    let status = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("build")
        .arg(&site)
        .arg("-o")
        .arg(&path)
        .arg("-q")
        .status()
        .unwrap();
    assert!(status.success());
    path
}

/// GET `path` of `host`: the status code, the body's length and the body
/// as text (empty beyond 100 bytes).
fn get(server: &Server, host: &str, path: &str) -> (u16, usize, String) {
    let response = server.get_host(host, path);
    let text = match response.body.len() {
        ..100 => String::from_utf8_lossy(&response.body).into_owned(),
        _ => String::new(),
    };
    (response.status, response.body.len(), text)
}

/// Waits until GET /version.txt of `host` answers `status` (with `body`).
fn wait_for(server: &Server, host: &str, status: u16, body: Option<&str>) {
    let started = Instant::now();
    loop {
        let got = get(server, host, "/version.txt");
        if got.0 == status && body.is_none_or(|b| got.2 == b) {
            return;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{host} still answers {got:?} after {PATIENCE:?}: {}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_container_is_served_as_a_folder_of_sites() {
    let Some(azurite) = Azurite::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let line = published(&azurite, &pack(dir.path(), "a-v1"), "prod/a.test.pack");
    assert!(line.starts_with("published "), "{line}");
    // 10 MB: past one part, so uploaded as blocks and committed at once.
    let big = big_pack(dir.path(), 10 << 20);
    let big_len = std::fs::metadata(&big).unwrap().len();
    assert!(big_len > 8 << 20, "{big_len}");
    published(&azurite, &big, "prod/big.test.pack");

    let endpoint = azurite.endpoint();
    let cache = dir.path().join("cache");
    let server = Server::launch(
        &[
            &format!("az://{CONTAINER}/prod/"),
            "--store-endpoint",
            &endpoint,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--sync-interval",
            "0.5",
        ],
        Launch {
            env: azurite.env(),
            ..Launch::default()
        },
    );
    assert_eq!(get(&server, "a.test", "/version.txt").2, "a-v1");
    let (status, len, _) = get(&server, "big.test", "/big.bin");
    assert_eq!((status, len), (200, 10 << 20));

    // A change is found by its ETag; a deletion by its absence.
    published(&azurite, &pack(dir.path(), "a-v2"), "prod/a.test.pack");
    wait_for(&server, "a.test", 200, Some("a-v2"));
    azurite.delete("prod/a.test.pack");
    wait_for(&server, "a.test", 421, None);

    // A wrong key: one line, naming the container and what is wrong
    // (Azurite says AuthorizationFailure where Azure says
    // AuthenticationFailed: both are said as the credentials').
    let wrong = vec![
        (
            "AZURE_STORAGE_ACCOUNT_NAME",
            common::azurite::ACCOUNT.to_owned(),
        ),
        (
            "AZURE_STORAGE_ACCOUNT_KEY",
            "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk=".to_owned(),
        ),
    ];
    let out = publish(&azurite, &pack(dir.path(), "x"), "prod/x.test.pack", wrong);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("credentials") && stderr.contains(&format!("{CONTAINER} at {endpoint}")),
        "{stderr}"
    );
}
