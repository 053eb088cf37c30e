//! The real `kiln` binary: `build` errors are one line naming the file and
//! exit non-zero, the summary is printed, and `verify` and `inspect`
//! (table and `--json`) read what `build` wrote.

use std::path::Path;
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("run kiln")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a failed run printed exactly one error line containing `needle`.
fn assert_one_line_error(o: &Output, needle: &str) {
    assert!(!o.status.success(), "should fail");
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("kiln: error: "), "{err}");
    assert!(err.contains(needle), "{err} should contain {needle}");
}

fn site(root: &Path) {
    for (path, content) in [
        ("index.html", "<h1>home</h1>\n".repeat(30)),
        ("docs/index.html", "docs".to_owned()),
        ("style.css", "body { color: red; }\n".repeat(20)),
        ("404.html", "missing".to_owned()),
        ("_redirects", "/old / 301\n/a/* /b/:splat 302\n".to_owned()),
    ] {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn build_prints_a_summary_and_the_pack_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let pack = dir.path().join("site.pack");
    let o = kiln(&["build", p(&src), "-o", p(&pack)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for word in [
        "files",
        "routes",
        "identity",
        "br",
        "zstd",
        "gzip",
        "dedup saved",
        "pack",
        "time",
    ] {
        assert!(out.contains(word), "summary lacks {word}: {out}");
    }
    assert!(
        out.contains(&format!(
            "{} bytes",
            std::fs::metadata(&pack).unwrap().len()
        )),
        "{out}"
    );

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&pack).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644, "world-readable like any site file");

    let o = kiln(&["verify", p(&pack)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(": ok ("));

    let o = kiln(&["inspect", p(&pack)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("/docs/ ") && l.contains("exact") && l.contains("200")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("/old ") && l.contains("301")),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("/ ")
            && l.contains(" br ")
            && l.contains("id 420 h2:")
            && l.contains(" h3:")),
        "{table}"
    );
    assert!(table.contains("HPACK blocks, "), "{table}");
    assert!(table.contains("QPACK blocks, "), "{table}");
    assert!(table.contains("rule  /a/* -> /b/:splat  302"), "{table}");
    assert!(table.contains("not-found"), "{table}");

    let o = kiln(&["inspect", "--headers", p(&pack)]);
    assert!(stdout(&o).contains("    Content-Type: text/html; charset=utf-8"));

    let o = kiln(&["inspect", "--json", "--headers", p(&pack)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let routes = v["routes"].as_array().unwrap();
    let root = routes.iter().find(|r| r["key"] == "/").unwrap();
    assert_eq!(root["status"], 200);
    assert_eq!(root["kind"], "exact");
    assert_eq!(root["variants"][0]["encoding"], "identity");
    assert_eq!(root["variants"][0]["bytes"], 420);
    let hpack_bytes = root["variants"][0]["hpack_bytes"].as_u64().unwrap();
    assert!((50..200).contains(&hpack_bytes), "{hpack_bytes}");
    let qpack_bytes = root["variants"][0]["qpack_bytes"].as_u64().unwrap();
    assert!((50..200).contains(&qpack_bytes), "{qpack_bytes}");
    let blocks = &v["summary"]["header_blocks"];
    assert!(blocks["hpack"]["bytes"].as_u64() < blocks["http1"]["bytes"].as_u64());
    assert!(blocks["qpack"]["bytes"].as_u64() < blocks["http1"]["bytes"].as_u64());
    assert!(root["headers"].as_str().unwrap().contains("ETag: "));
    assert_eq!(v["summary"]["rules"], 1);
    let old = routes.iter().find(|r| r["key"] == "/old").unwrap();
    assert_eq!(
        (old["status"].as_u64(), old["location"].as_str()),
        (Some(301), Some("/"))
    );
    assert_eq!(v["rules"][0]["from"], "/a/*");
    assert_eq!(v["pack_bytes"], std::fs::metadata(&pack).unwrap().len());
}

#[test]
fn quiet_prints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let o = kiln(&["build", "-q", p(&src), "-o", p(&dir.path().join("q.pack"))]);
    assert!(o.status.success());
    assert!(o.stdout.is_empty() && o.stderr.is_empty());
}

#[test]
fn missing_source_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let out = dir.path().join("x.pack");
    let o = kiln(&["build", p(&missing), "-o", p(&out)]);
    assert_one_line_error(&o, p(&missing));
    assert!(!out.exists());
}

#[test]
fn unreadable_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    // A fifo cannot be read as a file (and would block a naive reader); it
    // works as "unreadable" even for root, unlike chmod 000.
    let fifo = src.join("docs/pipe.html");
    let c = std::ffi::CString::new(p(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let out = dir.path().join("x.pack");
    let o = kiln(&["build", p(&src), "-o", p(&out)]);
    assert_one_line_error(&o, p(&fifo));
    assert!(!out.exists());
    std::fs::remove_file(&fifo).unwrap();

    // Without root, a file without read permission is another case.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let locked = src.join("locked.html");
        std::fs::write(&locked, "x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let o = kiln(&["build", p(&src), "-o", p(&out)]);
        assert_one_line_error(&o, p(&locked));
    }
}

#[test]
fn headers_the_server_owns_are_refused_naming_file_line_and_header() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let headers_file = src.join("_headers");
    let out = dir.path().join("x.pack");
    for (name, value) in [
        ("Last-Modified", "Tue, 14 Nov 2023 22:13:20 GMT"),
        ("ETag", "\"v1\""),
        ("Content-Length", "3"),
        ("Content-Encoding", "gzip"),
        ("Content-Range", "bytes 0-1/2"),
        ("Accept-Ranges", "none"),
        ("Transfer-Encoding", "chunked"),
        ("last-modified", "Tue, 14 Nov 2023 22:13:20 GMT"),
    ] {
        std::fs::write(
            &headers_file,
            format!("/*\n  X-Fine: 1\n/docs/*\n  {name}: {value}\n"),
        )
        .unwrap();
        let o = kiln(&["build", p(&src), "-o", p(&out)]);
        assert_one_line_error(&o, &format!("{}:4: {name} ", p(&headers_file)));
        assert!(!out.exists(), "{name}: no pack written");
    }
}

#[test]
fn unwritable_output_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let out = dir.path().join("no/such/dir/site.pack");
    let o = kiln(&["build", p(&src), "-o", p(&out)]);
    assert_one_line_error(&o, &format!("{}: the directory", p(&out)));
    assert!(stderr(&o).contains("does not exist") && !stderr(&o).contains(".site.pack."));
    // A directory in the way of the output.
    let o = kiln(&["build", p(&src), "-o", p(&src)]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1);
    assert!(src.join("index.html").exists());
}

