//! End to end: `kiln serve` on the example site's directory (fired into a
//! preview pack at start) answers every routing rule `kiln build` decided,
//! over a real socket. The preview keeps the site's `Cache-Control`
//! (`--preview-cache-control site`): the headers checked are the build's.

mod common;

use common::Server;

fn example_site() -> Server {
    let site = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/site");
    Server::start(&[site, "--threads", "1", "--preview-cache-control", "site"])
}

#[test]
fn routing_rules_reach_the_client() {
    let server = example_site();
    let index = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/site/index.html"
    ))
    .unwrap();

    let root = server.get("/", "");
    assert_eq!(root.status, 200);
    assert_eq!(root.body, index);
    assert_eq!(
        root.header("Content-Type").as_deref(),
        Some("text/html; charset=utf-8")
    );

    let docs = server.get("/docs", "");
    assert_eq!(docs.status, 301);
    assert_eq!(docs.header("Location").as_deref(), Some("/docs/"));

    let stripped = server.get("/about", "");
    assert_eq!(stripped.status, 200);
    assert!(String::from_utf8_lossy(&stripped.body).contains("<title>"));

    let wildcard = server.get("/app/some/client/route", "");
    assert_eq!(wildcard.status, 200);
    assert_eq!(wildcard.body, server.get("/app/_wildcard.html", "").body);

    for hidden in ["/nope", "/.env", "/_headers", "/_redirects"] {
        let missing = server.get(hidden, "");
        assert_eq!(missing.status, 404, "{hidden}");
        assert!(
            String::from_utf8_lossy(&missing.body).contains("Not found"),
            "{hidden}"
        );
    }

    let well_known = server.get("/.well-known/security.txt", "");
    assert_eq!(well_known.status, 200);
    assert!(String::from_utf8_lossy(&well_known.body).starts_with("Contact:"));
    assert_eq!(
        well_known.header("Cache-Control").as_deref(),
        Some("public, max-age=300")
    );

    let pattern = server.get("/blog/2024/post", "");
    assert_eq!(pattern.status, 302);
    assert_eq!(
        pattern.header("Location").as_deref(),
        Some("/docs/2024/post")
    );

    let rewrite = server.get("/start", "");
    assert_eq!(rewrite.status, 200);
    assert_eq!(
        rewrite.body,
        server.get("/docs/getting-started.html", "").body
    );
}

#[test]
fn compressed_variants_are_negotiated() {
    let server = example_site();
    let plain = server.get("/", "");
    let br = server.get("/", "Accept-Encoding: gzip, br\r\n");
    assert_eq!(br.header("Content-Encoding").as_deref(), Some("br"));
    assert_eq!(br.header("Vary").as_deref(), Some("Accept-Encoding"));
    assert_ne!(br.header("ETag"), plain.header("ETag"));
    let mut decoded = Vec::new();
    brotli::BrotliDecompress(&mut &br.body[..], &mut decoded).unwrap();
    assert_eq!(decoded, plain.body);

    let gz = server.get("/", "Accept-Encoding: gzip\r\n");
    assert_eq!(gz.header("Content-Encoding").as_deref(), Some("gzip"));
    let mut decoded = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&gz.body[..]),
        &mut decoded,
    )
    .unwrap();
    assert_eq!(decoded, plain.body);
}

#[test]
fn site_headers_replace_the_servers_own() {
    let server = example_site();
    let page = server.get("/about", "");
    let frame: Vec<&str> = page
        .head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("x-frame-options:"))
        .collect();
    assert_eq!(frame, ["X-Frame-Options: DENY"], "{}", page.head);
    let referrer = page
        .head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("referrer-policy:"))
        .count();
    assert_eq!(referrer, 1, "{}", page.head);
    assert_eq!(
        page.header("X-Content-Type-Options").as_deref(),
        Some("nosniff")
    );
}
