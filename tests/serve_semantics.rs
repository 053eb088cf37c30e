//! Lookup order, redirects and rules, content negotiation, conditional
//! requests and ranges, over real sockets.

mod common;

use std::io::Write;

use common::*;

fn server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let server = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    (dir, server)
}

#[test]
fn lookup_order_and_rules() {
    let (_dir, s) = server();
    let r = s.get("/", "");
    assert_eq!((r.status, r.body.as_slice()), (200, HOME));
    let r = s.get("/index.html?utm=1", "");
    assert_eq!((r.status, r.body.as_slice()), (200, HOME));
    let r = s.get("/a/../hello.txt", "");
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    let r = s.get("http://example.com/hello.txt", "");
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    // Wildcard: the deepest directory fallback, else the 404 page.
    let r = s.get("/docs/a/b/c.html", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"docs fallback"[..]));
    let r = s.get("/nope", "");
    assert_eq!((r.status, r.body.as_slice()), (404, &b"custom 404\n"[..]));
    assert_eq!(
        r.header("Content-Type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    // A stored redirect route.
    let r = s.get("/dir", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("Location").as_deref(), Some("/dir/"));
    // Rules: a redirect with placeholders, a rewrite with a splat, a 404
    // rewrite, an absolute redirect, and a forced rule shadowing a file.
    let r = s.get("/blog/2024/hello", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("Location").as_deref(), Some("/posts/hello-2024"));
    assert_eq!(r.header("Content-Length").as_deref(), Some("0"));
    let r = s.get("/app/deep/route", "");
    assert_eq!((r.status, r.body.as_slice()), (200, HOME));
    let r = s.get("/gone/x", "");
    assert_eq!((r.status, r.body.as_slice()), (404, HELLO));
    let r = s.get("/ext/a/b", "");
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("Location").as_deref(),
        Some("https://example.com/a/b")
    );
    let r = s.get("/forced/a", "");
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    // Dotfiles are hidden, /.well-known/ is served.
    let r = s.get("/.git/config", "");
    assert_eq!(r.status, 404);
    let r = s.get("/.well-known/security.txt", "");
    assert_eq!(r.status, 200);
}

/// The coding `/` is served in when each of `lines` is sent as its own
/// `Accept-Encoding` line. GET and HEAD must agree, and the body must be
/// that variant's.
fn negotiated(s: &Server, lines: &[&str]) -> &'static str {
    let headers = field_lines("Accept-Encoding", lines);
    let get = s.get("/", &headers);
    let head = s.request("HEAD", "/", &headers);
    for r in [&get, &head] {
        assert_eq!(r.status, 200, "{lines:?}");
        assert_eq!(r.header("Vary").as_deref(), Some("Accept-Encoding"));
    }
    let (coding, body) = match get.header("Content-Encoding").as_deref() {
        None => ("identity", HOME),
        Some("gzip") => ("gzip", HOME_GZ),
        Some("br") => ("br", HOME_BR),
        Some(other) => panic!("{lines:?}: unexpected coding {other}"),
    };
    assert_eq!(get.body, body, "{lines:?}");
    assert_eq!(
        (
            head.header("Content-Encoding"),
            head.header("Content-Length")
        ),
        (get.header("Content-Encoding"), get.header("Content-Length")),
        "{lines:?}: HEAD differs from GET"
    );
    coding
}

/// `Name: value` lines, one per value.
fn field_lines(name: &str, values: &[&str]) -> String {
    values.iter().map(|v| format!("{name}: {v}\r\n")).collect()
}

#[test]
fn content_negotiation() {
    let (_dir, s) = server();
    for (accept, want) in [
        ("gzip", "gzip"),
        ("gzip, br", "br"),
        ("gzip, br;q=0.5", "gzip"),
        ("*", "br"),
        ("*;q=0, identity", "identity"),
        ("zstd", "identity"),
        // Nothing acceptable: identity anyway (no 406).
        ("identity;q=0, zstd", "identity"),
        ("*;q=0", "identity"),
    ] {
        assert_eq!(negotiated(&s, &[accept]), want, "{accept}");
    }
    assert_eq!(negotiated(&s, &[]), "identity");
}

