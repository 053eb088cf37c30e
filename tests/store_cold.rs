//! `kiln serve s3://… --cache-size` against a real MinIO on loopback
//! (tests/common/minio.rs; skipped, saying so, without it): a cache that
//! holds three packs of a bucket of six. A cold site's first request
//! waits for its pack and gets the right body (over HTTP/1.1 and HTTP/2);
//! twenty concurrent requests for one cold site make one fetch; the cache
//! stays within its size as least recently used packs are evicted, and an
//! evicted site answers again; a host the bucket does not hold gets 421
//! without a fetch; with the store stopped a cold site gets 503 with
//! `Retry-After` at once while cached sites answer.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::minio::{BUCKET, Minio};
use common::{Launch, Server, version_pack};

/// How long anything the tests wait for may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// The sites of the bucket.
const HOSTS: [&str; 6] = ["a.test", "b.test", "c.test", "d.test", "e.test", "f.test"];

/// Publishes a pack whose /version.txt says `HOST-v1` for each of
/// `HOSTS`; the largest pack's size.
fn publish_all(minio: &Minio, dir: &Path) -> u64 {
    let mut largest = 0;
    for host in HOSTS {
        let path = dir.join(format!("{host}.pack"));
        version_pack(&path, &format!("{host}-v1"));
        largest = largest.max(std::fs::metadata(&path).unwrap().len());
        let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("publish")
            .arg(&path)
            .arg(format!("s3://{BUCKET}/prod/{host}.pack"))
            .args(["--store-endpoint", &minio.endpoint()])
            .envs(minio.env())
            .output()
            .expect("run kiln publish");
        assert!(
            out.status.success(),
            "publish {host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    largest
}

/// `kiln serve s3://sites/prod/ --cache-size SIZE` on `minio`.
fn serve(minio: &Minio, cache: &Path, size: u64) -> Server {
    let endpoint = minio.endpoint();
    let size = size.to_string();
    Server::launch(
        &[
            "s3://sites/prod/",
            "--store-endpoint",
            &endpoint,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--sync-interval",
            "1",
            "--cache-size",
            &size,
            "--fetch-timeout",
            "20",
            "--metrics",
            "127.0.0.1:0",
        ],
        Launch {
            env: minio.env(),
            ..Launch::default()
        },
    )
}

/// GET /version.txt of `host` over HTTP/1.1: the status code, the
/// response's head and its body.
fn get(server: &Server, host: &str) -> (u16, String, String) {
    let response = server.raw(&format!(
        "GET /version.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    ));
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no response: {response:?}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (status, head.to_owned(), body.to_owned())
}

/// The hosts whose packs the cache folder holds now.
fn cached(cache: &Path) -> Vec<String> {
    let mut hosts: Vec<String> = std::fs::read_dir(cache)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".pack")
                .map(str::to_owned)
        })
        .collect();
    hosts.sort();
    hosts
}

/// The value of metric `name` (a line `name VALUE`).
fn metric(server: &Server, name: &str) -> u64 {
    let text = server.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}")) as u64
}

/// Waits until `check` holds.
fn wait_until(what: &str, server: &Server, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < PATIENCE,
            "{what}: not after {PATIENCE:?}: {}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A host of `HOSTS` whose pack the cache does not hold.
fn a_cold_host(cache: &Path) -> &'static str {
    let held = cached(cache);
    HOSTS
        .into_iter()
        .find(|h| !held.iter().any(|c| c == h))
        .expect("a cold host")
}

/// Checks that the cache holds at most `fit` packs.
fn within_size(cache: &Path, fit: usize) {
    let held = cached(cache);
    assert!(
        held.len() <= fit,
        "the cache holds {held:?}, more than {fit}"
    );
}

/// The scratch folder and a cache three packs of six fit in.
fn setup(minio: &Minio) -> (tempfile::TempDir, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let largest = publish_all(minio, dir.path());
    let cache = dir.path().join("cache");
    (dir, cache, largest * 3 + largest / 2)
}

