//! Parses Netlify-style `_headers` and `_redirects` files (read from the site
//! root only; neither file is served) and matches their path patterns.
//!
//! Patterns: `*` (the splat) matches any run of bytes including `/`;
//! `:name` at the start of a segment matches one non-empty segment. Paths
//! and patterns are compared percent-decoded, like route keys.
//!
//! A syntax error is a one-line error naming `file:line`. A `_redirects`
//! rule using a feature kiln does not implement (query matching, `Country=`
//! or other conditions, domain-level `from`) is skipped with a warning
//! naming the line.

use anyhow::bail;

use super::urlpath::{encode_location, percent_decode};

/// Headers that the builder or the server own: setting them from `_headers`
/// would break framing or content negotiation, or make 304 and 206 answers
/// contradict the validators and ranges the server computes, so a line
/// setting one is refused. `Proxy-Connection`, connection-specific too, is
/// accepted: HTTP/1 sends it, and the HPACK block leaves it out, as HTTP/2
/// forbids such fields (`hpack::CONNECTION_SPECIFIC`).
const RESERVED_HEADERS: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "content-range",
    "accept-ranges",
    "etag",
    "last-modified",
    "connection",
    "keep-alive",
    "date",
    "upgrade",
    "trailer",
    "te",
];

/// Statuses a `_redirects` rule may carry.
pub const REDIRECT_STATUSES: [u16; 6] = [200, 301, 302, 307, 308, 404];

/// One block of `_headers`: a path pattern and the headers it adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderRule {
    /// Percent-decoded path pattern.
    pub pattern: Vec<u8>,
    /// `(name, value)` in file order.
    pub headers: Vec<(String, String)>,
    /// 1-based line of the pattern, for messages.
    pub line: usize,
}

/// One rule of `_redirects`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedirectRule {
    /// Percent-decoded path or pattern.
    pub from: Vec<u8>,
    /// Target as written, with bytes a URI may not hold percent-encoded
    /// (it becomes a `Location` value): a path, possibly with
    /// `:name`/`:splat`, or an absolute URL.
    pub to: String,
    /// 3xx redirect, 200 rewrite or 404.
    pub status: u16,
    /// `!`: applies even when a file exists at `from`.
    pub force: bool,
    /// 1-based line, for messages.
    pub line: usize,
}

/// Parses `_headers`; `file` names it in errors.
pub fn parse_headers(text: &str, file: &str) -> anyhow::Result<Vec<HeaderRule>> {
    let mut rules: Vec<HeaderRule> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indented = raw.starts_with([' ', '\t']);
        if !indented {
            if !trimmed.starts_with('/') {
                bail!(
                    "{file}:{line}: expected a path pattern starting with '/' or an indented 'Name: value' line"
                );
            }
            if trimmed.contains(char::is_whitespace) {
                bail!("{file}:{line}: a path pattern cannot contain spaces");
            }
            rules.push(HeaderRule {
                pattern: percent_decode(trimmed),
                headers: Vec::new(),
                line,
            });
            continue;
        }
        let Some(rule) = rules.last_mut() else {
            bail!("{file}:{line}: header line before any path pattern");
        };
        let Some((name, value)) = trimmed.split_once(':') else {
            bail!("{file}:{line}: expected 'Name: value'");
        };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            bail!("{file}:{line}: invalid header name {name:?}");
        }
        if value.chars().any(|c| c.is_control() && c != '\t') {
            bail!("{file}:{line}: control character in the value of {name}");
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            bail!("{file}:{line}: {name} is set by kiln and cannot be overridden");
        }
        rule.headers.push((name.to_owned(), value.to_owned()));
    }
    Ok(rules)
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The headers the blocks matching any of `paths` add, in file order, each
/// block once however many of the paths it matches. A name set by several
/// lines (in one block or in several) gets their values joined with ", ",
/// as Netlify does, except `Set-Cookie`, whose values may hold commas and
/// must stay separate lines (RFC 9110 §5.3).
pub fn headers_for(rules: &[HeaderRule], paths: &[&[u8]]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let matching = rules
        .iter()
        .filter(|r| paths.iter().any(|path| pattern_matches(&r.pattern, path)));
    for rule in matching {
        for (name, value) in &rule.headers {
            let joined = out
                .iter_mut()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .filter(|_| !name.eq_ignore_ascii_case("set-cookie"));
            match joined {
                Some((_, v)) => {
                    v.push_str(", ");
                    v.push_str(value);
                }
                None => out.push((name.clone(), value.clone())),
            }
        }
    }
    out
}

