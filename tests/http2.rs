//! HTTP/2: h2c by prior knowledge and h2 over TLS (ALPN), checked with
//! clients kiln shares no code with: h2spec (every test case) and curl
//! (every route of the example site, byte for byte what HTTP/1.1 gets).
//! Not a `serve_*` file: it starts its own cleartext and TLS listeners,
//! so `./test` runs it once.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Server;

/// A server with a cleartext and a TLS listener on the example site.
fn start(dir: &std::path::Path) -> Server {
    let pack = common::example_pack(dir);
    let server = Server::start(&[
        pack.to_str().unwrap(),
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
    ]);
    assert!(server.tls_port.is_some(), "{}", server.startup);
    server
}

/// h2spec, where `./test` installs it (`go install`), or on PATH.
fn h2spec() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let gopath = std::env::var_os("GOPATH").map(PathBuf::from);
    let candidates = [
        gopath.map(|p| p.join("bin/h2spec")),
        home.map(|p| p.join("go/bin/h2spec")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .or_else(|| {
            Command::new("h2spec")
                .arg("--version")
                .output()
                .ok()
                .map(|_| PathBuf::from("h2spec"))
        })
}

/// The example site's paths the comparisons with HTTP/1.1 fetch: pages,
/// a stylesheet, a directory redirect and a 404.
const PATHS: [&str; 6] = [
    "/",
    "/about/",
    "/style.css",
    "/missing",
    "/about",
    "/index.html",
];

#[test]
fn h2spec_passes_every_case_over_h2c_and_tls() {
    let Some(h2spec) = h2spec() else {
        eprintln!("h2spec not installed (./test installs it with `go install`); skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let tls_port = server.tls_port.unwrap().to_string();
    let port = server.port.to_string();
    for (name, args) in [
        ("h2c", vec!["-p", port.as_str()]),
        ("tls", vec!["-p", tls_port.as_str(), "-t", "-k"]),
    ] {
        let output = Command::new(&h2spec)
            .args(["-h", "127.0.0.1", "-o", "5"])
            .args(&args)
            .output()
            .expect("run h2spec");
        let report = String::from_utf8_lossy(&output.stdout);
        let summary = report
            .lines()
            .rev()
            .find(|l| l.contains("tests,"))
            .unwrap_or_default();
        assert!(
            output.status.success() && summary.contains(" 0 failed"),
            "h2spec over {name}: {summary}\n{report}\nserver: {}",
            server.stderr_text()
        );
    }
}

/// Every route of the example site, as curl receives it over HTTP/1.1,
/// h2c and h2 over TLS, for each encoding: the same status, the same body
/// bytes (not decoded) and the same representation headers.
#[test]
fn curl_gets_every_variant_as_over_http1() {
    if !common::curl_has_http2() {
        eprintln!("curl without HTTP/2; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let plain = format!("http://127.0.0.1:{}", server.port);
    let tls = format!("https://localhost:{}", server.tls_port.unwrap());
    let resolve = format!("localhost:{}:127.0.0.1", server.tls_port.unwrap());
    let paths = PATHS;
    for path in paths {
        for encoding in ["br", "gzip", "zstd", "identity"] {
            let get = |base: &str, version: &str| {
                let body = dir.path().join("body");
                let output = Command::new("curl")
                    .args(["-s", "-k", "--resolve", &resolve, version])
                    .args(["-H", &format!("Accept-Encoding: {encoding}")])
                    .args(["-D", "-", "-o"])
                    .arg(&body)
                    .arg(format!("{base}{path}"))
                    .output()
                    .expect("curl");
                assert!(output.status.success(), "curl {version} {base}{path}");
                let head = String::from_utf8_lossy(&output.stdout).to_lowercase();
                let mut words = head.split_whitespace();
                let protocol = words.next().unwrap_or_default().to_string();
                let status = words.next().unwrap_or_default().to_string();
                let fields: Vec<String> = head
                    .lines()
                    .filter(|l| {
                        [
                            "content-type",
                            "content-encoding",
                            "etag",
                            "content-length",
                            "location",
                        ]
                        .iter()
                        .any(|n| l.starts_with(&format!("{n}:")))
                    })
                    .map(|l| l.trim().to_string())
                    .collect();
                let response = (status, fields, std::fs::read(&body).unwrap_or_default());
                (protocol, response)
            };
            let (protocol, http1) = get(&plain, "--http1.1");
            assert_eq!(protocol, "http/1.1");
            let (protocol, h2c) = get(&plain, "--http2-prior-knowledge");
            assert_eq!(protocol, "http/2", "{path}: h2c");
            let (protocol, h2) = get(&tls, "--http2");
            assert_eq!(protocol, "http/2", "{path}: ALPN h2");
            assert_eq!(http1, h2c, "{path} {encoding}: HTTP/1.1 against h2c");
            assert_eq!(http1, h2, "{path} {encoding}: HTTP/1.1 against h2 over TLS");
        }
    }
}

/// Fields of a response as compared: lowercase, sorted, without `date`
/// and `connection` (per message), the status first.
fn comparable(status: &str, fields: impl Iterator<Item = String>) -> Vec<String> {
    let mut fields: Vec<String> = fields
        .filter(|l| !l.starts_with("date:") && !l.starts_with("connection:"))
        .collect();
    fields.sort();
    fields.insert(0, status.to_string());
    fields
}

/// A response over HTTP/1.1, by curl.
fn http1_head(resolve: &str, url: &str) -> Vec<String> {
    let output = Command::new("curl")
        .args(["-s", "-k", "--resolve", resolve, "--http1.1"])
        .args([
            "-H",
            "Accept-Encoding: br, gzip",
            "-D",
            "-",
            "-o",
            "/dev/null",
            url,
        ])
        .output()
        .expect("curl");
    assert!(output.status.success(), "curl {url}");
    let text = String::from_utf8_lossy(&output.stdout).to_lowercase();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1));
    comparable(status.unwrap_or_default(), lines.map(String::from))
}

/// The responses to `urls`, all requested on one HTTP/2 connection by
/// nghttp (nghttp2's HPACK decoder, which keeps the dynamic table across
/// blocks as every client does), in the order of `urls`; `None` without
/// nghttp.
fn h2_heads_of_one_connection(urls: &[String]) -> Option<Vec<Vec<String>>> {
    let output = Command::new("nghttp")
        .args(["-n", "-v", "-H", "accept-encoding: br, gzip"])
        .args(urls)
        .output()
        .ok()?;
    assert!(output.status.success(), "nghttp");
    let text = String::from_utf8_lossy(&output.stdout).to_lowercase();
    let mut streams: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    for line in text.lines() {
        let Some((_, rest)) = line.split_once("] recv (stream_id=") else {
            continue;
        };
        let (id, field) = rest.split_once(") ").expect("a field line");
        streams
            .entry(id.parse().expect("a stream id"))
            .or_default()
            .push(field.trim().to_string());
    }
    let heads = streams
        .into_values()
        .map(|fields| {
            let status = fields[0].strip_prefix(":status: ").expect(":status first");
            comparable(status, fields[1..].iter().cloned())
        })
        .collect();
    Some(heads)
}

/// Pages fetched over one HTTP/2 connection (h2c and h2 over TLS), several
/// times: every response has exactly the fields HTTP/1.1 gives, whether
/// its shared fields were inserted or named by index.
#[test]
fn one_connection_gets_every_field_as_over_http1() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let resolve = format!("localhost:{}:127.0.0.1", server.tls_port.unwrap());
    let paths = PATHS;
    for base in [
        format!("http://127.0.0.1:{}", server.port),
        format!("https://localhost:{}", server.tls_port.unwrap()),
    ] {
        // Distinct URLs (nghttp asks once for each), the same pages.
        let urls: Vec<String> = (0..3)
            .flat_map(|round| paths.iter().map(move |p| (round, p)))
            .map(|(round, p)| format!("{base}{p}?{round}"))
            .collect();
        let Some(h2) = h2_heads_of_one_connection(&urls) else {
            eprintln!("no nghttp (nghttp2-client); skipped");
            return;
        };
        assert_eq!(h2.len(), urls.len(), "{base}");
        for (url, h2) in urls.iter().zip(&h2) {
            assert_eq!(h2, &http1_head(&resolve, url), "{url}");
        }
    }
}
