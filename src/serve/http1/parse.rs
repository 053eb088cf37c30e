//! HTTP/1.x request heads (RFC 9112): httparse with a fixed, uninitialised
//! header array (no allocation, no memset per request), then one pass over
//! the fields that matter, with the framing checks that keep a request from
//! being read two ways (request smuggling).

use std::mem::MaybeUninit;

use crate::serve::handler::{Method, Request};

/// Most header fields accepted in one request head.
pub const MAX_HEADERS: usize = 100;
/// Longest request target (414 beyond).
pub const MAX_TARGET: usize = 8 * 1024;
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
    /// `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor_version: u8,
    /// Whether the connection may stay open after this request.
    pub keep_alive: bool,
    /// Length of the request body that follows the head (0 when none).
    pub content_length: u64,
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

/// Why a still-incomplete head is already unacceptable.
fn partial_limits(buf: &[u8]) -> Option<u16> {
    let line_done = buf.contains(&b'\n');
    if !line_done && buf.len() > MAX_TARGET + 64 {
        return Some(414);
    }
    (buf.len() > MAX_HEAD).then_some(431)
}

/// Parses the request head at the start of `buf`. Any byte sequence is
/// fine: this is the entry point of the fuzz target.
pub fn parse_request(buf: &[u8]) -> Parsed<'_> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut storage) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return partial_limits(buf).map_or(Parsed::Partial, Parsed::Error);
        }
        Err(httparse::Error::Version) => return Parsed::Error(505),
        Err(httparse::Error::TooManyHeaders) => return Parsed::Error(431),
        Err(_) => {
            return Parsed::Error(partial_limits(buf).unwrap_or(400));
        }
    };
    if head_len > MAX_HEAD {
        return Parsed::Error(431);
    }
    let (Some(method_token), Some(target), Some(minor)) = (req.method, req.path, req.version)
    else {
        return Parsed::Error(400);
    };
    if target.len() > MAX_TARGET {
        return Parsed::Error(414);
    }
    let mut head = RequestHead {
        request: Request::new(
            Method::from_token(method_token.as_bytes()),
            target.as_bytes(),
        ),
        method_token: method_token.as_bytes(),
        minor_version: minor,
        keep_alive: minor == 1,
        content_length: 0,
        head_len,
        referer: None,
        user_agent: None,
    };
    let mut hosts = 0;
    let mut length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut too_many_lines = false;
    for h in req.headers.iter() {
        let (name, value) = (h.name.as_bytes(), h.value);
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        match name.len() {
            4 if is(b"host") => {
                hosts += 1;
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
            14 if is(b"content-length") => match (parse_length(value), length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(prev)) if n == prev => {}
                _ => return Parsed::Error(400),
            },
            15 if is(b"accept-encoding") => {
                too_many_lines |= head.request.accept_encoding.push(value).is_err();
            }
            17 if is(b"transfer-encoding") => transfer_encoding = true,
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
    if hosts > 1 || (minor == 1 && hosts == 0) {
        return Parsed::Error(400);
    }
    if transfer_encoding {
        // Both framings at once is the classic smuggling vector: 400. A
        // transfer-coded body alone is a feature a static server does not
        // implement: 501, and the connection closes.
        return Parsed::Error(if length.is_some() { 400 } else { 501 });
    }
    head.content_length = length.unwrap_or(0);
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
        }
    }

    #[test]
    fn accepts_and_refuses() {
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), None);
        assert_eq!(status("GET / HTTP/1.0\r\n\r\n"), None);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\n"), Some(0));
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), Some(400));
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            Some(400)
        );
        assert_eq!(status("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), Some(505));
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nbad\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status(
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            Some(400)
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(501)
        );
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n"),
            Some(400)
        );
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
        let seeds: [&[u8]; 3] = [
            b"GET /a/b?c=d HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nContent-Length: 3\r\n\r\nabc",
            b"OPTIONS * HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            b"HEAD http://h/%2e%2e/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
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
