//! Request bodies, which a static server reads only to drop them: sans-IO,
//! fed whatever bytes arrive, holding no buffer. A `Content-Length` body is
//! a count; a chunked body (RFC 9112 §7.1) is decoded just enough to find
//! where it ends, with extensions and trailer fields read and ignored.
//! Extensions are held to their grammar (RFC 9112 §7.1.1: token names,
//! token or quoted-string values, with quoted-pairs): a front end that
//! reads `5;a="b` as an open string that swallows the line end would
//! find another end of the body than this one.
//!
//! Chunk framing must end its lines with CRLF: a bare LF (which RFC 9112
//! §2.2 lets a recipient accept) or a bare CR is malformed. Leniency here
//! is what lets a front end and a back end disagree on where a body ends
//! (request smuggling); refusing closes the connection, so nothing is
//! misread. Whitespace after the chunk size, or in an extension, is accepted
//! only where the grammar has BWS: before a `;` or around an `=`.
//!
//! The size cap counts the body as sent, framing and trailers included, so
//! extensions or trailer fields cannot stretch it.

use super::MAX_DISCARDED_BODY;
use super::request_line::is_token_byte;

/// Longest chunk-size line (size and extensions) or trailer line, CRLF
/// included. Real ones are a few bytes; past this the framing is refused as
/// malformed instead of being read up to the size cap.
pub const MAX_CHUNK_LINE: u16 = 1024;

/// A request body still to be read and dropped. `Default` is a body that
/// has ended (or never began).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Discard {
    framing: Framing,
    /// Bytes of the body read so far, for the size cap.
    seen: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Framing {
    #[default]
    Ended,
    /// `Content-Length` bytes still to come.
    Length(u64),
    Chunked {
        at: Chunked,
        /// Bytes of the current size or trailer line, for `MAX_CHUNK_LINE`.
        line: u16,
    },
}

/// Where a chunked decoder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunked {
    /// In the hex digits of a chunk size (a size line needs at least one).
    Size {
        size: u64,
        has_digit: bool,
    },
    /// In the chunk extensions after the size.
    Extension {
        size: u64,
        at: Extension,
    },
    /// The size line's CR was read.
    SizeLf {
        size: u64,
    },
    /// Chunk data still to come.
    Data {
        left: u64,
    },
    /// The CRLF that closes a chunk's data.
    DataCr,
    DataLf,
    /// At the start of a trailer line, or of the blank line that ends the
    /// body.
    LineStart,
    /// In a trailer field's name.
    TrailerName,
    /// After the `:` of a trailer field.
    TrailerValue,
    /// A trailer line's CR was read.
    TrailerLf,
    /// The final blank line's CR was read.
    EndLf,
}

/// Where the reader of a chunk's extensions is (RFC 9112 §7.1.1):
/// `*( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extension {
    /// Whitespace after the size or a value: only a `;` may follow.
    Bws,
    /// After `;`, before the name.
    NameStart,
    /// In the name (a token).
    Name,
    /// Whitespace after the name: a `;` or an `=` may follow.
    NameBws,
    /// After `=`, before the value.
    ValueStart,
    /// In a token value.
    Token,
    /// In a quoted-string value.
    Quoted,
    /// After a `\` in a quoted string: one more byte of text.
    QuotedPair,
    /// After the closing `"`.
    Closed,
}

impl Extension {
    /// Whether the size line may end here (with its CR).
    fn may_end(self) -> bool {
        matches!(self, Extension::Name | Extension::Token | Extension::Closed)
    }

    /// The state after `b` (not the line's CR), or `None` when `b` breaks
    /// the grammar.
    fn next(self, b: u8) -> Option<Extension> {
        use Extension::*;
        let blank = b == b' ' || b == b'\t';
        Some(match self {
            Bws | Token | Closed if b == b';' => NameStart,
            Bws | Token | Closed if blank => Bws,
            NameStart if blank => NameStart,
            NameStart | Name if is_token_byte(b) => Name,
            Name | NameBws if b == b';' => NameStart,
            Name | NameBws if b == b'=' => ValueStart,
            Name | NameBws if blank => NameBws,
            ValueStart if blank => ValueStart,
            ValueStart if b == b'"' => Quoted,
            ValueStart | Token if is_token_byte(b) => Token,
            Quoted if b == b'"' => Closed,
            Quoted if b == b'\\' => QuotedPair,
            // qdtext: text but the quote and the backslash, met above.
            Quoted | QuotedPair if is_text_byte(b) => Quoted,
            _ => return None,
        })
    }
}

