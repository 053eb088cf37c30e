//! `kiln serve s3://… --cache-size` against a real MinIO on loopback
//! (tests/common/minio.rs; skipped, saying so, without it): a cache that
//! holds three packs of a bucket of six. A cold site's first request
//! waits for its pack and gets the right body (over HTTP/1.1, HTTP/2 and
//! HTTP/3); twenty concurrent requests for one cold site make one fetch
//! (over HTTP/1.1, and on one HTTP/3 connection); the cache
//! stays within its size as least recently used packs are evicted, and an
//! evicted site answers again; a host the bucket does not hold gets 421
//! without a fetch; with the store stopped a cold site gets 503 with
//! `Retry-After` at once while cached sites answer.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::minio::Minio;
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
        minio.publish(&path, &format!("prod/{host}.pack"));
    }
    largest
}

/// `kiln serve s3://sites/prod/ --cache-size SIZE` on `minio`.
fn serve(minio: &Minio, cache: &Path, size: u64) -> Server {
    serve_with(minio, cache, size, "20", &[])
}

/// `serve`, a request waiting `fetch_timeout` seconds for its cold site,
/// with `extra` flags.
fn serve_with(
    minio: &Minio,
    cache: &Path,
    size: u64,
    fetch_timeout: &str,
    extra: &[&str],
) -> Server {
    let endpoint = minio.endpoint();
    let size = size.to_string();
    let mut args = vec![
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
        fetch_timeout,
        "--metrics",
        "127.0.0.1:0",
    ];
    args.extend(extra);
    Server::launch(
        &args,
        Launch {
            env: minio.env(),
            ..Launch::default()
        },
    )
}

/// GET /version.txt of `host` over HTTP/1.1: the status code, the
/// response's head and its body.
fn get(server: &Server, host: &str) -> (u16, String, String) {
    let response = server.get_host(host, "/version.txt");
    let body = String::from_utf8_lossy(&response.body).into_owned();
    (response.status, response.head, body)
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

/// The SHA-256 of `bytes` in hex, as `h3client.py many` gives each body's.
fn sha256_hex(bytes: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The TLS listener whose UDP twin serves HTTP/3.
const TLS: [&str; 3] = ["--listen-tls", "127.0.0.1:0", "--tls-self-signed"];

/// `h3client.py get` of /version.txt of `host` over HTTP/3, waiting as
/// long as the tests wait for anything: its JSON answer.
fn get_h3(port: u16, host: &str) -> serde_json::Value {
    let wait = PATIENCE.as_secs().to_string();
    let get = ["get", "/version.txt", "--authority", host, "--wait", &wait];
    common::h3client::run(port, &get).remove(0)
}

#[test]
fn a_cold_site_is_fetched_at_its_first_request_over_http3() {
    if !common::h3client::available() {
        return;
    }
    let Some(minio) = Minio::start() else { return };
    let (dir, _, size) = setup(&minio);
    for backend in common::h3client::BACKENDS {
        let cache = dir.path().join(format!("cache-{backend}"));
        let extra = [&TLS[..], &["--io", backend]].concat();
        let server = serve_with(&minio, &cache, size, "20", &extra);
        let port = server.tls_port.expect("a TLS listener");
        wait_until("three packs cached", &server, || cached(&cache).len() == 3);

        // A cold site's first request is parked until its pack lands,
        // then answered.
        let asks = metric(&server, "kiln_store_fetch_asks_total");
        let cold = a_cold_host(&cache);
        let answer = get_h3(port, cold);
        let stderr = server.stderr_text();
        assert_eq!(answer["status"], 200, "{backend}: {answer}: {stderr}");
        let body: String = format!("{cold}-v1")
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(answer["body"], body.as_str(), "{backend}: {answer}");
        assert_eq!(metric(&server, "kiln_store_fetch_asks_total"), asks + 1);
        wait_until("the cold fetch counted", &server, || {
            metric(&server, "kiln_store_cold_fetches_total") == 1
        });
        assert_eq!(metric(&server, "kiln_store_cold_timeouts_total"), 0);
        within_size(&cache, 3);

        // Twenty concurrent requests on one connection: one fetch, each
        // answered with the body.
        let cold = a_cold_host(&cache);
        let asks = metric(&server, "kiln_store_fetch_asks_total");
        let many = ["many", "20", "/version.txt", "--authority", cold];
        let result = &common::h3client::run(port, &many)[0];
        let want = sha256_hex(format!("{cold}-v1").as_bytes());
        let responses = result["responses"].as_array().expect("responses");
        assert_eq!(responses.len(), 20);
        for r in responses {
            let stderr = server.stderr_text();
            assert_eq!(r[0], 200, "{backend}: {result}: {stderr}");
            assert_eq!(r[1].as_str(), Some(want.as_str()), "a body differs");
        }
        assert_eq!(metric(&server, "kiln_store_fetch_asks_total"), asks + 1);
        wait_until("the second cold fetch counted", &server, || {
            metric(&server, "kiln_store_cold_fetches_total") == 2
        });
        within_size(&cache, 3);
    }
}

/// A host whose object is not a pack: its fetch fails, and a request for
/// it waits out `--fetch-timeout` (7 s, past the test client's idle
/// timeout of 5 s: the server keeps the connection alive meanwhile).
#[test]
fn a_parked_http3_request_gets_503_at_its_deadline_on_a_connection_kept_open() {
    if !common::h3client::available() {
        return;
    }
    let Some(minio) = Minio::start() else { return };
    let (dir, cache, size) = setup(&minio);
    let junk = dir.path().join("junk.pack");
    std::fs::write(&junk, b"not a pack").unwrap();
    minio.put_raw("prod/junk.test.pack", &junk);
    let server = serve_with(&minio, &cache, size, "7", &TLS);
    let port = server.tls_port.expect("a TLS listener");
    wait_until("three packs cached", &server, || cached(&cache).len() == 3);

    let started = Instant::now();
    let answer = get_h3(port, "junk.test");
    let stderr = server.stderr_text();
    assert_eq!(answer["status"], 503, "{answer}: {stderr}");
    assert!(
        started.elapsed() >= Duration::from_secs(6),
        "answered before its deadline: {answer}"
    );
    let retry_after = serde_json::json!(["retry-after", "1"]);
    let headers = answer["headers"].as_array().expect("headers");
    assert!(headers.contains(&retry_after), "{answer}");
    assert_eq!(metric(&server, "kiln_store_cold_timeouts_total"), 1);
}
