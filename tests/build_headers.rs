//! The header blocks `kiln build` prepares: byte-exact for a fixture, `Vary`
//! only on multi-variant resources, one ETag per variant, charsets, caching
//! policy, `_headers` overrides, redirect and not-found heads.

use std::fs::File;
use std::time::{Duration, UNIX_EPOCH};

use kiln::build::compress::CompressOptions;
use kiln::build::headers::CachePolicy;
use kiln::build::{BuildOptions, build_pack};
use kiln::pack::{Encoding, Pack, RouteKind, Variant};

/// 2023-11-14 22:13:20 UTC.
const MTIME: u64 = 1_700_000_000;
const HTTP_MTIME: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

fn page() -> String {
    "<p>The same paragraph, again and again, compresses well.</p>\n".repeat(40)
}

/// Builds a fixture site and returns the open pack (kept alive by the dir).
fn build(extra: &[(&str, &[u8])], opts: &BuildOptions) -> (tempfile::TempDir, Pack) {
    let dir = tempfile::tempdir().unwrap();
    let page = page();
    let mut files: Vec<(&str, &[u8])> = vec![
        ("page.html", page.as_bytes()),
        ("tiny.txt", b"tiny"),
        ("data.json", b"{\"a\": 1}"),
        ("app.0123abcd.js", b"export const a = 1;"),
        ("logo.svg", b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>"),
        ("docs/index.html", b"docs"),
        ("404.html", page.as_bytes()),
    ];
    files.extend_from_slice(extra);
    for (path, content) in files {
        let p = dir.path().join("src").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(UNIX_EPOCH + Duration::from_secs(MTIME))
            .unwrap();
    }
    let out = dir.path().join("site.pack");
    build_pack(&dir.path().join("src"), &out, opts).unwrap();
    let pack = Pack::open(&out).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    (dir, pack)
}

fn variant<'p>(pack: &'p Pack, key: &str, e: Encoding) -> Variant<'p> {
    pack.lookup(RouteKind::Exact, key.as_bytes())
        .unwrap()
        .variant(e)
        .unwrap_or_else(|| panic!("{key} has no {} variant", e.token()))
}

fn head(v: &Variant<'_>) -> String {
    String::from_utf8(v.head.to_vec()).unwrap()
}

fn etag_of(body: &[u8]) -> String {
    let hash = blake3::hash(body);
    let hex: String = hash.as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"{hex}\"")
}

#[test]
fn header_blocks_are_byte_exact() {
    let (_dir, pack) = build(&[], &BuildOptions::default());
    let id = variant(&pack, "/page.html", Encoding::Identity);
    let build_id = dictionary_id(&id);
    let expected = format!(
        "ETag: {}\r\nLast-Modified: {HTTP_MTIME}\r\nCache-Control: public, max-age=0, must-revalidate\r\nVary: Accept-Encoding\r\nUse-As-Dictionary: match=\"/page.html\", id=\"{build_id}\"\r\nContent-Type: text/html; charset=utf-8\r\nAccept-Ranges: bytes\r\nContent-Length: {}\r\n",
        etag_of(page().as_bytes()),
        page().len()
    );
    assert_eq!(head(&id), expected);
    assert_eq!(
        &id.head[..id.repr_at],
        expected.split("Content-Type").next().unwrap().as_bytes()
    );
    assert_eq!(
        &id.head[id.length_at..],
        format!("Content-Length: {}\r\n", page().len()).as_bytes()
    );
    assert_eq!(id.etag, etag_of(page().as_bytes()).as_bytes());

    let br = variant(&pack, "/page.html", Encoding::Br);
    let expected_br = format!(
        "ETag: {}\r\nLast-Modified: {HTTP_MTIME}\r\nCache-Control: public, max-age=0, must-revalidate\r\nVary: Accept-Encoding\r\nUse-As-Dictionary: match=\"/page.html\", id=\"{build_id}\"\r\nContent-Type: text/html; charset=utf-8\r\nContent-Encoding: br\r\nAccept-Ranges: bytes\r\nContent-Length: {}\r\n",
        etag_of(br.body),
        br.body.len()
    );
    assert_eq!(head(&br), expected_br);
}