/// Parses `_redirects`; returns the rules and the warnings for skipped ones.
pub fn parse_redirects(text: &str, file: &str) -> anyhow::Result<(Vec<RedirectRule>, Vec<String>)> {
    let mut rules = Vec::new();
    let mut warnings = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        // A field starting with '#' opens a trailing comment.
        let fields: Vec<&str> = trimmed
            .split_whitespace()
            .take_while(|f| !f.starts_with('#'))
            .collect();
        let from = fields[0];
        if from.contains("://") {
            warnings.push(format!(
                "{file}:{line}: domain-level rules are not supported, rule skipped"
            ));
            continue;
        }
        if !from.starts_with('/') {
            bail!("{file}:{line}: the source path must start with '/'");
        }
        if from.contains('?') {
            warnings.push(format!(
                "{file}:{line}: query matching is not supported, rule skipped"
            ));
            continue;
        }
        // The server matches a splat only as the whole last segment (as
        // Netlify documents it): anything else would be stored as a rule
        // that never fires.
        let splat_ok = |from: &str| match from.find('*') {
            None => true,
            Some(at) => from.ends_with("/*") && at == from.len() - 1,
        };
        if !splat_ok(from) {
            bail!(
                "{file}:{line}: '*' must be the whole last segment of the source path, as in /news/*"
            );
        }
        let Some(&to) = fields.get(1) else {
            bail!("{file}:{line}: missing target");
        };
        if to.contains('=') && !to.starts_with('/') && !to.contains("://") {
            warnings.push(format!(
                "{file}:{line}: query parameter matching is not supported, rule skipped"
            ));
            continue;
        }
        if !to.starts_with('/') && !to.starts_with("http://") && !to.starts_with("https://") {
            bail!("{file}:{line}: the target must be a path starting with '/' or an http(s) URL");
        }
        if to.chars().any(char::is_control) {
            bail!("{file}:{line}: control character in the target");
        }
        let (status, force) = match fields.get(2) {
            None => (301, false),
            Some(s) => {
                let (digits, force) = match s.strip_suffix('!') {
                    Some(d) => (d, true),
                    None => (*s, false),
                };
                match digits.parse::<u16>() {
                    Ok(code) if REDIRECT_STATUSES.contains(&code) => (code, force),
                    _ => bail!(
                        "{file}:{line}: status {s:?} is not one of 200, 301, 302, 307, 308, 404 (optionally with '!')"
                    ),
                }
            }
        };
        if fields.len() > 3 {
            warnings.push(format!(
                "{file}:{line}: conditions ({}) are not supported, rule skipped",
                fields[3..].join(" ")
            ));
            continue;
        }
        rules.push(RedirectRule {
            from: percent_decode(from),
            to: encode_location(to),
            status,
            force,
            line,
        });
    }
    Ok((rules, warnings))
}

/// True when a `from` needs run-time matching: it has a splat or a
/// `:placeholder` segment.
pub fn has_pattern(from: &[u8]) -> bool {
    tokens(from)
        .iter()
        .any(|t| matches!(t, Token::Splat | Token::Param))
}

/// A parsed pattern element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Byte(u8),
    /// `*`: any bytes, `/` included.
    Splat,
    /// `:name` at a segment start: one or more bytes without `/`.
    Param,
}

fn tokens(pattern: &[u8]) -> Vec<Token> {
    let mut out = Vec::with_capacity(pattern.len());
    let mut i = 0;
    while i < pattern.len() {
        let c = pattern[i];
        let at_segment_start = i > 0 && pattern[i - 1] == b'/';
        if c == b'*' {
            out.push(Token::Splat);
            i += 1;
        } else if c == b':'
            && at_segment_start
            && pattern
                .get(i + 1)
                .is_some_and(|n| n.is_ascii_alphabetic() || *n == b'_')
        {
            i += 1;
            while pattern
                .get(i)
                .is_some_and(|n| n.is_ascii_alphanumeric() || *n == b'_')
            {
                i += 1;
            }
            out.push(Token::Param);
        } else {
            out.push(Token::Byte(c));
            i += 1;
        }
    }
    out
}

