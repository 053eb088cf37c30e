//! The header lines kiln adds to every response on its own: the security
//! headers (on by default) and HSTS (`--hsts`). A site may set any of them in
//! `_headers`; the pack then marks the variant (`Variant::overrides`) and the
//! site's line is the one sent. Every combination is prepared once at start,
//! as HTTP/1 lines and as an HPACK block for HTTP/2, so a response only
//! indexes a table.

use crate::pack::format::SERVER_HEADERS;

/// kawipiko's set plus COOP. `X-XSS-Protection` is `0` because the legacy
/// filter that `1; mode=block` turned on is itself an information leak
/// (OWASP advice). In `SERVER_HEADERS` order.
const SECURITY_LINES: [&str; 5] = [
    "X-Content-Type-Options: nosniff\r\n",
    "Referrer-Policy: strict-origin-when-cross-origin\r\n",
    "X-Frame-Options: SAMEORIGIN\r\n",
    "X-XSS-Protection: 0\r\n",
    "Cross-Origin-Opener-Policy: same-origin\r\n",
];
const HSTS_LINE: &str = "Strict-Transport-Security: max-age=63072000; includeSubDomains\r\n";

/// The server's own header lines for each `overrides` bit set.
pub struct ServerHeaders {
    /// The HTTP/1 lines, indexed by the bit set of headers the response
    /// already carries.
    blocks: Vec<Vec<u8>>,
    /// The same fields HPACK-encoded (`hpack::encode_lines`), same index.
    hpack_blocks: Vec<Vec<u8>>,
}

impl ServerHeaders {
    pub fn new(security: bool, hsts: bool) -> ServerHeaders {
        let mut lines: Vec<Option<&str>> = SECURITY_LINES
            .iter()
            .map(|l| security.then_some(*l))
            .collect();
        lines.push(hsts.then_some(HSTS_LINE));
        debug_assert_eq!(lines.len(), SERVER_HEADERS.len());
        let blocks: Vec<Vec<u8>> = (0..1usize << lines.len())
            .map(|overridden| {
                lines
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| overridden & (1 << i) == 0)
                    .filter_map(|(_, line)| line.map(str::as_bytes))
                    .flatten()
                    .copied()
                    .collect()
            })
            .collect();
        let hpack_blocks = blocks
            .iter()
            .map(|lines| {
                let mut block = Vec::new();
                crate::hpack::encode_lines(lines, &mut block);
                block
            })
            .collect();
        ServerHeaders {
            blocks,
            hpack_blocks,
        }
    }

    /// The lines to send when the response itself sets the `overrides` ones.
    pub fn lines(&self, overrides: u8) -> &[u8] {
        &self.blocks[overrides as usize & (self.blocks.len() - 1)]
    }

    /// The fields of `lines(overrides)`, HPACK-encoded without the dynamic
    /// table, for HTTP/2.
    pub fn hpack(&self, overrides: u8) -> &[u8] {
        &self.hpack_blocks[overrides as usize & (self.hpack_blocks.len() - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_pack_format() {
        for (line, name) in SECURITY_LINES
            .iter()
            .chain([&HSTS_LINE])
            .zip(SERVER_HEADERS)
        {
            assert!(
                line.to_ascii_lowercase().starts_with(&format!("{name}:")),
                "{line}"
            );
        }
    }

    #[test]
    fn overridden_lines_are_left_out() {
        let all = ServerHeaders::new(true, true);
        let full = String::from_utf8_lossy(all.lines(0)).into_owned();
        assert_eq!(full.lines().count(), 6);
        let no_frame = String::from_utf8_lossy(all.lines(0b100)).into_owned();
        assert!(!no_frame.contains("X-Frame-Options"));
        assert_eq!(no_frame.lines().count(), 5);
        assert!(ServerHeaders::new(false, false).lines(0).is_empty());
        let hsts_only = ServerHeaders::new(false, true);
        assert_eq!(hsts_only.lines(0), HSTS_LINE.as_bytes());
        assert!(hsts_only.lines(0b10_0000).is_empty());
    }

    #[test]
    fn hpack_blocks_carry_the_lines() {
        for (security, hsts) in [(true, true), (true, false), (false, true), (false, false)] {
            let headers = ServerHeaders::new(security, hsts);
            for overrides in 0..=u8::MAX {
                let mut fields = Vec::new();
                crate::hpack::Decoder::new(0)
                    .decode(
                        headers.hpack(overrides),
                        &mut Vec::new(),
                        usize::MAX,
                        |name, value| {
                            fields.push((name.to_vec(), value.to_vec()));
                            Ok::<(), ()>(())
                        },
                    )
                    .unwrap();
                let lines: Vec<_> = crate::hpack::fields(headers.lines(overrides))
                    .map(|(name, value)| (name.to_ascii_lowercase(), value.to_vec()))
                    .collect();
                assert_eq!(fields, lines, "{security} {hsts} {overrides:#b}");
            }
        }
        let all = ServerHeaders::new(true, true);
        assert!(all.hpack(0).len() < all.lines(0).len());
        assert!(ServerHeaders::new(false, false).hpack(0).is_empty());
    }
}
