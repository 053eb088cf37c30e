//! Conditional requests (RFC 9110 §13: `If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since`) and byte ranges (`Range`,
//! `If-Range`, RFC 9110 §14).

use super::{FieldLines, Request};
use crate::httpdate::parse_http_date;

/// What a request's preconditions decide (RFC 9110 §13.2.2, steps 1 to 4;
/// `If-Range`, step 5, is left to the range code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Every condition holds: serve the resource (or the range).
    Holds,
    /// `If-None-Match` or `If-Modified-Since` found the client's copy
    /// current: 304.
    NotModified,
    /// `If-Match` or `If-Unmodified-Since` failed: 412.
    Failed,
}

/// Evaluates the preconditions of a GET or HEAD against the selected
/// variant's ETag and the resource's modification time, in the RFC's order:
/// `If-Match`, else `If-Unmodified-Since`; then `If-None-Match`, else
/// `If-Modified-Since`.
pub fn evaluate(req: &Request<'_>, etag: &[u8], last_modified: i64) -> Precondition {
    let unchanged = if !req.if_match.is_empty() {
        any_match(&req.if_match, etag)
    } else {
        req.if_unmodified_since
            .is_none_or(|since| unmodified_since(since, last_modified))
    };
    if !unchanged {
        return Precondition::Failed;
    }
    let client_current = if !req.if_none_match.is_empty() {
        none_match(&req.if_none_match, etag)
    } else {
        req.if_modified_since
            .is_some_and(|since| not_modified_since(since, last_modified))
    };
    if client_current {
        Precondition::NotModified
    } else {
        Precondition::Holds
    }
}

fn strip_weak(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// `If-Match`: `*`, or a listed tag equal to the ETag by strong comparison,
/// so a weak tag on either side never matches.
fn any_match(header: &FieldLines<'_>, etag: &[u8]) -> bool {
    let strong = etag.first() == Some(&b'"');
    header
        .elements()
        .any(|tag| tag == b"*" || (strong && tag == etag))
}

/// `If-None-Match`: `*`, or a listed tag equal to the ETag by weak
/// comparison.
fn none_match(header: &FieldLines<'_>, etag: &[u8]) -> bool {
    let ours = strip_weak(etag);
    header
        .elements()
        .any(|tag| tag == b"*" || (!etag.is_empty() && strip_weak(tag) == ours))
}

/// `If-Unmodified-Since`: true when the resource has not changed since.
/// An invalid date is ignored (the condition holds).
fn unmodified_since(header: &[u8], last_modified: i64) -> bool {
    parse_http_date(header).is_none_or(|since| last_modified <= since)
}

/// `If-Modified-Since`: true when the resource has not changed since.
/// An invalid date is ignored (the condition is false).
fn not_modified_since(header: &[u8], last_modified: i64) -> bool {
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

    fn lines(values: &[&'static str]) -> FieldLines<'static> {
        let mut field = FieldLines::default();
        for v in values {
            field.push(v.as_bytes()).unwrap();
        }
        field
    }

    #[test]
    fn validators() {
        assert!(none_match(&lines(&["\"a\", W/\"b\""]), b"\"b\""));
        assert!(none_match(&lines(&["\"a\"", "W/\"b\""]), b"W/\"b\""));
        assert!(none_match(&lines(&["*"]), b""));
        assert!(!none_match(&lines(&["\"a\""]), b"\"b\""));
        assert!(!none_match(&lines(&[""]), b""));
        assert!(any_match(&lines(&["\"a\", \"b\""]), b"\"b\""));
        assert!(any_match(&lines(&["\"a\"", "\"b\""]), b"\"b\""));
        assert!(any_match(&lines(&["*"]), b""));
        assert!(!any_match(&lines(&["W/\"b\""]), b"\"b\""));
        assert!(!any_match(&lines(&["W/\"b\""]), b"W/\"b\""));
        assert!(!any_match(&lines(&["\"b\""]), b"W/\"b\""));
        assert!(!any_match(&lines(&[""]), b"\"b\""));
        assert!(!any_match(&lines(&["\"a,b\""]), b"\"b\""));
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
        assert!(unmodified_since(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            784_111_777
        ));
        assert!(!unmodified_since(
            b"Sun, 06 Nov 1994 08:49:36 GMT",
            784_111_777
        ));
        assert!(unmodified_since(b"not a date", 784_111_777));
    }

    /// RFC 9110 §13.2.2: each row's headers and the outcome, for a resource
    /// with ETag `"e"` modified at `NOW`.
    #[test]
    fn evaluation_order() {
        use crate::serve::handler::Method;
        use Precondition::*;
        const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
        const NOW: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
        type Row = (
            &'static [&'static str],
            Option<&'static str>,
            &'static [&'static str],
            Option<&'static str>,
            Precondition,
        );
        // If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since.
        let rows: &[Row] = &[
            (&[], None, &[], None, Holds),
            (&["\"e\""], None, &[], None, Holds),
            (&["\"x\""], None, &[], None, Failed),
            (&[], Some(NOW), &[], None, Holds),
            (&[], Some(BEFORE), &[], None, Failed),
            (&[], Some("garbage"), &[], None, Holds),
            (&["\"e\""], Some(BEFORE), &[], None, Holds),
            (&["\"x\""], Some(NOW), &[], None, Failed),
            (&["\"x\""], None, &["\"e\""], None, Failed),
            (&[], Some(BEFORE), &[], Some(NOW), Failed),
            (&["\"e\""], None, &["\"e\""], None, NotModified),
            (&[], Some(NOW), &[], Some(NOW), NotModified),
            (&[], None, &["\"x\""], Some(NOW), Holds),
            (&[], None, &[], Some(BEFORE), Holds),
        ];
        for &(im, ius, inm, ims, want) in rows {
            let mut req = Request::new(Method::Get, b"/");
            req.if_match = lines(im);
            req.if_unmodified_since = ius.map(str::as_bytes);
            req.if_none_match = lines(inm);
            req.if_modified_since = ims.map(str::as_bytes);
            assert_eq!(
                evaluate(&req, b"\"e\"", 784_111_777),
                want,
                "{im:?} {ius:?} {inm:?} {ims:?}"
            );
        }
    }
}