/// The build id of a block's `Use-As-Dictionary` field.
fn dictionary_id(v: &Variant<'_>) -> String {
    let head = head(v);
    let id = head
        .split("id=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no dictionary id in {head}"));
    assert!(
        id.len() == 17 && id.starts_with("kiln-") && id[5..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    id.to_owned()
}

/// The `Use-As-Dictionary` value of a route's identity variant.
fn use_as_dictionary(pack: &Pack, key: &str) -> Option<String> {
    let v = variant(pack, key, Encoding::Identity);
    head(&v)
        .lines()
        .find_map(|l| l.strip_prefix("Use-As-Dictionary: "))
        .map(str::to_owned)
}

#[test]
fn compressible_files_are_offered_as_dictionaries_unless_turned_off() {
    let rules: &[u8] = b"/data.json\n  Use-As-Dictionary: match=\"/d*\", id=\"mine\"\n\
                        /logo.svg\n  Use-As-Dictionary: off\n";
    let big_js = "export const a = 1;\n".repeat(20);
    let (_dir, pack) = build(
        &[
            ("_headers", rules),
            ("app.0123abcd.js", big_js.as_bytes()),
            ("logo.svg", page().as_bytes()),
        ],
        &BuildOptions::default(),
    );
    let id = dictionary_id(&variant(&pack, "/page.html", Encoding::Identity));
    assert_eq!(
        use_as_dictionary(&pack, "/app.0123abcd.js"),
        Some(format!("match=\"/app.*.js\", id=\"{id}\""))
    );
    assert_eq!(
        use_as_dictionary(&pack, "/page"),
        Some(format!("match=\"/page\", id=\"{id}\""))
    );
    assert_eq!(
        use_as_dictionary(&pack, "/data.json").as_deref(),
        Some("match=\"/d*\", id=\"mine\"")
    );
    assert_eq!(use_as_dictionary(&pack, "/logo.svg"), None);
    // Too short to compress: not offered.
    assert_eq!(use_as_dictionary(&pack, "/tiny.txt"), None);

    let off = BuildOptions {
        dictionaries: kiln::build::dictionaries::DictionaryOptions {
            enabled: false,
            ..Default::default()
        },
        ..BuildOptions::default()
    };
    let (_off_dir, off) = build(&[], &off);
    for route in off.routes() {
        for v in route.variants() {
            assert!(!head(&v).contains("Use-As-Dictionary"), "{}", head(&v));
        }
    }
}

#[test]
fn each_variant_has_its_own_etag_and_vary() {
    let opts = BuildOptions {
        compress: CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
            ..CompressOptions::default()
        },
        ..BuildOptions::default()
    };
    let (_dir, pack) = build(&[], &opts);
    let route = pack.lookup(RouteKind::Exact, b"/page.html").unwrap();
    let variants: Vec<_> = route.variants().collect();
    assert_eq!(variants.len(), 4);
    let mut etags: Vec<&[u8]> = variants.iter().map(|v| v.etag).collect();
    for v in &variants {
        assert_eq!(v.etag, etag_of(v.body).as_bytes());
        assert!(
            head(v).contains("Vary: Accept-Encoding\r\n"),
            "{}",
            v.encoding.token()
        );
        if v.encoding != Encoding::Identity {
            assert!(head(v).contains(&format!("Content-Encoding: {}\r\n", v.encoding.token())));
        }
    }
    etags.sort();
    etags.dedup();
    assert_eq!(etags.len(), 4);

    let tiny = variant(&pack, "/tiny.txt", Encoding::Identity);
    assert!(
        !head(&tiny).contains("Vary"),
        "a single variant needs no Vary"
    );
    assert!(!head(&tiny).contains("Content-Encoding"));
}

#[test]
fn no_compression_keeps_identity_only() {
    let opts = BuildOptions {
        compress: CompressOptions {
            encodings: Vec::new(),
            ..CompressOptions::default()
        },
        ..BuildOptions::default()
    };
    let (_dir, pack) = build(&[], &opts);
    let route = pack.lookup(RouteKind::Exact, b"/page.html").unwrap();
    assert_eq!(route.encodings(), Encoding::Identity.bit());
}

#[test]
fn content_types_and_charsets() {
    let (_dir, pack) = build(&[("noise.png", &[0x89; 2000])], &BuildOptions::default());
    for (key, ct) in [
        ("/page.html", "text/html; charset=utf-8"),
        ("/tiny.txt", "text/plain; charset=utf-8"),
        ("/data.json", "application/json"),
        ("/app.0123abcd.js", "text/javascript; charset=utf-8"),
        ("/logo.svg", "image/svg+xml"),
        ("/noise.png", "image/png"),
    ] {
        let h = head(&variant(&pack, key, Encoding::Identity));
        assert!(
            h.contains(&format!("\r\nContent-Type: {ct}\r\n")),
            "{key}: {h}"
        );
    }
    let png = pack.lookup(RouteKind::Exact, b"/noise.png").unwrap();
    assert_eq!(
        png.encodings(),
        Encoding::Identity.bit(),
        "png is not compressed"
    );
}

