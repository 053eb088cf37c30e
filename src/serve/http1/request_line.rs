//! The request line (RFC 9112 §3): `method SP request-target SP
//! HTTP-version`, checked here because httparse knows only HTTP/1.0 and
//! HTTP/1.1. A later 1.x minor is served as HTTP/1.1 (RFC 9110 §2.5, §6.2),
//! another major gets 505, a version that is not `HTTP/` digit `.` digit
//! gets 400 (no answer at all when it does not even start with `H`: that
//! is another protocol), and a line too long gets 414 however it arrives. The grammar
//! is httparse's (token method, single spaces, a target of visible ASCII or
//! UTF-8, CRLF or a bare LF), so the two always agree on a line.

/// Longest request line, line end excluded (414 beyond).
pub const MAX_REQUEST_LINE: usize = 8 * 1024;

/// A complete request line; the slices borrow the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLine<'b> {
    pub method: &'b [u8],
    pub target: &'b [u8],
    /// The minor version of HTTP/1.x.
    pub minor: u8,
    /// Bytes before the header section: empty lines before the request
    /// line, the line and its end.
    pub len: usize,
}

/// The result of looking for a request line at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'b> {
    Complete(RequestLine<'b>),
    /// Valid so far, and within the limit.
    Partial,
    /// Answer with this status and close.
    Error(u16),
    /// A line whose third word is not even the start of an HTTP version:
    /// the client speaks another protocol (on a cleartext listener, most
    /// likely HTTP/2 with a broken preface, a connection error that closes
    /// the connection: RFC 9113 §3.4). Close without answering: an
    /// HTTP/1 response would be noise to it.
    NotHttp,
}

/// A byte class as a table: one load per byte of every request line and
/// `Host` instead of a range test and a scan of a punctuation list.
const fn byte_class(alphanumeric: bool, extra: &[u8], ranges: &[(u8, u8)]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        table[b] = alphanumeric && byte.is_ascii_alphanumeric();
        let mut i = 0;
        while i < extra.len() {
            table[b] |= extra[i] == byte;
            i += 1;
        }
        let mut r = 0;
        while r < ranges.len() {
            table[b] |= ranges[r].0 <= byte && byte <= ranges[r].1;
            r += 1;
        }
        b += 1;
    }
    table
}

/// `tchar` (RFC 9110 §5.6.2): the bytes of a method or a field name.
static TOKEN: [bool; 256] = byte_class(true, b"!#$%&'*+-.^_`|~", &[]);

/// Visible ASCII and the bytes of UTF-8 sequences (checked as UTF-8 after).
static TARGET: [bool; 256] = byte_class(false, b"", &[(b'!', b'~'), (0x80, 0xff)]);

/// `unreserved / sub-delims` of RFC 3986: the bytes of a `Host` name.
static HOST: [bool; 256] = byte_class(true, b"-._~!$&'()*+,;=", &[]);

