//! HPACK, header compression for HTTP/2 (RFC 7541): the decoder for
//! request header blocks and a stateless encoder for response fields.
//!
//! - [`Decoder`] keeps one connection's dynamic table and decodes each
//!   header block through a callback, handing names and values out as
//!   slices of the block or the tables; only Huffman-coded strings are
//!   copied, into a caller's reusable scratch buffer. The table lives in
//!   one byte ring and one ring of positions, allocated on first use
//!   (`table.rs`); the header list limit stops a block early without
//!   losing the table's state. See [`Decoder::decode`] for which errors
//!   end the connection.
//! - [`encode_field`], [`encode_status`] and their `encoded_*_len`
//!   companions write fields with static indices and literals only, never
//!   the dynamic table, so that `kiln build` can store a response's block
//!   in the pack and any connection can send it as is (`encode.rs`).
//! - [`encode_lines`] encodes HTTP/1 header lines (`Name: value\r\n`) the
//!   same way, leaving out connection-specific fields, and [`fields`]
//!   reads such lines: kiln decides each response's fields once, as lines,
//!   and both protocols send them (`lines.rs`).
//! - [`SharedTable`] is a pack's shared fields, chosen at build time, and
//!   [`SharedState`] what a connection inserted of them: each response
//!   inserts the shared fields it carries the first time, then names them
//!   by index (`shared.rs`).
//! - `huffman.rs` is the Huffman code, decoded four bits per table lookup
//!   by a state machine built at compile time.
//! - The prefix integers, string literals and field delivery (the list
//!   limit, the callback's error) are shared with `crate::qpack`, whose
//!   primitives are HPACK's (RFC 9204 §4.1) with other prefix widths.
//!
//! # Why not a crate
//!
//! The rule was: a maintained crate only if it is sans-IO, allocation-aware
//! and fuzzed. Checked in the published sources of each candidate:
//! - `hpack` 0.3.0 (hpack-rs): no release since 2016. `decode` returns a
//!   `Vec<(Vec<u8>, Vec<u8>)>`, two allocations per field (`decode_with_cb`
//!   hands out `Cow`s, still allocating for every Huffman-coded string and
//!   every field to be indexed); the dynamic table is a
//!   `VecDeque<(Vec<u8>, Vec<u8>)>`, two allocations per entry; Huffman
//!   strings are decoded bit by bit through nested `HashMap`s into a new
//!   `Vec`; there is no header list limit, so an HPACK bomb is decoded in
//!   full; and a truncated size update panics (`.ok().unwrap()`).
//!   `hpack-patched` 0.3.0 is a copy that fixes only that panic.
//! - `fluke-hpack` 0.3.1 and `loona-hpack` 0.4.3: forks of hpack-rs with
//!   the same table, Huffman decoder and lack of a list limit.
//! - `httlib-hpack` 0.1.3: decodes into `Vec<(Vec<u8>, Vec<u8>, u8)>` (a
//!   `Vec` per name and per value), a `VecDeque<(Vec<u8>, Vec<u8>)>` table,
//!   and bounds a block by field count, not by header list size.
//! - `h2`'s HPACK is a private module (`mod hpack` in h2 0.4, even with its
//!   `unstable` feature), built on `bytes` and h2's codec.
//!
//! None of these packages ships a fuzz target.

mod decode;
mod encode;
mod huffman;
mod lines;
mod shared;
mod table;
#[cfg(test)]
pub(crate) mod tests;

use std::fmt;

pub use decode::{Decoder, first_literal_len};
pub(crate) use decode::{
    Delivery, Literal, Span as StringSpan, materialize, read_literal, read_prefix_integer,
};
pub use encode::{
    FIRST_DYNAMIC_INDEX, encode_field, encode_field_indexing, encode_indexed, encode_status,
    encode_table_size_update, encoded_field_len, encoded_status_len, static_index,
};
pub(crate) use encode::{encode_integer, encode_string_prefixed, integer_len, string_len_prefixed};
pub use lines::{CONNECTION_SPECIFIC, encode_lines, fields, is_connection_specific};
pub use shared::{
    MAX_SHARED_ENTRIES, SHARED_TABLE_BUDGET, SPAN_LEN, SharedState, SharedTable, SharedView, Span,
    indexed_len,
};

