//! The live preview, `kiln serve DIR --watch`: a file written, added or
//! removed under DIR (new directories included) is served after an
//! in-memory rebuild, logged with what changed; a broken `_redirects` or
//! `_headers` is reported and the last good site keeps serving; symbolic
//! links out of DIR are not served, at start or after a rebuild; what is
//! not a directory is refused. The previous version of a changed file is
//! its dictionary (RFC 9842): a browser holding it gets a delta.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Waits until `cond` holds; a preview that never gets there fails after a
/// long bound (this is no timing measurement: bench/BUILD.md has those).
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

fn body(server: &Server, path: &str) -> (u16, String) {
    let r = server.get(path, "");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

fn site(root: &Path) {
    write(root, "index.html", &"<h1>first</h1>\n".repeat(20));
    write(root, "about.html", "<p>about</p>");
    write(root, "_redirects", "/old /about 301\n");
}

fn start(root: &Path, extra: &[&str]) -> Server {
    Server::start(&[&[root.to_str().unwrap(), "--watch"][..], extra].concat())
}

#[test]
fn changes_are_served_after_a_rebuild_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    site(&root);
    let server = start(&root, &[]);
    assert!(server.startup.contains("(5 routes)"), "{}", server.startup);
    assert_eq!(body(&server, "/").1, "<h1>first</h1>\n".repeat(20));

    // An edit: the new bytes, in every encoding.
    write(&root, "index.html", &"<h1>second</h1>\n".repeat(20));
    wait_until("the edit", &server, || {
        body(&server, "/").1 == "<h1>second</h1>\n".repeat(20)
    });
    let br = server.get("/", "Accept-Encoding: br\r\n");
    assert_eq!(br.header("Content-Encoding").as_deref(), Some("br"));
    let identity = server.get("/", "");
    assert_ne!(br.header("ETag"), identity.header("ETag"));
    wait_until("the log line", &server, || {
        server
            .stderr_text()
            .contains("2 changed (/, /index.html), 0 added, 0 removed")
    });
    let log = server.stderr_text();
    // br and gzip of the page, and a dcb and a dcz of it against its
    // previous version.
    assert!(
        log.contains("4 encodings compressed") && log.contains("reused"),
        "{log}"
    );

    // A file in a new directory, a file removed.
    write(&root, "docs/guide/intro.html", "<p>intro</p>");
    std::fs::remove_file(root.join("about.html")).unwrap();
    wait_until("the new directory", &server, || {
        body(&server, "/docs/guide/intro") == (200, "<p>intro</p>".to_owned())
    });
    wait_until("the removal", &server, || {
        body(&server, "/about.html").0 == 404
    });
    // A file later added to that new directory is seen too: it is watched.
    write(&root, "docs/guide/more.html", "<p>more</p>");
    wait_until("a file in the new directory", &server, || {
        body(&server, "/docs/guide/more.html").0 == 200
    });
}

#[test]
fn a_broken_rules_file_keeps_the_last_good_site() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    site(&root);
    let server = start(&root, &["--compression", "max"]);
    assert_eq!(server.get("/old", "").status, 301);

    write(&root, "_redirects", "/old /about 999\n");
    wait_until("the _redirects error", &server, || {
        server
            .stderr_text()
            .contains("still serving the previous site")
    });
    let log = server.stderr_text();
    let line = log.lines().find(|l| l.contains("still serving")).unwrap();
    assert!(line.contains("_redirects:1: status \"999\""), "{line}");
    assert_eq!(server.get("/old", "").status, 301, "the last good site");

    write(&root, "_headers", "/*\n  X-Broken\n");
    write(&root, "_redirects", "/old /index.html 302\n");
    wait_until("the _headers error", &server, || {
        server
            .stderr_text()
            .lines()
            .any(|l| l.contains("_headers") && l.contains("still serving"))
    });
    assert_eq!(
        server.get("/old", "").status,
        301,
        "still the last good site"
    );

    write(&root, "_headers", "/*\n  X-Fixed: yes\n");
    wait_until("the fixed rules", &server, || {
        server.get("/old", "").status == 302
    });
    assert_eq!(
        server.get("/", "").header("X-Fixed").as_deref(),
        Some("yes")
    );
}

#[test]
fn links_out_of_the_site_are_not_served_links_inside_are() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    site(&root);
    write(dir.path(), "secret.txt", "secret");
    write(dir.path(), "outside/shared.css", "shared");
    symlink("about.html", root.join("alias.html")).unwrap();
    symlink("../secret.txt", root.join("secret.txt")).unwrap();
    symlink(dir.path().join("outside"), root.join("ext")).unwrap();
    let server = start(&root, &[]);
    assert_eq!(body(&server, "/alias.html"), (200, "<p>about</p>".into()));
    for path in ["/secret.txt", "/secret", "/ext/shared.css"] {
        assert_eq!(body(&server, path).0, 404, "{path}");
    }
    let log = server.stderr_text();
    assert!(
        log.contains(
            "secret.txt: symbolic link to ../secret.txt skipped, it leads out of the source"
        ),
        "{log}"
    );

    // Links made while it runs: resolved by the rebuild, in the sandbox.
    symlink("/etc/passwd", root.join("passwd.txt")).unwrap();
    write(&root, ".git/config", "repository secrets");
    symlink(".git", root.join("repo")).unwrap();
    symlink("index.html", root.join("home.html")).unwrap();
    wait_until("the new link inside", &server, || {
        body(&server, "/home.html").0 == 200
    });
    assert_eq!(body(&server, "/passwd.txt").0, 404);
    assert_eq!(body(&server, "/secret.txt").0, 404);
    assert_eq!(body(&server, "/repo/config").0, 404);
    // A rebuild logs only what is new: the first link's warning once.
    let log = server.stderr_text();
    assert_eq!(
        log.matches("secret.txt: symbolic link to ../secret.txt skipped")
            .count(),
        1,
        "{log}"
    );
    assert!(
        log.contains(
            "repo: symbolic link to .git skipped, it leads to a name the build leaves out"
        ),
        "{log}"
    );
    assert!(
        log.contains("passwd.txt: symbolic link to /etc/passwd skipped"),
        "{log}"
    );
}

