//! The live preview, `kiln serve DIR --watch`: a file written, added or
//! removed under DIR (new directories included) is served after an
//! in-memory rebuild, logged with what changed; a broken `_redirects` or
//! `_headers` is reported and the last good site keeps serving; symbolic
//! links out of DIR are not served, at start or after a rebuild; what is
//! not a directory is refused. The previous version of a changed file is
//! its dictionary (RFC 9842): a browser holding it gets a delta.
//!
//! Live reload (`live_reload_*`): the script tag goes into a watched
//! preview's pages only (before `</head>`, before compression), never
//! into a plain preview or a pack `kiln build` writes; the event stream,
//! held open over HTTP/1.1 (raw, chunked), HTTP/2 (curl) and, over TLS,
//! HTTP/3 (the aioquic client), says each change (stylesheets alone, or a
//! reload), outlives the header and keep-alive deadlines without counting
//! as a timeout, is capped per thread (503), and ends at once, cleanly, at
//! SIGTERM. `browser_live_reload.rs` runs it in Chromium.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The live preview's script tag, as its pages carry it.
const TAG: &str = "<script src=\"/_kiln/live.js\" defer></script>";

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

/// Status and body of `GET path`, an HTML page's without the live
/// preview's script tag (`live_reload_*` check where it goes).
fn body(server: &Server, path: &str) -> (u16, String) {
    let r = server.get(path, "");
    let text = String::from_utf8_lossy(&r.body).replace(TAG, "");
    (r.status, text)
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
    server.wait_for_log(&[
        "secret.txt: symbolic link to ../secret.txt skipped, it leads out of the source",
    ]);

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
    let log = server.wait_for_log(&[
        "repo: symbolic link to .git skipped, it leads to a name the build leaves out",
        "passwd.txt: symbolic link to /etc/passwd skipped",
    ]);
    assert_eq!(
        log.matches("secret.txt: symbolic link to ../secret.txt skipped")
            .count(),
        1,
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

/// A site whose page loads a stylesheet.
fn styled_site(root: &Path) {
    let paragraphs = "<p>A page long enough to be worth compressing.</p>\n".repeat(20);
    write(
        root,
        "index.html",
        &format!(
            "<!doctype html><html><head><title>t</title>\
             <link rel=\"stylesheet\" href=\"/style.css\"></head><body><h1>one</h1>\n{paragraphs}</body></html>"
        ),
    );
    write(root, "style.css", "h1 { color: red }");
    write(root, "about.html", "<p>about</p>");
}

#[test]
fn live_reload_pages_load_the_script_only_in_a_watched_preview() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    styled_site(&root);
    let server = start(&root, &[]);
    let page = server.get("/", "");
    let text = String::from_utf8_lossy(&page.body);
    assert!(
        text.contains(&format!("href=\"/style.css\">{TAG}</head>")),
        "before </head>: {text}"
    );
    // No </head>: at the end.
    assert_eq!(body(&server, "/about.html").1, "<p>about</p>");
    let about = server.get("/about.html", "");
    assert!(String::from_utf8_lossy(&about.body).ends_with(TAG));
    // Compressed alike: the tag went in before compression, and the
    // validators are those of the page served.
    let gzip = server.get("/", "Accept-Encoding: gzip\r\n");
    assert_eq!(gzip.header("Content-Encoding").as_deref(), Some("gzip"));
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&gzip.body[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, page.body);
    let etag = page.header("ETag").unwrap();
    assert_eq!(
        server
            .get("/", &format!("If-None-Match: {etag}\r\n"))
            .status,
        304
    );
    let script = server.get("/_kiln/live.js", "");
    assert_eq!(script.status, 200);
    assert_eq!(
        script.header("Content-Type").as_deref(),
        Some("text/javascript; charset=utf-8")
    );
    assert!(String::from_utf8_lossy(&script.body).contains("new EventSource(\"/_kiln/events\")"));
    // HEAD of the event stream: its head, nothing held.
    let head = server.request("HEAD", "/_kiln/events", "");
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("Content-Type").as_deref(),
        Some("text/event-stream")
    );
    // HTTP/1.0 has no chunks: the stream is the rest of the connection.
    let mut old = server.connect();
    old.write_all(b"GET /_kiln/events HTTP/1.0\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"}\n\n") && old.read(&mut byte).unwrap_or(0) == 1 {
        got.push(byte[0]);
    }
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.contains("\r\nConnection: close\r\n"), "{got}");
    assert!(!got.contains("Transfer-Encoding"), "{got}");
    assert!(
        got.contains("\r\n\r\nretry: 1000\ndata: {\"hello\":true"),
        "{got}"
    );
    drop(old);

    drop(server);

    // A single-page app's forced rule does not take the preview's paths.
    let spa = dir.path().join("spa");
    write(&spa, "index.html", "<p>the app</p>");
    write(&spa, "_redirects", "/* /index.html 200!\n");
    let server = start(&spa, &[]);
    assert_eq!(body(&server, "/any/route"), (200, "<p>the app</p>".into()));
    let script = server.get("/_kiln/live.js", "");
    assert_eq!(
        script.header("Content-Type").as_deref(),
        Some("text/javascript; charset=utf-8")
    );
    let head = server.request("HEAD", "/_kiln/events", "");
    assert_eq!(
        head.header("Content-Type").as_deref(),
        Some("text/event-stream")
    );
    drop(server);

    // Served without --watch, or built: no script, no reserved path.
    let plain = Server::start(&[root.to_str().unwrap()]);
    assert_eq!(
        plain.get("/", "").body,
        std::fs::read(root.join("index.html")).unwrap()
    );
    for path in ["/_kiln/live.js", "/_kiln/events"] {
        assert_eq!(plain.get(path, "").status, 404, "{path}");
    }
    drop(plain);
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
    let bytes = std::fs::read(&pack).unwrap();
    assert!(
        !bytes.windows(b"/_kiln/".len()).any(|w| w == b"/_kiln/"),
        "kiln build wrote the live script into a pack"
    );
    let served = Server::start(&[pack.to_str().unwrap()]);
    assert_eq!(
        served.get("/", "").body,
        std::fs::read(root.join("index.html")).unwrap()
    );
    assert_eq!(served.get("/_kiln/live.js", "").status, 404);
}

