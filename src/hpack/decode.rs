//! Decoding header blocks (RFC 7541 §3, §6): the request side of HTTP/2.

use std::ops::Range;

use super::table::{
    DynamicTable, ENTRY_OVERHEAD, MAX_SETTINGS_TABLE_SIZE, NameSource, STATIC_TABLE,
};
use super::{DecodeError, Error, huffman};

/// Most continuation bytes an integer may take (§5.1). Four carry 28 bits:
/// any larger value is an error anyway (no block, string, index or table
/// size kiln accepts comes near 2^28), and the bound keeps a long run of
/// continuation bytes from overflowing or stalling the decoder.
const MAX_INTEGER_CONTINUATION_BYTES: usize = 4;

/// Most dynamic table size updates at the start of one block. RFC 7541
/// §4.2 describes at most two (the smallest size since the last block,
/// then the final one); more serve no purpose.
const MAX_SIZE_UPDATES: usize = 2;

/// Reads an integer with an `prefix_bits`-bit prefix at `block[*pos]`
/// (§5.1), advancing `pos`.
fn read_integer(block: &[u8], pos: &mut usize, prefix_bits: u32) -> Result<usize, Error> {
    read_prefix_integer(block, pos, prefix_bits, MAX_INTEGER_CONTINUATION_BYTES)
        .map(|value| value as usize)
}

/// Reads an integer with a `prefix_bits`-bit prefix (1 to 8) at
/// `block[*pos]`, advancing `pos`, with at most `max_continuation_bytes`
/// (at most 9) bytes after the prefix: HPACK's integers (§5.1), which QPACK
/// uses too (RFC 9204 §4.1.1) with a wider bound. Nine continuation bytes
/// carry 63 bits, so the sum cannot overflow a `u64`.
pub(crate) fn read_prefix_integer(
    block: &[u8],
    pos: &mut usize,
    prefix_bits: u32,
    max_continuation_bytes: usize,
) -> Result<u64, Error> {
    debug_assert!((1..=8).contains(&prefix_bits) && max_continuation_bytes <= 9);
    let mask = (1u64 << prefix_bits) - 1;
    let first = u64::from(*block.get(*pos).ok_or(Error::Truncated)?) & mask;
    *pos += 1;
    if first < mask {
        return Ok(first);
    }
    let mut value = mask;
    for i in 0..max_continuation_bytes {
        let byte = *block.get(*pos).ok_or(Error::Truncated)?;
        *pos += 1;
        value += u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Error::IntegerTooLong)
}

/// The length of the first field of `block` if it is a literal without
/// indexing (the form `encode_field` writes for a field the static table
/// does not hold whole), else `None`: lets a prepared block go out without
/// its first field, as a redirect does whose `location` is written again
/// with the request's query. Reads no more than that field; allocates
/// nothing.
pub fn first_literal_len(block: &[u8]) -> Option<usize> {
    if block.first()? & 0xf0 != 0 {
        return None;
    }
    let mut pos = 0;
    if read_integer(block, &mut pos, 4).ok()? == 0 {
        read_literal(block, &mut pos, 7, MAX_INTEGER_CONTINUATION_BYTES).ok()?;
    }
    read_literal(block, &mut pos, 7, MAX_INTEGER_CONTINUATION_BYTES).ok()?;
    Some(pos)
}

/// The room in a dynamic table (§4.1: name, value and 32 bytes) of the
/// entry that `repr`, a whole literal with incremental indexing (§6.2.1),
/// inserts; `None` if `repr` is anything else. Decodes nothing into
/// memory: a connection calls it when it inserts a pack's shared field.
pub fn inserted_entry_size(repr: &[u8]) -> Option<usize> {
    if repr.first()? & 0xc0 != 0x40 {
        return None;
    }
    let mut pos = 0;
    let name_len = match read_integer(repr, &mut pos, 6).ok()? {
        0 => literal_len(
            repr,
            &read_literal(repr, &mut pos, 7, MAX_INTEGER_CONTINUATION_BYTES).ok()?,
        )?,
        index => static_entry(index)?.0.len(),
    };
    let value = read_literal(repr, &mut pos, 7, MAX_INTEGER_CONTINUATION_BYTES).ok()?;
    (pos == repr.len()).then_some(())?;
    Some(name_len + literal_len(repr, &value)? + ENTRY_OVERHEAD)
}

