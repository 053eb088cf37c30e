//! `_redirects` pattern rules (Netlify semantics), compiled once per pack load
//! so that matching and expansion at request time allocate nothing.
//!
//! `:name` in `from` captures one path segment, a final `*` captures the rest
//! as `:splat`; `to` refers to them by the same names.

use crate::pack::Pack;

/// Captures beyond this many placeholders are matched but not kept.
const MAX_CAPTURES: usize = 16;

/// One element of a `from` pattern.
#[derive(Debug)]
enum Pattern {
    /// A segment that must match byte for byte.
    Literal(Vec<u8>),
    /// `:name`: any one non-empty segment, kept as capture number `usize`.
    Capture(usize),
    /// `*`: everything that is left, possibly nothing.
    Splat,
}

/// One element of a `to` template.
#[derive(Debug)]
enum Piece {
    Literal(Vec<u8>),
    /// The value of capture number `usize`.
    Capture(usize),
    Splat,
}

/// A compiled rule.
#[derive(Debug)]
pub struct Rule {
    /// The `from` pattern, one element per segment.
    from: Vec<Pattern>,
    /// The `to` template.
    to: Vec<Piece>,
    /// 200 rewrite, 3xx redirect, 404 (or other) status rewrite.
    pub status: u16,
    /// Forced rules apply even when the path exists.
    pub force: bool,
}

/// What a matching path binds.
#[derive(Default)]
pub struct Captures<'p> {
    /// Values by capture number.
    values: [&'p [u8]; MAX_CAPTURES],
    /// The rest of the path matched by `*`.
    splat: &'p [u8],
}

/// All rules of a pack in file order.
#[derive(Debug, Default)]
pub struct Rules {
    /// Compiled rules, first match wins.
    pub list: Vec<Rule>,
}

fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl Rules {
    pub fn compile(pack: &Pack) -> Rules {
        let list = pack
            .rules()
            .map(|r| Rule::compile(r.from, r.to, r.status, r.force))
            .collect();
        Rules { list }
    }
}

fn compile_template(to: &[u8], names: &[&[u8]]) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut literal = Vec::new();
    let mut i = 0;
    while i < to.len() {
        if to[i] == b':' {
            let end = i + 1 + to[i + 1..].iter().take_while(|&&c| is_name_byte(c)).count();
            let name = &to[i + 1..end];
            let piece = if name == b"splat" {
                Some(Piece::Splat)
            } else {
                names.iter().position(|n| *n == name).map(Piece::Capture)
            };
            if let Some(piece) = piece {
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                pieces.push(piece);
                i = end;
                continue;
            }
        }
        literal.push(to[i]);
        i += 1;
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    pieces
}

impl Rule {
    /// Compiles one `from` pattern and `to` template.
    pub fn compile(from: &[u8], to: &[u8], status: u16, force: bool) -> Rule {
        let mut names: Vec<&[u8]> = Vec::new();
        let from = from
            .split(|&c| c == b'/')
            .filter(|s| !s.is_empty())
            .map(|seg| match seg {
                b"*" => Pattern::Splat,
                [b':', name @ ..] if !name.is_empty() && names.len() < MAX_CAPTURES => {
                    names.push(name);
                    Pattern::Capture(names.len() - 1)
                }
                _ => Pattern::Literal(seg.to_vec()),
            })
            .collect();
        Rule {
            from,
            to: compile_template(to, &names),
            status,
            force,
        }
    }