/// What an event-stream client saw, in order.
#[derive(Debug)]
enum Seen {
    /// The response's status line and fields (HTTP/1.1 and curl: as
    /// sent; HTTP/3: as the client decoded them).
    Head(String),
    /// An event's `data`, as JSON (comments and `retry` left out).
    Event(Value),
    /// The stream ended: `clean` when the server ended the response
    /// (the last chunk, END_STREAM, a finished QUIC stream).
    Ended { clean: bool },
}

/// The `data` of each whole event in `text`, taking them off it.
fn take_events(text: &mut String) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(end) = text.find("\n\n") {
        let block: String = text.drain(..end + 2).collect();
        for line in block.lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                events.push(serde_json::from_str(data).expect("JSON data"));
            }
        }
    }
    events
}

/// An event stream held open by a client of some protocol, read on a
/// thread of its own.
struct EventClient {
    protocol: &'static str,
    seen: Receiver<Seen>,
    /// curl or the HTTP/3 client; killed on drop.
    child: Option<std::sync::Arc<std::sync::Mutex<Child>>>,
    /// The connection the thread reads (HTTP/1.1); shut down on drop.
    socket: Option<std::net::TcpStream>,
}

impl Drop for EventClient {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = child.lock().unwrap().kill();
        }
        if let Some(socket) = &self.socket {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl EventClient {
    /// What comes next; panics after a long bound (not a timing
    /// measurement: a lost event never comes).
    fn next(&self, what: &str) -> Seen {
        match self.seen.recv_timeout(Duration::from_secs(30)) {
            Ok(seen) => seen,
            Err(RecvTimeoutError::Timeout) => panic!("{}: never saw {what}", self.protocol),
            Err(RecvTimeoutError::Disconnected) => panic!("{}: gone before {what}", self.protocol),
        }
    }

    fn head(&self) -> String {
        match self.next("the head") {
            Seen::Head(head) => head,
            other => panic!("{}: {other:?} instead of the head", self.protocol),
        }
    }

    fn event(&self, what: &str) -> Value {
        match self.next(what) {
            Seen::Event(event) => event,
            other => panic!("{}: {other:?} instead of {what}", self.protocol),
        }
    }

    fn ended(&self) -> bool {
        match self.next("the end") {
            Seen::Ended { clean } => clean,
            other => panic!("{}: {other:?} instead of the end", self.protocol),
        }
    }

    /// The stream opened, its head checked and its hello taken: the id
    /// it starts from.
    fn opened(&self) -> String {
        let head = self.head().to_ascii_lowercase();
        assert!(
            head.contains("content-type: text/event-stream")
                && head.contains("cache-control: no-store"),
            "{}: {head}",
            self.protocol
        );
        let hello = self.event("the hello");
        assert_eq!(hello["hello"], true, "{}: {hello}", self.protocol);
        hello["id"].as_str().expect("an id").to_owned()
    }
}

/// `GET /_kiln/events` over HTTP/1.1 (TLS in TLS mode), each chunk read
/// as it comes.
fn http1_events(server: &Server) -> EventClient {
    let mut s = server.connect();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"GET /_kiln/events HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n")
        .unwrap();
    let socket = s.tcp().try_clone().unwrap();
    let (tx, seen) = channel();
    std::thread::spawn(move || {
        let mut s = BufReader::new(s);
        let mut head = String::new();
        while !head.ends_with("\r\n\r\n") {
            if s.read_line(&mut head).unwrap_or(0) == 0 {
                let _ = tx.send(Seen::Ended { clean: false });
                return;
            }
        }
        // A refusal (503) is a head and its end.
        let held = head.starts_with("HTTP/1.1 200 OK\r\n")
            && head.contains("\r\nTransfer-Encoding: chunked\r\n");
        let _ = tx.send(Seen::Head(head));
        if !held {
            let _ = tx.send(Seen::Ended { clean: false });
            return;
        }
        let mut text = String::new();
        loop {
            let mut size = String::new();
            if s.read_line(&mut size).unwrap_or(0) == 0 {
                let _ = tx.send(Seen::Ended { clean: false });
                return;
            }
            let size = usize::from_str_radix(size.trim_end(), 16).expect("a chunk size");
            let mut chunk = vec![0; size + 2];
            if s.read_exact(&mut chunk).is_err() {
                let _ = tx.send(Seen::Ended { clean: false });
                return;
            }
            assert!(chunk.ends_with(b"\r\n"), "a chunk's end");
            if size == 0 {
                // The last chunk, then the connection closes.
                let closed = s.read(&mut [0; 1]).is_ok_and(|n| n == 0);
                let _ = tx.send(Seen::Ended { clean: closed });
                return;
            }
            text.push_str(std::str::from_utf8(&chunk[..size]).unwrap());
            for event in take_events(&mut text) {
                let _ = tx.send(Seen::Event(event));
            }
        }
    });
    EventClient {
        protocol: "HTTP/1.1",
        seen,
        child: None,
        socket: Some(socket),
    }
}

