//! The `Content-Type` of a file from its name, and whether that type is worth
//! compressing.
//!
//! `mime_guess` supplies the long tail; the table below pins the types that
//! browsers and the current registrations agree on where `mime_guess` is
//! outdated or ambiguous (`text/javascript` per RFC 9239, `application/json`
//! without a charset per RFC 8259, fonts under `font/`, ...). Every `text/*`
//! type gets `; charset=utf-8`; XML types are served as `application/xml` or
//! `image/svg+xml` and carry no charset (XML declares its own encoding).
//! Unknown extensions are `application/octet-stream`.

/// Explicit (extension, type) pairs, checked before `mime_guess`.
const OVERRIDES: &[(&str, &str)] = &[
    ("html", "text/html"),
    ("htm", "text/html"),
    ("xhtml", "application/xhtml+xml"),
    ("xht", "application/xhtml+xml"),
    ("css", "text/css"),
    ("js", "text/javascript"),
    ("mjs", "text/javascript"),
    ("cjs", "text/javascript"),
    ("json", "application/json"),
    ("map", "application/json"),
    ("jsonld", "application/ld+json"),
    ("webmanifest", "application/manifest+json"),
    ("wasm", "application/wasm"),
    ("txt", "text/plain"),
    ("md", "text/markdown"),
    ("markdown", "text/markdown"),
    ("csv", "text/csv"),
    ("xml", "application/xml"),
    ("xsl", "application/xml"),
    ("rss", "application/rss+xml"),
    ("atom", "application/atom+xml"),
    ("svg", "image/svg+xml"),
    ("ico", "image/x-icon"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("bmp", "image/bmp"),
    ("woff2", "font/woff2"),
    ("woff", "font/woff"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("eot", "application/vnd.ms-fontobject"),
    ("pdf", "application/pdf"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tgz", "application/gzip"),
    ("zst", "application/zstd"),
    ("br", "application/octet-stream"),
    ("pbf", "application/x-protobuf"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("toml", "application/toml"),
];

/// The full `Content-Type` value for a file path (`charset` included).
pub fn content_type(path: &str) -> String {
    if path.is_empty() || path.ends_with('/') {
        // A folder's generated index page (`SourceFile::path`).
        return with_charset("text/html");
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let essence = OVERRIDES
        .iter()
        .find(|(e, _)| *e == ext)
        .map(|(_, t)| (*t).to_owned())
        .or_else(|| {
            (!ext.is_empty())
                .then(|| mime_guess::from_ext(&ext).first_raw())
                .flatten()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    with_charset(&essence)
}

/// Appends `; charset=utf-8` to `text/*` types that do not name one.
pub fn with_charset(essence: &str) -> String {
    if essence.starts_with("text/") && !essence.contains("charset") {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_owned()
    }
}

/// True when a response of this `Content-Type` usually shrinks under a
/// general-purpose compressor: text, scripts, JSON, XML, SVG, WebAssembly,
/// uncompressed fonts, icons and bitmaps. Already-compressed formats (PNG,
/// JPEG, WebP, AVIF, WOFF2, archives, audio, video) are not.
pub fn is_compressible(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "application/wasm"
                | "application/yaml"
                | "application/toml"
                | "application/x-protobuf"
                | "application/vnd.ms-fontobject"
                | "application/x-font-ttf"
                | "font/ttf"
                | "font/otf"
                | "image/x-icon"
                | "image/vnd.microsoft.icon"
                | "image/bmp"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_types() {
        for (path, expected) in [
            ("a/app.js", "text/javascript; charset=utf-8"),
            ("m.mjs", "text/javascript; charset=utf-8"),
            ("data.json", "application/json"),
            ("app.js.map", "application/json"),
            ("x.wasm", "application/wasm"),
            ("f.woff2", "font/woff2"),
            ("f.woff", "font/woff"),
            ("i.avif", "image/avif"),
            ("i.webp", "image/webp"),
            ("logo.svg", "image/svg+xml"),
            ("site.webmanifest", "application/manifest+json"),
            ("README.md", "text/markdown; charset=utf-8"),
            ("feed.xml", "application/xml"),
            ("favicon.ico", "image/x-icon"),
            ("doc.pdf", "application/pdf"),
            ("index.HTML", "text/html; charset=utf-8"),
            ("style.css", "text/css; charset=utf-8"),
            ("LICENSE", "application/octet-stream"),
            ("blob.unknownext", "application/octet-stream"),
            ("photo.jpg", "image/jpeg"),
        ] {
            assert_eq!(content_type(path), expected, "{path}");
        }
    }

    #[test]
    fn mime_guess_covers_the_long_tail() {
        assert_eq!(content_type("a.mp4"), "video/mp4");
        assert_eq!(content_type("a.tiff"), "image/tiff");
    }

    #[test]
    fn compressible_types() {
        for t in [
            "text/html; charset=utf-8",
            "text/javascript; charset=utf-8",
            "application/json",
            "application/manifest+json",
            "image/svg+xml",
            "application/wasm",
            "font/ttf",
            "font/otf",
            "application/vnd.ms-fontobject",
            "image/x-icon",
            "image/bmp",
            "application/xml",
        ] {
            assert!(is_compressible(t), "{t}");
        }
        for t in [
            "image/png",
            "image/jpeg",
            "image/webp",
            "image/avif",
            "font/woff2",
            "font/woff",
            "application/gzip",
            "application/zip",
            "application/octet-stream",
            "video/mp4",
        ] {
            assert!(!is_compressible(t), "{t}");
        }
    }
}
