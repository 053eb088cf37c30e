//! `--metrics`: the Prometheus exposition, read by a Prometheus text
//! parser (`prometheus-parse`), its values checked against the traffic
//! the test sent: responses by site, protocol, scheme and status class,
//! 304 and 206, body bytes, encodings, connections, timeouts, reloads and
//! failed reloads, pack gauges; and the health endpoints beside it.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use prometheus_parse::{Scrape, Value};

/// Starts a server with `--metrics` on a free port and `flags` after it:
/// the server and its metrics port.
fn start_with_metrics(site: &Path, flags: &[&str]) -> (Server, u16) {
    let mut args = vec![site.to_str().unwrap(), "--metrics", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    let server = Server::start(&args);
    let port = server.metrics_port();
    (server, port)
}

/// Waits until `/ready` answers 503, for at most `within`.
fn wait_not_ready(port: u16, within: Duration) {
    let start = Instant::now();
    while fetch(port, "/ready").0 != "HTTP/1.1 503 Service Unavailable" {
        assert!(start.elapsed() < within, "still ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET path` on the metrics listener: status line and body.
fn fetch(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: m\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole response");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// A scrape, parsed; every sample line must parse and have a type.
fn scrape(port: u16) -> Scrape {
    let (status, body) = fetch(port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let sample_lines = body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    let parsed = Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    assert_eq!(
        parsed.samples.len(),
        sample_lines,
        "unparsed lines in:\n{body}"
    );
    for s in &parsed.samples {
        assert!(
            matches!(s.value, Value::Counter(_) | Value::Gauge(_)),
            "{} has no TYPE: {:?}",
            s.metric,
            s.value
        );
        assert!(
            parsed.docs.contains_key(&s.metric),
            "{} has no HELP",
            s.metric
        );
    }
    parsed
}

/// The value of `metric` with exactly `labels` (0 when absent).
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let want: HashMap<&str, &str> = labels.iter().copied().collect();
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| {
            s.labels.len() == want.len() && want.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => panic!("{metric}: not a number"),
        })
        .sum()
}

fn scheme() -> &'static str {
    if tls_mode() { "https" } else { "http" }
}

/// A folder: `a.example` the sample site, `b.example` a version pack, no
/// default.
fn folder(dir: &Path) -> std::path::PathBuf {
    let sites = dir.join("sites");
    std::fs::create_dir(&sites).unwrap();
    let sample = sample_pack(dir);
    std::fs::rename(sample, sites.join("a.example.pack")).unwrap();
    version_pack(&sites.join("b.example.pack"), "b");
    sites
}

fn get(server: &Server, host: &str, path: &str, headers: &str) -> Response {
    let mut s = server.connect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut s, false).expect("a response")
}

/// Waits (bounded) until `check` holds for a scrape.
fn wait_scrape(port: u16, what: &str, check: impl Fn(&Scrape) -> bool) -> Scrape {
    let start = Instant::now();
    loop {
        let s = scrape(port);
        if check(&s) {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_count_what_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let sites = folder(dir.path());
    let (server, port) = start_with_metrics(&sites, &["--threads", "2"]);
    let before = scrape(port);
    assert_eq!(value(&before, "kiln_connections_accepted_total", &[]), 0.0);
    assert_eq!(
        value(&before, "kiln_site_generation", &[("site", "a.example")]),
        1.0
    );
    assert!(
        before.samples.iter().any(|s| s.metric == "kiln_build_info"
            && s.labels.get("version") == Some(env!("CARGO_PKG_VERSION"))),
        "build info"
    );

    let mut connections = 0;
    let mut a_bytes = 0;
    for _ in 0..5 {
        let r = get(&server, "a.example", "/hello.txt", "");
        assert_eq!(r.status, 200);
        a_bytes += r.body.len();
        connections += 1;
    }
    for _ in 0..2 {
        let r = get(
            &server,
            "A.EXAMPLE",
            "/hello.txt",
            "If-None-Match: \"hello\"\r\n",
        );
        assert_eq!(r.status, 304);
        connections += 1;
    }
    let r = get(&server, "a.example", "/hello.txt", "Range: bytes=0-4\r\n");
    assert_eq!((r.status, r.body.len()), (206, 5));
    a_bytes += 5;
    connections += 1;
    for _ in 0..3 {
        let r = get(&server, "a.example", "/", "Accept-Encoding: br\r\n");
        assert_eq!((r.status, r.body.as_slice()), (200, HOME_BR));
        a_bytes += HOME_BR.len();
        connections += 1;
    }
    let r = get(&server, "a.example", "/nothing-here", "");
    assert_eq!(r.status, 404);
    a_bytes += r.body.len();
    connections += 1;
    for _ in 0..4 {
        assert_eq!(get(&server, "b.example", "/version.txt", "").body, b"b");
        connections += 1;
    }
    for _ in 0..2 {
        assert_eq!(get(&server, "elsewhere.example", "/", "").status, 421);
        connections += 1;
    }

    // Counted when answered; the closes may trail the responses a little.
    let s = wait_scrape(port, "every connection closed", |s| {
        value(s, "kiln_connections_open", &[]) == 0.0
    });
    let requests = |site: &str, class: &str| {
        value(
            &s,
            "kiln_requests_total",
            &[
                ("site", site),
                ("protocol", "http/1.1"),
                ("scheme", scheme()),
                ("status", class),
            ],
        )
    };
    assert_eq!(requests("a.example", "2xx"), 5.0 + 1.0 + 3.0);
    assert_eq!(requests("a.example", "3xx"), 2.0);
    assert_eq!(requests("a.example", "4xx"), 1.0);
    assert_eq!(requests("b.example", "2xx"), 4.0);
    assert_eq!(requests("_none", "4xx"), 2.0);
    assert_eq!(
        value(&s, "kiln_not_modified_total", &[("site", "a.example")]),
        2.0
    );
    assert_eq!(
        value(&s, "kiln_partial_content_total", &[("site", "a.example")]),
        1.0
    );
    assert_eq!(
        value(&s, "kiln_sent_body_bytes_total", &[("site", "a.example")]),
        a_bytes as f64
    );
    assert_eq!(
        value(
            &s,
            "kiln_responses_by_encoding_total",
            &[("site", "a.example"), ("encoding", "br")]
        ),
        3.0
    );
    assert_eq!(
        value(&s, "kiln_connections_accepted_total", &[]),
        connections as f64
    );
    if tls_mode() {
        assert_eq!(
            value(&s, "kiln_tls_handshakes_total", &[]),
            connections as f64
        );
    }
    let pack_size = std::fs::metadata(sites.join("b.example.pack"))
        .unwrap()
        .len();
    assert_eq!(
        value(&s, "kiln_site_pack_bytes", &[("site", "b.example")]),
        pack_size as f64
    );
    assert!(value(&s, "kiln_site_pack_age_seconds", &[("site", "b.example")]) < 600.0);
}

#[test]
fn reloads_and_failed_reloads_are_counted_per_site() {
    let dir = tempfile::tempdir().unwrap();
    let sites = folder(dir.path());
    let (server, port) = start_with_metrics(&sites, &[]);
    version_pack(&sites.join("b.example.pack"), "b2");
    let s = wait_scrape(port, "b reloaded", |s| {
        value(s, "kiln_site_generation", &[("site", "b.example")]) == 2.0
    });
    assert_eq!(
        value(&s, "kiln_site_reloads_total", &[("site", "b.example")]),
        1.0
    );
    assert_eq!(
        value(&s, "kiln_site_reloads_total", &[("site", "a.example")]),
        0.0
    );
    let incoming = sites.join(".incoming");
    std::fs::write(&incoming, b"KILNPACK but not really a pack at all").unwrap();
    std::fs::rename(&incoming, sites.join("b.example.pack")).unwrap();
    let s = wait_scrape(port, "b failed", |s| {
        value(
            s,
            "kiln_site_reload_failures_total",
            &[("site", "b.example")],
        ) == 1.0
    });
    assert_eq!(
        value(&s, "kiln_site_generation", &[("site", "b.example")]),
        2.0
    );
    assert_eq!(get(&server, "b.example", "/version.txt", "").body, b"b2");
}

#[test]
fn timeouts_are_counted_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let (server, port) = start_with_metrics(
        &pack,
        &["--header-timeout", "0.5", "--keepalive-timeout", "0.5"],
    );
    // A head that never ends, and a keep-alive connection left idle.
    let mut slow = server.connect();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n").unwrap();
    let mut idle = server.connect();
    idle.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut idle, false).unwrap().status, 200);
    let s = wait_scrape(port, "both timed out", |s| {
        value(s, "kiln_connections_open", &[]) == 0.0
    });
    assert_eq!(value(&s, "kiln_timeouts_total", &[("kind", "header")]), 1.0);
    assert_eq!(value(&s, "kiln_timeouts_total", &[("kind", "idle")]), 1.0);
    assert_eq!(value(&s, "kiln_timeouts_total", &[("kind", "send")]), 0.0);
    drop((slow, idle));
}

#[test]
fn health_endpoints_say_when_to_stop_sending_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let (mut server, port) = start_with_metrics(&pack, &["--send-timeout", "5"]);
    assert_eq!(fetch(port, "/healthz").0, "HTTP/1.1 200 OK");
    assert_eq!(fetch(port, "/ready").0, "HTTP/1.1 200 OK");
    assert_eq!(fetch(port, "/other").0, "HTTP/1.1 404 Not Found");
    // Only the metrics listener serves them: the site does not.
    assert_eq!(server.get("/metrics", "").status, 404);
    // A response the client does not read keeps the drain going for a
    // while: /ready says 503 meanwhile, so a balancer stops sending
    // traffic here.
    let mut slow = server.connect();
    slow.write_all(
        "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n"
            .repeat(32)
            .as_bytes(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    server.signal(libc::SIGTERM);
    wait_not_ready(port, Duration::from_secs(5));
    assert_eq!(value(&scrape(port), "kiln_ready", &[]), 0.0);
    drop(slow);
    assert!(server.wait_exit(Duration::from_secs(20)).is_some());
}

#[test]
fn a_shutdown_delay_keeps_serving_while_ready_says_503() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let (mut server, port) = start_with_metrics(&pack, &["--shutdown-delay", "1.5"]);
    let start = Instant::now();
    server.signal(libc::SIGTERM);
    wait_not_ready(port, Duration::from_secs(1));
    // Not ready, still serving new connections until the delay is over.
    assert_eq!(server.get("/hello.txt", "").body, HELLO);
    let status = server.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{status}");
    assert!(
        start.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        start.elapsed()
    );
}

/// Sets the soft RLIMIT_NOFILE of the running process `pid`; returns the
/// one it had.
fn set_fd_limit(pid: u32, soft: u64) -> u64 {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads the limits of `pid` into `old`.
    assert_eq!(
        unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) },
        0
    );
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: sets them from `new`.
    assert_eq!(
        unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) },
        0,
        "{}",
        std::io::Error::last_os_error()
    );
    old.rlim_cur
}

/// Out of descriptors, the metrics listener backs off and answers once
/// one is free again, inside the sandbox (its pause was a sleep, whose
/// clock_nanosleep the filter refuses: the server ended).
#[test]
fn the_metrics_listener_waits_out_a_lack_of_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let (mut server, port) = start_with_metrics(&pack, &[]);
    let pid = server.child.id();
    let open: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // The lowest free descriptor number is the one accept would take:
    // below that limit there is none.
    let lowest_free = (0..).find(|n| !open.contains(n)).unwrap();
    let before = set_fd_limit(pid, lowest_free);
    let health = std::thread::spawn(move || fetch(port, "/healthz"));
    // The listener's accept meets EMFILE, more than once.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "{}",
        server.stderr_text()
    );
    set_fd_limit(pid, before);
    assert_eq!(health.join().unwrap().0, "HTTP/1.1 200 OK");
}
