//! Percent-coding of URL paths. Route keys are percent-*decoded* request
//! paths (raw bytes); `Location` values and HTML links are percent-*encoded*.

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays as is.
pub fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| (*c as char).to_digit(16)),
                b.get(i + 2).and_then(|c| (*c as char).to_digit(16)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Encodes a decoded path for a `Location` header or an `href`: unreserved
/// characters, `/` and the sub-delimiters that are safe in a path stay, all
/// else (spaces, non-ASCII, `"<>`, `%`, `?`, `#`, controls) becomes `%XX`.
pub fn percent_encode_path(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for &c in path {
        if c.is_ascii_alphanumeric() || b"-._~/!$()*+,;=:@".contains(&c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// Makes a `_redirects` target safe as a `Location` value, as written
/// otherwise: bytes a URI may not hold (non-ASCII, controls, space,
/// `"<>\^`{|}`) become `%XX`, and so does a `%` that does not start an
/// escape; existing escapes, `?`, `#` and `:placeholders` stay.
pub fn encode_location(to: &str) -> String {
    let b = to.as_bytes();
    let mut out = String::with_capacity(b.len());
    for (i, &c) in b.iter().enumerate() {
        let escape_start = c == b'%'
            && b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if c.is_ascii_graphic() && !b"\"<>\\^`{|}%".contains(&c) || escape_start {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// Escapes text for an HTML attribute or text node.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(percent_decode("/a%20b/%C3%A9"), "/a b/é".as_bytes());
        assert_eq!(percent_decode("/100%"), b"/100%");
        assert_eq!(percent_decode("/%zz"), b"/%zz");
        assert_eq!(
            percent_encode_path("/a b/é?\"".as_bytes()),
            "/a%20b/%C3%A9%3F%22"
        );
        assert_eq!(percent_encode_path(b"/docs/"), "/docs/");
        assert_eq!(
            encode_location("https://x.example/été?q=a b#\"<>|%zz%41"),
            "https://x.example/%C3%A9t%C3%A9?q=a%20b#%22%3C%3E%7C%25zz%41"
        );
        assert_eq!(encode_location("/blog/:slug/*"), "/blog/:slug/*");
        assert_eq!(
            html_escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
