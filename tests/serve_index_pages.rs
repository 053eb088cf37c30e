//! `--index-pages`: a listing of every folder without an index, made at
//! build time (`kiln build --index-pages`) or in a preview (`kiln serve
//! DIR|ARCHIVE --index-pages`, a directory with or without `--watch`); off
//! by default. Served
//! over real sockets, links followed; the pack stays reproducible and an
//! ordinary pack for `verify`, `inspect` and `diff`.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use kiln::build::{BuildOptions, build_pack};

/// Names with a space, `<`, `&`, `'`, `:`, non-ASCII; a folder with an
/// index, one with a wildcard, one without either, a hidden one.
const FILES: &[(&str, &str)] = &[
    ("readme.md", "read me"),
    ("a b/x&y<z>.txt", "odd name"),
    ("a b/it's.txt", "quote"),
    ("a b/deep/caf\u{e9} \u{65e5}\u{672c}.txt", "unicode"),
    ("a b/deep/q:r.txt", "colon"),
    ("docs/index.html", "docs index"),
    ("app/_wildcard.html", "app shell"),
    (".hidden/secret.txt", "secret"),
];

fn write_site(root: &Path) {
    for (path, body) in FILES {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
}

fn listing_opts() -> BuildOptions {
    let mut opts = BuildOptions::default();
    opts.routes.index_pages = true;
    opts
}

fn built(dir: &Path, opts: &BuildOptions) -> PathBuf {
    let src = dir.join("src");
    write_site(&src);
    let out = dir.join("site.pack");
    build_pack(&src, &out, opts).unwrap();
    out
}

/// The `href` values of a page, in order.
fn hrefs(page: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].replace("&amp;", "&"))
        .collect()
}

/// `href` resolved against the folder URL `base` (ending in `/`).
fn resolve(base: &str, href: &str) -> String {
    match href.strip_prefix("./") {
        Some(rest) => format!("{base}{rest}"),
        None if href == "../" => {
            let trimmed = &base[..base.len() - 1];
            trimmed[..=trimmed.rfind('/').unwrap()].to_string()
        }
        None => panic!("unexpected link {href}"),
    }
}

/// Walks the listings from `/`, following every link: each folder link
/// leads to a listing, each file link to the file's body. Returns the
/// files reached, by their decoded path.
fn walk(s: &Server) -> Vec<(String, String)> {
    let mut reached = Vec::new();
    let mut folders = vec!["/".to_string()];
    while let Some(folder) = folders.pop() {
        let r = s.get(&folder, "");
        assert_eq!(r.status, 200, "{folder}");
        assert_eq!(
            r.header("Content-Type").as_deref(),
            Some("text/html; charset=utf-8")
        );
        assert!(
            r.header("ETag").is_some(),
            "{folder}: validators like any page"
        );
        let page = String::from_utf8(r.body).unwrap();
        for href in hrefs(&page) {
            assert!(
                href.bytes()
                    .all(|c| c.is_ascii_graphic() && !b"<>\"' &".contains(&c)),
                "{folder}: {href} is percent-encoded"
            );
            if href == "../" {
                continue;
            }
            let url = resolve(&folder, &href);
            if href.ends_with('/') {
                folders.push(url);
            } else {
                let r = s.get(&url, "");
                assert_eq!(r.status, 200, "{url}");
                let decoded = percent_decode(&url);
                reached.push((decoded, String::from_utf8(r.body).unwrap()));
            }
        }
    }
    reached.sort();
    reached
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The files a walk must reach: every file not hidden and not in a
/// folder answered by its index or wildcard.
fn listed_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = FILES
        .iter()
        .filter(|(p, _)| !p.starts_with('.') && !p.starts_with("docs/") && !p.starts_with("app/"))
        .map(|(p, b)| (format!("/{p}"), b.to_string()))
        .collect();
    files.sort();
    files
}

#[test]
fn listings_are_served_for_folders_without_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let pack = built(dir.path(), &listing_opts());
    let s = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    assert_eq!(walk(&s), listed_files());

    let page = String::from_utf8(s.get("/a%20b/", "").body).unwrap();
    assert!(page.contains("<title>Index of /a b/</title>"), "{page}");
    assert!(
        page.contains("<a href=\"./x%26y%3Cz%3E.txt\">x&amp;y&lt;z&gt;.txt</a></td><td>8</td>"),
        "{page}"
    );
    assert!(page.contains(">it&#39;s.txt</a>"), "{page}");
    assert!(
        page.find("./deep/").unwrap() < page.find("./it").unwrap(),
        "folders first, then files, each sorted: {page}"
    );
    let deep = String::from_utf8(s.get("/a%20b/deep/", "").body).unwrap();
    assert!(
        deep.contains(
            "href=\"./caf%C3%A9%20%E6%97%A5%E6%9C%AC.txt\">caf\u{e9} \u{65e5}\u{672c}.txt<"
        ),
        "{deep}"
    );
    assert!(deep.contains("href=\"./q:r.txt\""), "{deep}");
    let root = String::from_utf8(s.get("/", "").body).unwrap();
    assert!(
        !root.contains("hidden"),
        "hidden folders are not listed: {root}"
    );
    assert!(!root.contains("href=\"../\""), "no parent above the root");

    // An index or a wildcard answers its folder; the folder redirect too.
    let r = s.get("/docs/", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"docs index"[..]));
    let r = s.get("/app/", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"app shell"[..]));
    assert_eq!(s.get("/.hidden/", "").status, 404);
    let r = s.get("/a%20b", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("Location").as_deref(), Some("/a%20b/"));
    // Compressed like any page.
    let r = s.get("/a%20b/", "Accept-Encoding: br\r\n");
    assert_eq!(r.header("Content-Encoding").as_deref(), Some("br"));
}

