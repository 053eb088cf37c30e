//! QPACK, field compression for HTTP/3 (RFC 9204), without a dynamic
//! table: the decoder for request field sections and a stateless encoder
//! for response fields.
//!
//! kiln advertises a dynamic table capacity of 0 (the default of
//! `SETTINGS_QPACK_MAX_TABLE_CAPACITY`) and never inserts into the peer's
//! table, so neither side has encoder or decoder stream state: every field
//! section stands alone, made of static table references and literals.
//!
//! - [`decode_field_section`] hands a section's fields to a callback as
//!   slices of the section or the static table; only Huffman-coded strings
//!   are copied, into a caller's reusable scratch buffer. Anything that
//!   needs a dynamic table (a Required Insert Count other than 0, a
//!   relative or post-base reference) breaks RFC 9204 here (§2.2.3,
//!   §4.5.1.1) and is an [`Error`]: `QPACK_DECOMPRESSION_FAILED`.
//! - [`encode_field`], [`encode_status`] and their `encoded_*_len`
//!   companions write static references and literals, after
//!   [`FIELD_SECTION_PREFIX`], so that `kiln build` can store a response's
//!   section in the pack and any connection can send it as is.
//!
//! QPACK's primitives are HPACK's (§4.1): the prefix integers, string
//! literals and Huffman code are `crate::hpack`'s, with QPACK's prefix
//! widths and its 62-bit integers.

mod decode;
mod encode;
mod table;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::hpack;

pub use decode::{decode_field_section, first_literal_len};
pub use encode::{
    FIELD_SECTION_PREFIX, encode_field, encode_lines, encode_status, encoded_field_len,
    encoded_status_len,
};

/// The HTTP/3 error code of every [`Error`] (RFC 9204 §6): the decoder
/// could not interpret a field section. A connection error.
pub const DECOMPRESSION_FAILED: u64 = 0x0200;

/// A field section that breaks RFC 9204, or that needs the dynamic table
/// kiln gives a capacity of 0. Each is `QPACK_DECOMPRESSION_FAILED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A prefix integer, a string literal or its Huffman code is broken as
    /// it would be in HPACK, which says how (§4.1: QPACK uses HPACK's).
    Primitive(hpack::Error),
    /// A Required Insert Count other than 0 (§4.5.1.1): the section
    /// references dynamic table entries, and with a capacity of 0 there
    /// can be none.
    RequiredInsertCount,
    /// A Base below 0: the sign bit set with a Required Insert Count of 0,
    /// which is never above the Delta Base (§4.5.1.2).
    NegativeBase,
    /// A reference to the dynamic table, relative (T bit 0) or post-base:
    /// every entry's absolute index is at least the Required Insert Count
    /// of 0 (§2.2.3).
    DynamicReference,
    /// A static index past the 99 entries of the static table (§3.1).
    StaticIndexOutOfRange,
}

impl From<hpack::Error> for Error {
    fn from(error: hpack::Error) -> Self {
        Error::Primitive(error)
    }
}

impl<E> From<Error> for DecodeError<E> {
    fn from(error: Error) -> Self {
        DecodeError::Compression(error)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Primitive(error) => write!(f, "QPACK: {error}"),
            Error::RequiredInsertCount => {
                f.write_str("QPACK: Required Insert Count not 0 (no dynamic table)")
            }
            Error::NegativeBase => f.write_str("QPACK: negative Base"),
            Error::DynamicReference => {
                f.write_str("QPACK: dynamic table reference (no dynamic table)")
            }
            Error::StaticIndexOutOfRange => f.write_str("QPACK: static index past the table"),
        }
    }
}

impl std::error::Error for Error {}

/// Why [`decode_field_section`] did not hand out every field of a section:
/// HPACK's outcomes with QPACK's [`Error`]. `Compression` is
/// `QPACK_DECOMPRESSION_FAILED`; `ListTooLarge` and `Field` concern the
/// one request.
pub type DecodeError<E> = hpack::DecodeError<E, Error>;