/// What feeding bytes to a `Discard` came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every byte fed was body, and the body goes on.
    NeedMore,
    /// The body ended after this many of the bytes fed; the rest is the
    /// next request.
    Ended(usize),
    /// The chunk framing is broken: answer 400 and close.
    Malformed,
    /// The body is longer than `MAX_DISCARDED_BODY`: close (with 413 when
    /// the request is not answered yet).
    TooLarge,
}

fn hex_value(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some(u64::from(b - b'0')),
        b'a'..=b'f' => Some(u64::from(b - b'a' + 10)),
        b'A'..=b'F' => Some(u64::from(b - b'A' + 10)),
        _ => None,
    }
}

/// Bytes of an extension or field value: HTAB, SP, VCHAR and obs-text;
/// never CR, LF or another control byte.
fn is_text_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

impl Discard {
    /// A body of `len` bytes.
    pub fn length(len: u64) -> Discard {
        Discard {
            framing: if len == 0 {
                Framing::Ended
            } else {
                Framing::Length(len)
            },
            seen: 0,
        }
    }

    /// A chunked body, from its first chunk-size line.
    pub fn chunked() -> Discard {
        Discard {
            framing: Framing::Chunked {
                at: Chunked::Size {
                    size: 0,
                    has_digit: false,
                },
                line: 0,
            },
            seen: 0,
        }
    }

    /// Whether the body has ended (nothing more is body).
    pub fn is_done(&self) -> bool {
        self.framing == Framing::Ended
    }

    /// Reads the body at the start of `bytes`. After `Malformed` or
    /// `TooLarge` the state is meaningless and the connection closes.
    pub fn feed(&mut self, bytes: &[u8]) -> Progress {
        let progress = match &mut self.framing {
            Framing::Ended => return Progress::Ended(0),
            Framing::Length(left) => {
                if self.seen + *left > MAX_DISCARDED_BODY {
                    return Progress::TooLarge;
                }
                let take = (*left).min(bytes.len() as u64);
                *left -= take;
                if *left == 0 {
                    Progress::Ended(take as usize)
                } else {
                    Progress::NeedMore
                }
            }
            Framing::Chunked { at, line } => decode(at, line, bytes, self.seen),
        };
        match progress {
            Progress::NeedMore => self.seen += bytes.len() as u64,
            Progress::Ended(used) => {
                self.seen += used as u64;
                self.framing = Framing::Ended;
            }
            Progress::Malformed | Progress::TooLarge => {}
        }
        progress
    }
}