#[test]
fn cache_control_policy_and_flags() {
    let (_dir, pack) = build(&[], &BuildOptions::default());
    let cc = |pack: &Pack, key: &str| {
        head(&variant(pack, key, Encoding::Identity))
            .lines()
            .find_map(|l| l.strip_prefix("Cache-Control: ").map(str::to_owned))
            .unwrap()
    };
    assert_eq!(
        cc(&pack, "/app.0123abcd.js"),
        "public, max-age=31536000, immutable"
    );
    assert_eq!(
        cc(&pack, "/page.html"),
        "public, max-age=0, must-revalidate"
    );
    assert_eq!(cc(&pack, "/docs/"), "public, max-age=0, must-revalidate");
    assert_eq!(cc(&pack, "/data.json"), "public, max-age=3600");

    let opts = BuildOptions {
        cache: CachePolicy {
            override_default: Some("no-cache".into()),
            override_immutable: Some("public, max-age=600".into()),
            revalidate_all: false,
        },
        ..BuildOptions::default()
    };
    let (_dir, pack) = build(&[], &opts);
    assert_eq!(cc(&pack, "/app.0123abcd.js"), "public, max-age=600");
    assert_eq!(cc(&pack, "/page.html"), "no-cache");
    assert_eq!(cc(&pack, "/data.json"), "no-cache");
}

#[test]
fn headers_file_adds_and_replaces() {
    let rules = b"/*\n  X-Frame-Options: DENY\n/page.html\n  Content-Type: text/x-special\n  cache-control: private\n  Link: </a.css>; rel=preload\n/data.json\n  Vary: Origin\n";
    let (_dir, pack) = build(&[("_headers", rules)], &BuildOptions::default());
    let h = head(&variant(&pack, "/page.html", Encoding::Br));
    assert_eq!(h.matches("Content-Type:").count(), 1, "{h}");
    assert_eq!(
        h.to_ascii_lowercase().matches("cache-control:").count(),
        1,
        "{h}"
    );
    assert!(h.contains("\r\nCache-Control: private\r\n"), "{h}");
    assert!(h.contains("\r\nContent-Type: text/x-special\r\n"), "{h}");
    assert!(h.contains("\r\nX-Frame-Options: DENY\r\n"), "{h}");
    let v = variant(&pack, "/page.html", Encoding::Br);
    let validators = String::from_utf8_lossy(&v.head[..v.repr_at]).into_owned();
    assert!(
        validators.contains("Link: </a.css>; rel=preload\r\n"),
        "custom headers precede the representation"
    );
    let json = head(&variant(&pack, "/data.json", Encoding::Identity));
    assert!(
        json.contains("\r\nVary: Origin\r\n") && json.matches("Vary").count() == 1,
        "{json}"
    );
    // On a resource with several encodings a custom Vary keeps
    // Accept-Encoding, added unless it is already there.
    let rules = b"/page.html\n  Vary: Origin\n/404.html\n  Vary: origin, accept-encoding\n";
    let (_vary_dir, vary) = build(&[("_headers", rules)], &BuildOptions::default());
    for e in [Encoding::Identity, Encoding::Br] {
        let h = head(&variant(&vary, "/page.html", e));
        assert!(h.contains("\r\nVary: Accept-Encoding, Origin\r\n"), "{h}");
        assert_eq!(h.matches("Vary").count(), 1, "{h}");
        let h = head(&variant(&vary, "/404.html", e));
        assert!(h.contains("\r\nVary: origin, accept-encoding\r\n"), "{h}");
    }
}

