//! Encoding field lines (RFC 9204 §4.5) for responses: stateless, so that a
//! section encoded once (by `kiln build`, into the pack) can be sent as is
//! on any connection.
//!
//! A field whose name and value are both in the static table is one indexed
//! field line (§4.5.2); any other is a literal, its name by static
//! reference when the table has the name (§4.5.4), else a literal name
//! (§4.5.6); the never-indexed bit is 0, as nothing kiln sends is secret.
//! A string is Huffman-coded only when that is strictly shorter. Nothing
//! refers to the dynamic table, so a section starts with
//! [`FIELD_SECTION_PREFIX`].
//!
//! Names are lowercased here (HTTP/3 requires lowercase names, RFC 9114
//! §4.2), so callers may pass them as HTTP/1 spells them; values are sent
//! as given. Neither is checked for HTTP field syntax: the encoder writes
//! what it is given, the build validates headers before.

use super::table::STATIC_TABLE;
use crate::hpack::{
    encode_integer, encode_string_prefixed, fields, integer_len, is_connection_specific,
    string_len_prefixed,
};

/// The encoded field section prefix of every section kiln writes (§4.5.1):
/// Required Insert Count 0, then sign bit 0 and Delta Base 0, so Base 0.
pub const FIELD_SECTION_PREFIX: [u8; 2] = [0, 0];

/// First byte of an indexed field line with T = 1 (§4.5.2), 6-bit index.
const INDEXED_STATIC: u8 = 0xc0;
/// First byte of a literal with a static name reference, N = 0, T = 1
/// (§4.5.4), 4-bit index.
const LITERAL_STATIC_NAME: u8 = 0x50;
/// First byte of a literal with a literal name, N = 0 (§4.5.6); the name's
/// Huffman flag and 3-bit length prefix follow.
const LITERAL_NAME: u8 = 0x20;
/// Static index of `:status: 103`, the first entry named `:status`.
const STATUS_NAME_INDEX: usize = 24;

/// How a field is represented.
enum Representation {
    /// Name and value at this static index.
    Indexed(usize),
    /// Name at this static index, value as a literal.
    IndexedName(usize),
    /// Name and value as literals.
    Literal,
}

fn representation(name: &[u8], value: &[u8]) -> Representation {
    // The static table's names are lowercase: comparing without case is
    // comparing the lowercased name.
    let mut name_index = None;
    for (i, &(static_name, static_value)) in STATIC_TABLE.iter().enumerate() {
        if static_name.eq_ignore_ascii_case(name) {
            if static_value == value {
                return Representation::Indexed(i);
            }
            name_index.get_or_insert(i);
        }
    }
    match name_index {
        Some(index) => Representation::IndexedName(index),
        None => Representation::Literal,
    }
}

/// Appends the field line `name: value`, `name` lowercased. See the module
/// doc for the representation chosen.
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match representation(name, value) {
        Representation::Indexed(index) => encode_integer(index, 6, INDEXED_STATIC, out),
        Representation::IndexedName(index) => {
            encode_integer(index, 4, LITERAL_STATIC_NAME, out);
            encode_string_prefixed(value, false, 7, 0, out);
        }
        Representation::Literal => {
            encode_string_prefixed(name, true, 3, LITERAL_NAME, out);
            encode_string_prefixed(value, false, 7, 0, out);
        }
    }
}

/// How many bytes [`encode_field`] appends for `name: value`.
pub fn encoded_field_len(name: &[u8], value: &[u8]) -> usize {
    match representation(name, value) {
        Representation::Indexed(index) => integer_len(index, 6),
        Representation::IndexedName(index) => {
            integer_len(index, 4) + string_len_prefixed(value, false, 7)
        }
        Representation::Literal => {
            string_len_prefixed(name, true, 3) + string_len_prefixed(value, false, 7)
        }
    }
}

/// The static index of `:status: code`, for the fourteen codes the static
/// table has.
fn status_index(code: u16) -> Option<u8> {
    Some(match code {
        100 => 63,
        103 => 24,
        200 => 25,
        204 => 64,
        206 => 65,
        302 => 66,
        304 => 26,
        400 => 67,
        403 => 68,
        404 => 27,
        421 => 69,
        425 => 70,
        500 => 71,
        503 => 28,
        _ => return None,
    })
}

/// Appends the `:status` pseudo-header field line: one byte for the codes
/// the static table has (all below index 64 fit the 6-bit prefix; 64 to 71
/// take two bytes), otherwise a literal with the name's static index. The
/// same bytes as `encode_field(b":status", ...)` with the code's digits,
/// without the table search.
pub fn encode_status(code: u16, out: &mut Vec<u8>) {
    if let Some(index) = status_index(code) {
        encode_integer(usize::from(index), 6, INDEXED_STATIC, out);
        return;
    }
    // A status code has three digits; any `u16` is written as its digits.
    let mut digits = itoa::Buffer::new();
    encode_integer(STATUS_NAME_INDEX, 4, LITERAL_STATIC_NAME, out);
    encode_string_prefixed(digits.format(code).as_bytes(), false, 7, 0, out);
}

/// How many bytes [`encode_status`] appends for `code`.
pub fn encoded_status_len(code: u16) -> usize {
    if let Some(index) = status_index(code) {
        return integer_len(usize::from(index), 6);
    }
    integer_len(STATUS_NAME_INDEX, 4)
        + string_len_prefixed(itoa::Buffer::new().format(code).as_bytes(), false, 7)
}

/// Appends the fields of HTTP/1 header lines (see `hpack::fields`) as
/// field lines with [`encode_field`], connection-specific fields left out
/// (RFC 9114 §4.2 forbids them as RFC 9113 does): the section kiln
/// prepares from a response's lines, without its prefix.
pub fn encode_lines(lines: &[u8], out: &mut Vec<u8>) {
    for (name, value) in fields(lines) {
        if !is_connection_specific(name) {
            encode_field(name, value, out);
        }
    }
}
