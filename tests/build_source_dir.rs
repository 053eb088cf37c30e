//! Reading a source directory: ignore rules, `.well-known`, symbolic links
//! (followed inside the tree; out of it, and loops, skipped with a warning),
//! names that are not UTF-8 or that no URL can name (left out with a
//! warning), a source with nothing to serve (refused without
//! `--allow-empty`).

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
        "#draft.html#",
        ".#draft.html",
        "notes#1.txt",
        "C#-guide.html",
        "#channel.html",
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
            "#channel.html",
            ".well-known/acme-challenge/token",
            ".well-known/security.txt",
            "C#-guide.html",
            "index.html",
            "notes#1.txt",
            "sub/ok.html"
        ]
    );
}

/// A `#` elsewhere than in an editor's autosave (`#name#`) or lock
/// (`.#name`) is an ordinary character: `C#-guide.html` is published and
/// served at `/C%23-guide.html`, whose decoded key is `/C#-guide.html`.
#[test]
fn a_hash_in_a_name_is_published_editor_files_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    write(&src, "C#-guide.html", "<p>C sharp</p>");
    write(&src, "#C#-guide.html#", "autosave");
    write(&src, ".#C#-guide.html", "lock");
    let out = dir.path().join("s.pack");
    let report = build_pack(&src, &out, &BuildOptions::default()).unwrap();
    let pack = kiln::pack::Pack::open(&out).unwrap();
    for key in ["/C#-guide.html", "/C#-guide"] {
        let route = pack.lookup(RouteKind::Exact, key.as_bytes()).unwrap();
        assert_eq!(
            route.variant(Encoding::Identity).unwrap().body,
            b"<p>C sharp</p>"
        );
    }
    assert_eq!(
        report.left_out,
        [
            ("#C#-guide.html#".to_owned(), Why::Hash),
            (".#C#-guide.html".to_owned(), Why::Hash)
        ]
    );
}

/// A name no request can name (a backslash, a newline, a tab: the server
/// refuses such a path with 400) is left out with a warning naming it,
/// on one line; a folder so named once.
#[test]
fn names_no_url_can_name_are_left_out_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for p in [
        "index.html",
        "back\\slash.txt",
        "line\nbreak.html",
        "tab\tdir/a.html",
        "tab\tdir/b.html",
    ] {
        write(root, p, "x");
    }
    let read = read_source(root, &ReadOptions::default()).unwrap();
    let kept: Vec<&str> = read.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(kept, ["index.html"]);
    assert_eq!(
        read.left_out,
        [
            ("back\\slash.txt".to_owned(), Why::Unservable),
            ("line\nbreak.html".to_owned(), Why::Unservable),
            ("tab\tdir/".to_owned(), Why::Unservable),
        ]
    );
    assert_eq!(read.warnings.len(), 3, "{:?}", read.warnings);
    for (w, name) in
        read.warnings
            .iter()
            .zip(["back\\slash.txt", "line\\nbreak.html", "tab\\tdir/"])
    {
        assert!(!w.contains('\n') && w.starts_with(name), "{w}");
        assert!(w.contains("no URL can name it"), "{w}");
    }
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

/// A name that is not UTF-8 (a file, a folder) is left out with a warning
/// naming it; the rest of the site builds.
#[test]
fn non_utf8_names_are_left_out_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    write(&src, "index.html", "home");
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.html");
    std::fs::write(src.join(name), "x").unwrap();
    let folder = std::ffi::OsStr::from_bytes(b"d\xe9j\xe0");
    std::fs::create_dir(src.join(folder)).unwrap();
    std::fs::write(src.join(folder).join("x.html"), "x").unwrap();
    let out = dir.path().join("s.pack");
    let report = build_pack(&src, &out, &BuildOptions::default()).unwrap();
    assert_eq!(report.files, 1);
    let reasons: Vec<Why> = report.left_out.iter().map(|(_, w)| *w).collect();
    assert_eq!(reasons, [Why::NotUtf8, Why::NotUtf8]);
    assert_eq!(report.warnings.len(), 2, "{:?}", report.warnings);
    for w in &report.warnings {
        assert!(w.contains("not UTF-8") && w.contains("left out"), "{w}");
    }
    assert!(report.warnings.iter().any(|w| w.contains("caf")));
    assert!(report.warnings.iter().any(|w| w.contains("/d")));
}