/// The `X-` lines of a route's identity head, in order.
fn x_lines(pack: &Pack, kind: RouteKind, key: &str) -> Vec<String> {
    let route = pack
        .lookup(kind, key.as_bytes())
        .unwrap_or_else(|| panic!("no route {key}"));
    head(&route.variant(Encoding::Identity).unwrap())
        .lines()
        .filter(|l| l.starts_with("X-"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn headers_blocks_apply_to_every_url_of_the_file() {
    let rules = b"/page.html\n  X-Page: file\n/page\n  X-Stripped: route\n\
/docs/index.html\n  X-Docs-Index: file\n/docs/\n  X-Docs-Dir: dir\n\
/docs/*\n  X-Docs-All: splat\n/*.html\n  X-Html: yes\n/r\n  X-Rewrite: r\n\
/blog/_wildcard.html\n  X-Fallback: file\n/blog/\n  X-Blog: dir\n";
    let (_dir, pack) = build(
        &[
            ("_headers", rules),
            ("_redirects", b"/r /page.html 200\n"),
            ("docs/guide.html", b"guide"),
            ("blog/_wildcard.html", b"fallback"),
        ],
        &BuildOptions::default(),
    );
    let page = ["X-Page: file", "X-Stripped: route", "X-Html: yes"];
    let docs = [
        "X-Docs-Index: file",
        "X-Docs-Dir: dir",
        "X-Docs-All: splat",
        "X-Html: yes",
    ];
    let guide = ["X-Docs-All: splat", "X-Html: yes"];
    let fallback = ["X-Html: yes", "X-Fallback: file", "X-Blog: dir"];
    for (kind, key, expected) in [
        (RouteKind::Exact, "/page.html", &page[..]),
        (RouteKind::Exact, "/page", &page),
        (RouteKind::Exact, "/docs/", &docs),
        (RouteKind::Exact, "/docs/index.html", &docs),
        (RouteKind::Exact, "/docs/guide", &guide),
        (RouteKind::Exact, "/docs/guide.html", &guide),
        (
            RouteKind::Exact,
            "/r",
            &[
                "X-Page: file",
                "X-Stripped: route",
                "X-Html: yes",
                "X-Rewrite: r",
            ],
        ),
        (RouteKind::Wildcard, "/blog/", &fallback),
        (RouteKind::Exact, "/blog/_wildcard.html", &fallback[..2]),
        (RouteKind::Exact, "/tiny.txt", &[]),
    ] {
        assert_eq!(x_lines(&pack, kind, key), expected, "{key}");
    }
}

#[test]
fn reserved_headers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("_headers"), "/*\n  Content-Length: 3\n").unwrap();
    let err = build_pack(
        dir.path(),
        &dir.path().join("x.pack"),
        &BuildOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("_headers:2: Content-Length is set by kiln"),
        "{err}"
    );
}

#[test]
fn not_found_and_redirect_heads_carry_no_validators() {
    let (_dir, pack) = build(&[], &BuildOptions::default());
    let nf = pack.not_found().unwrap();
    for v in nf.variants() {
        let h = head(&v);
        assert!(
            !h.contains("ETag") && !h.contains("Last-Modified") && !h.contains("Accept-Ranges"),
            "{h}"
        );
        assert!(v.etag.is_empty());
    }
    assert!(nf.variant(Encoding::Br).is_some());
    let redirect = variant(&pack, "/docs", Encoding::Identity);
    assert_eq!(
        head(&redirect),
        format!(
            "Location: /docs/\r\nCache-Control: public, max-age=3600\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n",
            redirect.body.len()
        )
    );
    // At its own URL the not-found page is a 404 too (`docs/routing.md`),
    // without validators; the same file served as a 200 page (a rewrite)
    // keeps them.
    let own = head(&variant(&pack, "/404.html", Encoding::Identity));
    assert!(
        !own.contains("ETag") && !own.contains("Last-Modified"),
        "{own}"
    );
    let (_dir, pack) = build(
        &[("_redirects", b"/lost /404.html 200\n")],
        &BuildOptions::default(),
    );
    let page = head(&variant(&pack, "/lost", Encoding::Identity));
    assert!(page.starts_with("ETag: "));
}

/// Checks every variant of every route of `pack`: the block is a run of
/// valid `Name: value\r\n` field lines; the validator part holds no
/// representation line; `Content-Length` is the last line and equals the
/// body length; `Content-Encoding` names the variant's encoding; the ETag
/// pointer lands on the ETag line; equal ETags mean equal bodies and vice versa.
fn assert_every_variant_well_formed(pack: &Pack) {
    let mut etags: std::collections::HashMap<Vec<u8>, Vec<u8>> = Default::default();
    let mut routes = 0;
    for route in pack.routes() {
        routes += 1;
        let key = String::from_utf8_lossy(route.key().unwrap()).into_owned();
        for v in route.variants() {
            let what = format!("{key} {}", v.encoding.token());
            assert!(
                v.repr_at <= v.length_at && v.length_at <= v.head.len(),
                "{what}"
            );
            let text = std::str::from_utf8(v.head).unwrap_or_else(|_| panic!("{what}: UTF-8"));
            assert!(text.ends_with("\r\n"), "{what}");
            let mut at = 0;
            let mut names = Vec::new();
            for line in text[..text.len() - 2].split("\r\n") {
                let (name, value) = line
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("{what}: {line:?}"));
                assert!(
                    !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)),
                    "{what}: header name {name:?}"
                );
                assert!(
                    !value.is_empty()
                        && !value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f),
                    "{what}: value of {name}: {value:?}"
                );
                names.push((at, name.to_ascii_lowercase()));
                at += line.len() + 2;
            }
            for (start, name) in &names {
                let representation = ["content-type", "content-length", "content-encoding"];
                assert_eq!(
                    *start >= v.repr_at,
                    representation.contains(&name.as_str()) || name == "accept-ranges",
                    "{what}: {name} on the wrong side of repr_at"
                );
            }
            let length_line = &text[v.length_at..];
            assert_eq!(
                length_line,
                format!("Content-Length: {}\r\n", v.body.len()),
                "{what}"
            );
            assert_eq!(
                names.iter().filter(|(_, n)| n == "content-length").count(),
                1,
                "{what}"
            );
            let coding = text
                .lines()
                .find_map(|l| l.strip_prefix("Content-Encoding: "));
            assert_eq!(
                coding,
                (v.encoding != Encoding::Identity).then(|| v.encoding.token()),
                "{what}"
            );
            if !v.etag.is_empty() {
                assert!(
                    text.contains(&format!("ETag: {}\r\n", String::from_utf8_lossy(v.etag))),
                    "{what}"
                );
                assert_eq!(v.etag, etag_of(v.body).as_bytes(), "{what}");
                let seen = etags
                    .entry(v.etag.to_vec())
                    .or_insert_with(|| v.body.to_vec());
                assert!(seen == v.body, "{what}: one ETag, two bodies");
            }
        }
    }
    assert_eq!(routes, pack.route_count());
}

