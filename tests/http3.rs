//! HTTP/3 (RFC 9114) over QUIC, checked with aioquic's QUIC layer driven
//! by `tests/http3/h3client.py` (kiln shares no code with it): the cases
//! h3spec checks, each with the error code the RFC requires, and the
//! answers HTTP/1.1 gets (methods, 304/412, ranges, negotiation, 404,
//! redirects, `_headers`) compared request by request. Skips itself,
//! saying so, without Python's `aioquic` (`./test` installs it).

mod common;

use std::process::Command;

use common::Server;
use common::h3client::{BACKENDS, available as have_aioquic, run as h3client};

/// A server on the example site with a cleartext and a TLS listener (the
/// TLS port's UDP twin serves HTTP/3) on `backend`, with metrics.
fn start(dir: &std::path::Path, backend: &str) -> Server {
    start_with(dir, backend, &[])
}

/// `start` with `extra` flags.
fn start_with(dir: &std::path::Path, backend: &str, extra: &[&str]) -> Server {
    start_on(dir, backend, "127.0.0.1:0", extra)
}

/// `start_with` on the TLS address `tls` (a port taken again after a
/// restart: see `port_outside_ephemeral_range`).
fn start_on(dir: &std::path::Path, backend: &str, tls: &str, extra: &[&str]) -> Server {
    let pack = common::example_pack(dir);
    common::h3client::start_server(&pack, backend, tls, extra)
}

/// A port free for TCP and UDP on 127.0.0.1 below the kernel's ephemeral
/// range, for a server restarted on the same port: the kernel gives no
/// port of its own choosing (another test's `:0` listener or client
/// socket) from outside that range, so none can take the port while
/// neither server holds it. Started from a point that depends on the
/// process, so that two test runs side by side look in different places.
fn port_outside_ephemeral_range() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
    assert!(low > 2048, "ephemeral range starts at {low}");
    let span = low - 1024;
    let start = (std::process::id() % u32::from(span)) as u16;
    (0..span)
        .map(|i| 1024 + (start + i) % span)
        .find(|&port| {
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
                && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
        })
        .expect("a free port below the ephemeral range")
}

/// Runs `check` against a server with `extra` flags (`start_with`) on each
/// back end; nothing without aioquic (`have_aioquic` says so).
fn on_each_backend(extra: &[&str], mut check: impl FnMut(&str, Server)) {
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for backend in BACKENDS {
        check(backend, start_with(dir.path(), backend, extra));
    }
}

/// Starts `h3client.py PORT hold` and waits for its GET's answer.
fn hold(
    port: u16,
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
) {
    use std::io::BufRead;
    let mut client = Command::new(common::python())
        .arg("tests/http3/h3client.py")
        .arg(port.to_string())
        .arg("hold")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the tests' Python");
    let mut lines = std::io::BufReader::new(client.stdout.take().unwrap()).lines();
    let ready: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(ready["status"], 200, "{ready}");
    (client, lines)
}

