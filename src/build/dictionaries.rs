//! Dictionaries between deploys (RFC 9842) at build time: which responses
//! a client may keep as a dictionary (`Use-As-Dictionary`), and which
//! earlier versions of a file its delta variants are made against.
//!
//! A compressible file is served with `Use-As-Dictionary: match="P",
//! id="kiln-…"`, where P is its URL with the content hash of a bundler's
//! name (`app.3f2a9b1c.js`, `index-BxY7z1Qa.js`) replaced by `*`, else its
//! URL as is (a page replaced in place is its own dictionary); `id` names
//! the build. A client that kept it sends its SHA-256 in
//! `Available-Dictionary` when it next fetches a URL matching P.
//!
//! The earlier versions are the routes of the earlier packs (the base of
//! an incremental build, each `--base`) whose identity response carried a
//! `Use-As-Dictionary` pattern matching one of the new file's URLs: those
//! are the dictionaries a returning visitor can hold. The last N of them
//! (packs in the order given, newest first within a pack) are used.

use std::collections::HashSet;

use super::headers::hash_span;
use crate::pack::{Encoding, Pack, RouteKind};

/// Default `--delta-versions`.
pub const DEFAULT_DELTA_VERSIONS: usize = 3;
/// The largest `--delta-versions`: each version costs two compressions
/// of the file per build (or a reuse).
pub const MAX_DELTA_VERSIONS: usize = 16;
/// The field a dictionary response carries.
pub const USE_AS_DICTIONARY: &str = "Use-As-Dictionary";

/// `--dictionaries`: whether responses are offered as dictionaries and
/// delta variants made; `versions` is `--delta-versions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DictionaryOptions {
    /// Off: no `Use-As-Dictionary`, no delta variants.
    pub enabled: bool,
    /// Delta variants per file: against the last this many versions.
    pub versions: usize,
}

impl Default for DictionaryOptions {
    fn default() -> Self {
        DictionaryOptions {
            enabled: true,
            versions: DEFAULT_DELTA_VERSIONS,
        }
    }
}

/// Escapes the characters URLPattern gives a meaning in a pathname.
fn escape_pattern(s: &str, out: &mut String) {
    for c in s.chars() {
        if "\\*:(){}+?".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// The `match` pattern of a response at `url_path` (percent-encoded): the
/// hash segment of a hashed file name replaced by `*`, else the path.
pub fn match_pattern(url_path: &str) -> String {
    let name_at = url_path.rfind('/').map_or(0, |slash| slash + 1);
    let mut out = String::with_capacity(url_path.len() + 4);
    match hash_span(&url_path[name_at..]) {
        Some(span) => {
            escape_pattern(&url_path[..name_at + span.start], &mut out);
            out.push('*');
            escape_pattern(&url_path[name_at + span.end..], &mut out);
        }
        None => escape_pattern(url_path, &mut out),
    }
    out
}

/// True when the URLPattern pathname `pattern` (only `*` and `\` escapes,
/// as kiln writes them; no groups) matches `path`.
pub fn pattern_matches(pattern: &str, path: &str) -> bool {
    enum Token {
        Byte(u8),
        Star,
    }
    let mut tokens = Vec::with_capacity(pattern.len());
    let mut bytes = pattern.bytes();
    while let Some(b) = bytes.next() {
        tokens.push(match b {
            b'\\' => Token::Byte(bytes.next().unwrap_or(b'\\')),
            b'*' => Token::Star,
            // A group, a named part or a modifier: not a pattern kiln
            // can evaluate, so it matches nothing.
            b'(' | b')' | b'{' | b'}' | b':' | b'+' | b'?' => return false,
            b => Token::Byte(b),
        });
    }
    let path = path.as_bytes();
    // Backtracking over the last star: linear for one star, quadratic at
    // worst.
    let (mut t, mut p) = (0, 0);
    let mut resume: Option<(usize, usize)> = None;
    while p < path.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                resume = Some((t, p));
                t += 1;
            }
            Some(Token::Byte(b)) if *b == path[p] => {
                t += 1;
                p += 1;
            }
            _ => match resume {
                Some((star, from)) => {
                    t = star + 1;
                    p = from + 1;
                    resume = Some((star, from + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|tok| matches!(tok, Token::Star))
}

/// An RFC 8941 string.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// The `Use-As-Dictionary` value for `pattern` in the build named `id`.
pub fn use_as_dictionary_value(pattern: &str, id: &str) -> String {
    format!("match={}, id={}", sf_string(pattern), sf_string(id))
}

/// The `match` pattern of a `Use-As-Dictionary` value (an RFC 8941
/// dictionary), if it has one as a string.
pub fn match_of(value: &str) -> Option<String> {
    let mut rest = value.trim_start();
    while !rest.is_empty() {
        let key_end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.*".contains(c)))
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        rest = &rest[key_end..];
        let mut string = None;
        if let Some(after) = rest.strip_prefix('=') {
            if let Some(quoted) = after.strip_prefix('"') {
                let mut s = String::new();
                let mut chars = quoted.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => s.push(chars.next()?.1),
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        c => s.push(c),
                    }
                }
                rest = &quoted[end?..];
                string = Some(s);
            } else {
                let end = after.find([',', ';']).unwrap_or(after.len());
                rest = &after[end..];
            }
        }
        if key == "match" {
            return string;
        }
        // Parameters, then the next member.
        rest = &rest[rest.find(',').map_or(rest.len(), |comma| comma + 1)..];
        rest = rest.trim_start();
    }
    None
}

/// The build's `id`: a name for this version of the whole site.
pub fn build_id(files: impl Iterator<Item = (String, [u8; 32])>) -> String {
    let mut hasher = blake3::Hasher::new();
    for (path, hash) in files {
        hasher.update(path.as_bytes());
        hasher.update(&[0]);
        hasher.update(&hash);
    }
    let hex: String = hasher.finalize().as_bytes()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("kiln-{hex}")
}

/// An earlier version of some file, as a client may hold it.
pub struct OldVersion<'p> {
    /// The pattern its response carried.
    pub pattern: String,
    /// Its bytes (the identity body), in its pack's mapping.
    pub bytes: &'p [u8],
    /// Their SHA-256: the dictionary's name.
    pub sha256: [u8; 32],
}

/// Every earlier version the dictionary packs hold, in the order the last
/// N are taken from.
pub struct History<'p> {
    versions: Vec<OldVersion<'p>>,
}