/// `tchar` (RFC 9110 §5.6.2): the bytes of a method or a field name.
pub(super) fn is_token_byte(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

fn is_target_byte(b: u8) -> bool {
    TARGET[usize::from(b)]
}

/// `unreserved / sub-delims` of RFC 3986.
pub(super) fn is_host_byte(b: u8) -> bool {
    HOST[usize::from(b)]
}

/// Parses the request line at the start of `buf`, judging an incomplete
/// one as far as it goes.
pub fn parse(buf: &[u8]) -> Line<'_> {
    // RFC 9112 §2.2: empty lines before a request line are ignored.
    let mut start = 0;
    loop {
        match &buf[start..] {
            [b'\r', b'\n', ..] => start += 2,
            [b'\n', ..] => start += 1,
            [] | [b'\r'] => return Line::Partial,
            [b'\r', ..] => return Line::Error(400),
            _ => break,
        }
    }
    // Two bytes of room for the line end: nothing past them can make a
    // line that fits.
    let line = &buf[start..buf.len().min(start + MAX_REQUEST_LINE + 2)];
    let incomplete = || {
        if line.len() > MAX_REQUEST_LINE {
            Line::Error(414)
        } else {
            Line::Partial
        }
    };
    let method_end = line
        .iter()
        .position(|&b| !is_token_byte(b))
        .unwrap_or(line.len());
    if method_end == line.len() {
        return incomplete();
    }
    if method_end == 0 || line[method_end] != b' ' {
        return Line::Error(400);
    }
    let target_start = method_end + 1;
    let target_end = line[target_start..]
        .iter()
        .position(|&b| !is_target_byte(b))
        .map_or(line.len(), |n| target_start + n);
    if target_end == line.len() {
        return incomplete();
    }
    if target_end == target_start || line[target_end] != b' ' {
        return Line::Error(400);
    }
    let target = &line[target_start..target_end];
    if !target.is_ascii() && std::str::from_utf8(target).is_err() {
        return Line::Error(400);
    }
    let version_start = target_end + 1;
    for (i, want) in b"HTTP/0.0".iter().enumerate() {
        let Some(&b) = line.get(version_start + i) else {
            return incomplete();
        };
        let fits = match want {
            b'0' => b.is_ascii_digit(),
            _ => b == *want,
        };
        if !fits {
            let other_protocol = i == 0 && is_token_byte(b) && !b.eq_ignore_ascii_case(&b'H');
            return if other_protocol {
                Line::NotHttp
            } else {
                Line::Error(400)
            };
        }
    }
    let content_end = version_start + 8;
    if content_end > MAX_REQUEST_LINE {
        return Line::Error(414);
    }
    let end = match &line[content_end..] {
        [] | [b'\r'] => return Line::Partial,
        [b'\n', ..] => content_end + 1,
        [b'\r', b'\n', ..] => content_end + 2,
        _ => return Line::Error(400),
    };
    let version = &line[version_start..content_end];
    if version[5] != b'1' {
        return Line::Error(505);
    }
    Line::Complete(RequestLine {
        method: &line[..method_end],
        target,
        minor: version[7] - b'0',
        len: start + end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for (version, want) in [
            ("HTTP/1.1", Some(1)),
            ("HTTP/1.0", Some(0)),
            ("HTTP/1.2", Some(2)),
            ("HTTP/1.9", Some(9)),
            ("HTTP/2.0", None),
            ("HTTP/0.9", None),
            ("HTTP/9.1", None),
        ] {
            let raw = format!("GET / {version}\r\n");
            match (parse(raw.as_bytes()), want) {
                (Line::Complete(line), Some(minor)) => {
                    assert_eq!(line.minor, minor);
                    assert_eq!(line.len, raw.len());
                }
                (Line::Error(505), None) => {}
                (other, _) => panic!("{version}: {other:?}"),
            }
        }
        for version in [
            "http/1.1",
            "HTTP/1.10",
            "HTTP/1",
            "HTTP/1.",
            "HTTP/11",
            "HTTP/1.x",
            "HTTP/a.1",
            "HTTPS/1.1",
            "HTTP/1.1 ",
            "HTTP/1.1x",
            "",
        ] {
            let raw = format!("GET / {version}\r\n");
            assert_eq!(parse(raw.as_bytes()), Line::Error(400), "{version:?}");
        }
    }

    #[test]
    fn grammar() {
        let line = |raw: &'static str| match parse(raw.as_bytes()) {
            Line::Complete(line) => (line.method, line.target, line.len),
            other => panic!("{raw:?}: {other:?}"),
        };
        assert_eq!(
            line("GET /a?b HTTP/1.1\r\nHost: x\r\n"),
            (&b"GET"[..], &b"/a?b"[..], 19)
        );
        assert_eq!(line("\r\n\nM-1 * HTTP/1.1\n"), (&b"M-1"[..], &b"*"[..], 18));
        assert_eq!(
            line("GET /caf\u{e9} HTTP/1.1\r\n"),
            (&b"GET"[..], "/caf\u{e9}".as_bytes(), 21)
        );
        for raw in [
            "GET  / HTTP/1.1\r\n",
            "GET /  HTTP/1.1\r\n",
            " GET / HTTP/1.1\r\n",
            "GET\t/ HTTP/1.1\r\n",
            "G(T / HTTP/1.1\r\n",
            "GET / HTTP/1.1\rX",
            "GET /\r\n",
            "GET\r\n",
            "\rGET / HTTP/1.1\r\n",
            "GET /a\u{7f} HTTP/1.1\r\n",
        ] {
            assert_eq!(parse(raw.as_bytes()), Line::Error(400), "{raw:?}");
        }
        assert_eq!(parse(b"GET /\xff HTTP/1.1\r\n"), Line::Error(400));
        assert_eq!(parse(b"\x00GET"), Line::Error(400));
    }

    /// A valid line is `Partial` cut anywhere before its end, and an
    /// invalid one is refused as soon as the bad byte arrives.
    #[test]
    fn incomplete_lines() {
        let raw = b"\r\nGET /x HTTP/1.1\r\n";
        for cut in 0..raw.len() {
            assert_eq!(parse(&raw[..cut]), Line::Partial, "cut at {cut}");
        }
        for (prefix, want) in [
            ("GET /x HTTP/2", Line::Partial),
            ("GET /x HTTX", Line::Error(400)),
            ("INVALID CONNECTION PREFACE", Line::NotHttp),
            ("GET / SSH-2.0", Line::NotHttp),
            ("GET /x\t", Line::Error(400)),
            ("GE\x01", Line::Error(400)),
        ] {
            assert_eq!(parse(prefix.as_bytes()), want, "{prefix:?}");
        }
    }

    #[test]
    fn long_lines_get_414_however_they_arrive() {
        let target_fitting = MAX_REQUEST_LINE - "GET  HTTP/1.1".len();
        for (target_len, want_414) in [(target_fitting, false), (target_fitting + 1, true)] {
            let target = format!("/{}", "a".repeat(target_len - 1));
            for end in ["\r\n", "\n"] {
                let raw = format!("GET {target} HTTP/1.1{end}Host: x\r\n\r\n");
                let whole = parse(raw.as_bytes());
                assert_eq!(whole == Line::Error(414), want_414, "{whole:?}");
                assert_eq!(matches!(whole, Line::Complete(_)), !want_414);
                // Arriving in pieces: never a different verdict.
                for cut in (0..raw.len()).step_by(509) {
                    let part = parse(&raw.as_bytes()[..cut]);
                    assert!(
                        part == Line::Partial || part == whole,
                        "cut at {cut}: {part:?}"
                    );
                }
            }
        }
        // An unfinished line is refused once it cannot fit any more.
        let unfinished = format!("GET /{}", "a".repeat(MAX_REQUEST_LINE));
        assert_eq!(parse(unfinished.as_bytes()), Line::Error(414));
        assert_eq!(
            parse(&unfinished.as_bytes()[..MAX_REQUEST_LINE]),
            Line::Partial
        );
        // A fitting line whose CR has arrived but not its LF is waited for.
        let mut exact = format!("GET /{} HTTP/1.1\r", "a".repeat(target_fitting - 1));
        assert_eq!(parse(exact.as_bytes()), Line::Partial);
        exact.push('\n');
        assert!(matches!(parse(exact.as_bytes()), Line::Complete(_)));
    }
}
