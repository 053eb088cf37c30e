//! The AWS shared files: keys only in `~/.aws/credentials` under a
//! temporary HOME (no key in the environment) and the region and
//! endpoint in `~/.aws/config`; `kiln publish` and `kiln serve s3://…`
//! work with them against a real MinIO on loopback
//! (tests/common/minio.rs; skipped, saying so, without it), a named
//! profile (AWS_PROFILE) too, and a profile that neither file has is one
//! line naming both.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::minio::{BUCKET, Minio, PASSWORD, USER};
use common::{Launch, Server, version_pack};

const PATIENCE: Duration = Duration::from_secs(30);

/// A HOME whose `.aws` holds MinIO's keys as the default profile (with
/// `--store-endpoint` to be given) and as the profile `fleet`, whose
/// config also names the endpoint.
fn home(minio: &Minio, dir: &Path) -> String {
    let aws = dir.join("home/.aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        format!(
            "[default]\naws_access_key_id = {USER}\naws_secret_access_key = {PASSWORD}\n\n\
             [fleet]\naws_access_key_id={USER}\naws_secret_access_key={PASSWORD}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[default]\nregion = us-east-1\n\n[profile fleet]\nregion = us-east-1\n\
             endpoint_url = {}\n",
            minio.endpoint()
        ),
    )
    .unwrap();
    dir.join("home").to_str().unwrap().to_owned()
}

/// `kiln ARGS` with only `env` of AWS's variables; its outcome.
fn kiln(args: &[&str], env: &[(&'static str, String)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    for (name, _) in std::env::vars() {
        if name.starts_with("AWS_") {
            command.env_remove(name);
        }
    }
    command
        .args(args)
        .envs(env.iter().cloned())
        .output()
        .unwrap()
}

/// GET /version.txt of `host` until it says `expected`.
fn wait_for(server: &Server, host: &str, expected: &str) {
    let started = Instant::now();
    loop {
        let response = server.raw(&format!(
            "GET /version.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ));
        if response.starts_with("HTTP/1.1 200") && response.ends_with(expected) {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "{host}: {response}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn keys_in_the_shared_files_publish_and_serve() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let home = home(&minio, dir.path());
    let pack = dir.path().join("v1.pack");
    version_pack(&pack, "v1");
    let pack = pack.to_str().unwrap();
    let endpoint = minio.endpoint();
    // The default profile, the endpoint given as a flag.
    let out = kiln(
        &[
            "publish",
            pack,
            "s3://sites/prod/a.test.pack",
            "--store-endpoint",
            &endpoint,
        ],
        &[("HOME", home.clone())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The profile `fleet`: its endpoint from the config file.
    let fleet = [("HOME", home.clone()), ("AWS_PROFILE", "fleet".to_owned())];
    let out = kiln(&["publish", pack, "s3://sites/prod/b.test.pack"], &fleet);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("s3://{BUCKET}/prod/b.test.pack")),
        "{stdout}"
    );
    // A server whose store client (sandboxed: TCP to the store's port
    // only) has only the profile's keys and endpoint.
    let cache = dir.path().join("cache");
    let server = Server::launch(
        &[
            "s3://sites/prod/",
            "--cache-dir",
            cache.to_str().unwrap(),
            "--sync-interval",
            "0.5",
        ],
        Launch {
            env: fleet.to_vec(),
            ..Launch::default()
        },
    );
    wait_for(&server, "a.test", "v1");
    wait_for(&server, "b.test", "v1");
    let log = server.stderr_text();
    assert!(!log.contains("store down"), "{log}");
}

#[test]
fn a_profile_neither_file_has_is_one_line_naming_them() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let home = home(&minio, dir.path());
    let pack = dir.path().join("v1.pack");
    version_pack(&pack, "v1");
    let env = [("HOME", home.clone()), ("AWS_PROFILE", "nope".to_owned())];
    let out = kiln(
        &[
            "publish",
            pack.to_str().unwrap(),
            "s3://sites/prod/a.test.pack",
        ],
        &env,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let expected = format!(
        "AWS_PROFILE=nope: no [nope] in {home}/.aws/credentials and no [profile nope] in {home}/.aws/config"
    );
    assert!(stderr.contains(&expected), "{stderr}");
    // `kiln serve` does not start either, saying the same.
    let cache = dir.path().join("cache");
    let out = kiln(
        &[
            "serve",
            "s3://sites/prod/",
            "--cache-dir",
            cache.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        &env,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&expected), "{stderr}");
}