/// The value of the sample `name` (with its labels) in `/metrics`.
fn sample(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

/// Each case and what RFC 9114 (or RFC 9204) requires of the server:
/// a connection error, a stream error (the request stream reset), or an
/// answer (the case's oddities ignored).
const CASES: &[(&str, &str, u64)] = &[
    ("unknown_frames_and_streams_ignored", "status", 200),
    ("unknown_frame_on_request_stream", "status", 200),
    ("data_before_headers", "connection_error", 0x105),
    ("settings_on_request_stream", "connection_error", 0x105),
    ("goaway_on_request_stream", "connection_error", 0x105),
    (
        "http2_frame_0x2_on_control_stream",
        "connection_error",
        0x105,
    ),
    (
        "http2_frame_0x6_on_control_stream",
        "connection_error",
        0x105,
    ),
    (
        "http2_frame_0x8_on_control_stream",
        "connection_error",
        0x105,
    ),
    (
        "http2_frame_0x9_on_control_stream",
        "connection_error",
        0x105,
    ),
    (
        "http2_frame_0x2_on_request_stream",
        "connection_error",
        0x105,
    ),
    (
        "http2_frame_0x6_on_request_stream",
        "connection_error",
        0x105,
    ),
    (
        "http2_frame_0x8_on_request_stream",
        "connection_error",
        0x105,
    ),
    (
        "http2_frame_0x9_on_request_stream",
        "connection_error",
        0x105,
    ),
    ("http2_setting_0x2", "connection_error", 0x109),
    ("http2_setting_0x3", "connection_error", 0x109),
    ("http2_setting_0x4", "connection_error", 0x109),
    ("http2_setting_0x5", "connection_error", 0x109),
    ("repeated_setting", "connection_error", 0x109),
    ("second_settings", "connection_error", 0x105),
    ("second_control_stream", "connection_error", 0x103),
    ("control_stream_closed", "connection_error", 0x104),
    ("control_stream_without_settings", "connection_error", 0x10a),
    ("data_on_control_stream", "connection_error", 0x105),
    ("headers_on_control_stream", "connection_error", 0x105),
    ("push_stream_from_client", "connection_error", 0x103),
    ("second_qpack_encoder_stream", "connection_error", 0x103),
    (
        "qpack_insert_into_a_table_of_capacity_0",
        "connection_error",
        0x201,
    ),
    ("qpack_dynamic_reference", "connection_error", 0x200),
    ("no_method", "stream_error", 0x10e),
    ("no_path", "stream_error", 0x10e),
    ("empty_path", "stream_error", 0x10e),
    ("repeated_pseudo_header", "stream_error", 0x10e),
    ("response_pseudo_header", "stream_error", 0x10e),
    ("pseudo_header_after_regular", "stream_error", 0x10e),
    ("upper_case_name", "stream_error", 0x10e),
    ("connection_specific_field", "stream_error", 0x10e),
    ("transfer_encoding_field", "stream_error", 0x10e),
    ("te_other_than_trailers", "stream_error", 0x10e),
    ("content_length_mismatch", "stream_error", 0x10e),
    ("trailers_with_pseudo_header", "stream_error", 0x10e),
    ("data_after_trailers", "connection_error", 0x105),
    ("request_stream_ended_early", "stream_error", 0x10d),
];

#[test]
fn each_case_gets_the_error_code_the_rfc_names() {
    on_each_backend(&[], |backend, server| {
        let names: Vec<&str> = CASES.iter().map(|(name, _, _)| *name).collect();
        let mut args = vec!["cases"];
        args.extend(&names);
        let results = h3client(server.tls_port.unwrap(), &args);
        assert_eq!(results.len(), CASES.len());
        for ((name, kind, code), result) in CASES.iter().zip(&results) {
            assert_eq!(
                result.get(*kind).and_then(|v| v.as_u64()),
                Some(*code),
                "{backend}: {name}: got {result}\nserver: {}",
                server.stderr_text()
            );
        }
    });
}

/// The fields compared with HTTP/1.1's: a response's representation and
/// what the site's rules add (`_headers`, redirects).
const COMPARED: [&str; 9] = [
    "content-type",
    "content-encoding",
    "content-length",
    "content-range",
    "etag",
    "last-modified",
    "location",
    "x-frame-options",
    "vary",
];

/// Requests of every kind the handler tells apart: `{etag}` is replaced
/// with the page's ETag (as HTTP/1.1 got it).
const REQUESTS: &[(&str, &str, &[&str])] = &[
    ("GET", "/", &[]),
    ("GET", "/", &["accept-encoding: br"]),
    ("GET", "/", &["accept-encoding: gzip"]),
    ("GET", "/", &["accept-encoding: zstd"]),
    ("GET", "/", &["accept-encoding: identity"]),
    ("HEAD", "/", &[]),
    ("POST", "/", &[]),
    ("OPTIONS", "/", &[]),
    ("DELETE", "/style.css", &[]),
    ("GET", "/", &["if-none-match: {etag}"]),
    ("GET", "/", &["if-match: \"nope\""]),
    (
        "GET",
        "/",
        &["if-modified-since: Sat, 01 Jan 2100 00:00:00 GMT"],
    ),
    ("GET", "/", &["range: bytes=0-9"]),
    ("GET", "/", &["range: bytes=5-"]),
    ("GET", "/", &["range: bytes=99999999-"]),
    ("GET", "/", &["range: bytes=0-9", "if-range: {etag}"]),
    ("GET", "/missing", &[]),
    ("GET", "/about", &[]),
    ("GET", "/old-about", &[]),
    ("GET", "/blog/x?y=1", &[]),
    ("GET", "/start", &[]),
    ("GET", "/app/anything", &[]),
    ("GET", "/.well-known/security.txt", &[]),
    ("GET", "/docs/notes.txt", &[]),
];

/// Status, compared fields and body, as HTTP/1.1 and HTTP/3 both give.
type Answer = (u64, Vec<String>, Vec<u8>);

fn compared(fields: impl Iterator<Item = (String, String)>) -> Vec<String> {
    let mut out: Vec<String> = fields
        .filter(|(n, _)| COMPARED.contains(&n.as_str()))
        .map(|(n, v)| format!("{n}: {v}"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_kind_of_request_gets_what_http1_gets() {
    on_each_backend(&[], |backend, server| {
        let etag = server.get("/", "").header("etag").expect("an ETag");
        let requests: Vec<(&str, &str, Vec<String>)> = REQUESTS
            .iter()
            .map(|(method, path, headers)| {
                let headers = headers.iter().map(|h| h.replace("{etag}", &etag));
                (*method, *path, headers.collect())
            })
            .collect();
        // One client for them all (a Python start each would cost more
        // than the requests).
        let results = h3client(
            server.tls_port.unwrap(),
            &["gets", &serde_json::json!(requests).to_string()],
        );
        assert_eq!(results.len(), requests.len());
        for ((method, path, headers), result) in requests.iter().zip(&results) {
            let lines: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
            let http1 = server.request(method, path, &lines);
            let http1: Answer = (
                u64::from(http1.status),
                compared(http1.head.lines().skip(1).filter_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    Some((n.to_ascii_lowercase(), v.trim().to_string()))
                })),
                http1.body,
            );
            let fields = result["headers"].as_array().cloned().unwrap_or_default();
            let http3: Answer = (
                result["status"].as_u64().unwrap_or_default(),
                compared(fields.iter().map(|f| {
                    (
                        f[0].as_str().unwrap_or_default().to_string(),
                        f[1].as_str().unwrap_or_default().to_string(),
                    )
                })),
                hex_decode(result["body"].as_str().unwrap_or_default()),
            );
            assert_eq!(
                http3, http1,
                "{backend}: {method} {path} {headers:?}: {result}"
            );
        }
        // One connection per request, each counted; requests by protocol.
        let metrics = server.metrics();
        let n = REQUESTS.len() as u64;
        assert_eq!(sample(&metrics, "kiln_quic_connections_total"), n);
        assert_eq!(sample(&metrics, "kiln_quic_handshakes_total"), n);
        let ok = "kiln_requests_total{site=\"_default\",protocol=\"h3\",scheme=\"https\",status=\"2xx\"}";
        assert!(sample(&metrics, ok) > 0, "{metrics}");
    });
}

/// The body as the client prints it, in hex.
fn hex_decode(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap_or_default())
        .collect()
}

/// The response head curl gets from `url`, lowercased.
fn curl_head(url: &str) -> String {
    let output = Command::new("curl")
        .args(["-s", "-k", "-D", "-", "-o", "/dev/null", url])
        .output()
        .expect("curl");
    assert!(output.status.success(), "curl {url}");
    String::from_utf8_lossy(&output.stdout).to_lowercase()
}

#[test]
fn alt_svc_is_sent_over_tls_only_while_http3_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let pack = common::example_pack(dir.path());
    for (http3, backend) in [(true, "epoll"), (true, "uring"), (false, "epoll")] {
        let mut args = vec![
            pack.to_str().unwrap(),
            "--listen-tls",
            "127.0.0.1:0",
            "--tls-self-signed",
            "--alt-svc-max-age",
            "600",
            "--io",
            backend,
        ];
        if !http3 {
            args.push("--no-http3");
        }
        let server = Server::start(&args);
        let tls_port = server.tls_port.unwrap();
        let over_tls = curl_head(&format!("https://127.0.0.1:{tls_port}/"));
        let want = format!("alt-svc: h3=\":{tls_port}\"; ma=600");
        assert_eq!(
            over_tls.contains(&want),
            http3,
            "{backend} {http3}: {over_tls}"
        );
        let cleartext = curl_head(&format!("http://127.0.0.1:{}/", server.port));
        assert!(!cleartext.contains("alt-svc"), "{cleartext}");
        if !http3 && have_aioquic() {
            let result = &h3client(tls_port, &["cases", "second_settings"])[0];
            assert!(
                result.get("failed").is_some(),
                "no HTTP/3 expected: {result}"
            );
        }
    }
}

