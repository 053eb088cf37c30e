//! Request-target to route key: strips the scheme and authority of an
//! absolute-form target and the query, percent-decodes, resolves `.` and `..`
//! (never above the root) and collapses `//`. Anything that could be read as
//! a different path by another component (encoded slash or dot segments,
//! backslash, control bytes, bad escapes) is refused rather than guessed.

/// Why a target has no route key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// Malformed or ambiguous: answered with 400.
    BadRequest,
    /// Well formed but hidden (a dotfile outside `/.well-known/`): 404.
    Hidden,
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The path part of `target`: origin-form as is, absolute-form without its
/// scheme and authority; the query and fragment are cut off.
fn path_part(target: &[u8]) -> Result<&[u8], PathError> {
    let mut path = target;
    for scheme in [&b"http://"[..], b"https://"] {
        if target.len() >= scheme.len() && target[..scheme.len()].eq_ignore_ascii_case(scheme) {
            let rest = &target[scheme.len()..];
            let end = rest
                .iter()
                .position(|&c| c == b'/' || c == b'?' || c == b'#')
                .unwrap_or(rest.len());
            path = match rest.get(end) {
                Some(b'/') => &rest[end..],
                _ => b"/",
            };
        }
    }
    if path.first() != Some(&b'/') {
        return Err(PathError::BadRequest);
    }
    let end = path
        .iter()
        .position(|&c| c == b'?' || c == b'#')
        .unwrap_or(path.len());
    Ok(&path[..end])
}

/// Writes the normalised, decoded route key of `target` into `out`.
pub fn normalize(target: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    let path = path_part(target)?;
    out.clear();
    out.push(b'/');
    let mut segments = path[1..].split(|&c| c == b'/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        let start = out.len();
        let mut encoded = false;
        let mut i = 0;
        while i < segment.len() {
            let mut c = segment[i];
            if c == b'%' {
                let (hi, lo) = (segment.get(i + 1).copied(), segment.get(i + 2).copied());
                let (Some(hi), Some(lo)) = (hi.and_then(hex), lo.and_then(hex)) else {
                    return Err(PathError::BadRequest);
                };
                c = hi << 4 | lo;
                encoded = true;
                i += 2;
                if c == b'/' {
                    return Err(PathError::BadRequest);
                }
            }
            if c == b'\\' || c < 0x20 || c == 0x7f {
                return Err(PathError::BadRequest);
            }
            out.push(c);
            i += 1;
        }
        match &out[start..] {
            b"" => {}
            b"." | b".." if encoded => return Err(PathError::BadRequest),
            b"." => out.truncate(start),
            b".." => {
                out.truncate(start);
                if start > 1 {
                    out.truncate(start - 1);
                    let parent = out.iter().rposition(|&c| c == b'/').unwrap_or(0);
                    out.truncate(parent + 1);
                }
            }
            _ if !last => out.push(b'/'),
            _ => {}
        }
    }
    let hidden = out
        .split(|&c| c == b'/')
        .enumerate()
        .any(|(i, seg)| seg.first() == Some(&b'.') && !(i == 1 && seg == b".well-known"));
    if hidden {
        return Err(PathError::Hidden);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(t: &str) -> Result<String, PathError> {
        let mut out = Vec::new();
        normalize(t.as_bytes(), &mut out).map(|()| String::from_utf8(out).unwrap())
    }

    #[test]
    fn resolves_dots_and_slashes() {
        let ok = |t: &str, want: &str| assert_eq!(norm(t), Ok(want.to_string()), "{t}");
        ok("/", "/");
        ok("/a/b.html?x=1", "/a/b.html");
        ok("//a///b/", "/a/b/");
        ok("/a/./b/../c", "/a/c");
        ok("/a/..", "/");
        ok("/../../etc/passwd", "/etc/passwd");
        ok("/a/%20b", "/a/ b");
        ok("/caf%C3%A9", "/caf\u{e9}");
        ok("http://example.com/x/y?q", "/x/y");
        ok("HTTPS://example.com", "/");
        ok("/.well-known/security.txt", "/.well-known/security.txt");
    }

    #[test]
    fn refuses_ambiguous_targets() {
        for t in [
            "/%2e%2e/etc/passwd",
            "/a/%2E",
            "/a%2fb",
            "/a\\b",
            "/a%5cb",
            "/a%00",
            "/%zz",
            "/%4",
            "a/b",
            "*",
        ] {
            assert_eq!(norm(t), Err(PathError::BadRequest), "{t}");
        }
        assert_eq!(norm("/.git/config"), Err(PathError::Hidden));
        assert_eq!(norm("/a/.env"), Err(PathError::Hidden));
    }
}