#[test]
fn q_values_below_one_keep_compression() {
    let (_dir, s) = server();
    for (accept, want) in [
        // An unlisted identity is acceptable, not preferred.
        ("br;q=0.9", "br"),
        ("gzip;q=0.5, br;q=0.9", "br"),
        ("gzip;q=0.5", "gzip"),
        ("gzip;q=0.001", "gzip"),
        ("identity;q=0.5, gzip;q=0.6", "gzip"),
        ("*;q=0.5", "br"),
        ("br;q=0.5, *;q=0.1", "br"),
        // Identity wins when the client weights it higher, by name or by `*`.
        ("br;q=0.9, identity", "identity"),
        ("gzip;q=0.5, identity;q=0.6", "identity"),
        ("br;q=0.5, gzip;q=0, *", "identity"),
    ] {
        assert_eq!(negotiated(&s, &[accept]), want, "{accept}");
    }
}

#[test]
fn conditional_requests() {
    let (_dir, s) = server();
    for inm in ["\"home\"", "W/\"home\"", "\"x\", \"home\"", "*"] {
        let r = s.get("/", &format!("If-None-Match: {inm}\r\n"));
        assert_eq!(r.status, 304, "{inm}");
        assert!(r.body.is_empty());
        let want = common_lines("HTTP/1.1 304 Not Modified", true)
            + "ETag: \"home\"\r\nLast-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n\
Cache-Control: public, max-age=60\r\nVary: Accept-Encoding";
        assert_eq!(r.head, want);
    }
    // The gzip variant has its own ETag.
    let r = s.get(
        "/",
        "Accept-Encoding: gzip\r\nIf-None-Match: \"home-gz\"\r\n",
    );
    assert_eq!(r.status, 304);
    assert_eq!(r.header("ETag").as_deref(), Some("\"home-gz\""));
    let r = s.get("/", "If-None-Match: \"other\"\r\n");
    assert_eq!(r.status, 200);
    for ims in [
        "Tue, 14 Nov 2023 22:13:20 GMT",
        "Tuesday, 14-Nov-23 22:13:20 GMT",
        "Tue Nov 14 22:13:20 2023",
        "Wed, 15 Nov 2023 00:00:00 GMT",
    ] {
        let r = s.get("/hello.txt", &format!("If-Modified-Since: {ims}\r\n"));
        assert_eq!(r.status, 304, "{ims}");
    }
    let r = s.get(
        "/hello.txt",
        "If-Modified-Since: Tue, 14 Nov 2023 22:13:19 GMT\r\n",
    );
    assert_eq!(r.status, 200);
    let r = s.get("/hello.txt", "If-Modified-Since: garbage\r\n");
    assert_eq!(r.status, 200);
    // If-None-Match wins over If-Modified-Since.
    let r = s.get(
        "/hello.txt",
        "If-None-Match: \"other\"\r\nIf-Modified-Since: Wed, 15 Nov 2023 00:00:00 GMT\r\n",
    );
    assert_eq!(r.status, 200);
    // Not for the 404 page.
    let r = s.get("/nope", "If-None-Match: *\r\n");
    assert_eq!(r.status, 404);
}