#[test]
fn a_build_that_works_again_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    site(&root);
    let server = start(&root, &[]);
    write(&root, "_headers", "/*\n  X-Broken\n");
    wait_until("the _headers error", &server, || {
        server
            .stderr_text()
            .contains("still serving the previous site")
    });
    // Put back as it was: the site served does not change, and the log
    // says the build works again after the error.
    std::fs::remove_file(root.join("_headers")).unwrap();
    wait_until("the recovery", &server, || {
        server.stderr_text().contains("the build works again")
    });
    let log = server.stderr_text();
    let error = log.find("still serving the previous site").unwrap();
    let recovery = log.find("the build works again").unwrap();
    assert!(error < recovery, "{log}");
    assert!(
        log[recovery..].contains("the site served is unchanged"),
        "{log}"
    );
}

#[test]
fn a_preview_is_revalidated_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    site(&root);
    write(&root, "logo.png", "not really a png");
    write(&root, "app.0123abcd.css", "body{}");
    write(
        &root,
        "_headers",
        "/about.html\n  Cache-Control: public, max-age=600\n",
    );
    let site_values = [
        ("/", "public, max-age=0, must-revalidate"),
        ("/logo.png", "public, max-age=3600"),
        ("/app.0123abcd.css", "public, max-age=31536000, immutable"),
        ("/about.html", "public, max-age=600"),
    ];
    for watch in [true, false] {
        for (flag, site_said) in [(None, false), (Some("site"), true)] {
            let mut args = vec![root.to_str().unwrap()];
            if watch {
                args.push("--watch");
            }
            if let Some(value) = flag {
                args.extend(["--preview-cache-control", value]);
            }
            let server = Server::start(&args);
            for (path, site_value) in site_values {
                let r = server.get(path, "");
                assert_eq!(r.status, 200, "{args:?} {path}");
                let want = if site_said { site_value } else { "no-cache" };
                assert_eq!(
                    r.header("Cache-Control").as_deref(),
                    Some(want),
                    "{args:?} {path}"
                );
                // The validators that make a revalidation a 304.
                let etag = r.header("ETag").expect("an ETag");
                assert!(r.header("Last-Modified").is_some(), "{args:?} {path}");
                let again = server.get(path, &format!("If-None-Match: {etag}\r\n"));
                assert_eq!(again.status, 304, "{args:?} {path}");
            }
        }
    }
    // Edited: the next load revalidates and gets the new bytes.
    let server = start(&root, &[]);
    let before = server.get("/logo.png", "");
    write(&root, "logo.png", "a new logo");
    let etag = before.header("ETag").unwrap();
    wait_until("the edit", &server, || {
        server
            .get("/logo.png", &format!("If-None-Match: {etag}\r\n"))
            .status
            == 200
    });
}

#[test]
fn watch_needs_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    site(&root);
    let pack = dir.path().join("site.pack");
    let built = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "build",
            "-q",
            root.to_str().unwrap(),
            "-o",
            pack.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(built.success());
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "serve",
            pack.to_str().unwrap(),
            "--watch",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--watch needs a directory"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", root.to_str().unwrap(), "--compression", "max"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "--compression is for --watch");
}

#[test]
fn the_previous_version_of_a_changed_file_is_its_dictionary() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    let old: String = (0..400)
        .map(|i| format!("export const c{i} = {};\n", i * 7))
        .collect();
    let new = format!("{old}// saved again\n");
    write(&root, "app.js", &old);
    let server = start(&root, &[]);
    let dictionary = server.get("/app.js", "Accept-Encoding: br\r\n");
    let offered = dictionary.header("Use-As-Dictionary").unwrap_or_default();
    assert!(offered.starts_with(r#"match="/app.js", id="#), "{offered}");
    write(&root, "app.js", &new);
    wait_until("the edit", &server, || body(&server, "/app.js").1 == new);
    let held =
        kiln::dictionary::available_dictionary_value(&kiln::dictionary::sha256(old.as_bytes()));
    let delta = server.get(
        "/app.js",
        &format!("Accept-Encoding: br, dcb, dcz\r\nAvailable-Dictionary: {held}\r\n"),
    );
    let encoding = match delta.header("Content-Encoding").as_deref() {
        Some("dcb") => kiln::pack::Encoding::Dcb,
        Some("dcz") => kiln::pack::Encoding::Dcz,
        other => panic!("not a delta: {other:?}"),
    };
    let decoded = kiln::dictionary::decode(encoding, old.as_bytes(), &delta.body, 1 << 20).unwrap();
    assert_eq!(decoded, new.as_bytes());
}