/// An empty folder, or one whose every file is left out, is refused in
/// one line that says so (a failed site generator leaves one); with
/// `--allow-empty` it builds an empty pack.
#[test]
fn a_source_with_nothing_to_serve_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let out = dir.path().join("e.pack");
    let err = format!(
        "{:#}",
        build_pack(&src, &out, &BuildOptions::default()).unwrap_err()
    );
    assert!(!err.contains('\n'), "{err}");
    assert!(
        err.contains("nothing to serve: it holds no file") && err.contains("--allow-empty"),
        "{err}"
    );
    assert!(!out.exists());
    write(&src, ".git/config", "x");
    write(&src, "build.log", "x");
    let err = format!(
        "{:#}",
        build_pack(&src, &out, &BuildOptions::default()).unwrap_err()
    );
    assert!(
        err.contains("every name in it is left out (2: .git/ (hidden")
            && err.contains("build.log (log"),
        "{err}"
    );
    // Rules alone are something to serve.
    write(&src, "_redirects", "/old /new 301\n");
    build_pack(&src, &out, &BuildOptions::default()).unwrap();
}

#[test]
fn an_empty_directory_builds_an_empty_pack_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    let out = dir.path().join("e.pack");
    let opts = BuildOptions {
        allow_empty: true,
        ..BuildOptions::default()
    };
    let report = build_pack(&dir.path().join("src"), &out, &opts).unwrap();
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
    let file = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        pack.file().unwrap().as_raw_fd()
    ))
    .unwrap();
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

/// A certificate and its private key: PEM, then DER.
fn key_material() -> (String, String, Vec<u8>, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["example.com".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    (
        cert.pem(),
        key.serialize_pem(),
        cert.der().to_vec(),
        key.serialize_der(),
    )
}

/// Text of `len` bytes with `inserted` at `at`.
fn text_with(len: usize, at: usize, inserted: &str) -> Vec<u8> {
    let mut text: Vec<u8> = b"a line of a large text file\n"
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect();
    text.splice(at..at + inserted.len(), inserted.bytes());
    text
}

#[test]
fn private_keys_are_left_out_by_name_and_by_content_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    let (cert_pem, key_pem, cert_der, key_der) = key_material();
    let openssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    let json = format!(
        r#"{{"type": "service_account", "private_key": "{}"}}"#,
        key_pem.replace('\n', "\\n")
    );
    // A BEGIN line cut between two of the pieces a large file is read in
    // (after its first 64 KiB, then 1 MiB each).
    let cut = (64 << 10) + (1 << 20) - 10;
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("index.html", b"<h1>home</h1>".to_vec()),
        (
            "example.com.key",
            b"named as a key, whatever it holds".to_vec(),
        ),
        (
            "certs/bundle.pem",
            format!("{cert_pem}{key_pem}").into_bytes(),
        ),
        ("certs/cert.pem", cert_pem.clone().into_bytes()),
        ("certs/cert.der", cert_der),
        ("keys/key.der", key_der),
        ("keys/id_ed25519", openssh.as_bytes().to_vec()),
        ("service-account.json", json.into_bytes()),
        ("notes/big.txt", text_with(3 << 20, cut, &key_pem)),
        // A page quoting a key is left out (docs/routing.md says why);
        // with the dash before BEGIN written as an entity, it is kept.
        (
            "docs/tls.html",
            format!("<p>A key looks like this:</p><pre>{key_pem}</pre>").into_bytes(),
        ),
        (
            "docs/tls-escaped.html",
            "<pre>----&#45;BEGIN PRIVATE KEY-----\nMIGH…\n-----END PRIVATE KEY-----</pre>"
                .as_bytes()
                .to_vec(),
        ),
        // An image is looked at in its first 64 KiB only: what it holds
        // past them is not text.
        ("photo.jpg", text_with(200 << 10, 100 << 10, &key_pem)),
    ];
    for (path, content) in &files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let out = dir.path().join("site.pack");
    let report = build_pack(&root, &out, &BuildOptions::default()).unwrap();
    let keys = [
        ("certs/bundle.pem", "it holds a PEM private key block"),
        ("docs/tls.html", "it holds a PEM private key block"),
        ("example.com.key", "its name ends in .key"),
        ("keys/id_ed25519", "it holds a PEM private key block"),
        ("keys/key.der", "a DER PKCS#8 private key"),
        ("notes/big.txt", "it holds a PEM private key block"),
        ("service-account.json", "it holds a PEM private key block"),
    ];
    let left_out: Vec<&str> = report
        .left_out
        .iter()
        .filter(|(_, why)| *why == Why::PrivateKey)
        .map(|(path, _)| path.as_str())
        .collect();
    assert_eq!(left_out, keys.map(|(path, _)| path));
    for (path, why) in keys {
        let warning = format!(
            "{}: left out: a private key ({why}), never published",
            root.join(path).display()
        );
        assert!(
            report.warnings.contains(&warning),
            "{warning}: {:?}",
            report.warnings
        );
    }
    let pack = kiln::pack::Pack::open(&out).unwrap();
    let served = |key: &str| pack.lookup(RouteKind::Exact, key.as_bytes()).is_some();
    for (path, _) in keys {
        assert!(!served(&format!("/{path}")), "{path} is served");
    }
    for path in [
        "index.html",
        "certs/cert.pem",
        "certs/cert.der",
        "docs/tls-escaped.html",
        "photo.jpg",
    ] {
        assert!(served(&format!("/{path}")), "{path} is not served");
    }
    // Whatever the flags: a preview leaves them out too.
    let preview = build_preview(&root, PreviewCacheControl::NoCache).unwrap();
    for (path, _) in keys {
        let key = format!("/{path}");
        assert!(
            preview.lookup(RouteKind::Exact, key.as_bytes()).is_none(),
            "{path}"
        );
    }
}

