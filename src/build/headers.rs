//! Prepares the header block of every stored variant, once, at build time.
//!
//! Order (validators and caching first, so a 304 is a prefix of the block):
//! `ETag`, `Last-Modified`, `Cache-Control`, `Vary`, `Use-As-Dictionary`
//! (RFC 9842), the custom headers from `_headers`; then the representation: `Content-Type`, `Content-Encoding`
//! (not for identity), `Accept-Ranges` (only with validators); then
//! `Content-Length`.
//!
//! A custom `Cache-Control`, `Vary`, `Content-Type` or `Use-As-Dictionary`
//! replaces the generated one in place instead of being sent twice (`off`
//! removes the last); the validators, `Accept-Ranges`
//! and the framing headers cannot be set from `_headers` (see `netlify`).
//!
//! Every line goes into both encodings of the block at once (HTTP/1 lines
//! and HPACK, see `HeadBlockBuilder`), in the same order. HTTP/2 forbids
//! connection-specific fields (RFC 9113 §8.2.2): `_headers` refuses
//! `Connection`, `Keep-Alive`, `Transfer-Encoding` and `Upgrade`, but
//! accepts `Proxy-Connection`, which is then sent over HTTP/1 only and left
//! out of the HPACK block.

use crate::pack::{Encoding, HeadBlock, HeadBlockBuilder};

/// Caching policy for HTML: always revalidate, so a new deploy shows at once.
pub const HTML_CACHE_CONTROL: &str = "public, max-age=0, must-revalidate";
/// Caching policy for names that carry a content hash: they never change.
pub const IMMUTABLE_CACHE_CONTROL: &str = "public, max-age=31536000, immutable";
/// Caching policy for everything else: an hour.
pub const DEFAULT_CACHE_CONTROL: &str = "public, max-age=3600";

/// The `Cache-Control` values to use; the flags fill it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CachePolicy {
    /// `--cache-control`: replaces both non-immutable defaults.
    pub override_default: Option<String>,
    /// `--immutable-cache-control`: replaces the immutable default.
    pub override_immutable: Option<String>,
    /// Every response says `no-cache`, a `_headers` value included: a
    /// preview, whose files change under the browser, is revalidated on
    /// every use (its validators make that a 304).
    pub revalidate_all: bool,
}

/// The `Cache-Control` of every response of a preview.
pub const REVALIDATE_CACHE_CONTROL: &str = "no-cache";

impl CachePolicy {
    /// The value for a file at `path` (relative or absolute) of `content_type`.
    /// HTML is never considered immutable, even with a hash-like name.
    pub fn for_file(&self, path: &str, content_type: &str) -> String {
        if self.revalidate_all {
            return REVALIDATE_CACHE_CONTROL.to_owned();
        }
        let is_html = content_type.starts_with("text/html")
            || content_type.starts_with("application/xhtml+xml");
        let name = path.rsplit('/').next().unwrap_or(path);
        if !is_html && is_hashed_name(name) {
            return self
                .override_immutable
                .clone()
                .unwrap_or_else(|| IMMUTABLE_CACHE_CONTROL.to_owned());
        }
        self.non_immutable(is_html)
    }

    /// The value for responses that are not files (redirects).
    pub fn for_redirect(&self) -> String {
        self.non_immutable(false)
    }

    fn non_immutable(&self, is_html: bool) -> String {
        if self.revalidate_all {
            return REVALIDATE_CACHE_CONTROL.to_owned();
        }
        match &self.override_default {
            Some(v) => v.clone(),
            None if is_html => HTML_CACHE_CONTROL.to_owned(),
            None => DEFAULT_CACHE_CONTROL.to_owned(),
        }
    }
}

/// True when a file name carries a build tool's content hash: a
/// dot-separated segment of at least 8 hex digits (`app.3f2a9b1c.js`), or a
/// `-` followed by at least 8 of `[A-Za-z0-9_]` just before the extension
/// (`index-BxY7z1Qa.js`). To spare ordinary words and dates the hash must
/// mix at least one digit and one letter.
pub fn is_hashed_name(name: &str) -> bool {
    hash_span(name).is_some()
}

