//! HTTP/1.x request heads (RFC 9112): the request line checked by
//! `request_line`, the header section by httparse into a fixed header
//! array, then one pass over the fields that matter, with the framing
//! checks that keep a request from being read two ways (request smuggling).

use std::mem::MaybeUninit;
use std::net::Ipv6Addr;

use super::body::Discard;
use super::request_line::{self, Line, MAX_REQUEST_LINE, RequestLine, is_host_byte};
use crate::serve::handler::{Method, Request};

/// Most header fields accepted in one request head.
pub const MAX_HEADERS: usize = 100;
/// Longest request head (431 beyond).
pub const MAX_HEAD: usize = 16 * 1024;

/// A parsed request head; every slice borrows the read buffer.
#[derive(Clone, Copy, Debug)]
pub struct RequestHead<'b> {
    /// What the handler needs: method, target and the header values it
    /// acts on.
    pub request: Request<'b>,
    /// The method as sent, for the access log.
    pub method_token: &'b [u8],
    /// The minor version as sent: `0` for HTTP/1.0; `1` for HTTP/1.1, and
    /// higher for a later HTTP/1.x, which is served as HTTP/1.1.
    pub minor_version: u8,
    /// Whether the connection may stay open after this request.
    pub keep_alive: bool,
    /// The request body that follows the head, as the state that skips it.
    pub body: Discard,
    /// Bytes of the head, blank line included.
    pub head_len: usize,
    /// For the access log.
    pub referer: Option<&'b [u8]>,
    /// For the access log.
    pub user_agent: Option<&'b [u8]>,
}

/// The result of looking at the start of a buffer.
#[derive(Clone, Copy, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per request and matched at once, never stored; \
              boxing the head would allocate on the hot path"
)]
pub enum Parsed<'b> {
    Complete(RequestHead<'b>),
    /// The head is not complete yet and still within limits.
    Partial,
    /// The request cannot be served; answer with this status and close.
    Error(u16),
    /// Not HTTP at all (see `Line::NotHttp`): close without answering.
    NotHttp,
}

fn parse_length(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |acc, d| acc * 10 + u64::from(d - b'0')))
}

fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&c| c == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The `Transfer-Encoding` lines of a request, read as one list (RFC 9110
/// §5.3).
#[derive(Default)]
struct TransferCodings {
    present: bool,
    /// How many times `chunked` is listed.
    chunked: u32,
    /// A coding other than `chunked` is listed.
    other: bool,
    /// The last coding listed is `chunked`.
    chunked_last: bool,
}

impl TransferCodings {
    fn add(&mut self, value: &[u8]) {
        self.present = true;
        // Empty list elements are allowed and ignored (RFC 9110 §5.6.1).
        for coding in value.split(|&c| c == b',').map(<[u8]>::trim_ascii) {
            if coding.is_empty() {
                continue;
            }
            self.chunked_last = coding.eq_ignore_ascii_case(b"chunked");
            if self.chunked_last {
                self.chunked += 1;
            } else {
                self.other = true;
            }
        }
    }
}

/// Whether `value` is a valid `Host` field value (RFC 9112 §3.2): empty
/// (the target has no authority), or `uri-host [":" port]` of RFC 3986 —
/// an IP-literal in brackets or a reg-name (which covers IPv4 addresses),
/// then a port of any number of digits, possibly none (`host:` is in the
/// grammar; the port is not used here).
fn valid_host(value: &[u8]) -> bool {
    let (host_ok, rest) = match value.strip_prefix(b"[") {
        Some(literal) => match literal.iter().position(|&b| b == b']') {
            Some(end) => (valid_ip_literal(&literal[..end]), &literal[end + 1..]),
            None => return false,
        },
        None => {
            let end = value.iter().position(|&b| b == b':').unwrap_or(value.len());
            (valid_reg_name(&value[..end]), &value[end..])
        }
    };
    host_ok
        && match rest {
            [] => true,
            [b':', port @ ..] => port.iter().all(u8::is_ascii_digit),
            _ => false,
        }
}

/// `reg-name = *( unreserved / pct-encoded / sub-delims )`.
fn valid_reg_name(name: &[u8]) -> bool {
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'%' {
            match name.get(i + 1..i + 3) {
                Some([hi, lo]) if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => i += 3,
                _ => return false,
            }
        } else if is_host_byte(name[i]) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// What is between the brackets of an IP-literal: an IPv6 address or
/// `IPvFuture = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )`.
fn valid_ip_literal(inside: &[u8]) -> bool {
    if let [b'v' | b'V', future @ ..] = inside {
        let Some(dot) = future.iter().position(|&b| b == b'.') else {
            return false;
        };
        let (version, text) = (&future[..dot], &future[dot + 1..]);
        return !version.is_empty()
            && version.iter().all(u8::is_ascii_hexdigit)
            && !text.is_empty()
            && text.iter().all(|&b| is_host_byte(b) || b == b':');
    }
    std::str::from_utf8(inside).is_ok_and(|s| s.parse::<Ipv6Addr>().is_ok())
}

/// A head not complete yet: wait for more unless it is already too long.
fn partial(buf: &[u8]) -> Parsed<'_> {
    if buf.len() > MAX_HEAD {
        Parsed::Error(431)
    } else {
        Parsed::Partial
    }
}

/// Parses the request head at the start of `buf`. Any byte sequence is
/// fine: this is the entry point of the fuzz target.
pub fn parse_request(buf: &[u8]) -> Parsed<'_> {
    // The fast path: httparse reads an HTTP/1.0 or 1.1 head with SIMD into
    // an uninitialised array (no memset per request). Whatever it does not
    // complete (a head still arriving, a later minor version, an error) is
    // judged by `request_line` first, which tells 414, 505 and 400 apart
    // where httparse cannot; the two accept the same lines (see there), so
    // `request_line` runs only off the fast path (running it on every
    // request cost about 6 % of pipelined requests per CPU-second).
    let mut uninit = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut init;
    let mut req = httparse::Request::new(&mut []);
    let fast = req.parse_with_uninit_headers(buf, &mut uninit);
    let (line, head_len, headers) = match (fast, req.method, req.path, req.version) {
        (Ok(httparse::Status::Complete(n)), Some(method), Some(target), Some(minor)) => {
            let line = RequestLine {
                method: method.as_bytes(),
                target: target.as_bytes(),
                minor,
                len: 0,
            };
            // httparse takes any byte above 0x7f in the target; `request_line`
            // requires them to be UTF-8, and so does this path.
            if method.len() + target.len() + b"  HTTP/1.1".len() > MAX_REQUEST_LINE {
                return Parsed::Error(414);
            }
            if !target.is_ascii() && std::str::from_utf8(target.as_bytes()).is_err() {
                return Parsed::Error(400);
            }
            let headers: &[httparse::Header<'_>] = req.headers;
            (line, n, headers)
        }
        (fast, ..) => {
            let line = match request_line::parse(buf) {
                Line::Complete(line) => line,
                Line::Partial => return partial(buf),
                Line::Error(status) => return Parsed::Error(status),
                Line::NotHttp => return Parsed::NotHttp,
            };
            let fields = if line.minor <= 1 {
                // Complete heads took the fast path: this one is partial.
                fast.map(|_| None)
            } else {
                // A later minor version, which httparse refuses: rare
                // enough for an initialised array.
                init = [httparse::EMPTY_HEADER; MAX_HEADERS];
                match httparse::parse_headers(&buf[line.len..], &mut init) {
                    Ok(httparse::Status::Complete((n, headers))) => {
                        Ok(Some((line.len + n, headers)))
                    }
                    Ok(httparse::Status::Partial) => Ok(None),
                    Err(e) => Err(e),
                }
            };
            match fields {
                Ok(Some((head_len, headers))) => (line, head_len, headers),
                Ok(None) => return partial(buf),
                Err(httparse::Error::TooManyHeaders) => return Parsed::Error(431),
                Err(_) => return Parsed::Error(400),
            }
        }
    };
    if head_len > MAX_HEAD {
        return Parsed::Error(431);
    }
    let minor = line.minor;
    let mut head = RequestHead {
        request: Request::new(Method::from_token(line.method), line.target),
        method_token: line.method,
        minor_version: minor,
        keep_alive: minor >= 1,
        body: Discard::default(),
        head_len,
        referer: None,
        user_agent: None,
    };
    let mut hosts = 0;
    let mut host_ok = true;
    let mut length: Option<u64> = None;
    let mut codings = TransferCodings::default();
    let mut too_many_lines = false;
    for h in headers {
        let (name, value) = (h.name.as_bytes(), h.value);
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        match name.len() {
            4 if is(b"host") => {
                hosts += 1;
                host_ok &= valid_host(value);
                head.request.host = Some(value);
            }
            5 if is(b"range") => head.request.range = Some(value),
            7 if is(b"referer") => head.referer = Some(value),
            8 if is(b"if-match") => {
                too_many_lines |= head.request.if_match.push(value).is_err();
            }
            8 if is(b"if-range") => head.request.if_range = Some(value),
            10 if is(b"connection") => {
                if has_token(value, b"close") {
                    head.keep_alive = false;
                } else if has_token(value, b"keep-alive") {
                    head.keep_alive = true;
                }
            }
            10 if is(b"user-agent") => head.user_agent = Some(value),
            13 if is(b"if-none-match") => {
                too_many_lines |= head.request.if_none_match.push(value).is_err();
            }
            14 if is(b"sec-fetch-site") => head.request.sec_fetch_site = Some(value),
            14 if is(b"sec-fetch-mode") => head.request.sec_fetch_mode = Some(value),
            20 if is(b"available-dictionary") => head.request.set_available_dictionary(value),
            // One field with one number: a second field (even with the
            // same value, which RFC 9110 §8.6 lets a recipient accept) or a
            // list (`5, 5`) is refused, as nginx does, so that no proxy in
            // front can take a different length from the same head.
            14 if is(b"content-length") => match (parse_length(value), length) {
                (Some(n), None) => length = Some(n),
                _ => return Parsed::Error(400),
            },
            15 if is(b"accept-encoding") => {
                too_many_lines |= head.request.accept_encoding.push(value).is_err();
            }
            17 if is(b"transfer-encoding") => codings.add(value),
            17 if is(b"if-modified-since") => head.request.if_modified_since = Some(value),
            19 if is(b"if-unmodified-since") => head.request.if_unmodified_since = Some(value),
            _ => {}
        }
    }
    if too_many_lines {
        // A list field on more than `MAX_FIELD_LINES` lines: refused
        // rather than read in part.
        return Parsed::Error(431);
    }
    if hosts > 1 || (minor >= 1 && hosts == 0) || !host_ok {
        return Parsed::Error(400);
    }
    head.body = if !codings.present {
        Discard::length(length.unwrap_or(0))
    } else if length.is_some() || minor == 0 {
        // Both framings at once is the classic smuggling vector; HTTP/1.0
        // has no transfer codings, so its framing is faulty (RFC 9112
        // §6.1). Either way the body cannot be found reliably.
        return Parsed::Error(400);
    } else if !codings.chunked_last || codings.chunked > 1 {
        // Without a final (and single) `chunked` the body has no end a
        // server can find (RFC 9112 §6.3).
        return Parsed::Error(400);
    } else if codings.other {
        // A coding under the chunked framing that a static server does not
        // implement (RFC 9112 §6.1).
        return Parsed::Error(501);
    } else {
        Discard::chunked()
    };
    Parsed::Complete(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(raw: &str) -> Option<u16> {
        match parse_request(raw.as_bytes()) {
            Parsed::Complete(_) => None,
            Parsed::Partial => Some(0),
            Parsed::Error(s) => Some(s),
            Parsed::NotHttp => panic!("{raw:?} taken for another protocol"),
        }
    }

    #[test]
    fn accepts_and_refuses() {
        for (raw, want) in [
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", None),
            ("GET / HTTP/1.0\r\n\r\n", None),
            ("GET / HTTP/1.1\r\nHost: a\r\n", Some(0)),
            ("GET / HTTP/1.1\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", Some(400)),
            ("GET / HTTP/2.0\r\nHost: a\r\n\r\n", Some(505)),
            ("GET / HTTP/1.1\r\nHost: a\r\nbad\r\n\r\n", Some(400)),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n",
                Some(400),
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Some(400),
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
                Some(400),
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                Some(400),
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
                Some(400),
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\ncontent-length: 0\r\n\r\n",
                Some(400),
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                None,
            ),
        ] {
            assert_eq!(status(raw), want, "{raw:?}");
        }
    }

    /// HTTP/1.2 and later 1.x minors are HTTP/1.1 to us (RFC 9110 §6.2):
    /// same defaults, same Host rule, headers parsed the same.
    #[test]
    fn later_minor_versions_are_served_as_http11() {
        for minor in 1..=9u8 {
            let raw = format!(
                "GET /x HTTP/1.{minor}\r\nHost: a\r\nRange: bytes=0-1\r\nContent-Length: 2\r\n\r\nab"
            );
            let Parsed::Complete(head) = parse_request(raw.as_bytes()) else {
                panic!("{raw:?}");
            };
            assert_eq!(head.minor_version, minor);
            assert!(head.keep_alive);
            assert_eq!(head.request.target, b"/x");
            assert_eq!(head.request.range, Some(&b"bytes=0-1"[..]));
            assert_eq!(head.body, Discard::length(2));
            assert_eq!(head.head_len, raw.len() - 2);
            let no_host = format!("GET / HTTP/1.{minor}\r\n\r\n");
            assert_eq!(status(&no_host), Some(400));
            let partial = format!("GET / HTTP/1.{minor}\r\nHost: a\r\n");
            assert_eq!(status(&partial), Some(0));
            let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
            assert_eq!(status(&format!("{partial}{many}\r\n")), Some(431));
            assert_eq!(status(&format!("{partial}bad\r\n\r\n")), Some(400));
        }
    }

    #[test]
    fn transfer_codings() {
        let head =
            |minor: u8, fields: &str| format!("GET / HTTP/1.{minor}\r\nHost: a\r\n{fields}\r\n");
        for fields in [
            "Transfer-Encoding: chunked\r\n",
            "transfer-encoding: CHUNKED\r\n",
            "Transfer-Encoding: , chunked ,\r\n",
            "Transfer-Encoding:\r\nTransfer-Encoding: chunked\r\n",
        ] {
            for minor in [1, 2] {
                match parse_request(head(minor, fields).as_bytes()) {
                    Parsed::Complete(h) => assert_eq!(h.body, Discard::chunked(), "{fields:?}"),
                    other => panic!("{fields:?}: {other:?}"),
                }
            }
        }
        for (fields, want) in [
            // Both framings at once.
            ("Content-Length: 1\r\nTransfer-Encoding: chunked\r\n", 400),
            ("Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", 400),
            // No final `chunked`: no way to find the end (RFC 9112 §6.3).
            ("Transfer-Encoding: gzip\r\n", 400),
            ("Transfer-Encoding: chunked, gzip\r\n", 400),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
                400,
            ),
            ("Transfer-Encoding: chunked;x=1\r\n", 400),
            ("Transfer-Encoding:\r\n", 400),
            ("Transfer-Encoding: chunked, chunked\r\n", 400),
            // A final `chunked` under a coding we do not implement.
            ("Transfer-Encoding: gzip, chunked\r\n", 501),
            (
                "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n",
                501,
            ),
        ] {
            assert_eq!(status(&head(1, fields)), Some(want), "{fields:?}");
        }
        // HTTP/1.0 has no transfer codings (RFC 9112 §6.1).
        assert_eq!(
            status(&head(0, "Transfer-Encoding: chunked\r\n")),
            Some(400)
        );
    }

    #[test]
    fn host_values() {
        for host in [
            "example.com",
            "EXAMPLE.com:8080",
            "a",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8080",
            "[2001:db8::ff00:42:8329]",
            "[::ffff:192.0.2.1]:1",
            "[v1.fe80::a+en1]",
            "xn--bcher-kva.example",
            "a-b_c~d.e!$&'()*+,;=",
            "%41%2e",
            "host:",
            "",
        ] {
            let raw = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(status(&raw), None, "{host:?}");
        }
        for host in [
            "a b",
            "a/b",
            "a\\b",
            "user@host",
            "a:b",
            "a:80:80",
            "a:8o",
            "[::1",
            "::1",
            "[::1]x",
            "[::1]:a",
            "[1.2.3.4]",
            "[::g]",
            "[fe80::1%25eth0]",
            "[v1]",
            "[v.x]",
            "[vg.x]",
            "[v1.]",
            "%4",
            "%zz",
            "a\tb",
            "a?b",
            "a#b",
            "\u{e9}.example",
        ] {
            let raw = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(status(&raw), Some(400), "{host:?}");
            // HTTP/1.0 needs no Host, but a bad one is still bad.
            let raw = format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n");
            assert_eq!(status(&raw), Some(400), "{host:?}");
        }
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\x01b\r\n\r\n"), Some(400));
    }

    /// 414 is for the request line, 431 for the header section, whatever
    /// the buffer holds of either.
    #[test]
    fn too_long_is_414_for_the_line_and_431_for_fields() {
        let max_line = request_line::MAX_REQUEST_LINE;
        let long_target = format!("/{}", "a".repeat(max_line));
        let big_field = format!("X-Big: {}\r\n", "b".repeat(MAX_HEAD));
        for (raw, want) in [
            // The line alone, still arriving.
            (format!("GET {long_target}"), 414),
            // The whole head, within MAX_HEAD.
            (
                format!("GET {long_target} HTTP/1.1\r\nHost: a\r\n\r\n"),
                414,
            ),
            // The line complete, the fields still arriving.
            (format!("GET {long_target} HTTP/1.1\r\nHost: a\r\n"), 414),
            // Over MAX_HEAD, but the line is what is too long.
            (
                format!("GET {long_target} HTTP/1.1\r\nHost: a\r\n{big_field}\r\n"),
                414,
            ),
            (format!("GET /{} HTTP/1.1", "a".repeat(MAX_HEAD)), 414),
            // A fitting line and too many bytes of fields.
            (format!("GET / HTTP/1.1\r\nHost: a\r\n{big_field}\r\n"), 431),
            (format!("GET / HTTP/1.1\r\nHost: a\r\n{big_field}"), 431),
            (format!("GET / HTTP/1.2\r\nHost: a\r\n{big_field}"), 431),
            // Empty lines before the request line count towards the head.
            (
                format!("{}GET / HTTP/1.1\r\n", "\r\n".repeat(MAX_HEAD)),
                431,
            ),
        ] {
            assert_eq!(status(&raw), Some(want), "{}", &raw[..60]);
        }
    }

    #[test]
    fn keep_alive_rules() {
        let ka = |raw: &str| match parse_request(raw.as_bytes()) {
            Parsed::Complete(h) => h.keep_alive,
            other => panic!("{other:?}"),
        };
        assert!(ka("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!ka(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        ));
        assert!(!ka("GET / HTTP/1.0\r\n\r\n"));
        assert!(ka("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    /// Mutated and random inputs never panic and never report a head
    /// longer than the input.
    #[test]
    fn arbitrary_bytes_are_handled() {
        let seeds: [&[u8]; 4] = [
            b"GET /a/b?c=d HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nContent-Length: 3\r\n\r\nabc",
            b"OPTIONS * HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            b"HEAD http://h/%2e%2e/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.2\r\nHost: [::1]:8\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut path = Vec::new();
        for i in 0..30_000 {
            let mut buf = seeds[i % seeds.len()].to_vec();
            for _ in 0..(next() % 6) {
                let at = (next() as usize) % (buf.len() + 1);
                match next() % 3 {
                    0 if at < buf.len() => buf[at] = next() as u8,
                    1 => buf.insert(at, next() as u8),
                    _ => buf.truncate(at),
                }
            }
            if i % 7 == 0 {
                buf = (0..next() % 64).map(|_| next() as u8).collect();
            }
            if let Parsed::Complete(head) = parse_request(&buf) {
                assert!(head.head_len <= buf.len());
                let _ = crate::serve::handler::normalize(head.request.target, &mut path);
            }
        }
    }
}
