//! Encoding header fields (RFC 7541 §6) for responses: stateless, so that a
//! block encoded once (by `kiln build`, into the pack) can be sent as is on
//! any connection.
//!
//! A field whose name and value are both in the static table is one index
//! (§6.1); any other is a literal without indexing (§6.2.2), its name by
//! static index when the name is there. `encode_field` never uses the
//! dynamic table: nothing is inserted, so no connection's decoder state
//! depends on what was sent. The one exception is `encode_field_indexing`,
//! for the few fields a connection sends on every response (the server's
//! own), inserted once and then referenced (see `ServerHeaders`). A string
//! is Huffman-coded only when that is strictly shorter.
//!
//! Names are lowercased here (HTTP/2 requires lowercase names, RFC 9113
//! §8.2.1), so callers may pass them as HTTP/1 spells them; values are
//! sent as given. Neither is checked for HTTP field syntax: the encoder
//! writes what it is given, the build validates headers before.

use super::huffman;
use super::table::STATIC_TABLE;

/// First byte of an indexed field (§6.1), 7-bit index prefix.
const INDEXED: u8 = 0x80;
/// First byte of a literal without indexing (§6.2.2), 4-bit index prefix.
const LITERAL_WITHOUT_INDEXING: u8 = 0x00;
/// First byte of a literal with incremental indexing (§6.2.1), 6-bit
/// index prefix.
const LITERAL_WITH_INDEXING: u8 = 0x40;
/// First byte of a dynamic table size update (§6.3), 5-bit prefix.
const TABLE_SIZE_UPDATE: u8 = 0x20;
/// The first index of the dynamic table (§2.3.3): the entry inserted last.
pub const FIRST_DYNAMIC_INDEX: usize = 62;
/// Static index of `:status` (with value 200), the name of every status.
const STATUS_NAME_INDEX: usize = 8;

/// Appends `value` as an integer with a `prefix_bits`-bit prefix (§5.1),
/// the first byte's high bits being `flags`. QPACK's integers are the same
/// (RFC 9204 §4.1.1).
///
/// Inlined for the one-byte case, what almost every call writes (indices
/// and lengths of prepared blocks); the longer forms are out of line.
#[inline]
pub(crate) fn encode_integer(value: usize, prefix_bits: u32, flags: u8, out: &mut Vec<u8>) {
    let mask = (1usize << prefix_bits) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    encode_long_integer(value, mask, flags, out);
}

/// [`encode_integer`] of a `value` at least `mask`, the prefix's maximum.
#[inline(never)]
fn encode_long_integer(value: usize, mask: usize, flags: u8, out: &mut Vec<u8>) {
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

pub(crate) fn integer_len(value: usize, prefix_bits: u32) -> usize {
    let mask = (1usize << prefix_bits) - 1;
    if value < mask {
        return 1;
    }
    let mut len = 2;
    let mut rest = value - mask;
    while rest >= 0x80 {
        len += 1;
        rest >>= 7;
    }
    len
}

/// `bytes`, lowercased if `lowercase`: names are, values are not.
fn text(bytes: &[u8], lowercase: bool) -> impl Iterator<Item = u8> + '_ {
    bytes
        .iter()
        .map(move |&b| if lowercase { b.to_ascii_lowercase() } else { b })
}

/// Appends a string literal (§5.2), Huffman-coded if strictly shorter.
fn encode_string(bytes: &[u8], lowercase: bool, out: &mut Vec<u8>) {
    encode_string_prefixed(bytes, lowercase, 7, 0, out);
}

fn string_len(bytes: &[u8], lowercase: bool) -> usize {
    string_len_prefixed(bytes, lowercase, 7)
}

/// Appends a string literal whose length has a `prefix_bits`-bit prefix,
/// the Huffman flag the bit above it and `flags` the bits above that:
/// HPACK's strings have a 7-bit prefix, QPACK's a 7-bit or, for a literal
/// name, a 3-bit one (RFC 9204 §4.1.2). Huffman-coded if strictly shorter.
pub(crate) fn encode_string_prefixed(
    bytes: &[u8],
    lowercase: bool,
    prefix_bits: u32,
    flags: u8,
    out: &mut Vec<u8>,
) {
    let huffman_len = huffman::encoded_len(text(bytes, lowercase));
    if huffman_len < bytes.len() {
        encode_integer(huffman_len, prefix_bits, flags | 1 << prefix_bits, out);
        huffman::encode(text(bytes, lowercase), out);
    } else {
        encode_integer(bytes.len(), prefix_bits, flags, out);
        out.extend(text(bytes, lowercase));
    }
}