/// `GET /_kiln/events` over HTTP/2 with curl: h2 on TLS in TLS mode, h2c
/// by prior knowledge otherwise; `None` (said) without curl's HTTP/2.
fn h2_events(server: &Server) -> Option<EventClient> {
    if !curl_has_http2() {
        eprintln!("curl without HTTP/2: the h2 event stream is not tried");
        return None;
    }
    let url = match server.tls_port {
        Some(port) => vec![
            "-k".to_owned(),
            "--http2".to_owned(),
            format!("https://127.0.0.1:{port}/_kiln/events"),
        ],
        None => vec![
            "--http2-prior-knowledge".to_owned(),
            format!("http://127.0.0.1:{}/_kiln/events", server.port),
        ],
    };
    let mut child = Command::new("curl")
        .args(["-sS", "-N", "-i"])
        .args(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("curl");
    let out = child.stdout.take().unwrap();
    let child = std::sync::Arc::new(std::sync::Mutex::new(child));
    let (tx, seen) = channel();
    let waited = std::sync::Arc::clone(&child);
    std::thread::spawn(move || {
        let mut out = BufReader::new(out);
        let mut head = String::new();
        while !head.ends_with("\r\n\r\n") {
            if out.read_line(&mut head).unwrap_or(0) == 0 {
                let _ = tx.send(Seen::Ended { clean: false });
                return;
            }
        }
        assert!(head.starts_with("HTTP/2 200"), "{head}");
        let _ = tx.send(Seen::Head(head));
        let mut text = String::new();
        let mut line = String::new();
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            text.push_str(&line);
            line.clear();
            for event in take_events(&mut text) {
                let _ = tx.send(Seen::Event(event));
            }
        }
        // curl says a stream the server ended with END_STREAM succeeded.
        let status = waited.lock().unwrap().wait();
        let _ = tx.send(Seen::Ended {
            clean: status.is_ok_and(|s| s.success()),
        });
    });
    Some(EventClient {
        protocol: "HTTP/2",
        seen,
        child: Some(child),
        socket: None,
    })
}