/// A TLS port whose UDP twin cannot be bound (another socket holds it
/// here; under a sandboxing unit, a bind filter or a missing capability)
/// stops the start with one line naming the address and `--no-http3`,
/// as Caddy and nginx refuse to start; with `--no-http3` the server starts
/// on that port.
#[test]
fn a_udp_twin_that_cannot_be_bound_stops_the_start_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let pack = common::example_pack(dir.path());
    let holder = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    let args = [
        pack.to_str().unwrap(),
        "--listen-tls",
        &addr,
        "--tls-self-signed",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("serve")
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "one line: {stderr}");
    let named = format!("kiln: error: cannot listen on UDP {addr} for HTTP/3: ");
    assert!(errors[0].starts_with(&named), "{stderr}");
    assert!(errors[0].ends_with("--no-http3"), "{stderr}");
    let server = Server::start(&[&args[..], &["--no-http3"]].concat());
    assert_eq!(server.tls_port, Some(holder.local_addr().unwrap().port()));
}

/// A TLS listener on a wildcard address (`0.0.0.0`, as `--listen-tls
/// :443` binds) answers HTTP/3 from the address each client wrote to,
/// on each back end. Every 127/8 address is this host's, and the route
/// back to a client that wrote to 127.0.0.2 leaves from 127.0.0.1: a
/// client (aioquic, as any) drops datagrams from an address it did not
/// write to, so without the source set per datagram it gets no answer.
#[test]
fn a_wildcard_tls_listener_answers_http3_from_the_address_written_to() {
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = common::example_pack(dir.path());
    for backend in BACKENDS {
        let args = [
            pack.to_str().unwrap(),
            "--listen-tls",
            "0.0.0.0:0",
            "--tls-self-signed",
            "--io",
            backend,
        ];
        let server = Server::start(&args);
        let port: u16 = server
            .startup
            .split("https://0.0.0.0:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no TLS port in {:?}", server.startup));
        let answer = &h3client(port, &["--host", "127.0.0.2", "get", "/"])[0];
        assert_eq!(answer["status"], 200, "{backend}: {answer}");
    }
}