/// How many bytes [`encode_string_prefixed`] appends.
pub(crate) fn string_len_prefixed(bytes: &[u8], lowercase: bool, prefix_bits: u32) -> usize {
    let len = huffman::encoded_len(text(bytes, lowercase)).min(bytes.len());
    integer_len(len, prefix_bits) + len
}

/// How a field is represented.
pub(super) enum Representation {
    /// Name and value at this static index.
    Indexed(usize),
    /// Name at this static index, value as a literal.
    IndexedName(usize),
    /// Name and value as literals.
    Literal,
}

pub(super) fn representation(name: &[u8], value: &[u8]) -> Representation {
    // The static table's names are lowercase: comparing without case is
    // comparing the lowercased name.
    let mut name_index = None;
    for (i, &(static_name, static_value)) in STATIC_TABLE.iter().enumerate() {
        if static_name.eq_ignore_ascii_case(name) {
            if static_value == value {
                return Representation::Indexed(i + 1);
            }
            name_index.get_or_insert(i + 1);
        }
    }
    match name_index {
        Some(index) => Representation::IndexedName(index),
        None => Representation::Literal,
    }
}

/// Appends the field `name: value`, `name` lowercased. See the module doc
/// for the representation chosen.
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match representation(name, value) {
        Representation::Indexed(index) => encode_integer(index, 7, INDEXED, out),
        Representation::IndexedName(index) => {
            encode_integer(index, 4, LITERAL_WITHOUT_INDEXING, out);
            encode_string(value, false, out);
        }
        Representation::Literal => {
            out.push(LITERAL_WITHOUT_INDEXING);
            encode_string(name, true, out);
            encode_string(value, false, out);
        }
    }
}