/// `GET /_kiln/events` over HTTP/3 with the aioquic client, in TLS mode
/// (HTTP/3 is served on the TLS port); `None` otherwise, or (said)
/// without aioquic.
fn h3_events(server: &Server) -> Option<EventClient> {
    let port = server.tls_port?;
    if !h3client::available() {
        return None;
    }
    let mut child = Command::new(common::python())
        .args([
            "tests/http3/h3client.py",
            &port.to_string(),
            "events",
            "1000",
            "/_kiln/events",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the tests' Python");
    let out = child.stdout.take().unwrap();
    let (tx, seen) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let line: Value = serde_json::from_str(&line).expect("a JSON line");
            if let Some(status) = line.get("status") {
                let fields: Vec<String> = line["headers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| format!("{}: {}\r\n", f[0].as_str().unwrap(), f[1].as_str().unwrap()))
                    .collect();
                let _ = tx.send(Seen::Head(format!(
                    ":status: {status}\r\n{}",
                    fields.concat()
                )));
            }
            if let Some(event) = line.get("event") {
                let mut text = format!("{}\n\n", event.as_str().unwrap());
                for event in take_events(&mut text) {
                    let _ = tx.send(Seen::Event(event));
                }
            }
            if line.get("ended").is_some() || line.get("timeout").is_some() {
                let _ = tx.send(Seen::Ended {
                    clean: line["ended"] == true,
                });
            }
        }
    });
    Some(EventClient {
        protocol: "HTTP/3",
        seen,
        child: Some(std::sync::Arc::new(std::sync::Mutex::new(child))),
        socket: None,
    })
}

/// An event stream over every protocol this run speaks to the server.
fn every_protocol(server: &Server) -> Vec<EventClient> {
    let mut clients = vec![http1_events(server)];
    clients.extend(h2_events(server));
    clients.extend(h3_events(server));
    clients
}