/// SIGTERM with an HTTP/3 connection open: GOAWAY on the server's control
/// stream, then the connection closed with H3_NO_ERROR, and the server
/// exits.
#[test]
fn shutdown_sends_goaway_then_closes_without_error() {
    on_each_backend(&[], |backend, mut server| {
        let (mut client, mut lines) = hold(server.tls_port.unwrap());
        server.signal(libc::SIGTERM);
        let end: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(client.wait().unwrap().success());
        let frames = end["control_frames"].as_array().unwrap();
        assert_eq!(frames.first().and_then(|f| f.as_u64()), Some(0x04), "{end}");
        assert!(frames.iter().any(|f| f == 0x07), "no GOAWAY: {end}");
        assert_eq!(end["connection_error"], 0x100, "{end}");
        let status = server.wait_exit(std::time::Duration::from_secs(10));
        assert!(status.is_some_and(|s| s.success()), "{backend}: {status:?}");
    });
}

/// `--max-connections` counts QUIC connections with TCP ones: with one
/// HTTP/3 connection open and a budget of 1, a second QUIC connection is
/// refused (and counted).
#[test]
fn quic_connections_take_from_the_connection_budget() {
    on_each_backend(&["--max-connections", "1"], |backend, server| {
        let port = server.tls_port.unwrap();
        let (mut holder, _lines) = hold(port);
        let second = &h3client(port, &["cases", "second_settings"])[0];
        assert!(second.get("failed").is_some(), "{backend}: {second}");
        let metrics = server.metrics();
        assert_eq!(sample(&metrics, "kiln_quic_refused_total"), 1, "{metrics}");
        assert_eq!(sample(&metrics, "kiln_quic_connections_open"), 1);
        let _ = holder.kill();
        let _ = holder.wait();
    });
}

/// An HTTP/3 connection left idle is closed at `--keepalive-timeout`
/// (QUIC's idle timeout): the server's count of open QUIC connections
/// falls back to 0 while the client still holds it.
#[test]
fn an_idle_quic_connection_ends_at_the_keepalive_timeout() {
    on_each_backend(&["--keepalive-timeout", "1"], |backend, server| {
        let (mut client, _lines) = hold(server.tls_port.unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(8);
        while sample(&server.metrics(), "kiln_quic_connections_open") != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{backend}: still open"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = client.kill();
        let _ = client.wait();
    });
}

/// Many requests at once on one connection, for a body far beyond QUIC's
/// initial flow-control windows: every response whole, byte for byte,
/// sent as the windows open.
#[test]
fn concurrent_large_responses_arrive_whole() {
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = common::sample_pack(dir.path());
    let want = {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &common::big_body());
        digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    for backend in BACKENDS {
        let server = Server::start(&[
            pack.to_str().unwrap(),
            "--listen-tls",
            "127.0.0.1:0",
            "--tls-self-signed",
            "--io",
            backend,
        ]);
        let result = &h3client(server.tls_port.unwrap(), &["many", "16", "/big.bin"])[0];
        let responses = result["responses"].as_array().unwrap();
        assert_eq!(responses.len(), 16);
        for r in responses {
            assert_eq!(r[0], 200, "{backend}: {r}");
            assert_eq!(
                r[1].as_str(),
                Some(want.as_str()),
                "{backend}: a body differs"
            );
        }
    }
}

/// ngtcp2's `gtlsclient` (Debian's `ngtcp2-client`; `./test` installs it
/// where it can): a second QUIC stack that resumes, updates keys and
/// moves, which aioquic's client does not.
fn have_gtlsclient() -> bool {
    let found = Command::new("gtlsclient")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("gtlsclient (Debian's ngtcp2-client) is not installed; skipped");
    }
    found
}