    /// Matches `path` (a route key) and fills `caps`.
    pub fn matches<'p>(&self, path: &'p [u8], caps: &mut Captures<'p>) -> bool {
        let mut rest = path;
        for pattern in &self.from {
            let skip = rest.iter().take_while(|&&c| c == b'/').count();
            rest = &rest[skip..];
            if let Pattern::Splat = pattern {
                caps.splat = rest;
                return true;
            }
            if rest.is_empty() {
                return false;
            }
            let end = rest.iter().position(|&c| c == b'/').unwrap_or(rest.len());
            let (segment, tail) = rest.split_at(end);
            match pattern {
                Pattern::Literal(lit) if lit.as_slice() == segment => {}
                Pattern::Capture(n) => caps.values[*n] = segment,
                _ => return false,
            }
            rest = tail;
        }
        rest.iter().all(|&c| c == b'/')
    }

    /// Writes `to` with the captures substituted into `out`. With
    /// `encode`, for a `Location`, a capture's bytes (decoded from the
    /// request's path) are percent-encoded again as the template's fixed
    /// part already is (`kiln build` encodes it): a `%`, `?` or `#` that was
    /// data stays data. Without it, for a rewrite looked up as a route key,
    /// they stay decoded as the keys are.
    pub fn expand(&self, caps: &Captures<'_>, out: &mut Vec<u8>, encode: bool) {
        out.clear();
        for piece in &self.to {
            let value = match piece {
                Piece::Literal(lit) => {
                    out.extend_from_slice(lit);
                    continue;
                }
                Piece::Capture(n) => caps.values[*n],
                Piece::Splat => caps.splat,
            };
            if encode {
                percent_encode_path(value, out);
            } else {
                out.extend_from_slice(value);
            }
        }
    }
}

/// Appends `bytes` to `out` as a URI path may hold them (RFC 3986 `pchar`
/// and `/`): unreserved characters, sub-delimiters, `:`, `@` and `/` as
/// they are, every other byte (`%`, `?`, `#`, space, `"<>`, controls,
/// UTF-8) as `%XX`.
fn percent_encode_path(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in bytes {
        let as_is = c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&c);
        if as_is {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(from: &str, to: &str) -> Rule {
        Rule::compile(from.as_bytes(), to.as_bytes(), 301, false)
    }

    fn apply(r: &Rule, path: &str) -> Option<String> {
        let mut caps = Captures::default();
        let mut out = Vec::new();
        r.matches(path.as_bytes(), &mut caps).then(|| {
            r.expand(&caps, &mut out, true);
            String::from_utf8(out).unwrap()
        })
    }

    #[test]
    fn placeholders_and_splat() {
        let r = rule("/blog/:year/:slug", "/posts/:slug-:year.html");
        assert_eq!(
            apply(&r, "/blog/2020/hi").as_deref(),
            Some("/posts/hi-2020.html")
        );
        assert_eq!(
            apply(&r, "/blog/2020/hi/").as_deref(),
            Some("/posts/hi-2020.html")
        );
        assert_eq!(apply(&r, "/blog/2020"), None);
        assert_eq!(apply(&r, "/blog/2020/hi/x"), None);
        let s = rule("/old/*", "https://example.com/new/:splat");
        assert_eq!(
            apply(&s, "/old/a/b.html").as_deref(),
            Some("https://example.com/new/a/b.html")
        );
        assert_eq!(
            apply(&s, "/old").as_deref(),
            Some("https://example.com/new/")
        );
        assert_eq!(apply(&s, "/older/x"), None);
        let u = rule("/x", "/y?a=:unknown");
        assert_eq!(apply(&u, "/x").as_deref(), Some("/y?a=:unknown"));
    }

    #[test]
    fn captures_in_a_location_are_encoded_again() {
        let splat = rule("/files/*", "/:splat");
        for (path, location) in [
            ("/files/100%.txt", "/100%25.txt"),
            ("/files/what?.txt", "/what%3F.txt"),
            ("/files/a b/c#d", "/a%20b/c%23d"),
            ("/files/\"<>\\^`{|}[]", "/%22%3C%3E%5C%5E%60%7B%7C%7D%5B%5D"),
            ("/files/caf\u{e9}", "/caf%C3%A9"),
            ("/files/\x01\x7f", "/%01%7F"),
            ("/files/a-._~!$&'()*+,;=:@z", "/a-._~!$&'()*+,;=:@z"),
        ] {
            assert_eq!(apply(&splat, path).as_deref(), Some(location), "{path}");
        }
        let named = rule("/t/:id", "/go/:id?from=t");
        assert_eq!(
            apply(&named, "/t/x?y#z").as_deref(),
            Some("/go/x%3Fy%23z?from=t")
        );
        // A rewrite's target is a route key: decoded, as keys are.
        let mut caps = Captures::default();
        let mut out = Vec::new();
        assert!(splat.matches(b"/files/a b", &mut caps));
        splat.expand(&caps, &mut out, false);
        assert_eq!(out, b"/a b");
    }
}
