//! The live preview's script tag (`kiln serve DIR --watch`): put into
//! every HTML page of such a preview while it is built, before it is
//! compressed, so that its prepared headers, validators and lengths are
//! those of the page as served; never into a pack `kiln build` writes
//! (`BuildOptions::live_reload` is off there).
//!
//! The tag loads a script from the preview's own origin at a fixed path
//! (`SCRIPT_PATH`), which a page's `Content-Security-Policy` of
//! `script-src 'self'` allows, where an inline script would need the
//! policy changed. The server answers that path and `EVENTS_PATH`, the
//! event stream the script listens to (`serve::handler::live`).
//!
//! Where: before the page's first `</head>` if it comes within
//! `HEAD_WINDOW` bytes (every page a generator writes), else at the very
//! end (a page without `</head>`, which HTML allows: the browser runs a
//! script there too). The place is found from the page's first bytes
//! alone, so that a page too large to hold is streamed through the same
//! rule, and the length of a page with the tag is known without reading
//! it: its own plus `TAG`'s.

use std::io::Read;

/// Where the preview's pages load the script from.
pub const SCRIPT_PATH: &str = "/_kiln/live.js";
/// The event stream the script listens to.
pub const EVENTS_PATH: &str = "/_kiln/events";
/// What is put into every page.
pub const TAG: &[u8] = b"<script src=\"/_kiln/live.js\" defer></script>";
/// How far into a page `</head>` is looked for.
pub const HEAD_WINDOW: usize = 64 * 1024;

/// Where `TAG` goes in a page that starts with `start` (at most
/// `HEAD_WINDOW` bytes of it; all of it when shorter) and is `len` bytes
/// long: before the first `</head>` (any case, spaces allowed before the
/// `>`; not `</header>`), else at the end.
pub fn insertion_point(start: &[u8], len: u64) -> u64 {
    let start = &start[..start.len().min(HEAD_WINDOW)];
    start
        .windows(7)
        .position(|w| {
            w[..6].eq_ignore_ascii_case(b"</head") && (w[6] == b'>' || w[6].is_ascii_whitespace())
        })
        .map_or(len, |at| at as u64)
}

/// `page` with `TAG` put in.
pub fn inject(page: &[u8]) -> Vec<u8> {
    let at = insertion_point(page, page.len() as u64) as usize;
    let mut out = Vec::with_capacity(page.len() + TAG.len());
    out.extend_from_slice(&page[..at]);
    out.extend_from_slice(TAG);
    out.extend_from_slice(&page[at..]);
    out
}

/// A page read in pieces with `TAG` put in: `rest` is the page after the
/// `start` already read from it (at most `HEAD_WINDOW` bytes, or all of
/// a shorter page), whose full length is `len`.
pub fn injected_reader(
    start: Vec<u8>,
    rest: Box<dyn Read + Send>,
    len: u64,
) -> Box<dyn Read + Send> {
    let at = insertion_point(&start, len);
    if at < start.len() as u64 {
        let mut start = start;
        let after = start.split_off(at as usize);
        Box::new(
            std::io::Cursor::new(start)
                .chain(TAG)
                .chain(std::io::Cursor::new(after))
                .chain(rest),
        )
    } else {
        // At the end: after every byte the file still has.
        Box::new(std::io::Cursor::new(start).chain(rest).chain(TAG))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(page: &[u8]) -> Vec<u8> {
        let cut = page.len().min(HEAD_WINDOW);
        let rest = Box::new(std::io::Cursor::new(page[cut..].to_vec()));
        let mut out = Vec::new();
        injected_reader(page[..cut].to_vec(), rest, page.len() as u64)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn the_tag_goes_before_the_head_ends_else_at_the_end() {
        let tag = std::str::from_utf8(TAG).unwrap();
        for (page, expected) in [
            (
                "<!doctype html><head><title>t</title></HEAD><body>x</body>".to_owned(),
                format!("<!doctype html><head><title>t</title>{tag}</HEAD><body>x</body>"),
            ),
            (
                "<!doctype html><title>t</title><header>h</header>".to_owned(),
                format!("<!doctype html><title>t</title><header>h</header>{tag}"),
            ),
            (String::new(), tag.to_owned()),
            (
                // Beyond the window: at the end.
                format!("{}</head>", " ".repeat(HEAD_WINDOW)),
                format!("{}</head>{tag}", " ".repeat(HEAD_WINDOW)),
            ),
        ] {
            let injected = inject(page.as_bytes());
            assert_eq!(String::from_utf8_lossy(&injected), expected);
            assert_eq!(injected.len(), page.len() + TAG.len());
            assert_eq!(streamed(page.as_bytes()), injected, "streamed alike");
        }
        // A large page whose head ends early, streamed.
        let mut page = b"<html><head></head>".to_vec();
        page.extend(std::iter::repeat_n(b'x', 3 * HEAD_WINDOW));
        assert_eq!(streamed(&page), inject(&page));
    }
}
