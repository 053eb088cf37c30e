//! A request's header section as HTTP/2 carries it (RFC 9113 §8.2,
//! §8.3): checked field by field as HPACK hands the fields out, and the
//! fields the handler (and the access log) reads copied into one buffer,
//! since HPACK lends each field only while it is being decoded.

use crate::serve::handler::{FieldLines, MAX_FIELD_LINES, Method, Request};

/// Where a field value sits in [`RequestFields::bytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

/// The lines of one list field.
#[derive(Clone, Copy, Debug, Default)]
struct Lines {
    spans: [Span; MAX_FIELD_LINES],
    count: u8,
}

/// Why a header section cannot be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldError {
    /// Malformed (§8.1.1): the stream is reset with PROTOCOL_ERROR.
    Malformed(&'static str),
    /// More lines of one list field than kiln reads: 431, as in HTTP/1.
    TooManyLines,
}

/// Pseudo-header fields seen, as bits.
const METHOD: u8 = 1;
const SCHEME: u8 = 2;
const AUTHORITY: u8 = 4;
const PATH: u8 = 8;

/// The fields of one request kept for the handler. Reused from one
/// request to the next (per thread), and copied into a stream only when
/// the request has content still to arrive.
#[derive(Clone, Debug, Default)]
pub struct RequestFields {
    /// The values kept, back to back.
    bytes: Vec<u8>,
    /// Which pseudo-header fields arrived (each at most once).
    pseudo: u8,
    /// A regular field arrived: pseudo-header fields may no longer come.
    regular: bool,
    method: Span,
    path: Span,
    authority: Span,
    /// `host`, used when `:authority` is absent.
    host: Option<Span>,
    accept_encoding: Lines,
    if_match: Lines,
    if_none_match: Lines,
    if_modified_since: Option<Span>,
    if_unmodified_since: Option<Span>,
    range: Option<Span>,
    if_range: Option<Span>,
    available_dictionary: Option<Span>,
    /// `available-dictionary` arrived more than once.
    available_dictionaries: bool,
    sec_fetch_site: Option<Span>,
    sec_fetch_mode: Option<Span>,
    priority: Lines,
    referer: Option<Span>,
    user_agent: Option<Span>,
    /// The `content-length` the client announced, checked against the
    /// DATA it sends (§8.1.1).
    content_length: Option<u64>,
}

impl RequestFields {
    /// Forgets the last request, keeping the buffer.
    pub fn clear(&mut self) {
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.clear();
        *self = RequestFields {
            bytes,
            ..RequestFields::default()
        };
    }

    fn keep(&mut self, value: &[u8]) -> Span {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(value);
        Span {
            start,
            end: self.bytes.len() as u32,
        }
    }

    fn keep_line(
        &mut self,
        which: fn(&mut Self) -> &mut Lines,
        value: &[u8],
    ) -> Result<(), FieldError> {
        let span = self.keep(value);
        let lines = which(self);
        let slot = lines
            .spans
            .get_mut(usize::from(lines.count))
            .ok_or(FieldError::TooManyLines)?;
        *slot = span;
        lines.count += 1;
        Ok(())
    }

