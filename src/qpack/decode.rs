//! Decoding field sections (RFC 9204 §4.5) without a dynamic table: the
//! request side of HTTP/3.

use super::table::STATIC_TABLE;
use super::{DecodeError, Error};
use crate::hpack::{
    self, Delivery, Literal, StringSpan, materialize, read_literal, read_prefix_integer,
};

/// Most continuation bytes an integer may take. RFC 9204 §4.1.1 requires
/// decoding integers of up to 62 bits: after the narrowest prefix (3 bits)
/// that is nine bytes of seven bits. The bound also keeps a long run of
/// continuation bytes from stalling the decoder.
const MAX_INTEGER_CONTINUATION_BYTES: usize = 9;

/// The largest integer accepted: 62 bits (§4.1.1).
const MAX_INTEGER: u64 = (1 << 62) - 1;

/// Reads a prefix integer at `section[*pos]`, advancing `pos`.
fn read_integer(section: &[u8], pos: &mut usize, prefix_bits: u32) -> Result<u64, Error> {
    let value = read_prefix_integer(section, pos, prefix_bits, MAX_INTEGER_CONTINUATION_BYTES)?;
    if value > MAX_INTEGER {
        return Err(hpack::Error::IntegerTooLong.into());
    }
    Ok(value)
}

/// Reads a string literal whose length has a `prefix_bits`-bit prefix.
fn read_string(section: &[u8], pos: &mut usize, prefix_bits: u32) -> Result<Literal, Error> {
    Ok(read_literal(
        section,
        pos,
        prefix_bits,
        MAX_INTEGER_CONTINUATION_BYTES,
    )?)
}

/// The static table entry at `index` (§3.1).
fn static_entry(index: u64) -> Result<(&'static [u8], &'static [u8]), Error> {
    usize::try_from(index)
        .ok()
        .and_then(|index| STATIC_TABLE.get(index))
        .copied()
        .ok_or(Error::StaticIndexOutOfRange)
}

/// Reads the field section prefix (§4.5.1): a Required Insert Count of 0
/// and a Base not below 0, or an error. Returns where the field lines
/// start.
fn read_prefix(section: &[u8]) -> Result<usize, Error> {
    let mut pos = 0;
    if read_integer(section, &mut pos, 8)? != 0 {
        return Err(Error::RequiredInsertCount);
    }
    let negative = *section.get(pos).ok_or(hpack::Error::Truncated)? & 0x80 != 0;
    // The Delta Base: any value is valid for a section without dynamic
    // references (§4.5.1.2), and none has a use for it.
    read_integer(section, &mut pos, 7)?;
    if negative {
        return Err(Error::NegativeBase);
    }
    Ok(pos)
}

/// The first byte of each field line representation (§4.5.2–§4.5.6), by
/// its high bits.
enum LineKind {
    /// `1T`: indexed field line, 6-bit index.
    Indexed { static_table: bool },
    /// `01NT`: literal with name reference, 4-bit index.
    NameReference { static_table: bool },
    /// `001N`: literal with literal name, 3-bit name length.
    LiteralName,
    /// `0001` (indexed) or `0000` (literal name): post-base references.
    PostBase,
}

fn line_kind(first: u8) -> LineKind {
    if first & 0x80 != 0 {
        LineKind::Indexed {
            static_table: first & 0x40 != 0,
        }
    } else if first & 0x40 != 0 {
        LineKind::NameReference {
            static_table: first & 0x10 != 0,
        }
    } else if first & 0x20 != 0 {
        LineKind::LiteralName
    } else {
        LineKind::PostBase
    }
}

