//! `kiln publish` and `kiln serve s3://BUCKET/PREFIX/` against a real
//! MinIO on loopback (tests/common/minio.rs; skipped, saying so, without
//! it): packs published then served over real sockets, a change served
//! within two sync intervals, a deletion gone, corrupt and truncated
//! objects refused while the previous pack serves on, the store stopped
//! and started again, SIGHUP, wrong credentials, a killed worker
//! restarted, and a warm cache served at start with the store down. Each
//! test runs its own MinIO and server (on the connection layer and with
//! the TLS mode of the run, as every serve test).

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::minio::Minio;
use common::{Launch, Server, version_pack};

/// How long anything the tests wait for may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// `kiln publish PACK s3://sites/KEY`; its summary line, one line.
fn publish(minio: &Minio, pack: &Path, key: &str) -> String {
    let stdout = minio.publish(pack, key);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    stdout
}

/// A pack whose /version.txt says `version`, in `dir`.
fn pack(dir: &Path, version: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{version}.pack"));
    version_pack(&path, version);
    path
}

/// Starts `kiln serve s3://sites/prod/` on `minio`, listing every
/// `interval` seconds, with its metrics listener.
fn serve(minio: &Minio, cache: &Path, interval: &str, env: Vec<(&'static str, String)>) -> Server {
    let endpoint = minio.endpoint();
    let cache = cache.to_str().unwrap();
    Server::launch(
        &[
            "s3://sites/prod/",
            "--store-endpoint",
            &endpoint,
            "--cache-dir",
            cache,
            "--sync-interval",
            interval,
            "--metrics",
            "127.0.0.1:0",
        ],
        Launch {
            env,
            ..Launch::default()
        },
    )
}

/// GET /version.txt of `host`: the status code and body.
fn version(server: &Server, host: &str) -> (u16, String) {
    let response = server.get_host(host, "/version.txt");
    let body = String::from_utf8_lossy(&response.body).into_owned();
    (response.status, body)
}

/// Waits until `host` serves `expected` (a body, or the status when
/// `None`); how long it took.
fn wait_for(server: &Server, host: &str, expected: Option<&str>, status: u16) -> Duration {
    let started = Instant::now();
    loop {
        let got = version(server, host);
        if got.0 == status && expected.is_none_or(|body| got.1 == body) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{host} still answers {got:?} after {PATIENCE:?}: {}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET /ready` on the metrics listener: its status code.
fn ready(server: &Server) -> u16 {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.metrics_port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /ready HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text[9..12].parse().unwrap()
}

#[test]
fn published_packs_are_served_and_changes_and_deletions_follow() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let published = publish(&minio, &pack(dir.path(), "a-v1"), "prod/a.test.pack");
    assert!(published.starts_with("published "), "{published}");
    publish(&minio, &pack(dir.path(), "b-v1"), "prod/b.test.pack");
    let cache = dir.path().join("cache");
    let interval = 1.0;
    let server = serve(&minio, &cache, "1", minio.env());
    // The first listing is done before the server starts serving.
    assert_eq!(version(&server, "a.test"), (200, "a-v1".to_owned()));
    assert_eq!(version(&server, "b.test"), (200, "b-v1".to_owned()));
    assert_eq!(ready(&server), 200);
    // The cache folder the server made, into which the bucket's private
    // keys are mirrored too, is closed to other users.
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750, "the cache folder's mode: {mode:o}");
    let metrics = server.metrics();
    assert!(metrics.contains("kiln_store_up 1"), "{metrics}");
    assert!(
        metrics.contains("kiln_store_object_info{name=\"a.test.pack\""),
        "{metrics}"
    );
    // A new version: served within two intervals of its upload (give or
    // take the 20 % jitter and a reload).
    publish(&minio, &pack(dir.path(), "a-v2"), "prod/a.test.pack");
    let took = wait_for(&server, "a.test", Some("a-v2"), 200);
    eprintln!("a published pack served after {} ms", took.as_millis());
    assert!(
        took.as_secs_f64() < 2.0 * interval * 1.2 + 1.0,
        "served after {took:?}"
    );
    // A deleted one: gone from the cache and no longer served.
    minio.delete("prod/b.test.pack");
    wait_for(&server, "b.test", None, 421);
    wait_until(|| !cache.join("b.test.pack").exists());
    // Hidden state and temporary files are not warned about as strays.
    let log = server.stderr_text();
    assert!(!log.contains(".kiln-store"), "{log}");
}

/// Waits until `done`.
fn wait_until(done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "not done after {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn corrupt_and_truncated_objects_are_refused_while_the_previous_pack_serves() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    publish(&minio, &pack(dir.path(), "v1"), "prod/a.test.pack");
    let server = serve(&minio, &dir.path().join("cache"), "0.5", minio.env());
    assert_eq!(version(&server, "a.test"), (200, "v1".to_owned()));
    let good = std::fs::read(pack(dir.path(), "v2-longer")).unwrap();
    // One byte flipped in the middle: the checksums catch it.
    let mut corrupt = good.clone();
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xff;
    let path = dir.path().join("corrupt");
    std::fs::write(&path, &corrupt).unwrap();
    minio.put_raw("prod/a.test.pack", &path);
    server.wait_for_log(&["refused s3://sites/prod/a.test.pack"]);
    assert_eq!(version(&server, "a.test"), (200, "v1".to_owned()));
    // Cut short.
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    minio.put_raw("prod/a.test.pack", &path);
    wait_until(|| server.stderr_text().matches("refused s3://").count() == 2);
    assert_eq!(version(&server, "a.test"), (200, "v1".to_owned()));
    // Refused once each: not again at every listing.
    std::thread::sleep(Duration::from_secs(2));
    let log = server.stderr_text();
    assert_eq!(log.matches("refused s3://").count(), 2, "{log}");
    assert!(log.contains("the previous one keeps serving"), "{log}");
    let metrics = server.metrics();
    assert!(
        metrics.contains("kiln_store_fetch_errors_total 2"),
        "{metrics}"
    );
    // A good one after them is taken.
    publish(&minio, &pack(dir.path(), "v3"), "prod/a.test.pack");
    wait_for(&server, "a.test", Some("v3"), 200);
}

#[test]
fn cached_sites_serve_on_while_the_store_is_down_with_one_line_per_outage() {
    let Some(mut minio) = Minio::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    publish(&minio, &pack(dir.path(), "v1"), "prod/a.test.pack");
    let server = serve(&minio, &dir.path().join("cache"), "0.3", minio.env());
    assert_eq!(version(&server, "a.test"), (200, "v1".to_owned()));
    minio.stop();
    server.wait_for_log(&["store down: cannot list s3://sites/prod/"]);
    // Several listings fail meanwhile; the site serves throughout.
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(3) {
        assert_eq!(version(&server, "a.test"), (200, "v1".to_owned()));
        std::thread::sleep(Duration::from_millis(100));
    }
    let metrics = server.metrics();
    assert!(metrics.contains("kiln_store_up 0"), "{metrics}");
    assert_eq!(ready(&server), 200, "cached sites serve: still ready");
    minio.resume();
    server.wait_for_log(&["store back: listed s3://sites/prod/"]);
    let log = server.stderr_text();
    assert_eq!(log.matches("store down").count(), 1, "{log}");
    assert_eq!(log.matches("store back").count(), 1, "{log}");
    publish(&minio, &pack(dir.path(), "v2"), "prod/a.test.pack");
    wait_for(&server, "a.test", Some("v2"), 200);
}

#[test]
fn sighup_lists_the_store_at_once() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    publish(&minio, &pack(dir.path(), "v1"), "prod/a.test.pack");
    // An interval no test waits for: only SIGHUP brings the change.
    let server = serve(&minio, &dir.path().join("cache"), "600", minio.env());
    assert_eq!(version(&server, "a.test"), (200, "v1".to_owned()));
    publish(&minio, &pack(dir.path(), "v2"), "prod/a.test.pack");
    server.signal(libc::SIGHUP);
    wait_for(&server, "a.test", Some("v2"), 200);
}

#[test]
fn wrong_credentials_are_said_in_one_clear_line() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let wrong = vec![
        ("AWS_ACCESS_KEY_ID", "nobody-knows".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "wrong-secret".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("publish")
        .arg(pack(dir.path(), "v1"))
        .arg("s3://sites/prod/a.test.pack")
        .args(["--store-endpoint", &minio.endpoint()])
        .envs(wrong.clone())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let place = format!("sites at {}", minio.endpoint());
    assert!(
        stderr.contains("wrong credentials") && stderr.contains(&place),
        "{stderr}"
    );
    let server = serve(&minio, &dir.path().join("cache"), "0.5", wrong);
    let log = server.wait_for_log(&["wrong credentials: InvalidAccessKeyId"]);
    let line = log
        .lines()
        .find(|l| l.contains("wrong credentials"))
        .unwrap();
    assert!(line.contains(&place), "{line}");
    // Nothing listed and nothing cached: not ready.
    assert_eq!(ready(&server), 503);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(server.stderr_text().matches("wrong credentials").count(), 1);
}

/// The children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

#[test]
fn a_store_worker_that_dies_is_restarted() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    publish(&minio, &pack(dir.path(), "v1"), "prod/a.test.pack");
    let server = serve(&minio, &dir.path().join("cache"), "0.5", minio.env());
    assert_eq!(version(&server, "a.test"), (200, "v1".to_owned()));
    // The server's child is the supervisor; its child, the worker.
    let supervisor = children(server.child.id());
    assert_eq!(supervisor.len(), 1, "{supervisor:?}");
    let worker = children(supervisor[0]);
    assert_eq!(worker.len(), 1, "{worker:?}");
    // SAFETY: kill(2) on a process of this test's server.
    unsafe { libc::kill(worker[0] as i32, libc::SIGKILL) };
    server.wait_for_log(&["restarting in 1 s"]);
    publish(&minio, &pack(dir.path(), "v2"), "prod/a.test.pack");
    wait_for(&server, "a.test", Some("v2"), 200);
    // The server going ends both.
    let restarted = children(supervisor[0]);
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert_ne!(restarted, worker);
    drop(server);
    for pid in [supervisor[0], restarted[0]] {
        wait_until(|| !Path::new(&format!("/proc/{pid}")).exists());
    }
}

#[test]
fn a_warm_cache_serves_at_start_with_the_store_down_and_follows_it_once_back() {
    let Some(mut minio) = Minio::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    publish(&minio, &pack(dir.path(), "a-v1"), "prod/a.test.pack");
    publish(&minio, &pack(dir.path(), "b-v1"), "prod/b.test.pack");
    let first = serve(&minio, &cache, "0.5", minio.env());
    assert_eq!(version(&first, "b.test"), (200, "b-v1".to_owned()));
    drop(first);
    // Deleted, and the store down, while no node ran.
    minio.delete("prod/b.test.pack");
    minio.stop();
    let server = serve(&minio, &cache, "0.5", minio.env());
    assert_eq!(version(&server, "a.test"), (200, "a-v1".to_owned()));
    assert_eq!(version(&server, "b.test"), (200, "b-v1".to_owned()));
    assert_eq!(ready(&server), 200, "the cache holds sites: ready");
    minio.resume();
    server.wait_for_log(&["store back"]);
    wait_for(&server, "b.test", None, 421);
    // What the cache held unchanged is not fetched again.
    let log = server.stderr_text();
    assert!(!log.contains("fetched a.test.pack"), "{log}");
}

#[test]
fn kiln_build_to_an_s3_url_publishes_the_pack() {
    let Some(minio) = Minio::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir(&site).unwrap();
    std::fs::write(site.join("version.txt"), "built-v1").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("build")
        .arg(&site)
        .args(["-o", "s3://sites/prod/c.test.pack", "-q"])
        .args(["--store-endpoint", &minio.endpoint()])
        .envs(minio.env())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("to s3://sites/prod/c.test.pack"),
        "{stdout}"
    );
    let server = serve(&minio, &dir.path().join("cache"), "0.5", minio.env());
    assert_eq!(version(&server, "c.test"), (200, "built-v1".to_owned()));
}