/// One `gtlsclient` run fetching `/` from `port`: its log (stdout and
/// stderr in the order written, for the order of events) and the body it
/// saved, once it exits.
struct Gtls {
    child: std::process::Child,
    log: std::path::PathBuf,
    download: std::path::PathBuf,
}

impl Gtls {
    fn start(port: u16, dir: &std::path::Path, name: &str, flags: &[&str]) -> Gtls {
        let log = dir.join(format!("{name}.log"));
        let download = dir.join(name);
        std::fs::create_dir_all(&download).unwrap();
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("gtlsclient")
            .args(["--exit-on-all-streams-close", "--timeout=5s"])
            .arg(format!("--download={}", download.display()))
            .args(flags)
            .args(["127.0.0.1", &port.to_string()])
            .arg(format!("https://127.0.0.1:{port}/"))
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("gtlsclient");
        Gtls {
            child,
            log,
            download,
        }
    }

    /// Waits for the exit: the log, and the body saved.
    fn finish(mut self) -> (String, Vec<u8>) {
        let status = self.child.wait().unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap();
        assert!(status.success(), "gtlsclient: {status}\n{log}");
        let body = std::fs::read(self.download.join("index.html")).unwrap_or_default();
        (log, body)
    }
}

/// The TLS handshake messages' types the server sent at the Handshake
/// level, from gtlsclient's dump of that CRYPTO stream (a resumed
/// handshake has no Certificate, 11).
fn handshake_messages(log: &str) -> Vec<u8> {
    let bytes: Vec<u8> = log
        .lines()
        .skip_while(|l| *l != "Ordered CRYPTO data in Handshake crypto level")
        .skip(1)
        .map_while(|l| l.split_once("  |").map(|(dump, _)| dump))
        .flat_map(|dump| dump.split_whitespace().skip(1).map(str::to_owned))
        .map(|b| u8::from_str_radix(&b, 16).unwrap())
        .collect();
    let mut types = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        types.push(bytes[at]);
        at += 4
            + (usize::from(bytes[at + 1]) << 16
                | usize::from(bytes[at + 2]) << 8
                | usize::from(bytes[at + 3]));
    }
    types
}

/// The log from the line starting with `from` on.
fn after<'a>(log: &'a str, from: &str) -> &'a str {
    log.find(from).map_or("", |at| &log[at..])
}

/// The local port gtlsclient moved to (`--change-local-addr`).
fn moved_to(log: &str) -> String {
    let line = after(log, "Local address is now ")
        .lines()
        .next()
        .unwrap_or("");
    line.rsplit(':').next().unwrap_or("").to_owned()
}