/// The decoded length of a literal of `block`.
fn literal_len(block: &[u8], literal: &Literal) -> Option<usize> {
    let bytes = &block[literal.range.clone()];
    if literal.huffman {
        huffman::decoded_len(bytes).ok()
    } else {
        Some(bytes.len())
    }
}

/// A string literal as it stands in the block (§5.2), not decoded yet.
#[derive(Clone, Debug)]
pub(crate) struct Literal {
    /// Whether the bytes are Huffman-coded.
    huffman: bool,
    /// Where the bytes are in the block.
    range: Range<usize>,
}

/// Reads the string literal at `block[*pos]`, advancing `pos` past it: its
/// length an integer with a `prefix_bits`-bit prefix (7 in HPACK; 7 or 3
/// in QPACK, RFC 9204 §4.1.2) and at most `max_continuation_bytes` (see
/// [`read_prefix_integer`]), the Huffman flag the bit above the prefix.
pub(crate) fn read_literal(
    block: &[u8],
    pos: &mut usize,
    prefix_bits: u32,
    max_continuation_bytes: usize,
) -> Result<Literal, Error> {
    let huffman = *block.get(*pos).ok_or(Error::Truncated)? & 1 << prefix_bits != 0;
    let len = read_prefix_integer(block, pos, prefix_bits, max_continuation_bytes)?;
    if len > (block.len() - *pos) as u64 {
        return Err(Error::StringPastEnd);
    }
    let range = *pos..*pos + len as usize;
    *pos = range.end;
    Ok(Literal { huffman, range })
}

/// Where a literal's bytes are once decoded. Resolved to a slice only when
/// handed out, so that the borrows of the block, the scratch buffer and the
/// table stay apart.
#[derive(Clone, Debug)]
pub(crate) enum Span {
    /// Raw bytes in the block.
    Block(Range<usize>),
    /// Huffman-decoded bytes in the scratch buffer.
    Scratch(Range<usize>),
}

impl Span {
    pub(crate) fn resolve<'a>(&self, block: &'a [u8], scratch: &'a [u8]) -> &'a [u8] {
        match self {
            Span::Block(range) => &block[range.clone()],
            Span::Scratch(range) => &scratch[range.clone()],
        }
    }
}

/// Where a literal field's name is.
#[derive(Clone, Debug)]
enum Name {
    /// A string literal in the block.
    Literal(Span),
    /// A static table entry's name.
    Static(&'static [u8]),
    /// A dynamic table entry's name: offset and length in its byte ring.
    Dynamic(usize, usize),
}

/// Makes a literal's bytes available: raw ones in place, Huffman-coded
/// ones decoded into `scratch`, storing at most `cap` bytes there. Returns
/// the span and its length, or `None` if it decoded to more than `cap`
/// (the string is still checked to its end).
pub(crate) fn materialize(
    block: &[u8],
    literal: &Literal,
    scratch: &mut Vec<u8>,
    cap: usize,
) -> Result<Option<(Span, usize)>, Error> {
    if !literal.huffman {
        let len = literal.range.len();
        return Ok(Some((Span::Block(literal.range.clone()), len)));
    }
    let start = scratch.len();
    if !huffman::decode(&block[literal.range.clone()], scratch, cap)? {
        return Ok(None);
    }
    Ok(Some((
        Span::Scratch(start..scratch.len()),
        scratch.len() - start,
    )))
}

/// Where a block's fields stand against the header list limit and the
/// field callback; QPACK's field sections count the same (RFC 9114
/// §4.2.2), and `C` is the codec's error type.
pub(crate) struct Delivery<E, C> {
    /// What the header list may still take: name + value + 32 per field.
    budget: usize,
    /// The first stream-level failure (the limit, or the callback's error),
    /// returned once the block is read. Once set, no more fields are
    /// handed out.
    failure: Option<DecodeError<E, C>>,
}

impl<E, C> Delivery<E, C> {
    /// Nothing handed out yet, `limit` to go.
    pub(crate) fn new(limit: usize) -> Self {
        Delivery {
            budget: limit,
            failure: None,
        }
    }

    /// How many bytes of a field's name and value are worth decoding: what
    /// the header list may still take, none once a failure stopped it.
    pub(crate) fn cap(&self) -> usize {
        match self.failure {
            None => self.budget.saturating_sub(ENTRY_OVERHEAD),
            Some(_) => 0,
        }
    }

