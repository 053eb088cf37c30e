//! `examples/site` builds, verifies and exercises every routing feature it
//! is meant to show.

use std::path::Path;

use kiln::build::{BuildOptions, build_pack};
use kiln::pack::{Encoding, Pack, RouteKind};

#[test]
fn example_site_builds_with_every_feature() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/site");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("site.pack");
    let report = build_pack(&src, &out, &BuildOptions::default()).unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let pack = Pack::open(&out).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    let exact = |key: &str| pack.lookup(RouteKind::Exact, key.as_bytes());
    for key in [
        "/",
        "/about",
        "/about.html",
        "/docs/",
        "/docs/getting-started",
        "/.well-known/security.txt",
        "/logo.svg",
        "/start",
    ] {
        assert_eq!(exact(key).map(|r| r.status()), Some(200), "{key}");
    }
    for (key, status) in [
        ("/docs", 301),
        ("/app", 301),
        ("/old-about", 301),
        ("/go/kiln", 302),
    ] {
        assert_eq!(exact(key).map(|r| r.status()), Some(status), "{key}");
    }
    for key in ["/.env", "/_headers", "/_redirects"] {
        assert!(exact(key).is_none(), "{key} must not be served");
    }
    assert!(pack.lookup(RouteKind::Wildcard, b"/app/").is_some());
    assert_eq!(pack.not_found().unwrap().status(), 404);
    assert_eq!(pack.rules().count(), 1);
    let home = exact("/").unwrap();
    assert!(home.variant(Encoding::Br).is_some());
    let head = String::from_utf8_lossy(home.variant(Encoding::Identity).unwrap().head).into_owned();
    assert!(head.contains("X-Frame-Options: DENY\r\n"), "{head}");
    let css = exact("/assets/style.3f2a9b1c.css").unwrap();
    let head = String::from_utf8_lossy(css.variant(Encoding::Identity).unwrap().head).into_owned();
    assert!(
        head.contains("Cache-Control: public, max-age=31536000, immutable\r\n"),
        "{head}"
    );
}