/// A second QUIC stack, ngtcp2's, against both back ends: a session
/// resumed with the first connection's ticket (its early data refused,
/// the request answered after the handshake: 0-RTT is off), a key update,
/// a migration to a new local port (path validated) and a NAT rebinding
/// (the server validates the new path): each gets the page whole after
/// the event. The events come 10 ms after the handshake, the request
/// 200 ms after it.
#[test]
fn gtlsclient_resumes_updates_keys_and_moves() {
    if !have_gtlsclient() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for backend in BACKENDS {
        let server = start(dir.path(), backend);
        let port = server.tls_port.unwrap();
        let page = server.get("/", "").body;
        let work = dir.path().join(backend);
        let session = format!("--session-file={}", work.join("session").display());
        let params = format!("--tp-file={}", work.join("params").display());
        let delayed = "--delay-stream=200ms";
        let runs = [
            Gtls::start(port, &work, "first", &[&session, &params]),
            Gtls::start(port, &work, "key-update", &[delayed, "--key-update=10ms"]),
            Gtls::start(
                port,
                &work,
                "migration",
                &[delayed, "--change-local-addr=10ms"],
            ),
            Gtls::start(
                port,
                &work,
                "nat-rebinding",
                &[delayed, "--change-local-addr=10ms", "--nat-rebinding"],
            ),
        ];
        let [first, key_update, migration, rebinding] = runs.map(Gtls::finish);
        for (name, (log, body)) in [
            ("first", &first),
            ("key update", &key_update),
            ("migration", &migration),
            ("NAT rebinding", &rebinding),
        ] {
            assert!(*body == page, "{backend} {name}: the page differs\n{log}");
        }
        assert!(handshake_messages(&first.0).contains(&11), "{}", first.0);

        let (resumed, body) = Gtls::start(port, &work, "resumed", &[&session, &params]).finish();
        assert_eq!(body, page, "{backend}: resumed: the page differs");
        let messages = handshake_messages(&resumed);
        assert!(
            messages.contains(&20) && !messages.contains(&11),
            "{backend}: not resumed ({messages:?})\n{resumed}"
        );
        // gtlsclient sent its request as 0-RTT; the server took none of
        // it and the request went again once the handshake completed.
        assert!(resumed.contains("type=0RTT"), "{resumed}");
        let refused = after(&resumed, "Early data was rejected by server");
        assert!(
            refused.contains("submit request headers"),
            "{backend}: early data not refused\n{resumed}"
        );

        let updated = after(&key_update.0, "Initiate key update");
        assert!(
            updated.contains("type=1RTT k=1") && updated.contains("pkt rx"),
            "{backend}: no key update\n{}",
            key_update.0
        );

        let (log, _) = &migration;
        let new_port = moved_to(log);
        assert!(
            log.contains(&format!(
                "{new_port}, remote:[127.0.0.1]:{port}}} succeeded"
            )),
            "{backend}: migration: the new path not validated\n{log}"
        );
        let answered = format!("Received packet: local=[127.0.0.1]:{new_port} ");
        assert!(
            after(log, "submit request headers").contains(&answered),
            "{backend}: migration: no answer on the new path\n{log}"
        );

        let (log, _) = &rebinding;
        let new_port = moved_to(log);
        let answered = format!("Received packet: local=[127.0.0.1]:{new_port} ");
        assert!(
            after(log, "Local address is now")
                .lines()
                .any(|l| l.contains(" frm rx ") && l.contains("PATH_CHALLENGE"))
                && after(log, "submit request headers").contains(&answered),
            "{backend}: NAT rebinding: no validation or no answer on the new path\n{log}"
        );
    }
}

/// What each client got, as `(retries, status or connection error)`.
fn retries(results: &[serde_json::Value]) -> Vec<(u64, String)> {
    results
        .iter()
        .map(|r| {
            let outcome = match (&r["status"], &r["connection_error"]) {
                (serde_json::Value::Null, e) => format!("connection error {e}"),
                (status, _) => format!("status {status}"),
            };
            (r["retries"].as_u64().unwrap_or(99), outcome)
        })
        .collect()
}

/// `--quic-retry always`: every new client gets a Retry (aioquic takes
/// it, kiln counts it) and then its answer; a token that is not kiln's is
/// no proof (another Retry); a good token sent from another address is
/// refused with INVALID_TOKEN (0x0b, RFC 9000 §8.1.3), without a Retry.
#[test]
fn quic_retry_always_validates_every_new_client() {
    on_each_backend(&["--quic-retry", "always"], |backend, server| {
        let results = h3client(
            server.tls_port.unwrap(),
            &["retry", "new", "replayed", "forged"],
        );
        let ok = || "status 200".to_owned();
        assert_eq!(
            retries(&results),
            [(1, ok()), (0, "connection error 11".to_owned()), (1, ok())],
            "{backend}: {results:?}"
        );
        let metrics = server.metrics();
        assert_eq!(sample(&metrics, "kiln_quic_retries_total"), 2, "{metrics}");
        assert_eq!(
            sample(&metrics, "kiln_quic_handshakes_total"),
            2,
            "{metrics}"
        );
    });
}

/// `--quic-retry auto` (the default) on one thread: no Retry while 63
/// handshakes are in flight, a Retry once there are 64
/// (`quic::HANDSHAKES_BEFORE_RETRY`), the client answered after it. The
/// handshakes are clients' first Initials, never continued. One back end:
/// the choice is the QUIC endpoint's, which both loops share.
#[test]
fn quic_retry_auto_begins_at_64_handshakes_in_flight() {
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), "epoll", &["--threads", "1"]);
    let results = h3client(
        server.tls_port.unwrap(),
        &["retry", "half-open:63", "half-open:1"],
    );
    let ok = || "status 200".to_owned();
    assert_eq!(retries(&results), [(0, ok()), (1, ok())], "{results:?}");
    let metrics = server.metrics();
    assert_eq!(sample(&metrics, "kiln_quic_retries_total"), 1, "{metrics}");
    // 64 half-open, and the two clients.
    assert_eq!(
        sample(&metrics, "kiln_quic_connections_total"),
        66,
        "{metrics}"
    );
}