#[test]
fn cold_sites_are_fetched_at_their_first_request_once_and_evicted_least_recently_used() {
    let Some(minio) = Minio::start() else { return };
    let (_dir, cache, size) = setup(&minio);
    let server = serve(&minio, &cache, size);
    // The first listing fills the cache up to its size, no further.
    wait_until("three packs cached", &server, || cached(&cache).len() == 3);
    within_size(&cache, 3);
    assert!(metric(&server, "kiln_store_cache_bytes") <= size);
    assert_eq!(metric(&server, "kiln_store_cache_limit_bytes"), size);

    // A host the bucket does not hold: 421, and no fetch asked.
    let asks = metric(&server, "kiln_store_fetch_asks_total");
    assert_eq!(get(&server, "nowhere.test").0, 421);
    assert_eq!(metric(&server, "kiln_store_fetch_asks_total"), asks);

    // A cold site's first request waits for its pack.
    let cold = a_cold_host(&cache);
    let (status, head, body) = get(&server, cold);
    assert_eq!(
        (status, body.as_str()),
        (200, format!("{cold}-v1").as_str()),
        "{head}"
    );
    assert_eq!(metric(&server, "kiln_store_fetch_asks_total"), asks + 1);
    within_size(&cache, 3);
    // The state file is written just after the pack is renamed in.
    wait_until("the cold fetch counted", &server, || {
        metric(&server, "kiln_store_cold_fetches_total") == 1
    });

    // Twenty concurrent requests for one cold site: one fetch.
    let cold = a_cold_host(&cache);
    let fetches = metric(&server, "kiln_store_cold_fetches_total");
    let asks = metric(&server, "kiln_store_fetch_asks_total");
    std::thread::scope(|scope| {
        let waiting: Vec<_> = (0..20)
            .map(|_| scope.spawn(|| get(&server, cold)))
            .collect();
        for request in waiting {
            let (status, head, body) = request.join().unwrap();
            assert_eq!((status, body), (200, format!("{cold}-v1")), "{head}");
        }
    });
    assert_eq!(metric(&server, "kiln_store_fetch_asks_total"), asks + 1);
    wait_until("the cold fetch counted", &server, || {
        metric(&server, "kiln_store_cold_fetches_total") > fetches
    });
    assert_eq!(
        metric(&server, "kiln_store_cold_fetches_total"),
        fetches + 1
    );
    within_size(&cache, 3);

    // Every site, twice round: each answers (the evicted fetched again),
    // and the cache never holds more than three.
    for host in HOSTS.iter().chain(HOSTS.iter()) {
        let (status, head, body) = get(&server, host);
        assert_eq!((status, body), (200, format!("{host}-v1")), "{head}");
        within_size(&cache, 3);
    }
    assert!(metric(&server, "kiln_store_evictions_total") >= 3);
    assert!(metric(&server, "kiln_store_cache_bytes") <= size);

    // Over HTTP/2 (h2c by prior knowledge), by curl.
    if !common::curl_has_http2() {
        eprintln!("curl without HTTP/2; the HTTP/2 part skipped");
        return;
    }
    let mut urls = vec![("--http2-prior-knowledge", server.port, "http")];
    // In TLS mode, h2 over TLS too.
    if let Some(port) = server.tls_port {
        urls.push(("--http2", port, "https"));
    }
    for (flag, port, scheme) in urls {
        let cold = a_cold_host(&cache);
        let output = Command::new("curl")
            .args(["-sk", flag, "-H"])
            .arg(format!("Host: {cold}"))
            .arg(format!("{scheme}://127.0.0.1:{port}/version.txt"))
            .args(["-w", "\n%{http_version} %{http_code}"])
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            text,
            format!("{cold}-v1\n2 200"),
            "{scheme}: {}",
            server.stderr_text()
        );
        within_size(&cache, 3);
    }
}

#[test]
fn a_cold_site_gets_503_at_once_while_the_store_is_down() {
    let Some(mut minio) = Minio::start() else {
        return;
    };
    let (_dir, cache, size) = setup(&minio);
    let server = serve(&minio, &cache, size);
    wait_until("three packs cached", &server, || cached(&cache).len() == 3);
    minio.stop();
    server.wait_for_log(&["store down"]);
    wait_until("kiln_store_up 0", &server, || {
        server.metrics().contains("kiln_store_up 0")
    });
    let cold = a_cold_host(&cache);
    // The server reads the state once a second.
    wait_until("a cold site answered 503", &server, || {
        get(&server, cold).0 == 503
    });
    let started = Instant::now();
    let (status, head, _) = get(&server, cold);
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("\r\nRetry-After: 1\r\n"), "{head}");
    assert!(started.elapsed() < Duration::from_secs(10), "not at once");
    assert!(metric(&server, "kiln_store_cold_store_down_total") >= 1);
    for host in cached(&cache) {
        let (status, head, body) = get(&server, &host);
        assert_eq!((status, body), (200, format!("{host}-v1")), "{head}");
    }
    // Back: the cold site answers again.
    minio.resume();
    wait_until("the cold site served", &server, || {
        get(&server, cold).0 == 200
    });
    assert_eq!(get(&server, cold).2, format!("{cold}-v1"));
}
