//! Conditional requests (`If-None-Match`, `If-Modified-Since`, RFC 9110
//! §13) and byte ranges (`Range`, `If-Range`, RFC 9110 §14).

use crate::httpdate::parse_http_date;

fn strip_weak(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// `If-None-Match` against the selected variant's ETag, weak comparison.
pub fn none_match(header: &[u8], etag: &[u8]) -> bool {
    let header = header.trim_ascii();
    if header == b"*" {
        return true;
    }
    if etag.is_empty() {
        return false;
    }
    let ours = strip_weak(etag);
    header
        .split(|&c| c == b',')
        .any(|t| strip_weak(t.trim_ascii()) == ours)
}

/// `If-Modified-Since`: true when the resource has not changed since.
/// An invalid date is ignored (the condition is false).
pub fn not_modified_since(header: &[u8], last_modified: i64) -> bool {
    parse_http_date(header).is_some_and(|since| last_modified <= since)
}

/// `If-Range`: the range applies only if the validator still matches; an
/// ETag compares strongly (so a weak one never matches), a date exactly.
pub fn if_range_holds(header: &[u8], etag: &[u8], last_modified: i64) -> bool {
    let h = header.trim_ascii();
    if h.first() == Some(&b'"') {
        return !etag.is_empty() && etag.first() == Some(&b'"') && h == etag;
    }
    if h.starts_with(b"W/") {
        return false;
    }
    parse_http_date(h) == Some(last_modified)
}

/// What a `Range` header asks of a body of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeAsk {
    /// Ignore it and send the whole body: bad syntax, another unit, or
    /// several ranges (a static server gains little from multipart bodies,
    /// and the RFC allows sending the full representation).
    Full,
    /// One satisfiable range, inclusive bounds.
    Part { start: u64, end: u64 },
    /// Syntactically fine but outside the body: 416.
    Unsatisfiable,
}

fn number(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')))
}

pub fn parse_range(header: &[u8], len: u64) -> RangeAsk {
    let h = header.trim_ascii();
    if h.len() < 6 || !h[..6].eq_ignore_ascii_case(b"bytes=") {
        return RangeAsk::Full;
    }
    let spec = h[6..].trim_ascii();
    if spec.contains(&b',') {
        return RangeAsk::Full;
    }
    let Some(dash) = spec.iter().position(|&c| c == b'-') else {
        return RangeAsk::Full;
    };
    let (first, last) = (spec[..dash].trim_ascii(), spec[dash + 1..].trim_ascii());
    if first.is_empty() {
        let Some(suffix) = number(last) else {
            return RangeAsk::Full;
        };
        if suffix == 0 || len == 0 {
            return RangeAsk::Unsatisfiable;
        }
        return RangeAsk::Part {
            start: len.saturating_sub(suffix),
            end: len - 1,
        };
    }
    let Some(start) = number(first) else {
        return RangeAsk::Full;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match number(last) {
            Some(e) if e >= start => e,
            _ => return RangeAsk::Full,
        }
    };
    if start >= len {
        return RangeAsk::Unsatisfiable;
    }
    RangeAsk::Part {
        start,
        end: end.min(len - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeAsk::*;
        assert_eq!(parse_range(b"bytes=0-4", 10), Part { start: 0, end: 4 });
        assert_eq!(parse_range(b"bytes=5-", 10), Part { start: 5, end: 9 });
        assert_eq!(parse_range(b"bytes=-3", 10), Part { start: 7, end: 9 });
        assert_eq!(parse_range(b"bytes=-30", 10), Part { start: 0, end: 9 });
        assert_eq!(parse_range(b"bytes=2-100", 10), Part { start: 2, end: 9 });
        assert_eq!(parse_range(b"bytes=10-", 10), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 10), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-1,3-4", 10), Full);
        assert_eq!(parse_range(b"bytes=4-2", 10), Full);
        assert_eq!(parse_range(b"items=0-1", 10), Full);
        assert_eq!(parse_range(b"bytes=x-1", 10), Full);
    }

    #[test]
    fn validators() {
        assert!(none_match(b"\"a\", W/\"b\"", b"\"b\""));
        assert!(none_match(b"*", b""));
        assert!(!none_match(b"\"a\"", b"\"b\""));
        assert!(if_range_holds(b"\"b\"", b"\"b\"", 0));
        assert!(!if_range_holds(b"W/\"b\"", b"\"b\"", 0));
        assert!(if_range_holds(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            b"",
            784_111_777
        ));
        assert!(not_modified_since(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            784_111_777
        ));
        assert!(!not_modified_since(
            b"Sun, 06 Nov 1994 08:49:36 GMT",
            784_111_777
        ));
    }
}