#[test]
fn failed_build_keeps_the_old_pack_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("site.pack");
    assert!(
        kiln(&["build", "-q", p(&src), "-o", p(&out)])
            .status
            .success()
    );
    let before = std::fs::read(&out).unwrap();
    std::fs::write(src.join("_redirects"), "/x /missing 200\n").unwrap();
    let o = kiln(&["build", p(&src), "-o", p(&out)]);
    assert_one_line_error(&o, "_redirects:1");
    assert_eq!(std::fs::read(&out).unwrap(), before);
    assert_eq!(
        std::fs::read_dir(&out_dir).unwrap().count(),
        1,
        "no temp file left"
    );
}

#[test]
fn bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let out = dir.path().join("x.pack");
    let o = kiln(&["build", p(&src), "-o", p(&out), "--encodings", "br,lzma"]);
    assert_one_line_error(&o, "--encodings: unknown encoding \"lzma\"");
    // The flag's name before still works, and is not in the help, where
    // it was mistaken for --compression.
    let o = kiln(&["build", p(&src), "-o", p(&out), "--compress", "br,lzma"]);
    assert_one_line_error(&o, "--encodings: unknown encoding \"lzma\"");
    let help = stdout(&kiln(&["build", "--help"]));
    assert!(help.contains("--encodings <LIST>"), "{help}");
    assert!(!help.contains("--compress "), "{help}");
    let o = kiln(&[
        "build",
        p(&src),
        "-o",
        p(&out),
        "--encodings",
        "zstd",
        "--gzip",
        "zopfli",
        "--brotli-quality",
        "4",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = kiln(&["inspect", "--json", p(&out)]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let encodings = &v["summary"]["bodies_by_encoding"];
    assert!(encodings["zstd"]["bodies"].as_u64().unwrap() > 0);
    assert_eq!(encodings["br"]["bodies"], 0);
}

#[test]
fn inspect_refuses_a_non_pack() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("junk.pack");
    std::fs::write(&f, vec![7u8; 1000]).unwrap();
    assert_one_line_error(&kiln(&["inspect", p(&f)]), p(&f));
}

/// A pack written by kiln before format 2 (HPACK blocks) is refused by
/// every command with one line naming the file and the way out.
#[test]
fn a_pack_of_an_older_format_is_refused_with_a_rebuild_hint() {
    use kiln::pack::format::{H_VERSION, HEADER_CHECKSUM_AT, VERSION};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let pack = dir.path().join("old.pack");
    assert!(
        kiln(&["build", "-q", p(&src), "-o", p(&pack)])
            .status
            .success()
    );
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[H_VERSION..H_VERSION + 4].copy_from_slice(&(VERSION - 1).to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..HEADER_CHECKSUM_AT]);
    bytes[HEADER_CHECKSUM_AT..HEADER_CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&pack, &bytes).unwrap();
    for args in [
        &["verify", p(&pack)][..],
        &["inspect", p(&pack)],
        &["serve", p(&pack), "--listen", "127.0.0.1:0"],
    ] {
        let o = kiln(args);
        assert_one_line_error(
            &o,
            &format!(
                "{}: built by another kiln version (pack format {}, this kiln reads format \
                 {VERSION}); rebuild it with `kiln build`",
                p(&pack),
                VERSION - 1
            ),
        );
    }
}

