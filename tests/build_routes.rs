//! Routing decided by `kiln build`: exact files, directory indexes, suffix
//! stripping, directory redirects, wildcards, the 404 page, `_redirects`
//! (shadowing, forcing, rewrites, run-time rules) — each with its off switch.

use std::path::Path;

use kiln::build::routes::RouteOptions;
use kiln::build::{BuildOptions, BuildReport, build_pack};
use kiln::pack::{Encoding, Pack, Route, RouteKind};

const FILES: &[(&str, &str)] = &[
    ("index.html", "home"),
    ("about.html", "about html"),
    ("about.htm", "about htm"),
    ("page", "page without suffix"),
    ("page.html", "page html"),
    ("docs/index.htm", "docs index htm"),
    ("docs/index.txt", "docs index txt"),
    ("docs/page.txt", "docs page txt"),
    ("data/index.json", "{}"),
    ("both.html", "both html"),
    ("both/index.html", "both index"),
    ("plain/readme.md", "no index here"),
    ("app/_wildcard.html", "app shell"),
    ("app/sub/_wildcard.txt", "sub shell"),
    ("with space/index.html", "spaced index"),
    ("caf\u{e9}.html", "unicode name"),
    ("404.html", "not found page"),
];

struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new(extra: &[(&str, &str)]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in FILES.iter().chain(extra) {
            let p = dir.path().join("src").join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        Site { dir }
    }

    fn build(&self, opts: &BuildOptions) -> anyhow::Result<(Pack, BuildReport)> {
        let out = self.dir.path().join("site.pack");
        let report = build_pack(&self.dir.path().join("src"), &out, opts)?;
        let pack = Pack::open(&out).unwrap();
        kiln::pack::verify::verify(&pack).unwrap();
        Ok((pack, report))
    }
}

fn with_routes(f: impl FnOnce(&mut RouteOptions)) -> BuildOptions {
    let mut opts = BuildOptions::default();
    f(&mut opts.routes);
    opts
}

fn identity_body(route: &Route<'_>) -> String {
    String::from_utf8(route.variant(Encoding::Identity).unwrap().body.to_vec()).unwrap()
}

fn exact(pack: &Pack, key: &str) -> Option<(u16, String)> {
    let r = pack.lookup(RouteKind::Exact, key.as_bytes())?;
    Some((r.status(), identity_body(&r)))
}

fn location(pack: &Pack, key: &str) -> Option<String> {
    let r = pack.lookup(RouteKind::Exact, key.as_bytes())?;
    let head = String::from_utf8(r.variant(Encoding::Identity)?.head.to_vec()).unwrap();
    head.lines()
        .find_map(|l| l.strip_prefix("Location: "))
        .map(str::to_owned)
}

fn ok(body: &str) -> Option<(u16, String)> {
    Some((200, body.to_owned()))
}

#[test]
fn every_file_has_its_exact_route() {
    let site = Site::new(&[]);
    let (pack, report) = site.build(&BuildOptions::default()).unwrap();
    assert_eq!(report.files, FILES.len() as u64);
    for (path, content) in FILES {
        // The not-found page says 404 at its own URL too.
        let status = if *path == "404.html" { 404 } else { 200 };
        assert_eq!(
            exact(&pack, &format!("/{path}")),
            Some((status, content.to_string())),
            "{path}"
        );
        let r = pack
            .lookup(RouteKind::Exact, format!("/{path}").as_bytes())
            .unwrap();
        assert_eq!(r.has_validators(), status == 200, "{path}");
    }
    assert_eq!(
        exact(&pack, "/caf\u{e9}.html"),
        ok("unicode name"),
        "keys are raw bytes"
    );
}

#[test]
fn directory_index_follows_kawipiko_order() {
    let site = Site::new(&[]);
    let (pack, _) = site.build(&BuildOptions::default()).unwrap();
    assert_eq!(exact(&pack, "/"), ok("home"));
    assert_eq!(
        exact(&pack, "/docs/"),
        ok("docs index htm"),
        ".htm before .txt"
    );
    assert_eq!(exact(&pack, "/data/"), ok("{}"));
    assert_eq!(exact(&pack, "/with space/"), ok("spaced index"));
    assert_eq!(exact(&pack, "/plain/"), None);

    let (pack, _) = site.build(&with_routes(|r| r.index = false)).unwrap();
    assert_eq!(exact(&pack, "/"), None);
    assert_eq!(exact(&pack, "/docs/"), None);
    assert_eq!(
        exact(&pack, "/docs"),
        None,
        "no index, no directory redirect"
    );
    assert_eq!(exact(&pack, "/index.html"), ok("home"));
}

