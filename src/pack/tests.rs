//! Round trip and corruption tests of the pack format.

use super::format::*;
use super::verify::verify;
use super::*;

fn head(etag: &str, ct: &str, len: u64) -> HeadBlock {
    let mut b = HeadBlockBuilder::new();
    b.line("ETag", etag)
        .line("Cache-Control", "public, max-age=60");
    b.begin_representation().line("Content-Type", ct);
    b.finish(len)
}

/// Writes a small pack: two routes sharing one resource, a gzip variant, a
/// wildcard, a not-found page and a rule.
fn sample(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("site.pack");
    let mut w = PackWriter::create(&path).unwrap();
    let body = w.add_body(b"<h1>hello</h1>").unwrap();
    let gz = w.add_body(b"gzipped-bytes").unwrap();
    let h_id = head("\"id\"", "text/html; charset=utf-8", body.len);
    let h_gz = head("\"gz\"", "text/html; charset=utf-8", gz.len);
    let set = w
        .add_variant_set(&[
            VariantIn {
                encoding: Encoding::Gzip,
                head: &h_gz,
                body: gz,
            },
            VariantIn {
                encoding: Encoding::Identity,
                head: &h_id,
                body,
            },
        ])
        .unwrap();
    for key in [&b"/"[..], b"/index.html"] {
        w.add_route(RouteIn {
            kind: RouteKind::Exact,
            key,
            status: 200,
            last_modified: 1_700_000_000,
            variants: set,
            validators: true,
        })
        .unwrap();
    }
    let dup = w.add_body(b"<h1>hello</h1>").unwrap();
    assert!(!dup.fresh);
    assert_eq!(dup.off, body.off);
    let nf_body = w.add_body(b"not here").unwrap();
    let nf_head = head("\"nf\"", "text/plain; charset=utf-8", nf_body.len);
    let nf = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &nf_head,
            body: nf_body,
        }])
        .unwrap();
    for (kind, key) in [
        (RouteKind::Wildcard, &b"/app/"[..]),
        (RouteKind::NotFound, b""),
    ] {
        w.add_route(RouteIn {
            kind,
            key,
            status: 404,
            last_modified: 0,
            variants: nf,
            validators: false,
        })
        .unwrap();
    }
    w.add_rule(RuleIn {
        from: b"/old/*",
        to: b"/new/:splat",
        status: 301,
        force: false,
    });
    let stats = w.finish().unwrap();
    assert_eq!(stats.routes, 4);
    assert_eq!(stats.bodies, 3);
    assert_eq!(stats.dedup_saved, 14);
    path
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let pack = Pack::open(&sample(dir.path())).unwrap();
    verify(&pack).unwrap();
    let root = pack.lookup(RouteKind::Exact, b"/").unwrap();
    assert_eq!(root.status(), 200);
    assert!(root.has_validators());
    assert_eq!(root.last_modified(), 1_700_000_000);
    let id = root.variant(Encoding::Identity).unwrap();
    assert_eq!(id.body, b"<h1>hello</h1>");
    assert_eq!(id.etag, b"\"id\"");
    assert!(id.head.ends_with(b"Content-Length: 14\r\n"));
    assert!(id.head[..id.repr_at].ends_with(b"max-age=60\r\n"));
    assert!(id.head[id.repr_at..id.length_at].starts_with(b"Content-Type: text/html"));
    assert_eq!(root.variant(Encoding::Gzip).unwrap().body, b"gzipped-bytes");
    assert!(root.variant(Encoding::Br).is_none());
    assert_eq!(root.variants().count(), 2);
    let alias = pack.lookup(RouteKind::Exact, b"/index.html").unwrap();
    assert_eq!(
        alias.variant(Encoding::Identity).unwrap().body_off,
        id.body_off
    );
    assert!(pack.lookup(RouteKind::Exact, b"/app/").is_none());
    assert_eq!(
        pack.lookup(RouteKind::Wildcard, b"/app/").unwrap().status(),
        404
    );
    assert_eq!(
        pack.not_found()
            .unwrap()
            .variant(Encoding::Identity)
            .unwrap()
            .body,
        b"not here"
    );
    let rules: Vec<_> = pack.rules().collect();
    assert_eq!(
        (rules[0].from, rules[0].to, rules[0].status),
        (&b"/old/*"[..], &b"/new/:splat"[..], 301)
    );
    assert!(!pack.has_forced_rules());
}

#[test]
fn duplicate_route_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = PackWriter::create(&dir.path().join("p")).unwrap();
    let body = w.add_body(b"x").unwrap();
    let h = head("\"x\"", "text/plain", 1);
    let set = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &h,
            body,
        }])
        .unwrap();
    let r = || RouteIn {
        kind: RouteKind::Exact,
        key: b"/x",
        status: 200,
        last_modified: 0,
        variants: set,
        validators: true,
    };
    w.add_route(r()).unwrap();
    assert!(
        w.add_route(r())
            .unwrap_err()
            .to_string()
            .contains("duplicate")
    );
}

#[test]
fn failed_build_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("site.pack");
    let w = PackWriter::create(&target).unwrap();
    drop(w);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn every_flipped_byte_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        let caught = match Pack::open(&path) {
            Err(_) => true,
            Ok(p) => verify(&p).is_err(),
        };
        // Section padding is the only place a flip can go unnoticed.
        let in_padding = {
            let p = Pack::open(&dir.path().join("site.pack")).ok();
            p.is_some_and(|p| {
                SECTIONS.iter().all(|&s| {
                    let (o, l, _) = p.section(s);
                    !(o..o + l).contains(&(at as u64))
                }) && at >= HEADER_LEN
            })
        };
        assert!(caught || in_padding, "flip at byte {at} not detected");
    }
}

#[test]
fn truncated_and_foreign_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, &good[..good.len() - 1]).unwrap();
    assert!(Pack::open(&path).unwrap_err().0.contains("truncated"));
    std::fs::write(&path, b"<html>not a pack</html>").unwrap();
    assert!(Pack::open(&path).unwrap_err().0.contains("not a kiln pack"));
    let mut v2 = good.clone();
    v2[H_VERSION] = 2;
    std::fs::write(&path, &v2).unwrap();
    assert!(Pack::open(&path).unwrap_err().0.contains("version 2"));
}