#[test]
fn warnings_go_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    std::fs::write(src.join("_redirects"), "/x /y 302 Country=us\n").unwrap();
    let o = kiln(&["build", p(&src), "-o", p(&dir.path().join("w.pack"))]);
    assert!(o.status.success());
    assert!(stderr(&o).starts_with("kiln: warning: "), "{}", stderr(&o));
    assert!(stderr(&o).contains("_redirects:1: conditions"));
}

#[test]
fn inspect_into_a_closed_pipe_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    // Enough routes for the table to overflow a pipe buffer (64 KiB).
    for i in 0..1500 {
        let p = src.join(format!("section-{}/page-number-{i}.html", i % 10));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("page {i}")).unwrap();
    }
    let pack = dir.path().join("big.pack");
    assert!(
        kiln(&["build", "-q", p(&src), "-o", p(&pack)])
            .status
            .success()
    );
    for json in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.args(["inspect", p(&pack)]);
        if json {
            cmd.arg("--json");
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Like `| head -1`: read one line, then close the pipe.
        let mut first = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut first,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(!first.is_empty());
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    }
}

#[test]
fn verify_errors_are_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let pack = dir.path().join("site.pack");
    assert!(
        kiln(&["build", "-q", p(&src), "-o", p(&pack)])
            .status
            .success()
    );
    let good = std::fs::read(&pack).unwrap();
    let check = |name: &str, bytes: Option<&[u8]>, needle: &str| {
        let f = dir.path().join(name);
        if let Some(b) = bytes {
            std::fs::write(&f, b).unwrap();
        }
        let o = kiln(&["verify", p(&f)]);
        assert_one_line_error(&o, p(&f));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    };
    check("empty.pack", Some(b""), "shorter than the header");
    check("cut.pack", Some(&good[..good.len() - 100]), "truncated");
    let mut flipped = good.clone();
    flipped[300] ^= 1; // in the bodies, right after the header
    check("flipped.pack", Some(&flipped), "bodies section checksum");
    check("missing.pack", None, "cannot open");
    check("site", None, "is a directory");
}

