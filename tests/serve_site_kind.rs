//! What SITE is taken for, said at start: a file by its content (a pack,
//! a tar archive, else a one-line error), never by its name; a folder of
//! sites by one rule (a `NAME.pack` that is a pack), whatever else it
//! holds: a stray file is warned about once, by name, and never served,
//! and only `--preview` fires such a folder into a site; any other folder
//! is a site to preview, with or without `--watch`; no SITE at all: the
//! current folder, previewed.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// `kiln serve ARGS` that must fail: its stderr, one line.
fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

/// A site folder with `/version.txt` saying `version`.
fn site_folder(dir: &Path, version: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("version.txt"), version).unwrap();
}

/// `/version.txt` as `host` is served it: status and body.
fn version(server: &Server, host: &str) -> String {
    let mut c = server.connect();
    let request = format!("GET /version.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    std::io::Write::write_all(&mut c, request.as_bytes()).unwrap();
    let r = read_response(&mut c, false).expect("a response");
    format!("{} {}", r.status, String::from_utf8_lossy(&r.body))
}

#[test]
fn a_file_is_taken_for_what_it_holds_not_for_its_name() {
    let dir = tempfile::tempdir().unwrap();
    // Neither a pack nor an archive, whatever its name says.
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    for name in ["x.pack", "x.tgz", "x"] {
        let path = dir.path().join(name);
        std::fs::write(&path, &random).unwrap();
        let err = refused(&[path.to_str().unwrap()]);
        assert_eq!(
            err,
            format!(
                "kiln: error: {}: not a kiln pack, a tar archive or a site folder\n",
                path.display()
            )
        );
    }
    // Archives named as packs, plain and gzip.
    let site = dir.path().join("public");
    site_folder(&site, "from the archive");
    for (name, flags) in [("plain.pack", "-cf"), ("gzip.pack", "-czf")] {
        let archive = dir.path().join(name);
        tar_contents(&archive, &site, flags);
        let server = Server::start(&[archive.to_str().unwrap()]);
        assert_eq!(version(&server, "t"), "200 from the archive", "{name}");
        let log = server.stderr_text();
        assert!(
            log.contains(&format!(
                "previewing {} as a site (a tar archive)",
                archive.display()
            )),
            "{log}"
        );
    }
    // A pack named as an archive.
    let pack = dir.path().join("site.tgz");
    version_pack(&pack, "from the pack");
    let server = Server::start(&[pack.to_str().unwrap()]);
    assert_eq!(version(&server, "t"), "200 from the pack");
}

/// `GET path` as `host`: the status.
fn status(server: &Server, host: &str, path: &str) -> u16 {
    let mut c = server.connect();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    std::io::Write::write_all(&mut c, request.as_bytes()).unwrap();
    read_response(&mut c, false).expect("a response").status
}

/// Waits, 20 s at most, until the server's log says `want`.
fn wait_for_log(server: &Server, want: &str) {
    let start = std::time::Instant::now();
    while !server.stderr_text().contains(want) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "no {want:?} in: {}",
            server.stderr_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The log lines saying what a folder of sites does not serve.
fn stray_lines(server: &Server) -> Vec<String> {
    server
        .stderr_text()
        .lines()
        .filter(|l| l.contains(": not served: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_folder_holding_a_pack_is_a_folder_of_sites_whatever_else_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("sites");
    std::fs::create_dir(&folder).unwrap();
    version_pack(&folder.join("a.example.pack"), "a");
    version_pack(&folder.join("_default.pack"), "default");
    // A build's temporary file is hidden: it does not count.
    std::fs::write(folder.join(".b.example.pack.tmp"), "partial").unwrap();
    let path = folder.to_str().unwrap();
    let server = Server::start(&[path]);
    assert!(
        server
            .stderr_text()
            .contains(&format!("serving {path} as a folder of sites (2 packs)")),
        "{}",
        server.stderr_text()
    );
    assert_eq!(version(&server, "a.example"), "200 a");
    assert_eq!(version(&server, "other.example"), "200 default");
    assert!(stray_lines(&server).is_empty(), "{}", server.stderr_text());
    drop(server);
    // --watch previews a site: a folder of sites is refused, saying how to
    // preview it.
    let err = refused(&[path, "--watch"]);
    assert!(
        err.starts_with(&format!("kiln: error: {path}: a folder of sites (2 packs)"))
            && err.contains("add --preview"),
        "{err}"
    );

    // A page and a subfolder beside the packs change nothing: warned
    // about, never served.
    std::fs::write(folder.join("version.txt"), "a site").unwrap();
    std::fs::create_dir(folder.join("docs")).unwrap();
    let server = Server::start(&[path]);
    assert_eq!(version(&server, "a.example"), "200 a");
    assert_eq!(status(&server, "a.example", "/a.example.pack"), 404);
    let strays = stray_lines(&server);
    assert!(
        strays.len() == 1 && strays[0].contains("docs, version.txt"),
        "{strays:?}"
    );
    drop(server);

    // --preview fires the folder into a site, with or without --watch.
    for watch in [&[][..], &["--watch"][..]] {
        let server = Server::start(&[&[path, "--preview"][..], watch].concat());
        assert_eq!(version(&server, "a.example"), "200 a site", "{watch:?}");
        assert!(
            server
                .stderr_text()
                .contains(&format!("previewing {path} as a site")),
            "{}",
            server.stderr_text()
        );
        assert_eq!(
            server.get("/a.example.pack", "").status,
            200,
            "a pack is one of its files"
        );
    }
    // A pack is a pack: --preview has nothing to fire.
    let pack = folder.join("a.example.pack");
    let err = refused(&[pack.to_str().unwrap(), "--preview"]);
    assert!(
        err.contains("--preview fires a directory or an archive"),
        "{err}"
    );
}

#[test]
fn files_named_pack_that_are_no_packs_leave_a_folder_a_site() {
    // A game's assets: `.pack` files of its own format.
    let dir = tempfile::tempdir().unwrap();
    site_folder(dir.path(), "a game");
    std::fs::write(dir.path().join("level1.pack"), b"GAMEDATA\x01\x02").unwrap();
    let path = dir.path().to_str().unwrap();
    let server = Server::start(&[path]);
    assert_eq!(version(&server, "t"), "200 a game");
    assert_eq!(server.get("/level1.pack", "").status, 200);
}

/// A certificate for `name` and its private key, PEM.
fn certificate(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The sequence: a folder of sites with its key, then a backup
/// of a pack and a note beside them. It stays a folder of sites: the
/// strays are named once, and nothing of the folder is served as a file,
/// on any host, with or without a fallback site.
#[test]
fn a_stray_file_never_turns_a_folder_of_sites_into_a_preview() {
    let dir = tempfile::tempdir().unwrap();
    let sites = dir.path().join("SITES");
    std::fs::create_dir(&sites).unwrap();
    version_pack(&sites.join("example.com.pack"), "example");
    version_pack(&sites.join("_default.pack"), "default");
    let (cert, key) = certificate("example.com");
    std::fs::write(sites.join("example.com.crt"), cert).unwrap();
    std::fs::write(sites.join("example.com.key"), &key).unwrap();
    std::fs::set_permissions(
        sites.join("example.com.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::copy(
        sites.join("example.com.pack"),
        sites.join("example.com.pack.bak"),
    )
    .unwrap();
    std::fs::write(sites.join("notes.txt"), "the key is beside the packs").unwrap();
    let path = sites.to_str().unwrap();
    let private = [
        "/example.com.key",
        "/notes.txt",
        "/example.com.pack.bak",
        "/example.com.pack",
        "/example.com.crt",
    ];
    for fallback in [true, false] {
        if !fallback {
            std::fs::remove_file(sites.join("_default.pack")).unwrap();
        }
        let server = Server::start(&[path]);
        let log = server.stderr_text();
        let packs = if fallback { 2 } else { 1 };
        assert!(
            log.contains(&format!(
                "serving {path} as a folder of sites ({packs} packs)"
            )) && !log.contains("previewing"),
            "{log}"
        );
        let strays = stray_lines(&server);
        assert!(
            strays.len() == 1 && strays[0].contains("example.com.pack.bak, notes.txt"),
            "{strays:?}"
        );
        assert_eq!(version(&server, "example.com"), "200 example");
        // Another host gets the fallback site, or 421 without one.
        let other = if fallback { 404 } else { 421 };
        for p in private {
            assert_eq!(status(&server, "example.com", p), 404, "{p}");
            assert_eq!(status(&server, "127.0.0.1", p), other, "{p}");
        }
        if fallback {
            // A reload of everything names no stray again; a new one is
            // named, alone, when it arrives.
            server.signal(libc::SIGHUP);
            std::fs::write(sites.join("later.txt"), "x").unwrap();
            wait_for_log(&server, "not served: later.txt ");
            let strays = stray_lines(&server);
            assert_eq!(strays.len(), 2, "{strays:?}");
            assert_eq!(status(&server, "127.0.0.1", "/later.txt"), 404);
            std::fs::remove_file(sites.join("later.txt")).unwrap();
        }
    }
}

#[test]
fn without_a_site_the_current_folder_is_previewed() {
    let dir = tempfile::tempdir().unwrap();
    site_folder(dir.path(), "here");
    let server = Server::launch(
        &[],
        Launch {
            current_dir: Some(dir.path().to_path_buf()),
            ..Launch::default()
        },
    );
    assert_eq!(version(&server, "t"), "200 here");
    let log = server.stderr_text();
    assert!(
        log.contains("no SITE given: serving the current folder")
            && log.contains("previewing . as a site"),
        "{log}"
    );
}