#[test]
fn every_variant_of_real_packs_is_well_formed() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/site");
    let dir = tempfile::tempdir().unwrap();
    let all = BuildOptions {
        compress: CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
            ..CompressOptions::default()
        },
        ..BuildOptions::default()
    };
    let out = dir.path().join("example.pack");
    build_pack(&example, &out, &all).unwrap();
    assert_every_variant_well_formed(&Pack::open(&out).unwrap());

    // A generated tree with every kind of name and content.
    let src = dir.path().join("gen");
    let mut noise = Vec::new();
    let mut x: u32 = 7;
    for _ in 0..3000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        noise.push((x >> 16) as u8);
    }
    let text = "<p>text that compresses</p>\n".repeat(60);
    let files: Vec<(String, Vec<u8>)> = vec![
        ("index.html".into(), text.clone().into_bytes()),
        ("copy.html".into(), text.clone().into_bytes()),
        ("empty.html".into(), Vec::new()),
        ("noise.css".into(), noise.clone()),
        ("noise.bin".into(), noise),
        ("with space/100% ?.html".into(), text.repeat(2).into_bytes()),
        ("caf\u{e9}/Upper.TXT".into(), b"x".repeat(500)),
        ("app/_wildcard.html".into(), text.as_bytes()[..200].to_vec()),
        ("404.html".into(), text.repeat(3).into_bytes()),
        (".well-known/index.html".into(), b"wk".to_vec()),
        (
            "_headers".into(),
            b"/*\n  X-Frame-Options: DENY\n  Link: </a>\n  Link: </b>\n/*.css\n  Vary: Origin\n  Content-Language: en\n".to_vec(),
        ),
        (
            "_redirects".into(),
            "/go /caf\u{e9}/Upper.TXT 302\n/x https://e.example/\u{e9}?a=1 301\n/r /index.html 200\n/n /404.html 404\n/s/* /t/:splat 301\n"
                .as_bytes()
                .to_vec(),
        ),
    ];
    for (i, (path, content)) in files.iter().enumerate() {
        for n in 0..3 {
            // Each file three times over, some names differing only in case.
            let path = match n {
                0 => path.clone(),
                1 if !path.starts_with('_') => format!("d{i}/{path}"),
                2 if !path.starts_with('_') => format!("D{i}/{path}"),
                _ => continue,
            };
            let p = src.join(&path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
    }
    let out = dir.path().join("gen.pack");
    build_pack(&src, &out, &all).unwrap();
    let pack = Pack::open(&out).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    assert_every_variant_well_formed(&pack);
}
