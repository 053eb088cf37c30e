//! Reading a source directory: ignore rules, `.well-known`, symbolic links
//! (followed inside the tree; out of it, and loops, skipped with a warning),
//! names that are not UTF-8.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;

use kiln::build::source::ignore::Why;
use kiln::build::source::{ReadOptions, read_source};
use kiln::build::{BuildOptions, PreviewCacheControl, build_pack, build_preview};
use kiln::pack::{Encoding, RouteKind};

fn write(root: &Path, path: &str, content: &str) {
    let p = root.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn paths(root: &Path) -> Vec<String> {
    read_source(root, &ReadOptions::default())
        .unwrap()
        .files
        .into_iter()
        .map(|f| f.path)
        .collect()
}

#[test]
fn ignore_rules_and_well_known() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for p in [
        "index.html",
        ".env",
        ".git/config",
        "#draft.html",
        "notes#1.txt",
        "page.html~",
        "debug.log",
        "x.tmp",
        "x.temp",
        "yarn.lock",
        "Thumbs.db",
        "sub/.DS_Store",
        "sub/.cache/a.html",
        "sub/ok.html",
        ".well-known/security.txt",
        ".well-known/acme-challenge/token",
        ".well-known/.hidden/x.txt",
        ".well-known/.DS_Store",
        ".well-known/.git/config",
        ".well-known/security.txt~",
        ".well-known/#security.txt#",
        ".well-known/acme-challenge/.swp",
        "sub/.well-known/no.txt",
    ] {
        write(root, p, "x");
    }
    assert_eq!(
        paths(root),
        [
            ".well-known/acme-challenge/token",
            ".well-known/security.txt",
            "index.html",
            "sub/ok.html"
        ]
    );
}

#[test]
fn links_inside_are_followed_links_out_of_the_source_and_loops_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    write(&root, "index.html", "home");
    write(&root, "sub/page.html", "page");
    write(dir.path(), "outside/shared.css", "shared");
    write(dir.path(), "secret.txt", "secret");
    symlink("index.html", root.join("alias.html")).unwrap();
    symlink(root.join("sub/page.html"), root.join("absolute.html")).unwrap();
    symlink("sub", root.join("again")).unwrap();
    symlink("../alias.html", root.join("sub/chain.html")).unwrap();
    symlink(dir.path().join("outside"), root.join("ext")).unwrap();
    symlink("../secret.txt", root.join("secret.txt")).unwrap();
    symlink("/etc/passwd", root.join("passwd.txt")).unwrap();
    // Inside, to a link that leads out: out.
    symlink("../passwd.txt", root.join("sub/passwd.txt")).unwrap();
    // Out, and back in through the parent: in.
    symlink("../site/index.html", root.join("round-trip.html")).unwrap();
    symlink("..", root.join("sub/loop")).unwrap();
    symlink("missing.html", root.join("dangling.html")).unwrap();
    // Inside, but to what the build leaves out: out too.
    write(&root, ".git/config", "repository secrets");
    write(&root, "server.log", "log");
    symlink(".git", root.join("repo")).unwrap();
    symlink("../.git/config", root.join("sub/config.txt")).unwrap();
    symlink("server.log", root.join("log.txt")).unwrap();
    let source = read_source(&root, &ReadOptions::default()).unwrap();
    let paths: Vec<&str> = source.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "absolute.html",
            "again/chain.html",
            "again/page.html",
            "alias.html",
            "index.html",
            "round-trip.html",
            "sub/chain.html",
            "sub/page.html"
        ]
    );
    let out: Vec<(&str, Why)> = source
        .left_out
        .iter()
        .map(|(p, w)| (p.as_str(), *w))
        .collect();
    assert_eq!(
        out,
        [
            (".git/", Why::Hidden),
            ("again/config.txt", Why::LeftOutLink),
            ("again/passwd.txt", Why::OutsideLink),
            ("ext", Why::OutsideLink),
            ("log.txt", Why::LeftOutLink),
            ("passwd.txt", Why::OutsideLink),
            ("repo", Why::LeftOutLink),
            ("secret.txt", Why::OutsideLink),
            ("server.log", Why::Scratch),
            ("sub/config.txt", Why::LeftOutLink),
            ("sub/passwd.txt", Why::OutsideLink)
        ]
    );
    let warnings = source.warnings.join("\n");
    for (link, target) in [
        ("site/ext", dir.path().join("outside").display().to_string()),
        ("site/secret.txt", "../secret.txt".to_owned()),
        ("site/passwd.txt", "/etc/passwd".to_owned()),
        ("site/sub/passwd.txt", "../passwd.txt".to_owned()),
    ] {
        assert!(
            warnings.contains(&format!(
                "{link}: symbolic link to {target} skipped, it leads out of the source"
            )),
            "{link}: {warnings}"
        );
    }
    assert!(
        warnings.contains("sub/loop") && warnings.contains("loop"),
        "{warnings}"
    );
    assert!(warnings.contains("dangling.html"), "{warnings}");

    // The pack holds what the walk kept, and nothing of what it skipped.
    let out = dir.path().join("s.pack");
    let report = build_pack(&root, &out, &BuildOptions::default()).unwrap();
    assert_eq!(report.files, 8);
    let pack = kiln::pack::Pack::open(&out).unwrap();
    for key in [
        "/passwd.txt",
        "/secret.txt",
        "/ext/shared.css",
        "/sub/passwd.txt",
    ] {
        assert!(
            pack.lookup(RouteKind::Exact, key.as_bytes()).is_none(),
            "{key}"
        );
    }
    let served = |key: &str| {
        let route = pack.lookup(RouteKind::Exact, key.as_bytes()).unwrap();
        route.variant(Encoding::Identity).unwrap().body.to_vec()
    };
    assert_eq!(served("/sub/chain.html"), b"home");
    assert_eq!(served("/again/page.html"), b"page");
}