/// Where the content hash of a hashed name (`is_hashed_name`) lies in it,
/// in bytes: the first dot-separated hex segment, else the dash hash.
pub fn hash_span(name: &str) -> Option<std::ops::Range<usize>> {
    let (stem, _ext) = name.rsplit_once('.')?;
    let mixed = |s: &str| {
        s.bytes().any(|b| b.is_ascii_digit()) && s.bytes().any(|b| b.is_ascii_alphabetic())
    };
    let mut at = 0;
    for seg in stem.split('.') {
        if seg.len() >= 8 && seg.bytes().all(|b| b.is_ascii_hexdigit()) && mixed(seg) {
            return Some(at..at + seg.len());
        }
        at += seg.len() + 1;
    }
    let last_start = stem.rfind('.').map_or(0, |dot| dot + 1);
    let (_, h) = stem[last_start..].rsplit_once('-')?;
    (h.len() >= 8 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') && mixed(h))
        .then(|| stem.len() - h.len()..stem.len())
}

/// The strong ETag of a body: its BLAKE3 hash, first 16 bytes, hex, quoted.
/// Each variant has its own bytes, hence its own ETag.
pub fn etag_for(hash: &[u8; 32]) -> String {
    let mut s = String::with_capacity(34);
    s.push('"');
    for b in &hash[..16] {
        s.push_str(&format!("{b:02x}"));
    }
    s.push('"');
    s
}

/// An IMF-fixdate (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
/// Times outside 1970–9999 are clamped to that range, the years the format
/// can express.
pub fn http_date(unix_secs: i64) -> String {
    let mut out = [0u8; 29];
    crate::httpdate::format_imf(unix_secs.clamp(0, 253_402_300_799), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Everything that goes into one variant's header block.
pub struct VariantHead<'a> {
    /// `None` for responses without validators (404 pages).
    pub etag: Option<&'a str>,
    /// Source mtime; `None` together with `etag`.
    pub last_modified: Option<i64>,
    /// The policy's value; `_headers` may still replace it.
    pub cache_control: &'a str,
    /// The resource has several variants: caches must key on the encoding.
    pub vary: bool,
    /// The resource has delta variants: caches must key on the dictionary
    /// too (`Vary: Accept-Encoding, Available-Dictionary`).
    pub vary_dictionary: bool,
    /// The `Use-As-Dictionary` value (RFC 9842 §2.1), for a response a
    /// client may keep as a dictionary for later versions.
    pub use_as_dictionary: Option<&'a str>,
    /// From `_headers`, already accumulated for the route.
    pub custom: &'a [(String, String)],
    /// From the file name, charset included.
    pub content_type: &'a str,
    /// The variant's content coding; identity sends no `Content-Encoding`.
    pub encoding: Encoding,
    /// The variant body's length.
    pub content_length: u64,
}

/// Builds a variant's header block.
pub fn variant_head(v: &VariantHead<'_>) -> HeadBlock {
    let custom = |name: &str| {
        v.custom
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    let mut b = HeadBlockBuilder::new();
    if let Some(etag) = v.etag {
        b.line("ETag", etag);
    }
    if let Some(t) = v.last_modified {
        b.line("Last-Modified", &http_date(t));
    }
    b.line(
        "Cache-Control",
        custom("Cache-Control").unwrap_or(v.cache_control),
    );
    let generated = if v.vary_dictionary {
        "Accept-Encoding, Available-Dictionary"
    } else {
        "Accept-Encoding"
    };
    match (v.vary || v.vary_dictionary, custom("Vary")) {
        (true, None) => {
            b.line("Vary", generated);
        }
        // A custom Vary must not drop Accept-Encoding (or, with deltas,
        // Available-Dictionary) from a resource with several encodings: a
        // cache would then hand br (or a delta) to any client.
        (true, Some(value)) if !varies_on(value, "accept-encoding") => {
            b.line("Vary", &format!("{generated}, {value}"));
        }
        (true, Some(value)) if v.vary_dictionary && !varies_on(value, "available-dictionary") => {
            b.line("Vary", &format!("{value}, Available-Dictionary"));
        }
        (_, Some(value)) => {
            b.line("Vary", value);
        }
        (false, None) => {}
    }
    // `_headers` may set its own value, or `off` to send none.
    match custom("Use-As-Dictionary") {
        Some(value) if value.eq_ignore_ascii_case("off") => {}
        Some(value) => {
            b.line("Use-As-Dictionary", value);
        }
        None => {
            if let Some(value) = v.use_as_dictionary {
                b.line("Use-As-Dictionary", value);
            }
        }
    }
    let replaceable = ["Cache-Control", "Vary", "Content-Type", "Use-As-Dictionary"];
    for (name, value) in v.custom {
        if !replaceable.iter().any(|g| g.eq_ignore_ascii_case(name)) {
            b.line(name, value);
        }
    }
    b.begin_representation();
    b.line(
        "Content-Type",
        custom("Content-Type").unwrap_or(v.content_type),
    );
    if v.encoding != Encoding::Identity {
        b.line("Content-Encoding", v.encoding.token());
    }
    // Ranges are served only where validators apply (stored 200 responses).
    if v.etag.is_some() {
        b.line("Accept-Ranges", "bytes");
    }
    b.finish(v.content_length)
}

/// True when a `Vary` value already covers `field` (or `*`).
fn varies_on(value: &str, field: &str) -> bool {
    value
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.eq_ignore_ascii_case(field))
}

/// The header block of a redirect: `Location` (already percent-encoded or
/// an absolute URL as written), caching, a small HTML body's type.
pub fn redirect_head(location: &str, cache_control: &str, content_length: u64) -> HeadBlock {
    let mut b = HeadBlockBuilder::new();
    b.line("Location", location)
        .line("Cache-Control", cache_control);
    b.begin_representation()
        .line("Content-Type", "text/html; charset=utf-8");
    b.finish(content_length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date(1_700_000_000), "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(http_date(-5), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn hashed_names() {
        for hashed in [
            "app.3f2a9b1c.js",
            "main.0a1b2c3d4e5f.css",
            "index-BxY7z1Qa.js",
            "vendor-4f8e2a1b.css",
            "chunk-a1b2c3d4e5.mjs",
            "3f2a9b1c0d.app.js",
        ] {
            assert!(is_hashed_name(hashed), "{hashed}");
        }
        for plain in [
            "index.html",
            "features.css",
            "deadbeef.js",
            "20240101.json",
            "release-notes.txt",
            "my-component.js",
            "app.js",
            "abcdef12",
            "photo-20240101.jpg",
            "build-features.js",
        ] {
            assert!(!is_hashed_name(plain), "{plain}");
        }
        for (name, hash) in [
            ("app.3f2a9b1c.js", "3f2a9b1c"),
            ("3f2a9b1c0d.app.js", "3f2a9b1c0d"),
            ("index-BxY7z1Qa.js", "BxY7z1Qa"),
            ("main.chunk-a1b2c3d4e5.mjs", "a1b2c3d4e5"),
        ] {
            assert_eq!(hash_span(name).map(|r| &name[r]), Some(hash), "{name}");
        }
    }

    #[test]
    fn cache_policy() {
        let p = CachePolicy::default();
        assert_eq!(
            p.for_file("a/app.3f2a9b1c.js", "text/javascript"),
            IMMUTABLE_CACHE_CONTROL
        );
        assert_eq!(
            p.for_file("index.html", "text/html; charset=utf-8"),
            HTML_CACHE_CONTROL
        );
        assert_eq!(
            p.for_file("page-a1b2c3d4.html", "text/html; charset=utf-8"),
            HTML_CACHE_CONTROL
        );
        assert_eq!(p.for_file("logo.png", "image/png"), DEFAULT_CACHE_CONTROL);
        let p = CachePolicy {
            override_default: Some("no-cache".into()),
            override_immutable: Some("max-age=60".into()),
            revalidate_all: false,
        };
        assert_eq!(p.for_file("index.html", "text/html"), "no-cache");
        assert_eq!(p.for_file("x.png", "image/png"), "no-cache");
        assert_eq!(p.for_file("a.0123abcd.css", "text/css"), "max-age=60");
        let preview = CachePolicy {
            override_default: Some("public, max-age=60".into()),
            override_immutable: Some("max-age=60".into()),
            revalidate_all: true,
        };
        for (path, content_type) in [
            ("index.html", "text/html"),
            ("x.png", "image/png"),
            ("a.0123abcd.css", "text/css"),
        ] {
            assert_eq!(preview.for_file(path, content_type), "no-cache", "{path}");
        }
        assert_eq!(preview.for_redirect(), "no-cache");
    }

    #[test]
    fn both_blocks_carry_the_same_fields_but_connection_specific_ones() {
        let custom = [
            ("X-Frame-Options".to_owned(), "DENY".to_owned()),
            ("Proxy-Connection".to_owned(), "keep-alive".to_owned()),
            ("Link".to_owned(), "</a.css>; rel=preload".to_owned()),
        ];
        let block = variant_head(&VariantHead {
            etag: Some("\"e\""),
            last_modified: Some(0),
            cache_control: DEFAULT_CACHE_CONTROL,
            vary: true,
            vary_dictionary: true,
            use_as_dictionary: Some("match=\"/a.*.css\", id=\"b\""),
            custom: &custom,
            content_type: "text/css",
            encoding: Encoding::Dcb,
            content_length: 5,
        });
        let lines = String::from_utf8(block.bytes.clone()).unwrap();
        assert!(
            lines.contains("Proxy-Connection: keep-alive\r\n"),
            "{lines}"
        );
        let mut fields = Vec::new();
        let mut at = Vec::new();
        crate::hpack::Decoder::new(0)
            .decode(&block.hpack, &mut Vec::new(), usize::MAX, |name, value| {
                fields.push(format!(
                    "{}: {}",
                    String::from_utf8_lossy(name),
                    String::from_utf8_lossy(value)
                ));
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(
            fields,
            [
                "etag: \"e\"",
                "last-modified: Thu, 01 Jan 1970 00:00:00 GMT",
                "cache-control: public, max-age=3600",
                "vary: Accept-Encoding, Available-Dictionary",
                "use-as-dictionary: match=\"/a.*.css\", id=\"b\"",
                "x-frame-options: DENY",
                "link: </a.css>; rel=preload",
                "content-type: text/css",
                "content-encoding: dcb",
                "accept-ranges: bytes",
                "content-length: 5",
            ]
        );
        // The cut points cut at the same fields.
        for cut in [block.hpack_repr_at, block.hpack_length_at] {
            let mut n = 0;
            crate::hpack::Decoder::new(0)
                .decode(
                    &block.hpack[..cut as usize],
                    &mut Vec::new(),
                    usize::MAX,
                    |_, _| {
                        n += 1;
                        Ok::<(), ()>(())
                    },
                )
                .unwrap();
            at.push(n);
        }
        assert_eq!(at, [7, 10]);
        assert!(lines[block.repr_at as usize..].starts_with("Content-Type: "));
        assert!(lines[block.length_at as usize..].starts_with("Content-Length: "));
    }

    #[test]
    fn etag_is_quoted_hex_of_sixteen_bytes() {
        let mut hash = [0u8; 32];
        hash[0] = 0xab;
        hash[15] = 0x01;
        hash[16] = 0xff;
        assert_eq!(etag_for(&hash), "\"ab000000000000000000000000000001\"");
    }
}