#[test]
fn off_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let pack = built(dir.path(), &BuildOptions::default());
    let s = Server::start(&[pack.to_str().unwrap(), "--threads", "1"]);
    for folder in ["/", "/a%20b/", "/a%20b/deep/"] {
        assert_eq!(s.get(folder, "").status, 404, "{folder}");
    }
    assert_eq!(s.get("/readme.md", "").status, 200);
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_pack_is_reproducible_and_ordinary_for_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    write_site(&src);
    let tar_path = dir.path().join("site.tar");
    let mut builder = tar::Builder::new(File::create(&tar_path).unwrap());
    builder.append_dir_all(".", &src).unwrap();
    builder.into_inner().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    for (source, out) in [(&src, "dir.pack"), (&tar_path, "tar.pack")] {
        let o = kiln(&[
            "build",
            source.to_str().unwrap(),
            "-o",
            &path(out),
            "--index-pages",
            "--quiet",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = kiln(&[
        "build",
        src.to_str().unwrap(),
        "-o",
        &path("again.pack"),
        "--index-pages",
        "--quiet",
    ]);
    assert!(o.status.success());
    let dir_pack = std::fs::read(path("dir.pack")).unwrap();
    assert!(
        dir_pack == std::fs::read(path("tar.pack")).unwrap(),
        "dir and tar differ"
    );
    assert!(
        dir_pack == std::fs::read(path("again.pack")).unwrap(),
        "two builds differ"
    );

    let o = kiln(&["verify", &path("dir.pack")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = kiln(&["inspect", "--json", &path("dir.pack")]);
    assert!(o.status.success());
    let inspected = String::from_utf8_lossy(&o.stdout);
    assert!(inspected.contains("\"/a b/deep/\""), "{inspected}");

    let o = kiln(&[
        "build",
        src.to_str().unwrap(),
        "-o",
        &path("plain.pack"),
        "--quiet",
    ]);
    assert!(o.status.success());
    let o = kiln(&["diff", &path("plain.pack"), &path("dir.pack")]);
    assert_eq!(o.status.code(), Some(1), "the listings are the difference");
    let diff = String::from_utf8_lossy(&o.stdout);
    for added in ["+ /  200", "+ /a b/  200", "+ /a b/deep/  200"] {
        assert!(diff.contains(added), "{added}: {diff}");
    }
    assert!(!diff.contains("/docs/  200"), "{diff}");
}

/// Waits until `cond` holds, failing after a generous bound.
fn wait_until(what: &str, server: &Server, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never saw {what}; stderr: {}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_preview_lists_folders_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    write_site(&src);
    let site = src.to_str().unwrap();
    let s = Server::start(&[site, "--threads", "1"]);
    assert_eq!(s.get("/a%20b/", "").status, 404, "off in a preview too");
    drop(s);
    let s = Server::start(&[site, "--index-pages", "--threads", "1"]);
    assert_eq!(walk(&s), listed_files());
    drop(s);
    let tar_path = dir.path().join("site.tar");
    let mut builder = tar::Builder::new(File::create(&tar_path).unwrap());
    builder.append_dir_all(".", &src).unwrap();
    builder.into_inner().unwrap();
    let s = Server::start(&[
        tar_path.to_str().unwrap(),
        "--index-pages",
        "--threads",
        "1",
    ]);
    assert_eq!(walk(&s), listed_files(), "an archive's preview");
    drop(s);

    let s = Server::start(&[site, "--watch", "--index-pages", "--threads", "1"]);
    assert_eq!(walk(&s), listed_files());
    std::fs::write(src.join("a b/new file.txt"), "new").unwrap();
    wait_until("the new file listed", &s, || {
        String::from_utf8_lossy(&s.get("/a%20b/", "").body).contains("./new%20file.txt")
    });
    std::fs::write(src.join("a b/index.html"), "now an index").unwrap();
    // With the live preview's script tag, as every page of a watched
    // preview (tests/serve_watch.rs).
    let index = [&b"now an index"[..], kiln::build::live::TAG].concat();
    wait_until("the index instead of the listing", &s, || {
        s.get("/a%20b/", "").body == index
    });
}

#[test]
fn index_pages_on_serve_is_for_previews() {
    let dir = tempfile::tempdir().unwrap();
    let pack = built(dir.path(), &BuildOptions::default());
    let o = kiln(&[
        "serve",
        pack.to_str().unwrap(),
        "--index-pages",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("site.pack: --index-pages applies to a preview"),
        "{err}"
    );
}
