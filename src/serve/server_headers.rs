//! The header lines kiln adds to every response on its own: the security
//! headers (on by default) and HSTS (`--hsts`). A site may set any of them in
//! `_headers`; the pack then marks the variant (`Variant::overrides`) and the
//! site's line is the one sent. Every combination is prepared once at start,
//! as HTTP/1 lines, as HPACK blocks for HTTP/2 and as QPACK field lines
//! (with `server: kiln`) for HTTP/3, so a response only indexes a table.
//!
//! HTTP/2 sends these fields, with `server: kiln`, on every response of a
//! connection: about 150 of a small response's 260 header bytes. So a
//! connection's first response inserts them into the client's dynamic
//! table (`hpack_indexing`), and the later ones name them by index, a byte
//! each (`write_indexed`), moved by the entries inserted after them (the
//! connection's `hpack::SharedState` counts those, and inserts these again
//! once the table evicted them). `hpack` is the stateless form, for
//! responses whose set differs from the one inserted, or when the
//! client's table is too small.

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
/// The `overrides` bit of `Alt-Svc` (its place in `SERVER_HEADERS`).
const ALT_SVC_BIT: usize = 1 << 6;
/// HSTS's max-age unless `--hsts-max-age` says otherwise: two years.
pub const DEFAULT_HSTS_MAX_AGE: u64 = 63_072_000;

/// The `Strict-Transport-Security` value of `--hsts`, `--hsts-max-age` and
/// `--hsts-no-subdomains`.
pub fn hsts_value(max_age: u64, include_subdomains: bool) -> String {
    let subdomains = if include_subdomains {
        "; includeSubDomains"
    } else {
        ""
    };
    format!("max-age={max_age}{subdomains}")
}

/// The server's own header lines for each `overrides` bit set.
pub struct ServerHeaders {
    /// The HTTP/1 lines, indexed by the bit set of headers the response
    /// already carries.
    blocks: Vec<Vec<u8>>,
    /// The same fields HPACK-encoded (`hpack::encode_lines`), same index.
    hpack_blocks: Vec<Vec<u8>>,
    /// `server: kiln` and the same fields as QPACK field lines
    /// (`qpack::encode_lines`), same index.
    qpack_blocks: Vec<Vec<u8>>,
    /// `server: kiln` and the same fields, inserted into the dynamic table
    /// as they are decoded; same index.
    indexing_blocks: Vec<Vec<u8>>,
    /// What `indexing_blocks` then sends again: one table index per field,
    /// as they are when nothing was inserted after them.
    indexed_refs: Vec<Vec<usize>>,
    /// The room each field `indexing_blocks` inserts takes in a dynamic
    /// table (RFC 7541 §4.1), in order.
    entry_sizes: Vec<Vec<usize>>,
}

/// `server: kiln`, which HTTP/2 sends on every response (HTTP/1 sends its
/// `Server` line with the pack's block).
const SERVER_FIELD: (&[u8], &[u8]) = (b"server", b"kiln");

/// The three forms of HTTP/2's fields for one set of lines: inserting,
/// the indices that then name them, and the table room each inserted
/// field takes.
fn indexing_forms(lines: &[u8]) -> (Vec<u8>, Vec<usize>, Vec<usize>) {
    let fields: Vec<(&[u8], &[u8])> = std::iter::once(SERVER_FIELD)
        .chain(crate::hpack::fields(lines))
        .filter(|(name, _)| !crate::hpack::is_connection_specific(name))
        .collect();
    let mut indexing = Vec::new();
    let mut static_refs = Vec::new();
    let mut sizes = Vec::new();
    for (name, value) in &fields {
        let inserted = crate::hpack::encode_field_indexing(name, value, &mut indexing);
        if inserted {
            sizes.push(name.len() + value.len() + 32);
            static_refs.push(None);
        } else {
            static_refs.push(Some(crate::hpack::static_index(name, value)));
        }
    }
    // The field inserted last is the first dynamic index.
    let inserted = static_refs.iter().filter(|r| r.is_none()).count();
    let mut indexed = Vec::new();
    let mut nth = 0;
    for reference in static_refs {
        match reference {
            Some(index) => {
                indexed.push(index.expect("a field not inserted is in the static table"))
            }
            None => {
                indexed.push(crate::hpack::FIRST_DYNAMIC_INDEX + inserted - 1 - nth);
                nth += 1;
            }
        }
    }
    (indexing, indexed, sizes)
}

impl ServerHeaders {
    /// The security headers if `security`, and HSTS for two years with
    /// its subdomains if `hsts`.
    pub fn new(security: bool, hsts: bool) -> ServerHeaders {
        let value = hsts.then(|| hsts_value(DEFAULT_HSTS_MAX_AGE, true));
        ServerHeaders::with_hsts(security, value.as_deref())
    }

