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

#[test]
fn content_negotiation() {
    let (_dir, s) = server();
    let pick = |ae: &str| {
        let r = s.get("/", &format!("Accept-Encoding: {ae}\r\n"));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Vary").as_deref(), Some("Accept-Encoding"));
        (r.header("Content-Encoding"), r.body)
    };
    assert_eq!(pick("gzip"), (Some("gzip".into()), HOME_GZ.to_vec()));
    assert_eq!(pick("gzip, br"), (Some("br".into()), HOME_BR.to_vec()));
    assert_eq!(
        pick("gzip, br;q=0.5"),
        (Some("gzip".into()), HOME_GZ.to_vec())
    );
    assert_eq!(pick("*"), (Some("br".into()), HOME_BR.to_vec()));
    assert_eq!(pick("*;q=0, identity"), (None, HOME.to_vec()));
    assert_eq!(pick("zstd"), (None, HOME.to_vec()));
    // Nothing acceptable: identity anyway (no 406).
    assert_eq!(pick("identity;q=0, zstd"), (None, HOME.to_vec()));
    let r = s.get("/", "");
    assert_eq!(r.header("Content-Encoding"), None);
    assert_eq!(r.body, HOME);
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