/// Decodes one field section, calling `on_field(name, value)` for each
/// field line in order. The same contract as `hpack::Decoder::decode`:
///
/// - names and values are borrowed from `section` or the static table
///   where they are stored as is; Huffman-coded ones are decoded into
///   `scratch`, which is cleared for every field and so holds at most one:
///   reused across sections, it stops growing once warm. Nothing else is
///   allocated.
/// - `limit` bounds the field section (RFC 9114 §4.2.2
///   `SETTINGS_MAX_FIELD_SECTION_SIZE`): the sum over the fields of name +
///   value + 32. Once a field would exceed it, or once `on_field` returns
///   an error, no more fields are handed out and no more strings are
///   decoded; the rest of the section is still read and checked, and the
///   outcome is [`DecodeError::ListTooLarge`] or [`DecodeError::Field`],
///   failures of the one request.
/// - [`DecodeError::Compression`] is a section that breaks RFC 9204 or
///   needs the dynamic table: `QPACK_DECOMPRESSION_FAILED`, a connection
///   error. It takes precedence over a failure earlier in the section.
///
/// The never-indexed bit (N) is accepted and dropped: it matters to an
/// intermediary re-encoding the field, which kiln is not.
pub fn decode_field_section<E>(
    section: &[u8],
    scratch: &mut Vec<u8>,
    limit: usize,
    mut on_field: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
) -> Result<(), DecodeError<E>> {
    scratch.clear();
    let mut pos = read_prefix(section)?;
    let mut delivery = Delivery::new(limit);
    while let Some(&first) = section.get(pos) {
        match line_kind(first) {
            LineKind::Indexed { static_table: true } => {
                let (name, value) = static_entry(read_integer(section, &mut pos, 6)?)?;
                delivery.hand_out(name, value, &mut on_field);
            }
            LineKind::NameReference { static_table: true } => {
                let (name, _) = static_entry(read_integer(section, &mut pos, 4)?)?;
                let name = Name::Static(name);
                literal(
                    section,
                    &mut pos,
                    name,
                    scratch,
                    &mut delivery,
                    &mut on_field,
                )?;
            }
            LineKind::LiteralName => {
                // The name's length has a 3-bit prefix after `001N`, its
                // Huffman flag the bit above.
                let name = Name::Literal(read_string(section, &mut pos, 3)?);
                literal(
                    section,
                    &mut pos,
                    name,
                    scratch,
                    &mut delivery,
                    &mut on_field,
                )?;
            }
            LineKind::Indexed {
                static_table: false,
            }
            | LineKind::NameReference {
                static_table: false,
            }
            | LineKind::PostBase => return Err(Error::DynamicReference.into()),
        }
    }
    delivery.finish()
}

/// Decodes the rest of a literal field line, its value at `section[*pos]`
/// (a string with a 7-bit prefix), and hands the field out with `name`. A
/// field too long for what the section may still take is checked to its
/// end and not handed out.
fn literal<E>(
    section: &[u8],
    pos: &mut usize,
    name: Name,
    scratch: &mut Vec<u8>,
    delivery: &mut Delivery<E, Error>,
    on_field: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
) -> Result<(), Error> {
    let value = read_string(section, pos, 7)?;
    scratch.clear();
    let cap = delivery.cap();
    let name = match name {
        Name::Static(bytes) => Some((NameAt::Static(bytes), bytes.len())),
        Name::Literal(literal) => materialize(section, &literal, scratch, cap)?
            .map(|(span, len)| (NameAt::Decoded(span), len)),
    };
    let name_len = name.as_ref().map_or(0, |(_, len)| *len);
    let value = materialize(section, &value, scratch, cap.saturating_sub(name_len))?;
    // `None`: the field decodes to more than `cap`, so the section cannot
    // take it.
    let Some(((name, _), (value, _))) = name.zip(value) else {
        delivery.too_large();
        return Ok(());
    };
    let name = match name {
        NameAt::Static(bytes) => bytes,
        NameAt::Decoded(span) => span.resolve(section, scratch),
    };
    delivery.hand_out(name, value.resolve(section, scratch), on_field);
    Ok(())
}

/// A literal field line's name as it stands in the section.
enum Name {
    /// A static table entry's name.
    Static(&'static [u8]),
    /// A string literal, not decoded yet.
    Literal(Literal),
}

/// Where a literal field line's name is once decoded.
enum NameAt {
    /// A static table entry's name.
    Static(&'static [u8]),
    /// In the section, or Huffman-decoded into the scratch.
    Decoded(StringSpan),
}

/// The length of the first of field `lines` (as a pack stores them,
/// without the section prefix) if it is a literal (the form
/// [`super::encode_field`] writes for a field the static table does not
/// hold whole), else `None`: lets prepared lines go out without their
/// first field, as a redirect does whose `location` is written again with
/// the request's query. Reads no more than that field; allocates nothing.
pub fn first_literal_len(lines: &[u8]) -> Option<usize> {
    let mut pos = 0;
    match line_kind(*lines.first()?) {
        LineKind::NameReference { static_table: true } => {
            static_entry(read_integer(lines, &mut pos, 4).ok()?).ok()?;
        }
        LineKind::LiteralName => {
            read_string(lines, &mut pos, 3).ok()?;
        }
        _ => return None,
    }
    read_string(lines, &mut pos, 7).ok()?;
    Some(pos)
}