    /// The security headers if `security`, and `Strict-Transport-Security`
    /// with the value `hsts` if given.
    pub fn with_hsts(security: bool, hsts: Option<&str>) -> ServerHeaders {
        let hsts_line = hsts.map(|value| format!("Strict-Transport-Security: {value}\r\n"));
        let mut lines: Vec<Option<&str>> = SECURITY_LINES
            .iter()
            .map(|l| security.then_some(*l))
            .collect();
        lines.push(hsts_line.as_deref());
        // `Alt-Svc`'s place: `with_alt_svc` fills it.
        lines.push(None);
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
        ServerHeaders::from_blocks(blocks)
    }

    /// The HTTP/2 forms of each block of HTTP/1 lines.
    fn from_blocks(blocks: Vec<Vec<u8>>) -> ServerHeaders {
        let hpack_blocks = blocks
            .iter()
            .map(|lines| {
                let mut block = Vec::new();
                crate::hpack::encode_lines(lines, &mut block);
                block
            })
            .collect();
        let qpack_blocks = blocks
            .iter()
            .map(|lines| {
                let mut block = Vec::new();
                crate::qpack::encode_field(SERVER_FIELD.0, SERVER_FIELD.1, &mut block);
                crate::qpack::encode_lines(lines, &mut block);
                block
            })
            .collect();
        let (mut indexing_blocks, mut indexed_refs, mut entry_sizes) =
            (Vec::new(), Vec::new(), Vec::new());
        for lines in &blocks {
            let (indexing, indexed, sizes) = indexing_forms(lines);
            indexing_blocks.push(indexing);
            indexed_refs.push(indexed);
            entry_sizes.push(sizes);
        }
        ServerHeaders {
            blocks,
            hpack_blocks,
            qpack_blocks,
            indexing_blocks,
            indexed_refs,
            entry_sizes,
        }
    }

    /// The same with `Alt-Svc: value` last, when a value is given, on
    /// every response whose block does not set its own (`_headers`).
    pub fn with_alt_svc(self, value: Option<&str>) -> ServerHeaders {
        let Some(value) = value else {
            return self;
        };
        let line = format!("Alt-Svc: {value}\r\n");
        let mut blocks = self.blocks;
        for (overridden, block) in blocks.iter_mut().enumerate() {
            if overridden & ALT_SVC_BIT == 0 {
                block.extend_from_slice(line.as_bytes());
            }
        }
        ServerHeaders::from_blocks(blocks)
    }

