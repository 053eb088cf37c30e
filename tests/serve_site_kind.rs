//! What SITE is taken for, said at start: a file by its content (a pack,
//! a tar archive, else a one-line error), never by its name; a folder of
//! sites by one rule (at least one `NAME.pack`, and nothing but packs,
//! certificates and keys), any other folder a site to preview, with or
//! without `--watch`; no SITE at all: the current folder, previewed.

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

#[test]
fn a_folder_of_sites_holds_nothing_but_packs_certificates_and_keys() {
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
    drop(server);
    // --watch previews a site: a folder of sites is refused, saying why.
    let err = refused(&[path, "--watch"]);
    assert!(
        err.starts_with(&format!("kiln: error: {path}: a folder of sites (2 packs")),
        "{err}"
    );

    // Anything else in it makes it a site, served as files, with or
    // without --watch.
    std::fs::write(folder.join("version.txt"), "a site").unwrap();
    for watch in [&[][..], &["--watch"][..]] {
        let server = Server::start(&[&[path][..], watch].concat());
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
    std::fs::remove_file(folder.join("version.txt")).unwrap();
    std::fs::create_dir(folder.join("docs")).unwrap();
    let server = Server::start(&[path]);
    assert!(
        server
            .stderr_text()
            .contains(&format!("previewing {path} as a site")),
        "a subfolder makes it a site: {}",
        server.stderr_text()
    );
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
