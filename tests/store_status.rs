//! `kiln status`: what a node serving a bucket serves and from where,
//! read from the cache folder of a real `kiln serve s3://…` run against a
//! real MinIO on loopback (tests/common/minio.rs; skipped, saying so,
//! without it): the store and its endpoint, up then down, the last
//! listing, and one line per site with its pack's size and the ETag
//! `kiln publish` reported; the same as JSON, and the same from the
//! server's `--metrics` listener; a folder no node mirrors into and a
//! listener that is not a metrics one, each said in one line.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::minio::Minio;
use common::{Launch, Server, version_pack};

const PATIENCE: Duration = Duration::from_secs(30);

/// `kiln publish` of a pack saying `version` to `key`; the ETag it
/// reports and the pack's size.
fn publish(minio: &Minio, dir: &Path, version: &str, key: &str) -> (String, u64) {
    let pack = dir.join(format!("{version}.pack"));
    version_pack(&pack, version);
    let stdout = minio.publish(&pack, key);
    let etag = stdout
        .trim_end()
        .rsplit_once("(ETag ")
        .map(|(_, e)| e.trim_end_matches(')').to_owned())
        .unwrap_or_else(|| panic!("no ETag in {stdout}"));
    (etag, std::fs::metadata(&pack).unwrap().len())
}

/// `kiln status ARGS`: its exit success, stdout and stderr.
fn status(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("status")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn status_says_what_a_node_serves_and_from_where() {
    let Some(mut minio) = Minio::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (etag_a, size_a) = publish(&minio, dir.path(), "a-v1", "prod/a.test.pack");
    let (etag_b, size_b) = publish(&minio, dir.path(), "b-v1.longer", "prod/b.test.pack");
    let cache = dir.path().join("cache");
    let endpoint = minio.endpoint();
    let server = Server::launch(
        &[
            "s3://sites/prod/",
            "--store-endpoint",
            &endpoint,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--sync-interval",
            "0.3",
            "--metrics",
            "127.0.0.1:0",
        ],
        Launch {
            env: minio.env(),
            ..Launch::default()
        },
    );
    // The server starts once the first listing and its fetches are done.
    let cache_arg = cache.to_str().unwrap();
    let (ok, text, stderr) = status(&["--cache-dir", cache_arg]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("serving s3://sites/prod/ (sites at {endpoint})"),
        "{text}"
    );
    assert_eq!(lines[1], format!("cache   {cache_arg}"));
    assert!(lines[2].starts_with("store   up since 20"), "{text}");
    assert!(lines[3].starts_with("listed  20"), "{text}");
    assert!(lines[3].contains(" ago), took "), "{text}");
    assert_eq!(lines[4], "2 sites");
    assert!(lines[5].starts_with("HOST    PACK BYTES  ETAG"), "{text}");
    for (line, host, size, etag) in [
        (lines[6], "a.test", size_a, &etag_a),
        (lines[7], "b.test", size_b, &etag_b),
    ] {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[..3], [host, &size.to_string(), etag], "{text}");
        assert!(
            fields[3].starts_with("20") && fields[3].ends_with('Z'),
            "{text}"
        );
    }
    let (ok, json, _) = status(&["--cache-dir", cache_arg, "--json"]);
    assert!(ok);
    assert_eq!(json.lines().count(), 1, "{json}");
    assert!(
        json.starts_with("{\"store\":\"s3://sites/prod/\""),
        "{json}"
    );
    assert!(json.contains("\"up\":true"), "{json}");
    let quoted_etag = etag_a.replace('"', "\\\"");
    assert!(
        json.contains(&format!(
            "{{\"host\":\"a.test\",\"pack_bytes\":{size_a},\"etag\":\"{quoted_etag}\""
        )),
        "{json}"
    );
    // A running server's /metrics says the same.
    let metrics = format!("127.0.0.1:{}", server.metrics_port());
    let (ok, scraped, stderr) = status(&["--metrics", &metrics]);
    assert!(ok, "{stderr}");
    let scraped: Vec<&str> = scraped.lines().collect();
    assert_eq!(scraped[..2], lines[..2], "{scraped:?}");
    assert!(scraped[2].starts_with("store   up since 20"), "{scraped:?}");
    assert_eq!(
        scraped[4..],
        lines[4..],
        "the sites as the cache's state says"
    );
    let (ok, scraped_json, _) = status(&["--metrics", &metrics, "--json"]);
    assert!(ok);
    let sites = |j: &str| j[j.find("\"sites\"").unwrap()..].to_owned();
    assert_eq!(sites(&scraped_json), sites(&json));
    let (ok, _, stderr) = status(&["--metrics", &format!("127.0.0.1:{}", server.port)]);
    assert!(!ok && stderr.lines().count() == 1, "{stderr}");
    // The store stopped: the next listing fails, and status says so.
    minio.stop();
    let started = Instant::now();
    loop {
        let (_, text, _) = status(&["--cache-dir", cache_arg]);
        if text
            .lines()
            .nth(2)
            .is_some_and(|l| l.starts_with("store   DOWN since 20"))
        {
            assert!(text.contains("2 sites"), "the cache still serves: {text}");
            break;
        }
        assert!(started.elapsed() < PATIENCE, "still: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    // A folder no node mirrors into.
    let (ok, _, stderr) = status(&["--cache-dir", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no listing recorded there"), "{stderr}");
}