#[test]
fn ranges() {
    let (_dir, s) = server();
    let r = s.get("/hello.txt", "Range: bytes=0-4\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"Hello");
    let want = common_lines("HTTP/1.1 206 Partial Content", true)
        + "ETag: \"hello\"\r\nLast-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n\
Cache-Control: public, max-age=60\r\nContent-Type: text/plain; charset=utf-8\r\n\
Accept-Ranges: bytes\r\nContent-Range: bytes 0-4/12\r\nContent-Length: 5";
    assert_eq!(r.head, want);
    let r = s.get("/hello.txt", "Range: bytes=-6\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &b"World!"[..]));
    let r = s.get("/hello.txt", "Range: bytes=6-\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &b"World!"[..]));
    let r = s.get("/hello.txt", "Range: bytes=12-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("Content-Range").as_deref(), Some("bytes */12"));
    // Several ranges: the whole body.
    let r = s.get("/hello.txt", "Range: bytes=0-1,4-5\r\n");
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    // If-Range: strong ETag match or exact date applies the range.
    let r = s.get("/hello.txt", "Range: bytes=0-4\r\nIf-Range: \"hello\"\r\n");
    assert_eq!(r.status, 206);
    let r = s.get(
        "/hello.txt",
        &format!("Range: bytes=0-4\r\nIf-Range: {LAST_MODIFIED_HTTP}\r\n"),
    );
    assert_eq!(r.status, 206);
    let r = s.get("/hello.txt", "Range: bytes=0-4\r\nIf-Range: \"old\"\r\n");
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    // The range applies to the selected (encoded) variant, Vary kept.
    let r = s.get("/", "Accept-Encoding: gzip\r\nRange: bytes=0-1\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &b"GZ"[..]));
    assert_eq!(r.header("Vary").as_deref(), Some("Accept-Encoding"));
    assert_eq!(r.header("Content-Encoding").as_deref(), Some("gzip"));
    // A range of the large (sendfile) body.
    let r = s.get("/big.bin", "Range: bytes=1000000-1000099\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &big_body()[1_000_000..1_000_100]);
    // HEAD ignores Range.
    let mut c = s.connect();
    c.write_all(b"HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\n\r\n")
        .unwrap();
    let r = read_response(&mut c, true).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Length").as_deref(), Some("12"));
}

/// A second before `/hello.txt` was last modified, and a day after.
const EARLIER: &str = "Tue, 14 Nov 2023 22:13:19 GMT";
const LATER: &str = "Wed, 15 Nov 2023 00:00:00 GMT";

#[test]
fn preconditions() {
    let (_dir, s) = server();
    let failed = common_lines("HTTP/1.1 412 Precondition Failed", true) + "Content-Length: 0";
    let cases: &[(&str, String, u16)] = &[
        // If-Match: strong comparison against the selected variant's ETag.
        ("/hello.txt", "If-Match: \"hello\"\r\n".into(), 200),
        ("/hello.txt", "If-Match: \"x\", \"hello\"\r\n".into(), 200),
        ("/hello.txt", "If-Match: *\r\n".into(), 200),
        ("/hello.txt", "If-Match: \"x\"\r\n".into(), 412),
        ("/hello.txt", "If-Match: W/\"hello\"\r\n".into(), 412),
        ("/hello.txt", "If-Match: \"x\", W/\"hello\"\r\n".into(), 412),
        ("/hello.txt", "If-Match: \"hello \"\r\n".into(), 412),
        ("/", "If-Match: \"home\"\r\n".into(), 200),
        (
            "/",
            "Accept-Encoding: gzip\r\nIf-Match: \"home\"\r\n".into(),
            412,
        ),
        (
            "/",
            "Accept-Encoding: gzip\r\nIf-Match: \"home-gz\"\r\n".into(),
            200,
        ),
        // If-Unmodified-Since: a later change fails it; a bad date is ignored.
        (
            "/hello.txt",
            format!("If-Unmodified-Since: {LAST_MODIFIED_HTTP}\r\n"),
            200,
        ),
        (
            "/hello.txt",
            format!("If-Unmodified-Since: {LATER}\r\n"),
            200,
        ),
        (
            "/hello.txt",
            format!("If-Unmodified-Since: {EARLIER}\r\n"),
            412,
        ),
        (
            "/hello.txt",
            "If-Unmodified-Since: yesterday\r\n".into(),
            200,
        ),
        // RFC 9110 §13.2.2: If-Match, else If-Unmodified-Since; then
        // If-None-Match, else If-Modified-Since.
        (
            "/hello.txt",
            format!("If-Match: \"hello\"\r\nIf-Unmodified-Since: {EARLIER}\r\n"),
            200,
        ),
        (
            "/hello.txt",
            format!("If-Match: \"x\"\r\nIf-Unmodified-Since: {LATER}\r\n"),
            412,
        ),
        (
            "/hello.txt",
            "If-Match: \"x\"\r\nIf-None-Match: \"hello\"\r\n".into(),
            412,
        ),
        (
            "/hello.txt",
            "If-Match: \"hello\"\r\nIf-None-Match: \"hello\"\r\n".into(),
            304,
        ),
        (
            "/hello.txt",
            format!("If-Unmodified-Since: {EARLIER}\r\nIf-None-Match: \"hello\"\r\n"),
            412,
        ),
        (
            "/hello.txt",
            format!("If-Unmodified-Since: {EARLIER}\r\nIf-Modified-Since: {LATER}\r\n"),
            412,
        ),
        (
            "/hello.txt",
            format!("If-Unmodified-Since: {LATER}\r\nIf-Modified-Since: {LATER}\r\n"),
            304,
        ),
        (
            "/hello.txt",
            "If-Match: \"x\"\r\nRange: bytes=0-4\r\n".into(),
            412,
        ),
        // Only a response that would otherwise be 2xx has preconditions
        // (RFC 9110 §13.2.1): not the 404 page, not a redirect.
        ("/nope", "If-Match: \"x\"\r\n".into(), 404),
        ("/nope", format!("If-Unmodified-Since: {EARLIER}\r\n"), 404),
        ("/gone/x", "If-Match: \"x\"\r\n".into(), 404),
        ("/dir", "If-Match: \"x\"\r\n".into(), 301),
        ("/blog/2024/hello", "If-Match: \"x\"\r\n".into(), 301),
        // A rewrite serves the target's representation, preconditions too.
        ("/app/x", "If-Match: \"x\"\r\n".into(), 412),
    ];
    for (path, headers, status) in cases {
        for method in ["GET", "HEAD"] {
            let r = s.request(method, path, headers);
            assert_eq!(r.status, *status, "{method} {path} {headers:?}");
            if r.status == 412 {
                assert_eq!(r.head, failed, "{method} {path} {headers:?}");
                assert!(r.body.is_empty());
            }
        }
    }
    // Passed preconditions leave Range to If-Range.
    let r = s.get("/hello.txt", "If-Match: \"hello\"\r\nRange: bytes=0-4\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &b"Hello"[..]));
    let r = s.get(
        "/hello.txt",
        &format!("If-Unmodified-Since: {LATER}\r\nRange: bytes=0-4\r\nIf-Range: \"old\"\r\n"),
    );
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    // A 412 is framed (Content-Length: 0) and keeps the connection open.
    let mut c = s.connect();
    c.write_all(
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-Match: \"x\"\r\n\r\n\
GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut c, false).unwrap();
    assert_eq!(r.status, 412);
    assert_eq!(r.header("Connection"), None);
    let r = read_response(&mut c, false).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
}

#[test]
fn repeated_list_fields_are_one_list() {
    let (_dir, s) = server();
    assert_eq!(negotiated(&s, &["br", "gzip;q=0.5"]), "br");
    assert_eq!(negotiated(&s, &["gzip", "identity"]), "gzip");
    assert_eq!(
        negotiated(&s, &["identity;q=0.1", "", "gzip;q=0.2"]),
        "gzip"
    );
    let cases: &[(&str, &str, &[&str], u16)] = &[
        ("/", "If-None-Match", &["\"home\"", "\"x\""], 304),
        ("/", "If-None-Match", &["\"x\"", "\"home\""], 304),
        ("/", "If-None-Match", &["\"x\"", "\"y\""], 200),
        ("/hello.txt", "If-Match", &["\"hello\"", "\"x\""], 200),
        ("/hello.txt", "If-Match", &["\"x\"", "\"hello\""], 200),
        ("/hello.txt", "If-Match", &["\"x\"", "\"y\", \"z\""], 412),
    ];
    for (path, name, values, status) in cases {
        for method in ["GET", "HEAD"] {
            let r = s.request(method, path, &field_lines(name, values));
            assert_eq!(r.status, *status, "{method} {path} {name}: {values:?}");
        }
    }
}

/// Each list field may come on up to four lines; a fifth is refused rather
/// than acted on in part.
#[test]
fn list_fields_beyond_four_lines_get_431() {
    let (_dir, s) = server();
    for (name, value) in [
        ("Accept-Encoding", "gzip"),
        ("If-None-Match", "\"x\""),
        ("If-Match", "*"),
    ] {
        let r = s.get("/", &field_lines(name, &[value; 4]));
        assert_eq!(r.status, 200, "{name} on four lines");
        let r = s.get("/", &field_lines(name, &[value; 5]));
        assert_eq!(r.status, 431, "{name} on five lines");
        assert_eq!(r.header("Connection").as_deref(), Some("close"));
    }
}