    /// Takes one field, in the order of the block.
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> Result<(), FieldError> {
        check_value(value)?;
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular {
                return Err(FieldError::Malformed(
                    "pseudo-header field after a regular one",
                ));
            }
            let bit = match pseudo {
                b"method" => METHOD,
                b"scheme" => SCHEME,
                b"authority" => AUTHORITY,
                b"path" => PATH,
                _ => {
                    return Err(FieldError::Malformed(
                        "unknown or response pseudo-header field",
                    ));
                }
            };
            if self.pseudo & bit != 0 {
                return Err(FieldError::Malformed("repeated pseudo-header field"));
            }
            self.pseudo |= bit;
            let span = self.keep(value);
            match bit {
                METHOD => self.method = span,
                AUTHORITY => self.authority = span,
                PATH => self.path = span,
                _ => {}
            }
            return Ok(());
        }
        self.regular = true;
        // The names matched below are valid; only another is checked.
        match name {
            b"connection" | b"proxy-connection" | b"keep-alive" | b"transfer-encoding"
            | b"upgrade" => {
                return Err(FieldError::Malformed("connection-specific header field"));
            }
            b"te" if value != b"trailers" => {
                return Err(FieldError::Malformed("te other than trailers"));
            }
            b"content-length" => {
                let length = parse_length(value)
                    .ok_or(FieldError::Malformed("content-length is not a number"))?;
                if self.content_length.is_some_and(|l| l != length) {
                    return Err(FieldError::Malformed("content-length values differ"));
                }
                self.content_length = Some(length);
            }
            b"host" => self.host = Some(self.keep(value)),
            b"accept-encoding" => self.keep_line(|f| &mut f.accept_encoding, value)?,
            b"if-match" => self.keep_line(|f| &mut f.if_match, value)?,
            b"if-none-match" => self.keep_line(|f| &mut f.if_none_match, value)?,
            b"priority" => self.keep_line(|f| &mut f.priority, value)?,
            b"if-modified-since" => self.if_modified_since = Some(self.keep(value)),
            b"if-unmodified-since" => self.if_unmodified_since = Some(self.keep(value)),
            b"range" => self.range = Some(self.keep(value)),
            b"if-range" => self.if_range = Some(self.keep(value)),
            b"available-dictionary" => {
                self.available_dictionaries |= self.available_dictionary.is_some();
                self.available_dictionary = Some(self.keep(value));
            }
            b"sec-fetch-site" => self.sec_fetch_site = Some(self.keep(value)),
            b"sec-fetch-mode" => self.sec_fetch_mode = Some(self.keep(value)),
            b"referer" => self.referer = Some(self.keep(value)),
            b"user-agent" => self.user_agent = Some(self.keep(value)),
            _ => check_name(name)?,
        }
        Ok(())
    }

    /// Once the block is read: the pseudo-header fields every request must
    /// carry (§8.3.1; CONNECT, which has none of `:scheme` and `:path`, is
    /// answered 405 like any method kiln does not allow).
    pub fn finish(&self) -> Result<(), FieldError> {
        if self.pseudo & METHOD == 0 {
            return Err(FieldError::Malformed("no :method"));
        }
        if self.method_token() == b"CONNECT" {
            return Ok(());
        }
        if self.pseudo & (SCHEME | PATH) != SCHEME | PATH {
            return Err(FieldError::Malformed("no :scheme or no :path"));
        }
        if self.path.start == self.path.end {
            return Err(FieldError::Malformed("empty :path"));
        }
        Ok(())
    }

    fn get(&self, span: Span) -> &[u8] {
        &self.bytes[span.start as usize..span.end as usize]
    }

    fn lines(&self, lines: &Lines) -> FieldLines<'_> {
        let mut out = FieldLines::default();
        for span in &lines.spans[..usize::from(lines.count)] {
            // At most MAX_FIELD_LINES were kept.
            let _ = out.push(self.get(*span));
        }
        out
    }

    /// Whether any pseudo-header field arrived (trailers may carry none).
    pub fn has_pseudo(&self) -> bool {
        self.pseudo != 0
    }

    /// The method as sent, for the access log.
    pub fn method_token(&self) -> &[u8] {
        self.get(self.method)
    }

    /// The request target (`:path`; empty for CONNECT).
    pub fn target(&self) -> &[u8] {
        self.get(self.path)
    }

    pub fn referer(&self) -> Option<&[u8]> {
        self.referer.map(|s| self.get(s))
    }

    pub fn user_agent(&self) -> Option<&[u8]> {
        self.user_agent.map(|s| self.get(s))
    }

    /// The `priority` field's lines (RFC 9218).
    pub fn priority_lines(&self) -> impl Iterator<Item = &[u8]> {
        self.priority.spans[..usize::from(self.priority.count)]
            .iter()
            .map(|s| self.get(*s))
    }

    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The host asked for: `:authority`, else `host`.
    pub fn host(&self) -> Option<&[u8]> {
        if self.pseudo & AUTHORITY != 0 {
            Some(self.get(self.authority))
        } else {
            self.host.map(|s| self.get(s))
        }
    }

    /// The request as the handler takes it.
    pub fn request(&self) -> Request<'_> {
        let mut req = Request::new(Method::from_token(self.method_token()), self.target());
        req.host = self.host();
        req.accept_encoding = self.lines(&self.accept_encoding);
        req.if_match = self.lines(&self.if_match);
        req.if_none_match = self.lines(&self.if_none_match);
        req.if_modified_since = self.if_modified_since.map(|s| self.get(s));
        req.if_unmodified_since = self.if_unmodified_since.map(|s| self.get(s));
        req.range = self.range.map(|s| self.get(s));
        req.if_range = self.if_range.map(|s| self.get(s));
        if let Some(s) = self.available_dictionary {
            req.set_available_dictionary(self.get(s));
            if self.available_dictionaries {
                req.set_available_dictionary(b"");
            }
        }
        req.sec_fetch_site = self.sec_fetch_site.map(|s| self.get(s));
        req.sec_fetch_mode = self.sec_fetch_mode.map(|s| self.get(s));
        req
    }
}

