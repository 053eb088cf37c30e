//! Redirects pass the request's query on (as Netlify does) unless their
//! target has its own, and the not-found page answers 404 at its own
//! URLs: over HTTP/1.1 and HTTP/2 (h2c, and h2 over TLS in TLS mode), on
//! a pack built from a site with `_redirects`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use kiln::build::{BuildOptions, build_pack};

const REDIRECTS: &str = "\
/old /new 301
/moved /new#top 302
/ext https://example.org/a?b=c 307
/blog/:slug /posts/:slug 301
/news/* /blog/:splat 308
/away/* https://example.org/x?keep=1 302
";

fn site_pack(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    for (path, body) in [
        ("index.html", "home"),
        ("new.html", "new"),
        ("dir/index.html", "dir index"),
        ("404.html", "custom 404"),
        ("_redirects", REDIRECTS),
    ] {
        let p = src.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    let out = dir.join("site.pack");
    build_pack(&src, &out, &BuildOptions::default()).unwrap();
    out
}

/// (target requested, status, Location expected).
const CASES: &[(&str, u16, &str)] = &[
    ("/old?x=1&y=%20z", 301, "/new?x=1&y=%20z"),
    ("/old", 301, "/new"),
    ("/old?", 301, "/new"),
    ("/moved?x=1", 302, "/new?x=1#top"),
    ("/ext?x=1", 307, "https://example.org/a?b=c"),
    ("/dir?x=1", 301, "/dir/?x=1"),
    ("/blog/hello?utm_source=a", 301, "/posts/hello?utm_source=a"),
    ("/news/2024/a?p=2", 308, "/blog/2024/a?p=2"),
    ("/away/a?x=1", 302, "https://example.org/x?keep=1"),
    // A placeholder or splat is decoded from the path and encoded again
    // in the Location: what was data (`%`, `?`, `#`, spaces, quotes,
    // UTF-8) stays data; what a path may hold as is stays as is.
    ("/news/100%25.txt", 308, "/blog/100%25.txt"),
    ("/news/what%3F.txt?p=1", 308, "/blog/what%3F.txt?p=1"),
    ("/blog/x%3Fy%23z", 301, "/posts/x%3Fy%23z"),
    (
        "/news/a%20b/%22%3C%3E%5E%60%7B%7C%7D",
        308,
        "/blog/a%20b/%22%3C%3E%5E%60%7B%7C%7D",
    ),
    ("/news/caf%C3%A9", 308, "/blog/caf%C3%A9"),
    (
        "/news/a-._~!$&'()*+,;=:@z",
        308,
        "/blog/a-._~!$&'()*+,;=:@z",
    ),
];

#[test]
fn redirects_keep_the_query_over_http1() {
    let dir = tempfile::tempdir().unwrap();
    let pack = site_pack(dir.path());
    let s = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    let cache_control = s.get("/old", "").header("Cache-Control");
    assert!(cache_control.is_some());
    for &(target, status, location) in CASES {
        for method in ["GET", "HEAD"] {
            let r = s.request(method, target, "");
            assert_eq!(r.status, status, "{method} {target}");
            assert_eq!(
                r.header("Location").as_deref(),
                Some(location),
                "{method} {target}"
            );
        }
    }
    // With the query passed on, the stored redirect keeps its caching and
    // leaves its page out.
    let r = s.get("/old?x=1", "");
    assert_eq!(r.header("Cache-Control"), cache_control);
    assert_eq!(r.header("Content-Length").as_deref(), Some("0"));
    assert!(r.body.is_empty());
    assert_eq!(r.header("Content-Type"), None);
    assert_eq!(r.head.matches("\r\nLocation:").count(), 1, "{}", r.head);
    // Without one, the stored answer as is.
    let r = s.get("/old", "");
    assert!(!r.body.is_empty());
    assert_eq!(r.header("Content-Length"), Some(r.body.len().to_string()));
}

#[test]
fn the_not_found_page_answers_404_at_its_own_urls() {
    let dir = tempfile::tempdir().unwrap();
    let pack = site_pack(dir.path());
    let s = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    for target in ["/404", "/404.html", "/nope"] {
        let r = s.get(target, "");
        assert_eq!(
            (r.status, r.body.as_slice()),
            (404, &b"custom 404"[..]),
            "{target}"
        );
        assert_eq!(r.header("ETag"), None, "{target}: no validators on a 404");
    }
    let r = s.get("/new", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"new"[..]));
}

/// Status and `location` of `url` fetched by curl with `version`.
fn curl(url: &str, version: &str) -> (String, Option<String>) {
    let out = Command::new("curl")
        .args(["-sS", "-k", "--max-time", "10", version, "-D", "-", "-o"])
        .arg("/dev/null")
        .arg(url)
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl {version} {url}");
    let head = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(head.starts_with("HTTP/2 "), "{version} {url}: {head}");
    let status = head.split_whitespace().nth(1).unwrap().to_string();
    let location = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("location")
            .then(|| value.trim().to_string())
    });
    (status, location)
}

#[test]
fn redirects_keep_the_query_over_http2() {
    if !curl_has_http2() {
        eprintln!("curl without HTTP/2; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = site_pack(dir.path());
    let s = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    let mut bases = vec![(
        format!("http://127.0.0.1:{}", s.port),
        "--http2-prior-knowledge",
    )];
    if let Some(tls) = s.tls_port {
        bases.push((format!("https://127.0.0.1:{tls}"), "--http2"));
    }
    for (base, version) in &bases {
        for &(target, status, location) in CASES {
            let got = curl(&format!("{base}{target}"), version);
            assert_eq!(
                got,
                (status.to_string(), Some(location.to_string())),
                "{version} {target}"
            );
        }
        assert_eq!(curl(&format!("{base}/404"), version).0, "404");
    }
}
