//! The access log: combined format (to a file, to stdout) and JSON lines
//! (`--access-log-format json`), each line parsed back and its fields
//! checked against the requests sent, over HTTP/1.1, HTTP/2 and HTTP/3.

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
    // A TLS listener of its own, whose UDP twin serves HTTP/3; HTTP/1.1
    // over TLS only in TLS mode, as the other tests.
    let mut server = start_logging_to_stdout(
        &sites,
        &[
            "--access-log-format",
            "json",
            "--listen-tls",
            "127.0.0.1:0",
            "--tls-self-signed",
        ],
    );
    let mut s = if tls_mode() {
        server.connect()
    } else {
        Client::Plain(server.connect_plain())
    };
    std::io::Write::write_all(
        &mut s,
        b"GET /?q=%22x%22 HTTP/1.1\r\nHost: a.example\r\nAccept-Encoding: br\r\n\
          User-Agent: agent \"7\"\r\nReferer: http://r.example/\r\n\r\n\
          HEAD /hello.txt HTTP/1.1\r\nHost: nowhere\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HOME_BR);
    assert_eq!(read_response(&mut s, true).unwrap().status, 421);
    let later = hello_over_later_protocols(&server);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(15)).is_some());
    let lines = stdout_lines(&server, 2 + later.len());
    assert_eq!(lines.len(), 2 + later.len(), "{lines:?}");
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

    let fields = [
        "protocol",
        "remote",
        "host",
        "status",
        "bytes",
        "encoding",
        "user_agent",
    ];
    for (protocol, entry) in later.iter().zip(&parsed[2..]) {
        let logged: Vec<serde_json::Value> = fields.iter().map(|f| entry[f].clone()).collect();
        let want: [serde_json::Value; 7] = [
            (*protocol).into(),
            "127.0.0.1".into(),
            "a.example".into(),
            200.into(),
            HELLO.len().into(),
            "identity".into(),
            "agent-h".into(),
        ];
        assert_eq!(logged, want, "{entry}");
    }
}

/// `GET /hello.txt` for `a.example` with the user agent `agent-h`, over
/// h2c by prior knowledge (curl) and over HTTP/3 (aioquic, where it is
/// installed): the protocols each was sent over, as the log names them.
fn hello_over_later_protocols(server: &Server) -> Vec<&'static str> {
    let url = format!("http://127.0.0.1:{}/hello.txt", server.port);
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2-prior-knowledge"])
        .args(["-H", "Host: a.example", "-A", "agent-h", &url])
        .output()
        .expect("curl");
    assert_eq!(
        out.stdout,
        HELLO,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut sent = vec!["HTTP/2.0"];
    if h3client::available() {
        let port = server.tls_port.expect("a TLS listener");
        let args = ["get", "/hello.txt", "--authority", "a.example"];
        let answer = &h3client::run(
            port,
            &[&args[..], &["--header", "user-agent: agent-h"]].concat(),
        )[0];
        assert_eq!(answer["status"], 200, "{answer}");
        sent.push("HTTP/3");
    }
    sent
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