#[test]
fn inspect_escapes_hostile_keys() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    // A key with a terminal escape, CR LF and a byte that is not UTF-8.
    std::fs::write(src.join("_redirects"), "/%1B[2J%0D%0A%FF /x 302\n").unwrap();
    let pack = dir.path().join("h.pack");
    assert!(
        kiln(&["build", "-q", p(&src), "-o", p(&pack)])
            .status
            .success()
    );
    let table = kiln(&["inspect", "--headers", p(&pack)]);
    assert!(table.status.success());
    let text = stdout(&table);
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
    assert!(text.contains("/\\u{1b}[2J\\r\\n\\xFF "), "{text}");
    let json = kiln(&["inspect", "--json", p(&pack)]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let keys: Vec<&str> = doc["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"/\\u{1b}[2J\\r\\n\\xFF"), "{keys:?}");
}

/// Runs kiln with stdout on a pipe whose reading end is already closed.
fn kiln_into_closed_pipe(args: &[&str]) -> Output {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .stdout(std::process::Stdio::from(write))
        .output()
        .expect("run kiln")
}

#[test]
fn a_closed_stdout_is_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let pack = dir.path().join("site.pack");
    let o = kiln_into_closed_pipe(&["build", p(&src), "-o", p(&pack)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert!(pack.exists());
    for args in [
        &["inspect", p(&pack)][..],
        &["inspect", "--json", p(&pack)],
        &["verify", p(&pack)],
    ] {
        let o = kiln_into_closed_pipe(args);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    }
}

#[test]
fn the_source_archive_is_never_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let archive = dir.path().join("site.tar");
    let mut builder = tar::Builder::new(std::fs::File::create(&archive).unwrap());
    builder.append_dir_all(".", &src).unwrap();
    builder.into_inner().unwrap();
    let before = std::fs::read(&archive).unwrap();
    let o = kiln(&["build", p(&archive), "-o", p(&archive)]);
    assert_one_line_error(&o, "is the source itself");
    assert!(
        std::fs::read(&archive).unwrap() == before,
        "the archive was replaced"
    );
}

#[test]
fn what_is_left_out_and_which_suffix_serves_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    for path in [
        "#draft.html#",
        "debug.log",
        "yarn.lock",
        ".git/config",
        "f.html",
        "f.txt",
        "g.htm",
        "g.xhtml",
        "g.txt",
    ] {
        let p = src.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, path).unwrap();
    }
    let pack = dir.path().join("site.pack");
    let o = kiln(&["build", p(&src), "-o", p(&pack)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "left out             4  1 hidden (.name), 1 editor's autosave or lock (#name# .#name), \
             2 log, lock or temporary (*.log *.lock *.tmp *.temp); -v lists them\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "suffixes             2  URLs with several files, the first of \
             .html .htm .xhtml .xht .txt serves: /f is f.html; -v lists them\n"
        ),
        "{out}"
    );
    assert!(!out.contains("left out    debug.log"), "{out}");

    let o = kiln(&["build", p(&src), "-o", p(&pack), "-v"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for line in [
        "left out    #draft.html#  (editor's autosave or lock (#name# .#name))",
        "left out    .git/  (hidden (.name))",
        "left out    debug.log  (log, lock or temporary (*.log *.lock *.tmp *.temp))",
        "left out    yarn.lock  (log, lock or temporary (*.log *.lock *.tmp *.temp))",
        "suffix      /f is f.html, not f.txt",
        "suffix      /g is g.htm, not g.xhtml, g.txt",
    ] {
        assert!(out.lines().any(|l| l == line), "{line}: {out}");
    }
    // What the summary says is what is served.
    let o = kiln(&["inspect", p(&pack), "--json"]);
    let routes = stdout(&o);
    assert!(
        !routes.contains("debug.log") && !routes.contains("draft"),
        "{routes}"
    );
    let served = |key: &str| {
        let pack = kiln::pack::Pack::open(&pack).unwrap();
        let route = pack
            .lookup(kiln::pack::RouteKind::Exact, key.as_bytes())
            .unwrap();
        route
            .variant(kiln::pack::Encoding::Identity)
            .unwrap()
            .body
            .to_vec()
    };
    assert_eq!(served("/f"), b"f.html");
    assert_eq!(served("/g"), b"g.htm");
    assert_eq!(served("/f.txt"), b"f.txt");
}

/// A source is told by its content, not its name: random bytes named like
/// an archive, and a pack given as a source, are refused in one line that
/// says what they are not or are; archives are found by their header's
/// checksum (a pre-POSIX one has no `ustar` magic) and an empty archive
/// is refused, as having nothing to serve, but with `--allow-empty`.
#[test]
fn a_source_is_taken_for_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pack");
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for name in ["x.tgz", "x.tar", "x.pack"] {
        let file = dir.path().join(name);
        std::fs::write(&file, &noise).unwrap();
        let o = kiln(&["build", p(&file), "-o", p(&out)]);
        assert_one_line_error(&o, "not a kiln pack, a tar archive or a site folder");
    }
    let root = dir.path().join("site");
    site(&root);
    let pack = dir.path().join("site.pack");
    assert!(
        kiln(&["build", p(&root), "-o", p(&pack), "-q"])
            .status
            .success()
    );
    let o = kiln(&["build", p(&pack), "-o", p(&out)]);
    assert_one_line_error(&o, "a kiln pack, not a site");
    for (name, format) in [("v7.tar", "--format=v7"), ("gnu.tar", "--format=gnu")] {
        let archive = dir.path().join(name);
        let made = Command::new("tar")
            .args([format, "-cf", p(&archive), "-C", p(&root), "."])
            .status()
            .unwrap();
        assert!(made.success());
        let o = kiln(&["build", p(&archive), "-o", p(&out), "-q"]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
    }
    let empty = dir.path().join("empty.tar");
    let made = Command::new("tar")
        .args(["-cf", p(&empty), "-T", "/dev/null"])
        .status()
        .unwrap();
    assert!(made.success());
    let o = kiln(&["build", p(&empty), "-o", p(&out), "-q"]);
    assert_one_line_error(&o, "nothing to serve: it holds no file; --allow-empty");
    let o = kiln(&["build", p(&empty), "-o", p(&out), "-q", "--allow-empty"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A private key in the source: a warning naming it on stderr, counted in
/// the summary, listed with -v, and absent from the pack.
#[test]
fn a_private_key_is_left_out_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let key = rcgen::KeyPair::generate().unwrap();
    std::fs::write(src.join("docs/server.pem"), key.serialize_pem()).unwrap();
    let pack = dir.path().join("site.pack");
    let o = kiln(&["build", p(&src), "-o", p(&pack), "-v"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let key_file = src.join("docs/server.pem");
    assert_eq!(
        stderr(&o),
        format!(
            "kiln: warning: {}: left out: a private key (it holds a PEM private key block), \
             never published\n",
            key_file.display()
        )
    );
    let out = stdout(&o);
    assert!(
        out.contains(
            "left out             1  1 private key (*.key, PEM or DER key content); -v lists them\n"
        ) && out
            .lines()
            .any(|l| l
                == "left out    docs/server.pem  (private key (*.key, PEM or DER key content))"),
        "{out}"
    );
    let o = kiln(&["inspect", p(&pack), "--json"]);
    assert!(!stdout(&o).contains("server.pem"), "{}", stdout(&o));
}

/// `--follow-external-links` and KILN_FOLLOW_EXTERNAL_LINKS (1/0, yes/no,
/// true/false): a link out of the source is skipped, naming the flag, or
/// followed; a value that is none of these is refused in one line naming
/// the variable; `--follow-external-links=no` says no.
#[test]
fn links_out_of_the_source_follow_the_flag_and_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("site");
    site(&src);
    let outside = dir.path().join("jquery.js");
    std::fs::write(&outside, "var jQuery;").unwrap();
    std::os::unix::fs::symlink(&outside, src.join("jquery.js")).unwrap();
    let pack = dir.path().join("site.pack");
    let build = |flag: Option<&str>, variable: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.args(["build", p(&src), "-o", p(&pack), "-q"]);
        cmd.args(flag);
        cmd.env_remove("KILN_FOLLOW_EXTERNAL_LINKS");
        if let Some(v) = variable {
            cmd.env("KILN_FOLLOW_EXTERNAL_LINKS", v);
        }
        cmd.output().unwrap()
    };
    let served = || {
        let o = kiln(&["inspect", p(&pack), "--json"]);
        stdout(&o).contains("/jquery.js")
    };
    let o = build(None, None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("leads out of the source (--follow-external-links follows it)"),
        "{}",
        stderr(&o)
    );
    assert!(!served());
    for (flag, variable, follows) in [
        (Some("--follow-external-links"), None, true),
        (Some("--follow-external-links=no"), Some("1"), false),
        (None, Some("yes"), true),
        (None, Some("TRUE"), true),
        (None, Some("1"), true),
        (None, Some("no"), false),
        (None, Some("0"), false),
        (None, Some("false"), false),
    ] {
        let o = build(flag, variable);
        assert!(o.status.success(), "{flag:?} {variable:?}: {}", stderr(&o));
        assert_eq!(served(), follows, "{flag:?} {variable:?}");
    }
    let o = build(None, Some("maybe"));
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("KILN_FOLLOW_EXTERNAL_LINKS"), "{err}");
}