/// §8.2.1: no empty name, no control characters, space, upper case,
/// colon or non-ASCII in a name.
fn check_name(name: &[u8]) -> Result<(), FieldError> {
    let bad = |c: &u8| matches!(c, 0x00..=0x20 | b'A'..=b'Z' | b':' | 0x7f..=0xff);
    if name.is_empty() || name.iter().any(bad) {
        return Err(FieldError::Malformed("invalid field name"));
    }
    Ok(())
}

/// §8.2.1: no NUL, CR or LF in a value, and no whitespace around it.
fn check_value(value: &[u8]) -> Result<(), FieldError> {
    if value.iter().any(|&c| matches!(c, 0 | b'\r' | b'\n'))
        || value.first().is_some_and(|&c| c == b' ' || c == b'\t')
        || value.last().is_some_and(|&c| c == b' ' || c == b'\t')
    {
        return Err(FieldError::Malformed("invalid field value"));
    }
    Ok(())
}

fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        value
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(list: &[(&str, &str)]) -> Result<RequestFields, FieldError> {
        let mut f = RequestFields::default();
        for (name, value) in list {
            f.field(name.as_bytes(), value.as_bytes())?;
        }
        f.finish()?;
        Ok(f)
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "example.com"),
        (":path", "/a?b"),
    ];

    #[test]
    fn a_request_and_its_fields() {
        let mut list = GET.to_vec();
        list.extend([
            ("accept-encoding", "gzip"),
            ("accept-encoding", "br"),
            ("range", "bytes=0-1"),
            ("user-agent", "test"),
            ("te", "trailers"),
            ("content-length", "0"),
        ]);
        let f = fields(&list).unwrap();
        let req = f.request();
        assert_eq!(req.method, Method::Get);
        assert_eq!(req.target, b"/a?b");
        assert_eq!(req.host, Some(&b"example.com"[..]));
        let encodings: Vec<_> = req.accept_encoding.elements().collect();
        assert_eq!(encodings, [&b"gzip"[..], b"br"]);
        assert_eq!(req.range, Some(&b"bytes=0-1"[..]));
        assert_eq!(f.user_agent(), Some(&b"test"[..]));
        assert_eq!(f.content_length(), Some(0));
    }

    #[test]
    fn host_stands_in_for_a_missing_authority() {
        let f = fields(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            ("host", "h.example"),
        ])
        .unwrap();
        assert_eq!(f.request().host, Some(&b"h.example"[..]));
    }

    #[test]
    fn malformed_sections() {
        let cases: &[&[(&str, &str)]] = &[
            &[(":method", "GET"), (":path", "/")],
            &[(":scheme", "https"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "")],
            &[
                (":method", "GET"),
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                (":status", "200"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                ("accept", "*/*"),
                (":path", "/"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("Accept", "x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("connection", "x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("te", "gzip"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("x", " padded"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("x", "a\nb"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("content-length", "x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("content-length", "1"),
                ("content-length", "2"),
            ],
        ];
        for case in cases {
            assert!(
                matches!(fields(case), Err(FieldError::Malformed(_))),
                "{case:?}"
            );
        }
    }

    #[test]
    fn connect_needs_no_path() {
        let f = fields(&[(":method", "CONNECT"), (":authority", "a:443")]).unwrap();
        assert_eq!(f.request().method, Method::NotAllowed);
    }

    #[test]
    fn too_many_lines_of_a_list() {
        let mut list = GET.to_vec();
        list.extend([("if-none-match", "\"a\""); MAX_FIELD_LINES + 1]);
        assert_eq!(fields(&list).unwrap_err(), FieldError::TooManyLines);
    }

    #[test]
    fn clearing_keeps_nothing_but_the_buffer() {
        let mut f = fields(&GET).unwrap();
        f.clear();
        assert!(f.finish().is_err());
        assert!(f.bytes.is_empty() && f.bytes.capacity() > 0);
    }
}