/// True when `path` (percent-decoded) matches `pattern`.
pub fn pattern_matches(pattern: &[u8], path: &[u8]) -> bool {
    match_tokens(&tokens(pattern), path)
}

/// Matches in O(pattern × path) steps: a naive backtracking matcher is
/// exponential in the number of splats (`/*a*a*a*a*…`), which would let one
/// line of `_headers` or `_redirects` stall a build, or a server per request.
fn match_tokens(pattern: &[Token], path: &[u8]) -> bool {
    // reach[j]: the tokens so far match exactly `path[..j]`.
    let mut reach = vec![false; path.len() + 1];
    reach[0] = true;
    for token in pattern {
        let mut next = vec![false; path.len() + 1];
        match *token {
            Token::Byte(c) => {
                for (j, &b) in path.iter().enumerate() {
                    next[j + 1] = reach[j] && b == c;
                }
            }
            Token::Splat => {
                let mut any = false;
                for (j, slot) in next.iter_mut().enumerate() {
                    any |= reach[j];
                    *slot = any;
                }
            }
            Token::Param => {
                // Some start i ≤ j was reached and path[i..=j] has no '/'.
                let mut open = false;
                for (j, &b) in path.iter().enumerate() {
                    open = b != b'/' && (open || reach[j]);
                    next[j + 1] = open;
                }
            }
        }
        reach = next;
    }
    reach[path.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_blocks_accumulate() {
        let text = "# comment\n/*\n  X-Frame-Options: DENY\n  Link: </a.css>; rel=preload\n\n/blog/:slug\n  Cache-Control: no-store\n  Link: </b.js>\n";
        let rules = parse_headers(text, "_headers").unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1].line, 6);
        let h = headers_for(&rules, &[b"/blog/post"]);
        assert_eq!(
            h,
            vec![
                ("X-Frame-Options".to_owned(), "DENY".to_owned()),
                (
                    "Link".to_owned(),
                    "</a.css>; rel=preload, </b.js>".to_owned()
                ),
                ("Cache-Control".to_owned(), "no-store".to_owned()),
            ]
        );
        assert_eq!(headers_for(&rules, &[b"/blog/a/b"]).len(), 2);
        assert_eq!(
            headers_for(&rules, &[b"/blog/post", b"/blog/post.html", b"/x"]),
            h,
            "a block matching several URLs of a file applies once"
        );
        let cookies =
            "/*\n  Set-Cookie: a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT\n  set-cookie: b=2\n";
        let rules = parse_headers(cookies, "_headers").unwrap();
        assert_eq!(headers_for(&rules, &[b"/"]).len(), 2, "never joined");
    }

    #[test]
    fn headers_syntax_errors_name_the_line() {
        for (text, needle) in [
            ("  X-A: 1\n", "_headers:1: header line before"),
            (
                "/a\n  no colon here\n",
                "_headers:2: expected 'Name: value'",
            ),
            ("/a\n  Bad Name: x\n", "_headers:2: invalid header name"),
            (
                "/a\n  Content-Length: 5\n",
                "_headers:2: Content-Length is set by kiln",
            ),
            ("a/b\n", "_headers:1: expected a path pattern"),
            (
                "/a\n  X-A: b\rSet-Cookie: x=1\n",
                "_headers:2: control character in the value of X-A",
            ),
            ("/a\n  X-A: b\0\n", "_headers:2: control character"),
            ("/a\n  X-A: b\u{85}c\n", "_headers:2: control character"),
            ("/a\n  X(A): b\n", "_headers:2: invalid header name"),
            ("/a\n  X\u{e9}: b\n", "_headers:2: invalid header name"),
            ("/a\n  : b\n", "_headers:2: invalid header name"),
        ] {
            let err = parse_headers(text, "_headers").unwrap_err().to_string();
            assert!(err.starts_with(needle), "{err}");
        }
    }

    /// HTTP/2 forbids connection-specific fields: all but
    /// `Proxy-Connection` are refused here, and that one is left out of
    /// the HPACK block (`HeadBlockBuilder::line`).
    #[test]
    fn connection_specific_headers() {
        for name in crate::hpack::CONNECTION_SPECIFIC {
            let text = format!("/a\n  {name}: x\n");
            let parsed = parse_headers(&text, "_headers");
            if name == "proxy-connection" {
                assert_eq!(parsed.unwrap()[0].headers[0].0, name);
            } else {
                assert!(parsed.is_err(), "{name}");
            }
        }
    }

    #[test]
    fn redirects_parse() {
        let text = "/old /new # moved in 2024\n/a%20b /c 302\n/force /x 200!\n/news/* /blog/:splat 301\n\n# c\n/x /y 302 Country=us\n/q id=:id /z 301\nhttps://a.example/* https://b.example/:splat 301!\n";
        let (rules, warnings) = parse_redirects(text, "_redirects").unwrap();
        assert_eq!(rules.len(), 4);
        assert_eq!((rules[0].status, rules[0].force), (301, false));
        assert_eq!(rules[1].from, b"/a b");
        assert_eq!((rules[2].status, rules[2].force), (200, true));
        assert!(has_pattern(&rules[3].from));
        assert!(!has_pattern(&rules[0].from));
        assert_eq!(warnings.len(), 3);
        assert!(warnings[0].starts_with("_redirects:7: conditions (Country=us)"));
        assert!(warnings[1].starts_with("_redirects:8: query parameter"));
        assert!(warnings[2].starts_with("_redirects:9: domain-level"));
    }

    #[test]
    fn redirects_syntax_errors_name_the_line() {
        for (text, needle) in [
            ("/a /b 303\n", "_redirects:1: status \"303\""),
            ("/ok /b\nrel /b\n", "_redirects:2: the source path"),
            ("/a\n", "_redirects:1: missing target"),
            ("/a b\n", "_redirects:1: the target must be"),
            (
                "/blog* /b\n",
                "_redirects:1: '*' must be the whole last segment",
            ),
            (
                "/a/*/c /b\n",
                "_redirects:1: '*' must be the whole last segment",
            ),
        ] {
            let err = parse_redirects(text, "_redirects").unwrap_err().to_string();
            assert!(err.starts_with(needle), "{err}");
        }
    }

    #[test]
    fn pattern_matching() {
        assert!(pattern_matches(b"/*", b"/"));
        assert!(pattern_matches(b"/*", b"/a/b/c"));
        assert!(pattern_matches(b"/blog/*", b"/blog/"));
        assert!(!pattern_matches(b"/blog/*", b"/blog"));
        assert!(pattern_matches(b"/u/:id/edit", b"/u/42/edit"));
        assert!(!pattern_matches(b"/u/:id/edit", b"/u//edit"));
        assert!(!pattern_matches(b"/u/:id", b"/u/4/2"));
        assert!(
            pattern_matches(b"/a:b", b"/a:b"),
            "':' inside a segment is literal"
        );
        assert!(pattern_matches(b"/*.css", b"/x/y.css"));
        assert!(!pattern_matches(b"/exact", b"/exact/"));
        assert!(pattern_matches(b"/:a/:b", b"/x/y"));
        assert!(!pattern_matches(b"/:a/:b", b"/x/"));
        assert!(pattern_matches(b"/a/*/b", b"/a/x/y/b"));
        assert!(!pattern_matches(b"/a/*/b", b"/a/b"));
        assert!(pattern_matches(b"/*/:id.json", b"/api/v1/42.json"));
        assert!(!pattern_matches(b"/*/:id.json", b"/api/v1/.json"));
        assert!(pattern_matches(b"", b""));
        assert!(!pattern_matches(b"", b"/"));
    }

    #[test]
    fn many_splats_match_without_backtracking() {
        // Exponential for a backtracking matcher: this would not finish.
        let pattern = format!("/{}b", "*a".repeat(40));
        let path = format!("/{}", "a".repeat(400));
        assert!(!pattern_matches(pattern.as_bytes(), path.as_bytes()));
        assert!(pattern_matches(
            pattern.as_bytes(),
            format!("{path}b").as_bytes()
        ));
        let params = "/:p".repeat(30);
        assert!(!pattern_matches(
            params.as_bytes(),
            "/xx".repeat(29).as_bytes()
        ));
        assert!(pattern_matches(
            params.as_bytes(),
            "/xx".repeat(30).as_bytes()
        ));
    }
}