/// Runs the chunked decoder over `bytes` until the body ends or the bytes
/// run out. `seen`: body bytes before `bytes`, for the size cap, which is
/// checked at every line end (and against a chunk's announced size before
/// its data arrives).
fn decode(at: &mut Chunked, line: &mut u16, bytes: &[u8], seen: u64) -> Progress {
    let mut i = 0;
    while i < bytes.len() {
        if let Chunked::Data { left } = at {
            let take = (*left).min((bytes.len() - i) as u64);
            *left -= take;
            i += take as usize;
            if *left == 0 {
                *at = Chunked::DataCr;
            }
            continue;
        }
        let b = bytes[i];
        i += 1;
        *line += 1;
        if *line > MAX_CHUNK_LINE {
            return Progress::Malformed;
        }
        if let Chunked::Size { size, .. } = *at
            && let Some(digit) = hex_value(b)
        {
            // Leading zeros are fine; a size that does not fit is not.
            if size > u64::MAX >> 4 {
                return Progress::Malformed;
            }
            *at = Chunked::Size {
                size: size << 4 | digit,
                has_digit: true,
            };
            continue;
        }
        let line_end = b == b'\n';
        *at = match (*at, b) {
            (
                Chunked::Size {
                    has_digit: false, ..
                },
                _,
            ) => return Progress::Malformed,
            (Chunked::Size { size, .. }, b'\r') => Chunked::SizeLf { size },
            // After the size, as after a value: `;` or whitespace.
            (Chunked::Size { size, .. }, _) => match Extension::Bws.next(b) {
                Some(at) => Chunked::Extension { size, at },
                None => return Progress::Malformed,
            },
            (Chunked::Extension { size, at }, b'\r') if at.may_end() => Chunked::SizeLf { size },
            (Chunked::Extension { size, at }, _) => match at.next(b) {
                Some(at) => Chunked::Extension { size, at },
                None => return Progress::Malformed,
            },
            (Chunked::SizeLf { size }, b'\n') => {
                if size > MAX_DISCARDED_BODY || seen + i as u64 + size > MAX_DISCARDED_BODY {
                    return Progress::TooLarge;
                }
                if size == 0 {
                    Chunked::LineStart
                } else {
                    Chunked::Data { left: size }
                }
            }
            (Chunked::DataCr, b'\r') => Chunked::DataLf,
            (Chunked::DataLf, b'\n') => Chunked::Size {
                size: 0,
                has_digit: false,
            },
            (Chunked::LineStart, b'\r') => Chunked::EndLf,
            (Chunked::LineStart | Chunked::TrailerName, _) if is_token_byte(b) => {
                Chunked::TrailerName
            }
            (Chunked::TrailerName, b':') => Chunked::TrailerValue,
            (Chunked::TrailerValue, b'\r') => Chunked::TrailerLf,
            (Chunked::TrailerValue, _) if is_text_byte(b) => Chunked::TrailerValue,
            (Chunked::TrailerLf, b'\n') => Chunked::LineStart,
            (Chunked::EndLf, b'\n') if seen + i as u64 > MAX_DISCARDED_BODY => {
                return Progress::TooLarge;
            }
            (Chunked::EndLf, b'\n') => return Progress::Ended(i),
            _ => return Progress::Malformed,
        };
        if line_end {
            *line = 0;
            if seen + i as u64 > MAX_DISCARDED_BODY {
                return Progress::TooLarge;
            }
        }
    }
    Progress::NeedMore
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces cut at `cuts`; returns the outcome and the
    /// bytes of `input` the body used.
    fn feed_split(mut body: Discard, input: &[u8], cuts: &[usize]) -> (Progress, usize) {
        let mut used = 0;
        let mut from = 0;
        for &to in cuts.iter().chain([&input.len()]) {
            match body.feed(&input[from..to]) {
                Progress::NeedMore => used = to,
                Progress::Ended(n) => return (Progress::Ended(from + n), from + n),
                other => return (other, used),
            }
            from = to;
        }
        (Progress::NeedMore, used)
    }

    /// The outcome of `input` whole, checked to be the same when it
    /// arrives split at any one byte position, and byte by byte.
    fn outcome(body: Discard, input: &[u8]) -> Progress {
        let (whole, _) = feed_split(body, input, &[]);
        for cut in 0..=input.len() {
            assert_eq!(
                feed_split(body, input, &[cut]).0,
                whole,
                "{:?} cut at {cut}",
                String::from_utf8_lossy(input)
            );
        }
        let every: Vec<usize> = (0..input.len()).collect();
        assert_eq!(feed_split(body, input, &every).0, whole);
        whole
    }

    const NEXT: &[u8] = b"GET / HTTP/1.1\r\n";

    #[test]
    fn valid_chunked_bodies_end_where_they_should() {
        for body in [
            &b"0\r\n\r\n"[..],
            b"5\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            b"A\r\n0123456789\r\n0\r\n\r\n",
            b"a\r\n0123456789\r\n000\r\n\r\n",
            b"0000000000000000000000005\r\nhello\r\n0\r\n\r\n",
            b"5;name=value\r\nhello\r\n0;last\r\n\r\n",
            b"5 ;a=\"q \\\" d\"; b\r\nhello\r\n0\t; x\r\n\r\n",
            b"5;a=\"\"\r\nhello\r\n0;b = \"\\\\\" ;c= d\r\n\r\n",
            b"5;a=\"\xff\t\\\xfe\"\r\nhello\r\n0;!#$%&'*+-.^_`|~\r\n\r\n",
            b"5\r\nhello\r\n0\r\nChecksum: abc\r\nX-Empty:\r\n\r\n",
            b"5\r\n\r\n0\r\n\r\n0\r\nT: \xff obs-text\r\n\r\n",
        ] {
            let mut input = body.to_vec();
            input.extend_from_slice(NEXT);
            assert_eq!(
                outcome(Discard::chunked(), &input),
                Progress::Ended(body.len()),
                "{:?}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(
                outcome(Discard::chunked(), &body[..body.len() - 1]),
                Progress::NeedMore
            );
        }
    }

    #[test]
    fn malformed_chunk_framing_is_refused() {
        for body in [
            &b"\r\n"[..],
            b"x\r\n",
            b"-5\r\n",
            b"+5\r\n",
            b"0x5\r\n",
            b";ext\r\n",
            b"5 \r\n",
            b"5 x\r\n",
            b"5\n",
            b"5\rx",
            b"5;a\n",
            b"5;a\x00\r\n",
            b"5;a\rb\r\n",
            // Unterminated, or ending in a quoted-pair: the string would
            // go on past the line end.
            b"5;a=\"b\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"b\\\"\r\nhello\r\n0\r\n\r\n",
            b"5;a=\"b\\\r\nhello\r\n",
            // Names are tokens, values tokens or quoted strings, and
            // whitespace is only BWS.
            b"5;\r\n",
            b"5;=b\r\n",
            b"5;a=\r\n",
            b"5;a b\r\n",
            b"5;a=b c\r\n",
            b"5;a=\"b\"c\r\n",
            b"5;a=b\"c\"\r\n",
            b"5;a=\"b\" \r\n",
            b"5;a \r\n",
            b"5;a=(b)\r\n",
            b"5;a=\"\x7f\"\r\n",
            b"5;a=\"b\\\x01\"\r\n",
            b"5\r\nhelloX\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhello\r0\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\n",
            b"0\r\n\r\r",
            b"0\r\nno colon\r\n\r\n",
            b"0\r\n: empty name\r\n\r\n",
            b"0\r\n folded: x\r\n\r\n",
            b"0\r\nT: a\nb\r\n\r\n",
            b"0\r\nT: \x7f\r\n\r\n",
            b"0\r\nT\x01: x\r\n\r\n",
        ] {
            assert_eq!(
                outcome(Discard::chunked(), body),
                Progress::Malformed,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn hex_overflow_is_malformed_not_a_wrapped_size() {
        // 17 significant hex digits overflow a u64; 16 do not (and are
        // over the cap instead).
        assert_eq!(
            outcome(Discard::chunked(), b"10000000000000000\r\n"),
            Progress::Malformed
        );
        assert_eq!(
            outcome(Discard::chunked(), b"ffffffffffffffff\r\n"),
            Progress::TooLarge
        );
        assert_eq!(
            outcome(Discard::chunked(), b"10000000000000001\r\n"),
            Progress::Malformed
        );
    }

    #[test]
    fn lines_are_bounded() {
        let longest = usize::from(MAX_CHUNK_LINE) - 2;
        for (len, fits) in [(longest, true), (longest + 1, false)] {
            // A size line with an extension, then a trailer line, of `len`
            // bytes before the CRLF.
            let mut size_line = b"0;".to_vec();
            size_line.resize(len, b'x');
            size_line.extend_from_slice(b"\r\n\r\n");
            let mut trailer = b"0\r\nT:".to_vec();
            trailer.resize(3 + len, b'x');
            trailer.extend_from_slice(b"\r\n\r\n");
            for body in [size_line, trailer] {
                let want = if fits {
                    Progress::Ended(body.len())
                } else {
                    Progress::Malformed
                };
                assert_eq!(feed_split(Discard::chunked(), &body, &[]).0, want);
            }
        }
    }

    #[test]
    fn the_size_cap_counts_the_body_as_sent() {
        let max = MAX_DISCARDED_BODY;
        // One chunk whose size alone breaks the cap: refused at its size
        // line, before any data arrives.
        let huge = format!("{:x}\r\n", max + 1);
        assert_eq!(
            outcome(Discard::chunked(), huge.as_bytes()),
            Progress::TooLarge
        );
        // Framing counts: exactly the cap passes, one byte more does not.
        let data = max as usize - "ffff\r\n\r\n0\r\n\r\n".len();
        for (extra, want) in [(0, Progress::Ended(max as usize)), (1, Progress::TooLarge)] {
            let mut body = format!("{:04x}\r\n", data + extra).into_bytes();
            body.resize(body.len() + data + extra, b'd');
            body.extend_from_slice(b"\r\n0\r\n\r\n");
            assert_eq!(feed_split(Discard::chunked(), &body, &[]).0, want);
            assert_eq!(feed_split(Discard::chunked(), &body, &[3, 9, 500]).0, want);
        }
        // Many small chunks (or long trailers) add up too.
        let mut many = Vec::new();
        while many.len() as u64 <= max {
            many.extend_from_slice(b"1;pad=xxxxxxxxxxxxxxxx\r\nd\r\n");
        }
        assert_eq!(
            feed_split(Discard::chunked(), &many, &[]).0,
            Progress::TooLarge
        );
        assert_eq!(
            feed_split(Discard::chunked(), &many, &[1000, 40_000]).0,
            Progress::TooLarge
        );
    }

    #[test]
    fn content_length_bodies() {
        assert!(Discard::length(0).is_done());
        assert!(Discard::default().is_done());
        assert_eq!(Discard::default().feed(NEXT), Progress::Ended(0));
        let mut input = b"hello".to_vec();
        input.extend_from_slice(NEXT);
        assert_eq!(outcome(Discard::length(5), &input), Progress::Ended(5));
        assert_eq!(outcome(Discard::length(5), b"hell"), Progress::NeedMore);
        let max = MAX_DISCARDED_BODY;
        assert_eq!(Discard::length(max + 1).feed(b""), Progress::TooLarge);
        let mut body = Discard::length(max);
        assert_eq!(body.feed(&vec![0; max as usize - 1]), Progress::NeedMore);
        assert_eq!(body.feed(NEXT), Progress::Ended(1));
        assert!(body.is_done());
    }
}