/// A header block that breaks RFC 7541. In HTTP/2 every one is a
/// connection error of type `COMPRESSION_ERROR` (RFC 9113 §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// An indexed field with index 0 (§6.1).
    ZeroIndex,
    /// An index past the static and dynamic tables (§2.3.3).
    IndexOutOfRange,
    /// An integer with more continuation bytes than any acceptable value
    /// needs (§5.1; see `MAX_INTEGER_CONTINUATION_BYTES`).
    IntegerTooLong,
    /// The block ends inside a representation: within an integer, or
    /// before a string it announces.
    Truncated,
    /// A string's length goes past the end of the block (§5.2).
    StringPastEnd,
    /// A Huffman-coded string contains EOS (§5.2).
    HuffmanEos,
    /// A Huffman-coded string ends with more than 7 bits of padding (§5.2).
    HuffmanPaddingTooLong,
    /// A Huffman-coded string's padding is not the start of EOS, all ones
    /// (§5.2).
    HuffmanPaddingNotOnes,
    /// A dynamic table size update above the `SETTINGS_HEADER_TABLE_SIZE`
    /// this side advertised (§6.3).
    SizeUpdateAboveMax,
    /// A dynamic table size update after a field (§4.2: only at the start
    /// of a block).
    SizeUpdateNotAtStart,
    /// More than two dynamic table size updates at the start of a block
    /// (§4.2 has use for two at most).
    TooManySizeUpdates,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::ZeroIndex => "HPACK: index 0",
            Error::IndexOutOfRange => "HPACK: index past the tables",
            Error::IntegerTooLong => "HPACK: integer too long",
            Error::Truncated => "HPACK: block ends inside a representation",
            Error::StringPastEnd => "HPACK: string past the end of the block",
            Error::HuffmanEos => "HPACK: EOS in a Huffman-coded string",
            Error::HuffmanPaddingTooLong => "HPACK: Huffman padding longer than 7 bits",
            Error::HuffmanPaddingNotOnes => "HPACK: Huffman padding not all ones",
            Error::SizeUpdateAboveMax => "HPACK: table size update above the maximum",
            Error::SizeUpdateNotAtStart => "HPACK: table size update after a field",
            Error::TooManySizeUpdates => "HPACK: more than two table size updates",
        })
    }
}

impl std::error::Error for Error {}

/// Why [`Decoder::decode`] did not hand out every field of a block; with
/// `C` = [`crate::qpack::Error`], why `qpack::decode_field_section` did
/// not hand out every field of a section.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError<E, C = Error> {
    /// The block breaks RFC 7541: connection-fatal (`COMPRESSION_ERROR`),
    /// the dynamic table is no longer in step with the peer's. (In QPACK:
    /// the section breaks RFC 9204, `QPACK_DECOMPRESSION_FAILED`.)
    Compression(C),
    /// The header list exceeds the limit. The rest of the block was read,
    /// the table is in step: only this request fails.
    ListTooLarge,
    /// The field callback's error. The rest of the block was read without
    /// calling it again, the table is in step.
    Field(E),
}

impl<E> From<Error> for DecodeError<E> {
    fn from(error: Error) -> Self {
        DecodeError::Compression(error)
    }
}

impl<E: fmt::Display, C: fmt::Display> fmt::Display for DecodeError<E, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Compression(error) => error.fmt(f),
            DecodeError::ListTooLarge => f.write_str("header list too large"),
            DecodeError::Field(error) => error.fmt(f),
        }
    }
}

impl<E: fmt::Debug + fmt::Display, C: fmt::Debug + fmt::Display> std::error::Error
    for DecodeError<E, C>
{
}
