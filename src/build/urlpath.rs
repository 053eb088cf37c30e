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
            html_escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