/// Appends `name: value` so that the decoder inserts it into its dynamic
/// table (§6.2.1), unless the static table has the whole field: then it is
/// that index, as in [`encode_field`]. Returns whether the field was
/// inserted.
pub fn encode_field_indexing(name: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool {
    match representation(name, value) {
        Representation::Indexed(index) => {
            encode_integer(index, 7, INDEXED, out);
            return false;
        }
        Representation::IndexedName(index) => encode_integer(index, 6, LITERAL_WITH_INDEXING, out),
        Representation::Literal => {
            out.push(LITERAL_WITH_INDEXING);
            encode_string(name, true, out);
        }
    }
    encode_string(value, false, out);
    true
}

/// The static index of the whole field `name: value` (`name` in any
/// case), if the static table has it.
pub fn static_index(name: &[u8], value: &[u8]) -> Option<usize> {
    match representation(name, value) {
        Representation::Indexed(index) => Some(index),
        _ => None,
    }
}

/// Appends a reference to `index` of the static or dynamic table (§6.1).
pub fn encode_indexed(index: usize, out: &mut Vec<u8>) {
    encode_integer(index, 7, INDEXED, out);
}

/// Appends a dynamic table size update to `size` (§6.3).
pub fn encode_table_size_update(size: usize, out: &mut Vec<u8>) {
    encode_integer(size, 5, TABLE_SIZE_UPDATE, out);
}

/// How many bytes [`encode_field`] appends for `name: value`.
pub fn encoded_field_len(name: &[u8], value: &[u8]) -> usize {
    match representation(name, value) {
        Representation::Indexed(index) => integer_len(index, 7),
        Representation::IndexedName(index) => integer_len(index, 4) + string_len(value, false),
        Representation::Literal => 1 + string_len(name, true) + string_len(value, false),
    }
}

/// The static index of `:status: code`, for the seven codes the static
/// table has.
fn status_index(code: u16) -> Option<u8> {
    Some(match code {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => return None,
    })
}

/// Appends the `:status` pseudo-header: one byte for 200, 204, 206, 304,
/// 400, 404 and 500 (static indices 8 to 14), otherwise a literal with the
/// name's static index. The same bytes as `encode_field(b":status", ...)`
/// with the code's digits, without the table search.
pub fn encode_status(code: u16, out: &mut Vec<u8>) {
    if let Some(index) = status_index(code) {
        out.push(INDEXED | index);
        return;
    }
    // A status code has three digits; any `u16` is written as its digits.
    let mut digits = itoa::Buffer::new();
    encode_integer(STATUS_NAME_INDEX, 4, LITERAL_WITHOUT_INDEXING, out);
    encode_string(digits.format(code).as_bytes(), false, out);
}

/// How many bytes [`encode_status`] appends for `code`.
pub fn encoded_status_len(code: u16) -> usize {
    if status_index(code).is_some() {
        return 1;
    }
    1 + string_len(itoa::Buffer::new().format(code).as_bytes(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_field(name, value, &mut out);
        assert_eq!(out.len(), encoded_field_len(name, value));
        out
    }

    /// RFC 7541 C.1.
    #[test]
    fn integers() {
        let mut out = Vec::new();
        encode_integer(10, 5, 0, &mut out);
        assert_eq!(out, [0x0a]);
        out.clear();
        encode_integer(1337, 5, 0, &mut out);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        out.clear();
        encode_integer(42, 8, 0, &mut out);
        assert_eq!(out, [0x2a]);
        for (value, prefix) in [
            (0, 4),
            (14, 4),
            (15, 4),
            (16, 4),
            (127, 7),
            (128, 7),
            (1 << 20, 5),
        ] {
            out.clear();
            encode_integer(value, prefix, 0, &mut out);
            assert_eq!(out.len(), integer_len(value, prefix), "{value}");
        }
    }

    #[test]
    fn static_pairs_are_one_index() {
        assert_eq!(field(b":status", b"200"), [0x88]);
        assert_eq!(field(b":status", b"304"), [0x8b]);
        assert_eq!(field(b"accept-encoding", b"gzip, deflate"), [0x90]);
        assert_eq!(field(b":authority", b""), [0x81]);
    }

    #[test]
    fn static_names_are_indexed_and_values_literal() {
        // C.2.2's field (literal without indexing, name index 4), with
        // the value Huffman-coded: 9 bytes instead of 12.
        assert_eq!(
            field(b":path", b"/sample/path"),
            b"\x04\x89\x61\x03\xa6\xba\x0a\xc5\x63\x4c\xff"
        );
        // Names of more than one entry take the first index.
        assert_eq!(field(b":method", b"PUT")[0], 0x02);
        // Index 31 does not fit 4 bits: 15 then 16.
        assert_eq!(
            field(b"content-type", b"text/html"),
            b"\x0f\x10\x87\x49\x7c\xa5\x89\xd3\x4d\x1f"
        );
        // A name not in the table: a literal, here Huffman-coded.
        assert_eq!(
            field(b"x-custom-header", b"")[..13],
            *b"\x00\x8b\xf2\xb1\x2d\x42\x4f\x4a\xd3\x94\x72\x16\xcf"
        );
    }

    #[test]
    fn names_are_lowercased() {
        assert_eq!(
            field(b"Content-Type", b"text/html"),
            field(b"content-type", b"text/html")
        );
        assert_eq!(
            field(b"X-Custom-Header", b"Value"),
            field(b"x-custom-header", b"Value")
        );
        assert_eq!(field(b":STATUS", b"200"), [0x88]);
        // Values keep their case.
        assert_ne!(field(b"x-a", b"Value"), field(b"x-a", b"value"));
    }

    #[test]
    fn huffman_only_when_strictly_shorter() {
        // "custom-key": 10 bytes raw, 8 Huffman-coded.
        let out = field(b"custom-key", b"");
        assert_eq!(out[..2], [0x00, 0x88]);
        // A byte with a 28-bit code: raw.
        let out = field(b"x", &[0x01]);
        assert_eq!(out[out.len() - 2..], [0x01, 0x01]);
        // "302" Huffman-coded is 2 bytes.
        assert_eq!(field(b":status", b"302"), [0x08, 0x82, 0x64, 0x02]);
        // "404" is 3 bytes either way: raw (and here indexed anyway).
        let mut out = Vec::new();
        encode_string(b"999", false, &mut out);
        assert_eq!(out, [0x03, b'9', b'9', b'9']);
    }

    #[test]
    fn status_codes() {
        for (code, index) in [
            (200, 8),
            (204, 9),
            (206, 10),
            (304, 11),
            (400, 12),
            (404, 13),
            (500, 14),
        ] {
            let mut out = Vec::new();
            encode_status(code, &mut out);
            assert_eq!(out, [0x80 | index], "{code}");
        }
        let mut out = Vec::new();
        encode_status(302, &mut out);
        assert_eq!(out, [0x08, 0x82, 0x64, 0x02]);
        for code in (0..1000).chain([9999, 10000, u16::MAX]) {
            let mut out = Vec::new();
            encode_status(code, &mut out);
            assert_eq!(out.len(), encoded_status_len(code), "{code}");
            assert_eq!(
                out,
                field(b":status", code.to_string().as_bytes()),
                "{code}"
            );
        }
    }
}
