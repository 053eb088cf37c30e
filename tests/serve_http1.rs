//! HTTP/1.1 behaviour over real sockets: byte-exact responses, HEAD,
//! methods, keep-alive and pipelining.

mod common;

use std::io::{Read, Write};

use common::*;
use kiln::serve::http1::MAX_DISCARDED_BODY;

fn server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let server = Server::start(&[pack.to_str().unwrap(), "--threads", "2"]);
    (dir, server)
}

#[test]
fn get_is_byte_exact() {
    let (_dir, server) = server();
    let raw = server.raw("GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let want = common_lines("HTTP/1.1 200 OK", true)
        + "ETag: \"hello\"\r\nLast-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n\
Cache-Control: public, max-age=60\r\nContent-Type: text/plain; charset=utf-8\r\n\
Accept-Ranges: bytes\r\nContent-Length: 12";
    assert_eq!(mask_date(head), want);
    assert_eq!(body, "Hello World!");
    let date = head.lines().find(|l| l.starts_with("Date: ")).unwrap();
    assert!(date.ends_with(" GMT") && date.len() == "Date: Sun, 06 Nov 1994 08:49:37 GMT".len());
}

#[test]
fn head_has_the_same_headers_and_no_body() {
    let (_dir, server) = server();
    let get = server.raw("GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let head = server.raw("HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let get_head = get.split_once("\r\n\r\n").unwrap().0;
    assert_eq!(mask_date(&head), mask_date(get_head) + "\r\n\r\n");
    assert!(head.ends_with("Content-Length: 12\r\n\r\n"), "{head}");
}

#[test]
fn methods() {
    let (_dir, server) = server();
    let options = server.raw("OPTIONS * HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(
        mask_date(&options),
        common_lines("HTTP/1.1 204 No Content", true) + "Allow: GET, HEAD, OPTIONS\r\n\r\n"
    );
    let options_path =
        server.raw("OPTIONS /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(options_path.starts_with("HTTP/1.1 204 No Content\r\n"));
    assert!(!options_path.contains("Content-Length"));
    for method in ["POST", "PUT", "DELETE", "PATCH", "TRACE"] {
        let r = server.raw(&format!(
            "{method} /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
        ));
        assert!(
            r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{method}: {r}"
        );
        assert!(r.contains("\r\nAllow: GET, HEAD, OPTIONS\r\n"), "{r}");
        assert!(r.contains("\r\nConnection: close\r\n"), "{r}");
    }
    let r = server.raw("BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 501 Not Implemented\r\n"), "{r}");
    let r = server.raw("GET * HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{r}");
}

#[test]
fn keep_alive_and_close() {
    let (_dir, server) = server();
    let mut s = server.connect();
    for _ in 0..3 {
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Connection"), None);
        assert_eq!(r.body, HELLO);
    }
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.header("Connection").as_deref(), Some("close"));
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap(),
        0,
        "closed after Connection: close"
    );

    // HTTP/1.0 closes by default and keeps alive when asked.
    let r = server.raw("GET /hello.txt HTTP/1.0\r\n\r\n");
    assert!(
        r.contains("\r\nConnection: close\r\n") && r.ends_with("Hello World!"),
        "{r}"
    );
    let mut s = server.connect();
    s.write_all(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.header("Connection").as_deref(), Some("keep-alive"));
    s.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n").unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.body, HELLO);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_dir, server) = server();
    let mut s = server.connect();
    let paths = ["/hello.txt", "/", "/missing", "/docs/x"];
    let mut batch = String::new();
    for i in 0..16 {
        let method = if i % 5 == 4 { "HEAD" } else { "GET" };
        batch += &format!(
            "{method} {} HTTP/1.1\r\nHost: t\r\n\r\n",
            paths[i % paths.len()]
        );
    }
    s.write_all(batch.as_bytes()).unwrap();
    for i in 0..16 {
        let r = read_response(&mut s, i % 5 == 4).unwrap();
        let (status, body): (u16, &[u8]) = match i % paths.len() {
            0 => (200, HELLO),
            1 => (200, HOME),
            2 => (404, b"custom 404\n"),
            _ => (200, b"docs fallback"),
        };
        assert_eq!(r.status, status, "response {i}");
        if i % 5 != 4 {
            assert_eq!(r.body, body, "response {i}");
        }
    }
    // More requests in one write than one batch holds: all answered, in
    // order, the later ones once the first batch is sent.
    let many: String = (0..300)
        .map(|i| format!("GET /hello.txt?{i} HTTP/1.1\r\nHost: t\r\n\r\nGET /missing HTTP/1.1\r\nHost: t\r\n\r\n"))
        .collect();
    s.write_all(many.as_bytes()).unwrap();
    for i in 0..600 {
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, if i % 2 == 0 { 200 } else { 404 }, "response {i}");
    }
    // A request split over several writes is still answered.
    for part in ["GET /hel", "lo.txt HTTP/1.1\r\nHo", "st: t\r\n", "\r\n"] {
        s.write_all(part.as_bytes()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
}

#[test]
fn large_bodies_arrive_whole() {
    let (_dir, server) = server();
    let mut s = server.connect();
    for _ in 0..2 {
        s.write_all(
            b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body == big_body(), "big body differs");
        assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
    }
}

#[test]
fn request_bodies_are_skipped_not_parsed() {
    let (_dir, server) = server();
    let mut s = server.connect();
    let smuggled = "GET /missing HTTP/1.1\r\nHost: t\r\n\r\n";
    let req = format!(
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{smuggled}GET / HTTP/1.1\r\nHost: t\r\n\r\n",
        smuggled.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
    let second = read_response(&mut s, false).unwrap();
    assert_eq!(second.status, 200);
    assert_eq!(second.body, HOME);
}

/// Chunked request bodies (RFC 9112 §7.1), each followed on the wire by
/// the next request.
fn chunked_bodies() -> Vec<String> {
    let smuggled = "GET /missing HTTP/1.1\r\nHost: t\r\n\r\n";
    vec![
        "0\r\n\r\n".into(),
        "5\r\nhello\r\n0\r\n\r\n".into(),
        "5;ext=1\r\nhello\r\n6 ; a=\"b c\"\r\n world\r\n0;last\r\n\r\n".into(),
        "3\r\nabc\r\n0\r\nChecksum: x\r\nX-Trailer: y\r\n\r\n".into(),
        // Chunk data that reads like a request: only the framing says
        // where the body ends.
        format!("{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len()),
    ]
}

const CHUNKED_GET: &str =
    "GET /hello.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
const NEXT_GET: &str = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";

#[test]
fn chunked_request_bodies_are_read_and_dropped() {
    let (_dir, server) = server();
    for body in chunked_bodies() {
        // The whole body in the buffer, with the next request behind it.
        let mut s = server.connect();
        s.write_all(format!("{CHUNKED_GET}{body}{NEXT_GET}").as_bytes())
            .unwrap();
        let first = read_response(&mut s, false).unwrap();
        assert_eq!((first.status, &first.body[..]), (200, HELLO), "{body:?}");
        assert_eq!(first.header("Connection"), None);
        let second = read_response(&mut s, false).unwrap();
        assert_eq!((second.status, &second.body[..]), (200, HOME), "{body:?}");
        // The body cut at every byte: the request is answered after its
        // head and what was read of the body, the rest is dropped as it
        // arrives, in any number of writes.
        for cut in 0..body.len() {
            let mut s = server.connect();
            s.tcp().set_nodelay(true).unwrap();
            s.write_all(format!("{CHUNKED_GET}{}", &body[..cut]).as_bytes())
                .unwrap();
            assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
            let rest = &body[cut..];
            let split = rest.len() / 2;
            s.write_all(&rest.as_bytes()[..split]).unwrap();
            s.write_all(format!("{}{NEXT_GET}", &rest[split..]).as_bytes())
                .unwrap();
            let second = read_response(&mut s, false).unwrap();
            assert_eq!(second.body, HOME, "{body:?} cut at {cut}");
        }
    }
}

#[test]
fn broken_chunk_framing_gets_400_and_close() {
    let (_dir, server) = server();
    for bad in [
        "zz\r\n",
        "-1\r\n",
        "5 \r\nhello\r\n0\r\n\r\n",
        "5\nhello\r\n0\r\n\r\n",
        "5\r\nhelloXX\r\n0\r\n\r\n",
        "10000000000000000\r\n",
        "0\r\nno colon\r\n\r\n",
        // Chunk extensions outside RFC 9112 §7.1.1's grammar: an
        // unterminated quoted string, a bare value, whitespace not BWS.
        "5;a=\"b\r\nhello\r\n0\r\n\r\n",
        "5;a=\"b\\\"\r\nhello\r\n0\r\n\r\n",
        "5;a=b c\r\nhello\r\n0\r\n\r\n",
        "5;=b\r\nhello\r\n0\r\n\r\n",
    ] {
        // In the same read as the head: refused, never answered.
        let r = server.raw(&format!("{CHUNKED_GET}{bad}{NEXT_GET}"));
        assert!(
            r.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{bad:?}: {r}"
        );
        assert!(r.contains("\r\nConnection: close\r\n"), "{r}");
        assert_eq!(r.matches("HTTP/1.1 ").count(), 1, "{r}");
        // After the request was answered: 400, then the connection closes.
        let mut s = server.connect();
        s.write_all(format!("{CHUNKED_GET}1\r\nx\r\n").as_bytes())
            .unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
        s.write_all(format!("{bad}{NEXT_GET}").as_bytes()).unwrap();
        let mut rest = String::new();
        let _ = s.read_to_string(&mut rest);
        assert!(
            rest.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{bad:?}: {rest}"
        );
        assert!(rest.contains("\r\nConnection: close\r\n"), "{rest}");
        assert_eq!(rest.matches("HTTP/1.1 ").count(), 1, "{rest}");
    }
}

#[test]
fn chunked_bodies_over_the_cap_close_the_connection() {
    let (_dir, server) = server();
    let max = MAX_DISCARDED_BODY as usize;
    // A chunk size that alone breaks the cap: refused before an answer.
    let r = server.raw(&format!("{CHUNKED_GET}{:x}\r\n", max + 1));
    assert!(r.starts_with("HTTP/1.1 413 Content Too Large\r\n"), "{r}");
    assert!(r.contains("\r\nConnection: close\r\n"), "{r}");
    assert_eq!(r.matches("HTTP/1.1 ").count(), 1, "{r}");
    // The cap counts the body as sent, framing included: exactly the cap
    // passes, one byte more closes the connection (with 413 if it all came
    // with the head, else after the answer).
    let data = max - "ffff\r\n\r\n0\r\n\r\n".len();
    let body = |len: usize| format!("{len:04x}\r\n{}\r\n0\r\n\r\n", "d".repeat(len));
    let mut s = server.connect();
    s.write_all(format!("{CHUNKED_GET}{}{NEXT_GET}", body(data)).as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
    assert_eq!(read_response(&mut s, false).unwrap().body, HOME);
    let r = server.raw(&format!("{CHUNKED_GET}{}{NEXT_GET}", body(data + 1)));
    assert!(
        r.starts_with("HTTP/1.1 413 ") || r.starts_with("HTTP/1.1 200 "),
        "{}",
        &r[..r.len().min(200)]
    );
    assert_eq!(r.matches("HTTP/1.1 ").count(), 1, "no second answer");
    // Past the cap after the answer: closed without another response.
    let mut s = server.connect();
    s.write_all(format!("{CHUNKED_GET}5\r\nhello\r\n").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().body, HELLO);
    s.write_all(format!("{max:x}\r\n").as_bytes()).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert_eq!(String::from_utf8_lossy(&rest), "");
}

#[test]
fn later_http1_minor_versions_are_served_as_http11() {
    let (_dir, server) = server();
    for minor in [2, 9] {
        let mut s = server.connect();
        for _ in 0..2 {
            s.write_all(format!("GET /hello.txt HTTP/1.{minor}\r\nHost: t\r\n\r\n").as_bytes())
                .unwrap();
            let r = read_response(&mut s, false).unwrap();
            assert_eq!((r.status, &r.body[..]), (200, HELLO));
            assert!(r.head.starts_with("HTTP/1.1 200 OK\r\n"), "{}", r.head);
            assert_eq!(r.header("Connection"), None, "kept alive as HTTP/1.1");
        }
        let r = server.raw(&format!("GET /hello.txt HTTP/1.{minor}\r\n\r\n"));
        assert!(r.starts_with("HTTP/1.1 400 "), "Host is required: {r}");
    }
}

#[test]
fn dummy_mode_and_flags() {
    let server = Server::start(&[
        "--dummy",
        "--threads",
        "1",
        "--no-security-headers",
        "--hsts",
    ]);
    let r = server.raw("GET /anything HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(
        mask_date(&r),
        format!(
            "HTTP/1.1 200 OK\r\nServer: kiln\r\nDate: <date>\r\nConnection: close\r\n\
Strict-Transport-Security: max-age=63072000; includeSubDomains\r\n{}\
Content-Type: text/plain; charset=utf-8\r\nContent-Length: 12\r\n\r\nHello World!",
            common::alt_svc_line()
        )
    );
    assert!(server.startup.contains("dummy"), "{}", server.startup);
}

#[test]
fn hsts_max_age_and_subdomains_are_settable() {
    for (flags, value) in [
        (&[][..], "max-age=63072000; includeSubDomains"),
        (
            &["--hsts-max-age", "300"][..],
            "max-age=300; includeSubDomains",
        ),
        (&["--hsts-no-subdomains"][..], "max-age=63072000"),
        (
            &["--hsts-max-age", "0", "--hsts-no-subdomains"][..],
            "max-age=0",
        ),
    ] {
        let server = Server::start(&[&["--dummy", "--threads", "1", "--hsts"][..], flags].concat());
        assert_eq!(
            server
                .get("/", "")
                .header("Strict-Transport-Security")
                .as_deref(),
            Some(value),
            "{flags:?}"
        );
    }
    // They tune --hsts, which they need.
    for flags in [
        &["--hsts-max-age", "300"][..],
        &["--hsts-no-subdomains"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["serve", "--dummy", "--listen", "127.0.0.1:0"])
            .args(flags)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--hsts"), "{flags:?}: {err}");
    }
}

#[test]
fn bad_site_argument_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, b"neither a pack nor a tar archive").unwrap();
    for site in [garbage.clone(), dir.path().join("missing.pack")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["serve", site.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(site.to_str().unwrap()), "{err}");
    }
}

#[test]
fn startup_line_and_ipv6_listener() {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let ipv6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let mut args = vec![pack.to_str().unwrap(), "--threads", "2"];
    if ipv6 {
        args.extend(["--listen", "[::1]:0"]);
    }
    let server = Server::start(&args);
    assert!(
        server.startup.contains("site.pack (9 routes)"),
        "{}",
        server.startup
    );
    assert!(
        server.startup.contains("with 2 threads"),
        "{}",
        server.startup
    );
    if ipv6 {
        let port: u16 = server
            .startup
            .split("http://[::1]:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("the IPv6 URL in the start-up line");
        let mut c = std::net::TcpStream::connect(("::1", port)).unwrap();
        c.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut c, false).unwrap().body, HELLO);
    }
}

#[test]
fn a_port_in_use_is_an_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--dummy", "--listen", &addr])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}