    /// The outcome once the whole block was read without a codec error.
    pub(crate) fn finish(self) -> Result<(), DecodeError<E, C>> {
        match self.failure {
            None => Ok(()),
            Some(failure) => Err(failure),
        }
    }

    /// Hands a field to the callback if no failure came before and the
    /// header list can take it.
    pub(crate) fn hand_out(
        &mut self,
        name: &[u8],
        value: &[u8],
        on_field: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) {
        if self.failure.is_some() {
            return;
        }
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.budget {
            self.failure = Some(DecodeError::ListTooLarge);
            return;
        }
        self.budget -= size;
        if let Err(e) = on_field(name, value) {
            self.failure = Some(DecodeError::Field(e));
        }
    }

    /// Records a field too long to decode within the budget.
    pub(crate) fn too_large(&mut self) {
        if self.failure.is_none() {
            self.failure = Some(DecodeError::ListTooLarge);
        }
    }
}

/// The static table entry at `index` (1-based), if `index` is in it.
fn static_entry(index: usize) -> Option<(&'static [u8], &'static [u8])> {
    STATIC_TABLE.get(index.checked_sub(1)?).copied()
}

/// The decoding context of one HTTP/2 connection's request header blocks:
/// the dynamic table, in step with the peer's encoder.
///
/// Blocks must be decoded in the order they arrive, each whole (HEADERS
/// with its CONTINUATION fragments joined), including blocks of streams
/// the connection refuses or resets: each may change the table.
#[derive(Debug)]
pub struct Decoder {
    /// The entries the peer indexed; empty, and unallocated, until it
    /// indexes one.
    table: DynamicTable,
}

impl Decoder {
    /// A decoder for a connection that advertised `max_table_size` as
    /// `SETTINGS_HEADER_TABLE_SIZE` (4096 unless changed, which kiln keeps).
    /// Values above 16 MiB are taken as 16 MiB. Allocates nothing: the
    /// table's `2 × max_table_size` bytes are allocated on the first
    /// insertion.
    pub fn new(max_table_size: usize) -> Self {
        Decoder {
            table: DynamicTable::new(max_table_size.min(MAX_SETTINGS_TABLE_SIZE)),
        }
    }