#[test]
fn live_reload_every_protocol_hears_each_change() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    styled_site(&root);
    let server = start(&root, &[]);
    let clients = every_protocol(&server);
    let ids: Vec<String> = clients.iter().map(EventClient::opened).collect();
    let epoch = ids[0].strip_suffix("-0").expect("the first generation");
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");

    // A stylesheet alone: swapped, not reloaded.
    let saved = Instant::now();
    write(&root, "style.css", "h1 { color: blue }");
    for c in &clients {
        let event = c.event("the stylesheet change");
        assert_eq!(
            event["css"],
            serde_json::json!(["/style.css"]),
            "{}",
            c.protocol
        );
        assert_eq!(event["id"], format!("{epoch}-1"), "{}", c.protocol);
    }
    eprintln!("a saved stylesheet heard after {:?}", saved.elapsed());
    // A page: reloaded; so is a page and a stylesheet together.
    write(&root, "about.html", "<p>about us</p>");
    for c in &clients {
        let event = c.event("the page change");
        assert_eq!(
            (event["reload"].clone(), event["id"].clone()),
            (true.into(), format!("{epoch}-2").into()),
            "{}: {event}",
            c.protocol
        );
    }
    write(&root, "more.css", "p { margin: 0 }");
    wait_until("the new stylesheet", &server, || {
        body(&server, "/more.css").0 == 200
    });
    for c in &clients {
        let event = c.event("the added stylesheet");
        assert_eq!(
            event["css"],
            serde_json::json!(["/more.css"]),
            "{}",
            c.protocol
        );
    }
    // A new stream opened now starts from the generation served.
    let late = http1_events(&server);
    assert_eq!(late.opened(), format!("{epoch}-3"));
}

#[test]
fn live_reload_streams_outlive_the_header_and_keep_alive_deadlines() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    styled_site(&root);
    let server = start(
        &root,
        &[
            "--header-timeout",
            "1",
            "--keepalive-timeout",
            "1",
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    // TCP's only: QUIC's idle timeout is the keep-alive one, which a
    // stream's comments (every 15 s) do not beat at 1 s.
    let mut clients = vec![http1_events(&server)];
    clients.extend(h2_events(&server));
    for c in &clients {
        c.opened();
    }
    std::thread::sleep(Duration::from_millis(2500));
    write(&root, "index.html", "<p>edited</p>");
    for c in &clients {
        assert_eq!(
            c.event("the change after the deadlines")["reload"],
            true,
            "{}",
            c.protocol
        );
    }
    let metrics = server.metrics();
    for kind in ["header", "idle", "send"] {
        let line = format!("kiln_timeouts_total{{kind=\"{kind}\"}} 0");
        assert!(metrics.contains(&line), "{line}:\n{metrics}");
    }
}

#[test]
fn live_reload_streams_are_capped_per_thread() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    styled_site(&root);
    let server = start(&root, &["--threads", "1"]);
    let cap = kiln::serve::handler::live::MAX_PER_THREAD;
    let held: Vec<EventClient> = (0..cap).map(|_| http1_events(&server)).collect();
    for c in &held {
        c.opened();
    }
    let refused = server.get("/_kiln/events", "");
    assert_eq!(refused.status, 503, "{}", refused.head);
    // Pages are served as ever.
    assert_eq!(body(&server, "/about.html").1, "<p>about</p>");
    // A stream let go gives its place back, once the server has seen
    // its connection close.
    drop(held);
    let start = Instant::now();
    loop {
        let again = http1_events(&server);
        let head = again.head();
        if head.starts_with("HTTP/1.1 200") {
            assert_eq!(again.event("the hello")["hello"], true);
            break;
        }
        assert!(head.starts_with("HTTP/1.1 503"), "{head}");
        assert!(start.elapsed() < Duration::from_secs(30), "no place freed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn live_reload_streams_end_at_once_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    styled_site(&root);
    let mut server = start(&root, &[]);
    let clients = every_protocol(&server);
    for c in &clients {
        c.opened();
    }
    server.signal(libc::SIGTERM);
    // Each ends as a response does (its last chunk, END_STREAM, a
    // finished stream), which only the drain's goodbye writes: a server
    // that waited for them would close them at the end of its grace
    // period (10 s) without a word.
    for c in &clients {
        assert!(c.ended(), "{}: not ended cleanly", c.protocol);
    }
    let status = server
        .wait_exit(Duration::from_secs(15))
        .expect("the server exits");
    assert!(status.success(), "{status:?}");
    let log = server.stderr_text();
    let stopping = log.find("shutting down").expect("the drain");
    assert!(log[stopping..].contains("stopped"), "{log}");
}