#[test]
fn non_utf8_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.html");
    std::fs::write(dir.path().join(name), "x").unwrap();
    let err = format!(
        "{:#}",
        read_source(dir.path(), &ReadOptions::default()).unwrap_err()
    );
    assert!(err.contains("not UTF-8") && err.contains("caf"), "{err}");
}

#[test]
fn an_empty_directory_builds_an_empty_pack() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    let out = dir.path().join("e.pack");
    let report = build_pack(&dir.path().join("src"), &out, &BuildOptions::default()).unwrap();
    assert_eq!((report.files, report.routes), (0, 0));
    let pack = kiln::pack::Pack::open(&out).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    // Lookups on a pack without routes find nothing and do not spin.
    assert!(pack.lookup(RouteKind::Exact, b"/").is_none());
    assert!(pack.lookup(RouteKind::Wildcard, b"/").is_none());
    assert!(pack.not_found().is_none());
    assert_eq!(pack.routes().count(), 0);
}

#[test]
fn preview_pack_is_in_memory() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", &"<p>preview</p>\n".repeat(50));
    let pack = build_preview(dir.path(), PreviewCacheControl::NoCache).unwrap();
    assert_eq!(pack.path(), dir.path(), "messages name the source");
    let file = std::fs::read_link(format!("/proc/self/fd/{}", pack.file().as_raw_fd())).unwrap();
    assert!(
        file.to_string_lossy()
            .starts_with("/memfd:kiln-preview.pack"),
        "an anonymous in-memory file: {}",
        file.display()
    );
    let route = pack.lookup(RouteKind::Exact, b"/").unwrap();
    assert_eq!(
        route.variant(Encoding::Identity).unwrap().body,
        "<p>preview</p>\n".repeat(50).as_bytes()
    );
    assert!(route.variant(Encoding::Br).is_some());
    assert!(route.variant(Encoding::Zstd).is_none());
    kiln::pack::verify::verify(&pack).unwrap();
}

#[test]
fn the_pack_inside_its_source_is_never_packed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("public");
    write(&src, "index.html", "<p>home</p>");
    let out = src.join("site.pack");
    let opts = BuildOptions::default();
    build_pack(&src, &out, &opts).unwrap();
    let first = std::fs::read(&out).unwrap();
    // The rebuild finds the previous pack in the tree: it must not be served.
    let report = build_pack(&src, &out, &opts).unwrap();
    assert_eq!(report.files, 1);
    let pack = kiln::pack::Pack::open(&out).unwrap();
    assert!(pack.lookup(RouteKind::Exact, b"/site.pack").is_none());
    assert!(first == std::fs::read(&out).unwrap(), "the rebuild differs");
    // Nor through a symbolic link to it.
    std::os::unix::fs::symlink(&out, src.join("copy.bin")).unwrap();
    assert_eq!(build_pack(&src, &out, &opts).unwrap().files, 1);
}

#[test]
fn files_are_read_when_built_and_must_not_change_size_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.html", "first");
    let source = read_source(dir.path(), &ReadOptions::default()).unwrap();
    let file = &source.files[0];
    assert_eq!((file.path.as_str(), file.len), ("a.html", 5));
    assert_eq!(&*file.read().unwrap(), b"first");
    write(dir.path(), "a.html", "rewritten");
    let err = format!("{:#}", file.read().unwrap_err());
    assert!(
        err.contains("a.html") && err.contains("changed during the build"),
        "{err}"
    );
    std::fs::remove_file(dir.path().join("a.html")).unwrap();
    let err = format!("{:#}", file.read().unwrap_err());
    assert!(err.contains("a.html: cannot read"), "{err}");
}
