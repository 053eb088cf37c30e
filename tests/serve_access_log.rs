//! The access log: combined format (to a file, to stdout) and JSON lines
//! (`--access-log-format json`), each line parsed back and its fields
//! checked against the requests sent, over HTTP/1.1 and HTTP/2.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn access_log_in_combined_format() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let log = dir.path().join("access.log");
    let mut server = Server::start(&[
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--access-log",
        log.to_str().unwrap(),
    ]);
    server.get(
        "/hello.txt",
        "Referer: http://r/\r\nUser-Agent: test \"agent\"\r\n",
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(15)).is_some());
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text.lines().next().expect("one line");
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(
        line.ends_with(
            "+0000] \"GET /hello.txt HTTP/1.1\" 200 12 \"http://r/\" \"test \\x22agent\\x22\""
        ),
        "{line}"
    );
}

#[test]
fn access_log_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let mut server = start_logging_to_stdout(&pack, &[]);
    server.get("/hello.txt", "");
    server.get("/missing", "");
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(15)).is_some());
    let lines = stdout_lines(&server, 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains("\"GET /hello.txt HTTP/1.1\" 200 12 "),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("\"GET /missing HTTP/1.1\" 404 "),
        "{lines:?}"
    );
}

/// Starts a server on one thread that logs to its stdout, with `flags`
/// after.
fn start_logging_to_stdout(site: &Path, flags: &[&str]) -> Server {
    let mut args = vec![
        site.to_str().unwrap(),
        "--threads",
        "1",
        "--access-log",
        "-",
    ];
    args.extend_from_slice(flags);
    Server::start(&args)
}

/// Waits (bounded) until the server's stdout holds `n` lines: the reader
/// thread may still be draining the pipe after the exit.
fn stdout_lines(server: &Server, n: usize) -> Vec<String> {
    let start = Instant::now();
    loop {
        let text = server.stdout.lock().unwrap().clone();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || start.elapsed() > Duration::from_secs(10) {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stdout_holds_the_json_log_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    // The self-signed certificate's lines are human messages too.
    let mut server = start_logging_to_stdout(
        &pack,
        &[
            "--access-log-format",
            "json",
            "--listen-tls",
            "127.0.0.1:0",
            "--tls-self-signed",
        ],
    );
    assert_eq!(server.get("/hello.txt", "").body, HELLO);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(15)).is_some());
    let lines = stdout_lines(&server, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    for line in &lines {
        let entry: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(entry["path"], "/hello.txt", "{line}");
    }
    let stderr = server.stderr_text();
    assert!(
        stderr.contains("kiln: serving") && stderr.contains("kiln: self-signed certificate for"),
        "{stderr}"
    );
}

#[test]
fn access_log_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let sites = dir.path().join("sites");
    std::fs::create_dir(&sites).unwrap();
    std::fs::rename(sample_pack(dir.path()), sites.join("a.example.pack")).unwrap();
    let mut server = start_logging_to_stdout(&sites, &["--access-log-format", "json"]);
    let mut s = server.connect();
    std::io::Write::write_all(
        &mut s,
        b"GET /?q=%22x%22 HTTP/1.1\r\nHost: a.example\r\nAccept-Encoding: br\r\n\
          User-Agent: agent \"7\"\r\nReferer: http://r.example/\r\n\r\n\
          HEAD /hello.txt HTTP/1.1\r\nHost: nowhere\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HOME_BR);
    assert_eq!(read_response(&mut s, true).unwrap().status, 421);
    // HTTP/2, by prior knowledge.
    let url = format!("http://127.0.0.1:{}/hello.txt", server.port);
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2-prior-knowledge"])
        .args(["-H", "Host: a.example", "-A", "curl-h2", &url])
        .output()
        .expect("curl");
    assert_eq!(
        out.stdout,
        HELLO,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(15)).is_some());
    let lines = stdout_lines(&server, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let first = &parsed[0];
    assert_eq!(first["remote"], "127.0.0.1");
    assert_eq!(first["host"], "a.example");
    assert_eq!(first["method"], "GET");
    assert_eq!(first["path"], "/?q=%22x%22");
    assert_eq!(first["protocol"], "HTTP/1.1");
    assert_eq!(first["status"], 200);
    assert_eq!(first["bytes"], HOME_BR.len());
    assert_eq!(first["encoding"], "br");
    assert_eq!(first["user_agent"], "agent \"7\"");
    assert_eq!(first["referer"], "http://r.example/");
    let duration = first["duration"].as_f64().expect("a number");
    assert!((0.0..10.0).contains(&duration), "{duration}");
    let time = first["time"].as_str().unwrap();
    assert!(
        time.len() == 20 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "{time}"
    );

    let second = &parsed[1];
    assert_eq!(
        (
            &second["method"],
            &second["status"],
            &second["bytes"],
            &second["host"]
        ),
        (&"HEAD".into(), &421.into(), &0.into(), &"nowhere".into())
    );
    assert!(second["encoding"].is_null() && second["referer"].is_null());

    let third = &parsed[2];
    assert_eq!(third["protocol"], "HTTP/2.0");
    assert_eq!(third["host"], "a.example");
    assert_eq!(third["status"], 200);
    assert_eq!(third["bytes"], HELLO.len());
    assert_eq!(third["encoding"], "identity");
    assert_eq!(third["user_agent"], "curl-h2");
}

#[test]
fn a_request_is_timed_from_its_first_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let mut server = start_logging_to_stdout(&pack, &["--access-log-format", "json"]);
    let mut s = server.connect();
    // A head in two reads, a second apart, then one at once (the margins
    // are wide: a loaded machine may be slow to answer).
    std::io::Write::write_all(&mut s, b"GET /hello.txt HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_secs(1));
    std::io::Write::write_all(&mut s, b"Host: t\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
    std::io::Write::write_all(&mut s, b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(15)).is_some());
    let lines = stdout_lines(&server, 2);
    let durations: Vec<f64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["duration"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert!(durations[0] >= 0.95, "{durations:?}");
    assert!(durations[1] < 0.5, "{durations:?}");
}