impl<'p> History<'p> {
    /// The versions in `packs`: packs in the order given; within one, the
    /// newest route first (then by key), each body once.
    pub fn of(packs: &[&'p Pack]) -> History<'p> {
        let mut versions = Vec::new();
        for pack in packs {
            let mut found = Vec::new();
            let mut seen = HashSet::new();
            for route in pack.routes() {
                if route.kind() != Some(RouteKind::Exact) || route.status() != 200 {
                    continue;
                }
                let Some(identity) = route.variant(Encoding::Identity) else {
                    continue;
                };
                let Some(pattern) = dictionary_pattern(identity.head) else {
                    continue;
                };
                if !seen.insert((identity.body_off, pattern.clone())) {
                    continue;
                }
                found.push((
                    route.last_modified(),
                    route.key().unwrap_or_default(),
                    pattern,
                    identity.body,
                ));
            }
            found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
            let hashed: Vec<OldVersion<'p>> = {
                use rayon::prelude::*;
                found
                    .into_par_iter()
                    .map(|(_, _, pattern, bytes)| OldVersion {
                        pattern,
                        bytes,
                        sha256: crate::dictionary::sha256(bytes),
                    })
                    .collect()
            };
            versions.extend(hashed);
        }
        History { versions }
    }

    /// True when no pack holds a dictionary.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The last `n` versions a client fetching one of `urls` may hold as a
    /// dictionary, other than the content whose SHA-256 is `current`.
    pub fn for_urls(&self, urls: &[String], current: &[u8; 32], n: usize) -> Vec<&OldVersion<'p>> {
        let mut seen = HashSet::new();
        self.versions
            .iter()
            .filter(|v| v.sha256 != *current)
            .filter(|v| urls.iter().any(|url| pattern_matches(&v.pattern, url)))
            .filter(|v| seen.insert(v.sha256))
            .take(n)
            .collect()
    }
}

/// The `match` pattern of the `Use-As-Dictionary` line of an HTTP/1
/// header block, if it has one.
fn dictionary_pattern(head: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(head).ok()?;
    text.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case(USE_AS_DICTIONARY)
            .then(|| match_of(value.trim()))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_replace_the_hash_of_bundler_names() {
        for (url, pattern) in [
            ("/assets/app.3f2a9b1c.js", "/assets/app.*.js"),
            ("/assets/index-BxY7z1Qa.js", "/assets/index-*.js"),
            (
                "/static/js/main.0a1b2c3d.chunk.js",
                "/static/js/main.*.chunk.js",
            ),
            ("/docs/", "/docs/"),
            ("/styles/site.css", "/styles/site.css"),
            ("/a(b)/c+d.js", "/a\\(b\\)/c\\+d.js"),
            ("/v1.2:3.js", "/v1.2\\:3.js"),
        ] {
            assert_eq!(match_pattern(url), pattern, "{url}");
        }
    }

    #[test]
    fn patterns_match_later_versions_only() {
        let p = match_pattern("/assets/app.3f2a9b1c.js");
        assert!(pattern_matches(&p, "/assets/app.3f2a9b1c.js"));
        assert!(pattern_matches(&p, "/assets/app.77aa88bb99.js"));
        assert!(!pattern_matches(&p, "/assets/app.js.map"));
        assert!(!pattern_matches(&p, "/assets/vendor.3f2a9b1c.js"));
        assert!(!pattern_matches(&p, "/other/app.3f2a9b1c.js"));
        assert!(pattern_matches("/a\\(b\\)/c\\+d.js", "/a(b)/c+d.js"));
        assert!(pattern_matches("*", "/anything"));
        assert!(pattern_matches("/a/*/*.js", "/a/b/c/d.js"));
        assert!(!pattern_matches("/a/:id.js", "/a/b.js"));
        assert!(!pattern_matches("/a.js", "/a.jsx"));
    }

    #[test]
    fn use_as_dictionary_values_round_trip() {
        let value = use_as_dictionary_value("/a\\(b\\)/x.*.js", "kiln-0011");
        assert_eq!(value, r#"match="/a\\(b\\)/x.*.js", id="kiln-0011""#);
        assert_eq!(match_of(&value).as_deref(), Some("/a\\(b\\)/x.*.js"));
        assert_eq!(
            match_of(r#"id="x";p=1, match-dest=("script"), match="/m.*.js""#).as_deref(),
            Some("/m.*.js")
        );
        assert_eq!(match_of("id=\"x\""), None);
        assert_eq!(match_of("match=token"), None);
        assert_eq!(match_of("match=\"open"), None);
    }
}