#[test]
fn a_preview_leaves_out_what_cannot_be_read_where_a_build_stops() {
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!(
            "skipped: root reads every file (tests/serve_sandbox.rs covers previews as nobody)"
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    write(&root, "index.html", "home");
    write(&root, "private.html", "mine");
    write(&root, "locked/page.html", "page");
    std::fs::set_permissions(
        root.join("private.html"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let err = format!(
        "{:#}",
        build_pack(&root, &dir.path().join("x.pack"), &BuildOptions::default()).unwrap_err()
    );
    assert!(err.contains("Permission denied"), "{err}");
    let opts = BuildOptions::preview(
        kiln::build::compress::Level::Fast,
        PreviewCacheControl::NoCache,
    );
    let (pack, report) = kiln::build::build_preview_with(&root, &opts, None).unwrap();
    assert!(pack.lookup(RouteKind::Exact, b"/index.html").is_some());
    assert!(pack.lookup(RouteKind::Exact, b"/private.html").is_none());
    let left_out: Vec<(&str, Why)> = report
        .left_out
        .iter()
        .map(|(p, w)| (p.as_str(), *w))
        .collect();
    assert_eq!(
        left_out,
        [
            ("locked/", Why::Unreadable),
            ("private.html", Why::Unreadable)
        ]
    );
    std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A link out of the source (Debian's Python docs link
/// `_static/jquery.js` to `/usr/share/javascript`) is skipped by default,
/// the warning naming the flag that follows it; with
/// `follow_external_links` the file it leads to is served, and a folder
/// it leads to is walked under the ignore rules and the key screening.
#[test]
fn links_out_of_the_source_are_followed_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("usr/share/javascript");
    write(&shared, "jquery/jquery.js", "/* jQuery */ var $ = 1;");
    write(&shared, "fonts/a.woff2", "font");
    write(&shared, "fonts/.hidden", "x");
    let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
    write(&shared, "fonts/leaked.pem", &key);
    let src = dir.path().join("site");
    write(
        &src,
        "index.html",
        "<script src=_static/jquery.js></script>",
    );
    std::fs::create_dir_all(src.join("_static")).unwrap();
    symlink(
        shared.join("jquery/jquery.js"),
        src.join("_static/jquery.js"),
    )
    .unwrap();
    symlink(
        "../../usr/share/javascript/fonts",
        src.join("_static/fonts"),
    )
    .unwrap();
    let out = dir.path().join("s.pack");

    let report = build_pack(&src, &out, &BuildOptions::default()).unwrap();
    assert_eq!(report.files, 1);
    assert_eq!(
        report.left_out,
        [
            ("_static/fonts".to_owned(), Why::OutsideLink),
            ("_static/jquery.js".to_owned(), Why::OutsideLink)
        ]
    );
    assert_eq!(report.warnings.len(), 2, "{:?}", report.warnings);
    for w in &report.warnings {
        assert!(
            w.contains("leads out of the source") && w.contains("--follow-external-links"),
            "{w}"
        );
    }

    let opts = BuildOptions {
        follow_external_links: true,
        ..BuildOptions::default()
    };
    let report = build_pack(&src, &out, &opts).unwrap();
    let pack = kiln::pack::Pack::open(&out).unwrap();
    let served = |key: &str| {
        let route = pack.lookup(RouteKind::Exact, key.as_bytes())?;
        Some(route.variant(Encoding::Identity)?.body.to_vec())
    };
    assert_eq!(
        served("/_static/jquery.js").unwrap(),
        b"/* jQuery */ var $ = 1;"
    );
    assert_eq!(served("/_static/fonts/a.woff2").unwrap(), b"font");
    assert!(served("/_static/fonts/.hidden").is_none());
    assert!(served("/_static/fonts/leaked.pem").is_none());
    assert_eq!(report.files, 3);
    let reasons: Vec<Why> = report.left_out.iter().map(|(_, w)| *w).collect();
    assert_eq!(reasons, [Why::Hidden, Why::PrivateKey]);
}