/// A reload with an HTTP/3 connection open does as HTTP/1.1 and HTTP/2
/// do (`serve_reload`): no GOAWAY, the connection stays, and its next
/// request is answered from the new pack.
#[test]
fn a_reload_reaches_open_connections_without_goaway() {
    use std::io::{BufRead, Write};
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("site.pack");
    for backend in BACKENDS {
        common::version_pack(&pack, "v0");
        let server = Server::start(&[
            pack.to_str().unwrap(),
            "--listen-tls",
            "127.0.0.1:0",
            "--tls-self-signed",
            "--io",
            backend,
        ]);
        let mut client = Command::new(common::python())
            .arg("tests/http3/h3client.py")
            .arg(server.tls_port.unwrap().to_string())
            .arg("session")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the tests' Python");
        let mut paths = client.stdin.take().unwrap();
        let mut answers = std::io::BufReader::new(client.stdout.take().unwrap()).lines();
        let mut version = || {
            paths.write_all(b"/version.txt\n").unwrap();
            let line = answers.next().expect("an answer").unwrap();
            serde_json::from_str::<serde_json::Value>(&line).unwrap()
        };
        let before = version();
        assert_eq!(before["body"], "v0", "{backend}: {before}");

        common::version_pack(&pack, "v1");
        let start = std::time::Instant::now();
        while server.get("/version.txt", "").body != b"v1" {
            assert!(start.elapsed() < std::time::Duration::from_secs(20));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let after = version();
        assert_eq!(
            (&after["status"], &after["body"], &after["control_frames"]),
            (&200.into(), &"v1".into(), &serde_json::json!([0x04])),
            "{backend}: {after}"
        );
        drop(paths);
        assert!(client.wait().unwrap().success());
    }
}

/// A short-header datagram for connection `id` sent to `port`: the
/// stateless reset it gets (RFC 9000 §10.3), checked for its form
/// (smaller than the datagram, looking like a short-header packet); its
/// last 16 bytes are the token.
fn stateless_reset(port: u16, id: &[u8]) -> Vec<u8> {
    // A short-header packet: its first byte, the ID, 40 bytes more.
    let mut datagram = vec![0x41];
    datagram.extend(id);
    datagram.extend([0x5a; 40]);
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    socket.send_to(&datagram, ("127.0.0.1", port)).unwrap();
    let mut reply = [0u8; 1500];
    let n = socket.recv(&mut reply).expect("a stateless reset");
    let reply = reply[..n].to_vec();
    assert!(n < datagram.len() && n >= 21, "{reply:02x?}");
    assert_eq!(reply[0] & 0xc0, 0x40, "{reply:02x?}");
    reply
}

/// The first connection ID (and its stateless-reset token) the server
/// issued to an `ids` client, which then closed.
fn issued_id(port: u16) -> (Vec<u8>, Vec<u8>) {
    let issued = h3client(port, &["ids"]).remove(0);
    assert_eq!(issued["status"], 200, "{issued}");
    let [id, token] = [0, 1].map(|i| hex_decode(issued["ids"][0][i].as_str().unwrap()));
    assert_eq!((id.len(), token.len()), (8, 16), "{issued}");
    (id, token)
}

/// A datagram for a connection the server no longer has (closed by the
/// client, drained) gets a stateless reset ending with the token the
/// server announced with that connection ID.
#[test]
fn a_datagram_for_a_forgotten_connection_gets_a_stateless_reset() {
    on_each_backend(&[], |backend, server| {
        let port = server.tls_port.unwrap();
        let (id, token) = issued_id(port);
        let start = std::time::Instant::now();
        while sample(&server.metrics(), "kiln_quic_connections_open") != 0 {
            assert!(start.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let reply = stateless_reset(port, &id);
        assert_eq!(
            reply[reply.len() - 16..],
            token[..],
            "{backend}: {reply:02x?}"
        );
    });
}

/// `h3client.py PORT held-retry`: a client stopped after the server's
/// Retry, and what it said then (its address, its original destination
/// connection ID, the token).
struct HeldRetry {
    client: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    held: serde_json::Value,
}

impl HeldRetry {
    fn start(port: u16) -> HeldRetry {
        use std::io::BufRead;
        let mut client = Command::new(common::python())
            .arg("tests/http3/h3client.py")
            .arg(port.to_string())
            .arg("held-retry")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the tests' Python");
        let stdin = client.stdin.take().unwrap();
        let mut stdout = std::io::BufReader::new(client.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let held: serde_json::Value = serde_json::from_str(&line).expect("a Retry taken");
        HeldRetry {
            client,
            stdin,
            stdout,
            held,
        }
    }

    /// Goes on with `token` in place of the server's (hex; empty: the
    /// server's): the kind of the server's first answer, and the GET's
    /// status or the connection error.
    fn finish(mut self, token: &str) -> serde_json::Value {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{token}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(self.client.wait().unwrap().success());
        serde_json::from_str(&line).expect("an outcome")
    }
}

/// The keys of Retry tokens and stateless resets outlive a restart with
/// `--quic-host-key` (the same file), and only with it: a datagram for a
/// connection of the server before gets a stateless reset with the token
/// announced then, and a client that took a Retry before the restart is
/// served after it with that Retry's token. Without the file, the reset's
/// token is another (the client would time out) and the token is no
/// proof (another Retry). One back end: the keys are the QUIC endpoint's,
/// which both loops share.
#[test]
fn retry_tokens_and_resets_outlive_a_restart_with_a_host_key() {
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("quic-host-key");
    std::fs::write(&key, b"thirty-two bytes of test secret!").unwrap();
    let with_key = [
        "--quic-retry",
        "always",
        "--quic-host-key",
        key.to_str().unwrap(),
    ];
    for (flags, kept) in [(&with_key[..], true), (&with_key[..2], false)] {
        let tls = format!("127.0.0.1:{}", port_outside_ephemeral_range());
        let before = start_on(dir.path(), "epoll", &tls, flags);
        let port = before.tls_port.unwrap();
        let (id, token) = issued_id(port);
        let held = HeldRetry::start(port);
        drop(before);
        let after = start_on(dir.path(), "epoll", &tls, flags);
        let reply = stateless_reset(port, &id);
        assert_eq!(
            reply[reply.len() - 16..] == token[..],
            kept,
            "{flags:?}: {reply:02x?} against {token:02x?}"
        );
        let outcome = held.finish("");
        let expected = match kept {
            true => serde_json::json!({"first_reply": "initial", "status": 200}),
            false => serde_json::json!({"first_reply": "retry"}),
        };
        assert_eq!(outcome, expected, "{flags:?}\n{}", after.stderr_text());
    }
}

/// A Retry token as quinn-proto 0.11 seals one (its `token.rs`): type 0
/// (Retry), the client's address, the original destination connection
/// ID, the issue time in Unix seconds, sealed with AES-256-GCM under a key
/// expanded from the token key (`Keys::derive` of the host key's secret)
/// with the nonce, which follows.
fn retry_token(
    secret: &[u8],
    address: std::net::SocketAddrV4,
    odcid: &[u8],
    age: std::time::Duration,
) -> Vec<u8> {
    let keys = kiln::serve::quic::Keys::derive(secret).unwrap();
    let issued = (std::time::SystemTime::now() - age)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut token = vec![0, 0];
    token.extend(address.ip().octets());
    token.extend(address.port().to_be_bytes());
    token.push(odcid.len() as u8);
    token.extend(odcid);
    token.extend(issued.to_be_bytes());
    let nonce = u128::from(issued).to_le_bytes();
    keys.token
        .aead_from_hkdf(&nonce)
        .seal(&mut token, &[])
        .unwrap();
    token.extend(nonce);
    token
}

/// `bytes` in hex, as `h3client.py held-retry` reads a token.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A Retry token lasts 15 s (quinn's `retry_token_lifetime`): one issued
/// 20 s ago for the client's own address and handshake is refused with
/// `INVALID_TOKEN`, one issued now is taken. The tokens are sealed by the
/// test with the host key's token key, as the server seals them, so no
/// test waits for one to expire; the one issued now shows that they are
/// the server's kind. One back end: tokens are the QUIC endpoint's.
#[test]
fn an_expired_retry_token_is_refused() {
    if !have_aioquic() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("quic-host-key");
    let secret = b"thirty-two bytes of test secret!";
    std::fs::write(&key, secret).unwrap();
    let server = start_with(
        dir.path(),
        "epoll",
        &[
            "--quic-retry",
            "always",
            "--quic-host-key",
            key.to_str().unwrap(),
        ],
    );
    for (age, expected) in [
        (
            0,
            serde_json::json!({"first_reply": "initial", "status": 200}),
        ),
        (
            20,
            serde_json::json!({"first_reply": "initial", "connection_error": 0x0b}),
        ),
    ] {
        let held = HeldRetry::start(server.tls_port.unwrap());
        let address = held.held["address"].as_str().unwrap().parse().unwrap();
        let odcid = hex_decode(held.held["odcid"].as_str().unwrap());
        let token = retry_token(secret, address, &odcid, std::time::Duration::from_secs(age));
        let outcome = held.finish(&hex(&token));
        assert_eq!(outcome, expected, "{age} s old\n{}", server.stderr_text());
    }
}