#[test]
fn suffix_stripping_yields_to_files() {
    let site = Site::new(&[]);
    let (pack, _) = site.build(&BuildOptions::default()).unwrap();
    assert_eq!(
        exact(&pack, "/about"),
        ok("about html"),
        ".html before .htm"
    );
    assert_eq!(exact(&pack, "/about.htm"), ok("about htm"));
    assert_eq!(
        exact(&pack, "/page"),
        ok("page without suffix"),
        "a file wins"
    );
    assert_eq!(exact(&pack, "/docs/page"), ok("docs page txt"));
    assert_eq!(exact(&pack, "/caf\u{e9}"), ok("unicode name"));
    assert_eq!(exact(&pack, "/index"), None, "index files are not stripped");
    assert_eq!(
        exact(&pack, "/both"),
        ok("both html"),
        "stripped beats dir redirect"
    );

    let (pack, _) = site.build(&with_routes(|r| r.strip = false)).unwrap();
    assert_eq!(exact(&pack, "/about"), None);
    assert_eq!(exact(&pack, "/docs/page"), None);
    assert_eq!(location(&pack, "/both").as_deref(), Some("/both/"));
}

#[test]
fn directories_redirect_to_their_slash() {
    let site = Site::new(&[]);
    let (pack, _) = site.build(&BuildOptions::default()).unwrap();
    let r = pack.lookup(RouteKind::Exact, b"/docs").unwrap();
    assert_eq!(r.status(), 301);
    assert!(!r.has_validators());
    assert_eq!(location(&pack, "/docs").as_deref(), Some("/docs/"));
    assert!(identity_body(&r).contains("href=\"/docs/\""));
    assert_eq!(
        location(&pack, "/with space").as_deref(),
        Some("/with%20space/")
    );
    assert_eq!(
        location(&pack, "/app").as_deref(),
        Some("/app/"),
        "a wildcard counts"
    );
    assert_eq!(exact(&pack, "/plain"), None, "no index, no redirect");

    let (pack, _) = site
        .build(&with_routes(|r| r.dir_redirect = false))
        .unwrap();
    assert_eq!(exact(&pack, "/docs"), None);
    assert_eq!(exact(&pack, "/docs/"), ok("docs index htm"));
}

#[test]
fn wildcards_are_keyed_by_directory() {
    let site = Site::new(&[("app/_wildcard.htm", "second wildcard")]);
    let (pack, report) = site.build(&BuildOptions::default()).unwrap();
    let app = pack.lookup(RouteKind::Wildcard, b"/app/").unwrap();
    assert_eq!(
        (app.status(), identity_body(&app).as_str()),
        (200, "app shell")
    );
    let sub = pack.lookup(RouteKind::Wildcard, b"/app/sub/").unwrap();
    assert_eq!(identity_body(&sub), "sub shell");
    assert!(pack.lookup(RouteKind::Wildcard, b"/").is_none());
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("app/_wildcard.htm")),
        "{:?}",
        report.warnings
    );

    let (pack, _) = site.build(&with_routes(|r| r.wildcard = false)).unwrap();
    assert!(pack.lookup(RouteKind::Wildcard, b"/app/").is_none());
    assert_eq!(exact(&pack, "/app"), None, "no wildcard, no redirect");
    assert_eq!(exact(&pack, "/app/_wildcard.html"), ok("app shell"));
}

#[test]
fn root_404_is_the_not_found_page() {
    let site = Site::new(&[]);
    let big = "<p>missing</p>\n".repeat(100);
    let site2 = Site::new(&[("404.html", &big)]);
    let (pack, _) = site.build(&BuildOptions::default()).unwrap();
    let nf = pack.not_found().unwrap();
    assert_eq!(nf.status(), 404);
    assert!(!nf.has_validators());
    assert_eq!(identity_body(&nf), "not found page");
    for key in ["/404.html", "/404"] {
        assert_eq!(
            exact(&pack, key),
            Some((404, "not found page".to_owned())),
            "{key}: still served by name, as a 404 (never indexed as a page)"
        );
    }

    let (pack, _) = site2.build(&BuildOptions::default()).unwrap();
    let nf = pack.not_found().unwrap();
    assert!(
        nf.variant(Encoding::Br).is_some(),
        "compressed variants too"
    );

    let (pack, _) = site.build(&with_routes(|r| r.not_found = false)).unwrap();
    assert!(pack.not_found().is_none());
    assert_eq!(
        exact(&pack, "/404.html"),
        ok("not found page"),
        "an ordinary page with --no-404"
    );
}