    /// The set `overrides` stands for: responses with equal keys send the
    /// same fields.
    pub fn key(&self, overrides: u8) -> u8 {
        (overrides as usize & (self.blocks.len() - 1)) as u8
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

    /// `server: kiln` and the fields of `lines(overrides)` as QPACK field
    /// lines (no dynamic table), for HTTP/3.
    pub fn qpack(&self, overrides: u8) -> &[u8] {
        &self.qpack_blocks[usize::from(self.key(overrides))]
    }

    /// `server: kiln` and the fields of `lines(overrides)`, inserted into
    /// the client's dynamic table as they are decoded, and the room each
    /// entry it inserts takes there, in order.
    pub fn hpack_indexing(&self, overrides: u8) -> (&[u8], &[usize]) {
        let key = usize::from(self.key(overrides));
        (&self.indexing_blocks[key], &self.entry_sizes[key])
    }

    /// Appends the same fields once `hpack_indexing(overrides)` was
    /// inserted into the client's table and `newer` entries after it (a
    /// pack's shared fields): an index each.
    pub fn write_indexed(&self, overrides: u8, newer: usize, out: &mut Vec<u8>) {
        for &index in &self.indexed_refs[usize::from(self.key(overrides))] {
            let index = if index >= crate::hpack::FIRST_DYNAMIC_INDEX {
                index + newer
            } else {
                index
            };
            crate::hpack::encode_indexed(index, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_pack_format() {
        let hsts = ServerHeaders::with_hsts(false, Some("max-age=1"));
        let hsts_line = std::str::from_utf8(hsts.lines(0)).unwrap();
        for (line, name) in SECURITY_LINES
            .iter()
            .chain([&hsts_line])
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
        assert_eq!(
            hsts_only.lines(0),
            b"Strict-Transport-Security: max-age=63072000; includeSubDomains\r\n"
        );
        assert!(hsts_only.lines(0b10_0000).is_empty());
        // A site's own `Alt-Svc` (`_headers`) replaces the server's.
        let alt_svc = ServerHeaders::new(false, true).with_alt_svc(Some("h3=\":443\""));
        assert_eq!(
            alt_svc.lines(0),
            b"Strict-Transport-Security: max-age=63072000; includeSubDomains\r\n\
              Alt-Svc: h3=\":443\"\r\n"
        );
        assert_eq!(
            alt_svc.lines(0b100_0000),
            b"Strict-Transport-Security: max-age=63072000; includeSubDomains\r\n"
        );
        assert_eq!(
            SERVER_HEADERS[ALT_SVC_BIT.trailing_zeros() as usize],
            "alt-svc"
        );
        let overrides = crate::pack::format::server_header_overrides(b"alt-svc: clear\n");
        assert_eq!(usize::from(overrides), ALT_SVC_BIT);
        let short = ServerHeaders::with_hsts(false, Some(&hsts_value(300, false)));
        assert_eq!(
            short.lines(0),
            b"Strict-Transport-Security: max-age=300\r\n"
        );
    }

    /// Each HPACK block decodes to its lines' fields, and each QPACK one
    /// to `server: kiln` and the same fields, with Alt-Svc and without.
    #[test]
    fn hpack_and_qpack_blocks_carry_the_lines() {
        for (security, hsts) in [(true, true), (true, false), (false, true), (false, false)] {
            for alt_svc in [None, Some("h3=\":443\"; ma=86400")] {
                let headers = ServerHeaders::new(security, hsts).with_alt_svc(alt_svc);
                for overrides in 0..=u8::MAX {
                    let lines: Vec<_> = crate::hpack::fields(headers.lines(overrides))
                        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_vec()))
                        .collect();
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
                    let case = format!("{security} {hsts} {alt_svc:?} {overrides:#b}");
                    assert_eq!(fields, lines, "HPACK {case}");
                    let mut section = crate::qpack::FIELD_SECTION_PREFIX.to_vec();
                    section.extend_from_slice(headers.qpack(overrides));
                    let mut fields = Vec::new();
                    crate::qpack::decode_field_section(
                        &section,
                        &mut Vec::new(),
                        usize::MAX,
                        |name, value| {
                            fields.push((name.to_vec(), value.to_vec()));
                            Ok::<(), ()>(())
                        },
                    )
                    .unwrap();
                    let server = (SERVER_FIELD.0.to_vec(), SERVER_FIELD.1.to_vec());
                    assert_eq!(fields[0], server, "QPACK {case}");
                    assert_eq!(fields[1..], lines, "QPACK {case}");
                }
            }
        }
        let all = ServerHeaders::new(true, true);
        assert!(all.hpack(0).len() < all.lines(0).len());
        assert!(ServerHeaders::new(false, false).hpack(0).is_empty());
    }

    /// The inserting block, then the indexed one, decode on one decoder to
    /// the same fields as `server: kiln` and `hpack`, and take the room
    /// they say in its table; also with entries inserted after them.
    #[test]
    fn indexed_blocks_name_what_the_indexing_block_inserted() {
        let decode = |decoder: &mut crate::hpack::Decoder, block: &[u8]| {
            let mut fields = Vec::new();
            decoder
                .decode(block, &mut Vec::new(), usize::MAX, |name, value| {
                    fields.push((name.to_vec(), value.to_vec()));
                    Ok::<(), ()>(())
                })
                .unwrap();
            fields
        };
        for (security, hsts) in [(true, true), (false, false)] {
            let headers = ServerHeaders::new(security, hsts);
            for overrides in 0..64u8 {
                let mut stateless = vec![(b"server".to_vec(), b"kiln".to_vec())];
                stateless.extend(decode(
                    &mut crate::hpack::Decoder::new(0),
                    headers.hpack(overrides),
                ));
                let (indexing, sizes) = headers.hpack_indexing(overrides);
                let mut indexed = Vec::new();
                headers.write_indexed(overrides, 0, &mut indexed);
                let mut decoder = crate::hpack::Decoder::new(4096);
                assert_eq!(decode(&mut decoder, indexing), stateless);
                for _ in 0..3 {
                    assert_eq!(decode(&mut decoder, &indexed), stateless);
                }
                assert_eq!(indexed.len(), stateless.len(), "an index of one byte each");
                assert!(sizes.iter().sum::<usize>() <= 4096);
                // One size per inserted field: the fields the indexed block
                // names in the dynamic table.
                let dynamic = indexed.iter().filter(|&&b| b >= 0x80 | 62).count();
                assert_eq!(sizes.len(), dynamic);
                // Two entries inserted after them: two indices further.
                decode(&mut decoder, b"\x40\x01a\x01b\x40\x01c\x01d");
                indexed.clear();
                headers.write_indexed(overrides, 2, &mut indexed);
                assert_eq!(decode(&mut decoder, &indexed), stateless);
            }
        }
        assert!(
            !ServerHeaders::new(true, true)
                .hpack_indexing(0)
                .1
                .is_empty()
        );
    }
}