    /// Decodes one header block, calling `on_field(name, value)` for each
    /// field in order. Names and values are borrowed from `block` or the
    /// tables where they are stored as is; Huffman-coded ones are decoded
    /// into `scratch`, which is cleared for every field and so holds at
    /// most one field: reused across blocks, it stops growing once warm.
    /// Nothing else is allocated.
    ///
    /// `limit` bounds the header list (RFC 9113 §6.5.2
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`): the sum over the fields of name +
    /// value + 32. Once a field would exceed it, or once `on_field` returns
    /// an error, no more fields are handed out and no more strings are
    /// decoded except those the dynamic table must store; the rest of the
    /// block is still read, so that the table stays in step with the
    /// peer's, and the outcome is [`DecodeError::ListTooLarge`] or
    /// [`DecodeError::Field`]. These two leave the connection usable: the
    /// HTTP/2 layer can refuse the one request (431, or a stream error).
    /// Reading the rest costs no more than the block's length: an index
    /// costs no copy, so a block repeating a reference to a large entry (an
    /// HPACK bomb) ends after the limit without using memory.
    ///
    /// [`DecodeError::Compression`] is connection-fatal: the block breaks
    /// RFC 7541 and the table is left as far as the decoder got, so the
    /// connection must end with `COMPRESSION_ERROR` (RFC 9113 §4.3). It
    /// takes precedence over a stream-level failure earlier in the block.
    ///
    /// `scratch` holds at most `max(limit, max_table_size)` bytes of one
    /// field (a string the table must store is decoded even past the
    /// limit), and at most 8/5 of the block's length.
    pub fn decode<E>(
        &mut self,
        block: &[u8],
        scratch: &mut Vec<u8>,
        limit: usize,
        mut on_field: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), DecodeError<E>> {
        scratch.clear();
        let mut delivery = Delivery::new(limit);
        let mut size_updates = 0;
        let mut at_start = true;
        let mut pos = 0;
        while let Some(&first) = block.get(pos) {
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                at_start = false;
                let index = read_integer(block, &mut pos, 7)?;
                let (name, value) = self.field(index)?;
                delivery.hand_out(name, value, &mut on_field);
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3), only at the start of a
                // block (§4.2).
                if !at_start {
                    return Err(Error::SizeUpdateNotAtStart.into());
                }
                size_updates += 1;
                if size_updates > MAX_SIZE_UPDATES {
                    return Err(Error::TooManySizeUpdates.into());
                }
                let max_size = read_integer(block, &mut pos, 5)?;
                if max_size > self.table.settings_max() {
                    return Err(Error::SizeUpdateAboveMax.into());
                }
                self.table.set_max_size(max_size);
            } else {
                at_start = false;
                self.literal(block, &mut pos, scratch, &mut delivery, &mut on_field)?;
            }
        }
        delivery.finish()
    }

    /// Decodes the literal field (§6.2) at `block[*pos]`: with incremental
    /// indexing (01), without indexing (0000) or never indexed (0001); the
    /// last two differ only for intermediaries, which kiln is not.
    fn literal<E>(
        &mut self,
        block: &[u8],
        pos: &mut usize,
        scratch: &mut Vec<u8>,
        delivery: &mut Delivery<E, Error>,
        on_field: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), Error> {
        let indexing = block[*pos] & 0x40 != 0;
        let index = read_integer(block, pos, if indexing { 6 } else { 4 })?;
        let name_literal = match index {
            0 => Some(read_literal(block, pos, 7, MAX_INTEGER_CONTINUATION_BYTES)?),
            _ => None,
        };
        let value_literal = read_literal(block, pos, 7, MAX_INTEGER_CONTINUATION_BYTES)?;
        scratch.clear();
        // How much of the field to decode: what the header list may still
        // take while fields are handed out, and what the table can hold if
        // it must store the field.
        let mut cap = delivery.cap();
        if indexing {
            cap = cap.max(self.table.max_size().saturating_sub(ENTRY_OVERHEAD));
        }
        let name = match &name_literal {
            Some(literal) => materialize(block, literal, scratch, cap)?
                .map(|(span, len)| (Name::Literal(span), len)),
            None => Some(self.name(index)?),
        };
        let name_len = name.as_ref().map_or(0, |(_, len)| *len);
        let value = materialize(block, &value_literal, scratch, cap.saturating_sub(name_len))?;
        // `None`: the field is longer than `cap`, so too large for the
        // header list and for the table alike.
        let Some(((name, _), (value, value_len))) = name.zip(value) else {
            delivery.too_large();
            if indexing {
                // §4.4: an entry larger than the table empties it.
                self.table.clear();
            }
            return Ok(());
        };
        let value = value.resolve(block, scratch);
        let name_bytes = match name {
            Name::Literal(ref span) => span.resolve(block, scratch),
            Name::Static(bytes) => bytes,
            Name::Dynamic(offset, len) => self.table.ring(offset, len),
        };
        delivery.hand_out(name_bytes, value, on_field);
        if indexing {
            if name_len + value_len + ENTRY_OVERHEAD > self.table.max_size() {
                self.table.clear();
                return Ok(());
            }
            let name = match name {
                Name::Literal(span) => NameSource::Bytes(span.resolve(block, scratch)),
                Name::Static(bytes) => NameSource::Bytes(bytes),
                Name::Dynamic(offset, len) => NameSource::Ring(offset, len),
            };
            self.table.insert(name, value);
        }
        Ok(())
    }

    /// Name and value of the field at `index` in the static then dynamic
    /// table (§2.3.3). Inlined into the decoding loop: a request's fields
    /// are mostly indices.
    #[inline]
    fn field(&self, index: usize) -> Result<(&[u8], &[u8]), Error> {
        if index == 0 {
            return Err(Error::ZeroIndex);
        }
        match static_entry(index) {
            Some(entry) => Ok(entry),
            None => index
                .checked_sub(STATIC_TABLE.len())
                .and_then(|index| self.table.get(index))
                .ok_or(Error::IndexOutOfRange),
        }
    }

    /// Where the name of the field at `index` (not 0: that is a literal
    /// name) is, and its length.
    fn name(&self, index: usize) -> Result<(Name, usize), Error> {
        if let Some((name, _)) = static_entry(index) {
            return Ok((Name::Static(name), name.len()));
        }
        let (offset, len) = index
            .checked_sub(STATIC_TABLE.len())
            .and_then(|index| self.table.name_position(index))
            .ok_or(Error::IndexOutOfRange)?;
        Ok((Name::Dynamic(offset, len), len))
    }

    #[cfg(test)]
    pub(super) fn table(&self) -> &DynamicTable {
        &self.table
    }
}