const REDIRECTS: &str = "\
# comment
/old /about 301
/temp /about.html 302
/about /elsewhere 301
/index.html /about 301!
/alias /docs/page.txt 200
/gone /404.html 404
/old /x 302
/docs /manual/ 302
/blog/:slug /posts/:slug 301
/x/* /y/:splat 200!
/ext https://example.org/a?b=c 307
/caf%C3%A9-old /caf%C3%A9 308
";

#[test]
fn redirects_file_compiles_exact_rules_into_routes() {
    let site = Site::new(&[("_redirects", REDIRECTS)]);
    let (pack, report) = site.build(&BuildOptions::default()).unwrap();
    assert_eq!(exact(&pack, "/_redirects"), None, "never served");
    let r = pack.lookup(RouteKind::Exact, b"/old").unwrap();
    assert_eq!(r.status(), 301);
    assert_eq!(
        location(&pack, "/old").as_deref(),
        Some("/about"),
        "first rule wins"
    );
    assert!(report.warnings.iter().any(|w| w.contains("_redirects:8")));
    assert_eq!(
        pack.lookup(RouteKind::Exact, b"/temp").unwrap().status(),
        302
    );
    assert_eq!(
        exact(&pack, "/about"),
        ok("about html"),
        "a file shadows a rule"
    );
    assert_eq!(report.shadowed_rules, vec![4]);
    assert_eq!(
        location(&pack, "/index.html").as_deref(),
        Some("/about"),
        "forced"
    );
    assert_eq!(exact(&pack, "/"), ok("home"));
    let alias = pack.lookup(RouteKind::Exact, b"/alias").unwrap();
    assert_eq!(
        (alias.status(), identity_body(&alias).as_str()),
        (200, "docs page txt")
    );
    assert!(alias.has_validators());
    let gone = pack.lookup(RouteKind::Exact, b"/gone").unwrap();
    assert_eq!(
        (gone.status(), identity_body(&gone).as_str()),
        (404, "not found page")
    );
    assert!(!gone.has_validators());
    assert_eq!(
        location(&pack, "/docs").as_deref(),
        Some("/manual/"),
        "replaces the dir redirect"
    );
    assert_eq!(
        pack.lookup(RouteKind::Exact, b"/docs").unwrap().status(),
        302
    );
    assert_eq!(
        location(&pack, "/ext").as_deref(),
        Some("https://example.org/a?b=c"),
        "absolute URLs are kept verbatim"
    );
    assert_eq!(
        pack.lookup(RouteKind::Exact, b"/ext").unwrap().status(),
        307
    );
    assert!(
        pack.lookup(RouteKind::Exact, "/caf\u{e9}-old".as_bytes())
            .is_some(),
        "keys are decoded"
    );

    let rules: Vec<_> = pack
        .rules()
        .map(|r| (r.from.to_vec(), r.to.to_vec(), r.status, r.force))
        .collect();
    assert_eq!(
        rules,
        vec![
            (
                b"/blog/:slug".to_vec(),
                b"/posts/:slug".to_vec(),
                301,
                false
            ),
            (b"/x/*".to_vec(), b"/y/:splat".to_vec(), 200, true),
        ]
    );
    assert_eq!(report.rules, 2);
    assert!(pack.has_forced_rules());

    let opts = BuildOptions {
        redirects_file: false,
        ..BuildOptions::default()
    };
    let (pack, _) = site.build(&opts).unwrap();
    assert_eq!(exact(&pack, "/old"), None);
    assert_eq!(pack.rule_count(), 0);
    assert_eq!(
        exact(&pack, "/_redirects"),
        None,
        "not served when disabled either"
    );
}

#[test]
fn redirect_errors_name_the_line_and_leave_no_pack() {
    for (text, needle) in [
        (
            "/a /b 301\n/bad /missing 200\n",
            "_redirects:2: target /missing is not a file",
        ),
        ("/bad /about 418\n", "_redirects:1: status \"418\""),
        (
            "/bad https://example.org/ 200\n",
            "_redirects:1: a 200 rule must target a path",
        ),
        (
            "/a /b 301\n/api/* https://api.example.com/:splat 200\n",
            "_redirects:2: a 200 rule must target a path in the site, not a URL: kiln serves files and cannot proxy",
        ),
        (
            "/app/* /missing.html 200\n",
            "_redirects:1: target /missing.html is not a file",
        ),
        (
            "/x/:id https://example.org/ 404\n",
            "_redirects:1: a 404 rule must target a path",
        ),
    ] {
        let site = Site::new(&[("_redirects", text)]);
        let err = format!("{:#}", site.build(&BuildOptions::default()).unwrap_err());
        assert!(err.contains(needle), "{err}");
        assert!(!err.contains('\n'));
        assert!(!Path::new(&site.dir.path().join("site.pack")).exists());
    }
}

#[test]
fn headers_file_is_never_served() {
    let site = Site::new(&[("_headers", "/*\n  X-Test: yes\n")]);
    let (pack, _) = site.build(&BuildOptions::default()).unwrap();
    assert_eq!(exact(&pack, "/_headers"), None);
    let head = pack
        .lookup(RouteKind::Exact, b"/")
        .unwrap()
        .variant(Encoding::Identity)
        .unwrap()
        .head;
    assert!(String::from_utf8_lossy(head).contains("X-Test: yes\r\n"));

    let opts = BuildOptions {
        headers_file: false,
        ..BuildOptions::default()
    };
    let (pack, _) = site.build(&opts).unwrap();
    let head = pack
        .lookup(RouteKind::Exact, b"/")
        .unwrap()
        .variant(Encoding::Identity)
        .unwrap()
        .head;
    assert!(!String::from_utf8_lossy(head).contains("X-Test"));
    assert_eq!(exact(&pack, "/_headers"), None);
}

#[test]
fn redirect_targets_become_valid_location_values() {
    let site = Site::new(&[(
        "_redirects",
        "/x /\u{e9}t\u{e9}#top 301\n/y https://b.example/a\"b<c>?q=1 302\n/z /100%-off/%41 301\n/p/* /q/\u{e9}/:splat 302\n",
    )]);
    let (pack, _) = site.build(&BuildOptions::default()).unwrap();
    assert_eq!(location(&pack, "/x").as_deref(), Some("/%C3%A9t%C3%A9#top"));
    assert_eq!(
        location(&pack, "/y").as_deref(),
        Some("https://b.example/a%22b%3Cc%3E?q=1")
    );
    assert_eq!(location(&pack, "/z").as_deref(), Some("/100%25-off/%41"));
    let rule = pack.rules().next().unwrap();
    assert_eq!(rule.to, b"/q/%C3%A9/:splat");
    // A CR or NUL inside a target would split or end the prepared header.
    for (text, needle) in [
        ("/a /b\r/c 301\n", "_redirects:1: status"),
        ("/a /b\u{0}c 301\n", "_redirects:1: control character"),
        ("/a /b\u{9b}c 301\n", "_redirects:1: control character"),
    ] {
        let site = Site::new(&[("_redirects", text)]);
        let err = format!("{:#}", site.build(&BuildOptions::default()).unwrap_err());
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn rule_files_saved_by_windows_editors_parse() {
    // A byte order mark and CRLF line ends.
    let site = Site::new(&[
        (
            "_redirects",
            "\u{feff}/old /about 302\r\n/x/* /y/:splat 301\r\n",
        ),
        ("_headers", "\u{feff}/*\r\n  X-Test: yes\r\n"),
    ]);
    let (pack, report) = site.build(&BuildOptions::default()).unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(location(&pack, "/old").as_deref(), Some("/about"));
    assert_eq!(pack.rules().next().unwrap().to, b"/y/:splat");
    let head = pack
        .lookup(RouteKind::Exact, b"/")
        .unwrap()
        .variant(Encoding::Identity)
        .unwrap()
        .head;
    assert!(String::from_utf8_lossy(head).contains("\r\nX-Test: yes\r\n"));
}

#[test]
fn rewrite_patterns_that_reach_no_file_warn_with_their_line() {
    let site = Site::new(&[(
        "_redirects",
        "/app/* /index.html 200\n/p/:id /docs/:id 200\n/q/* /nothing/:splat 200\n/r/* /gone/:splat 301\n",
    )]);
    let (pack, report) = site.build(&BuildOptions::default()).unwrap();
    assert_eq!(pack.rule_count(), 4);
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert!(
        report.warnings[0].contains("_redirects:3: no file of this site starts with /nothing/"),
        "{:?}",
        report.warnings
    );
}

/// A folder's generated listing (`--index-pages`) is no file of the
/// author's: a `_redirects` rule for its `/dir/` replaces it unforced.
#[test]
fn a_rule_replaces_a_folder_listing() {
    let site = Site::new(&[("_redirects", "/plain/ /about 302\n")]);
    let opts = with_routes(|r| r.index_pages = true);
    let (pack, report) = site.build(&opts).unwrap();
    assert!(report.shadowed_rules.is_empty());
    assert_eq!(location(&pack, "/plain/").as_deref(), Some("/about"));
    let (pack, _) = Site::new(&[]).build(&opts).unwrap();
    let (status, page) = exact(&pack, "/plain/").unwrap();
    assert_eq!(status, 200);
    assert!(page.contains("./readme.md"), "{page}");
    assert_eq!(
        exact(&pack, "/docs/"),
        ok("docs index htm"),
        "an index wins"
    );
}
