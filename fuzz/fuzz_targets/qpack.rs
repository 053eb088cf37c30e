//! Arbitrary bytes as QPACK field sections, both ways.
//!
//! - **Decoding**: the first byte picks the field section limit (0 to
//!   1920); the rest is sections, each a length byte then that many
//!   bytes, decoded one by one (no state links them: there is no dynamic
//!   table). It must never panic; the fields handed out must stay within
//!   the limit; the scratch buffer must stay within its bound. A section
//!   that decodes whole is encoded again from its fields, and that must
//!   decode to the same fields, names lowercased. `first_literal_len`
//!   must never panic nor point past the section.
//! - **Round trip**: the same bytes read as fields (a name length byte,
//!   the name, a value length byte, the value; or `0xff` and a status code
//!   in two bytes), encoded after the section prefix, must decode to the
//!   same fields, names lowercased, and be as long as `encoded_*_len`
//!   said.

#![no_main]

use kiln::qpack::{
    DecodeError, FIELD_SECTION_PREFIX, decode_field_section, encode_field, encode_status,
    encoded_field_len, encoded_status_len, first_literal_len,
};
use libfuzzer_sys::fuzz_target;

/// What each field counts toward the field section besides name and value.
const FIELD_OVERHEAD: usize = 32;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fuzz_target!(|data: &[u8]| {
    decode_sections(data);
    round_trip(data);
});

/// Decodes `section` whole, with no limit.
fn decode(section: &[u8]) -> Result<Fields, DecodeError<()>> {
    let mut decoded = Vec::new();
    decode_field_section(section, &mut Vec::new(), usize::MAX, |name, value| {
        decoded.push((name.to_vec(), value.to_vec()));
        Ok(())
    })
    .map(|()| decoded)
}

fn decode_sections(data: &[u8]) {
    let Some((&settings, mut rest)) = data.split_first() else {
        return;
    };
    let limit = usize::from(settings >> 4) * 128;
    let mut scratch = Vec::new();
    // The most one field can put in scratch, and hence (with `Vec`'s
    // doubling growth, and its smallest allocation of 8) its capacity.
    let capacity_bound = (2 * limit).max(8);
    while let Some((&len, tail)) = rest.split_first() {
        let (section, tail) = tail.split_at(usize::from(len).min(tail.len()));
        rest = tail;
        let mut list_size = 0;
        let mut fail_at = section.get(2).copied();
        let result = decode_field_section(section, &mut scratch, limit, |name, value| {
            list_size += name.len() + value.len() + FIELD_OVERHEAD;
            // Now and then the callback refuses a field, as the HTTP/3
            // layer refuses a malformed request.
            if fail_at == Some(name.len() as u8) {
                fail_at = None;
                return Err(());
            }
            Ok(())
        });
        assert!(list_size <= limit);
        assert!(scratch.len() <= limit);
        assert!(scratch.len() <= section.len() * 8 / 5);
        assert!(scratch.capacity() <= capacity_bound);
        if let Some(end) = first_literal_len(section) {
            assert!(end <= section.len());
        }
        let whole = decode(section);
        if !matches!(result, Err(DecodeError::Compression(_))) {
            // Only a broken section is refused whatever the limit.
            assert!(whole.is_ok());
        }
        if let Ok(fields) = whole {
            let mut again = FIELD_SECTION_PREFIX.to_vec();
            for (name, value) in &fields {
                encode_field(name, value, &mut again);
            }
            let lowercased: Fields = fields
                .into_iter()
                .map(|(name, value)| (name.to_ascii_lowercase(), value))
                .collect();
            assert_eq!(decode(&again).unwrap(), lowercased);
        }
    }
}

fn round_trip(data: &[u8]) {
    let mut expected: Fields = Vec::new();
    let mut section = FIELD_SECTION_PREFIX.to_vec();
    let mut rest = data;
    while let Some((&first, tail)) = rest.split_first() {
        let before = section.len();
        if first == 0xff {
            let Some((code, tail)) = tail.split_first_chunk::<2>() else {
                break;
            };
            rest = tail;
            let code = u16::from_be_bytes(*code);
            encode_status(code, &mut section);
            assert_eq!(section.len() - before, encoded_status_len(code));
            expected.push((b":status".to_vec(), code.to_string().into_bytes()));
            continue;
        }
        let (name, tail) = tail.split_at(usize::from(first).min(tail.len()));
        let Some((&value_len, tail)) = tail.split_first() else {
            break;
        };
        let (value, tail) = tail.split_at(usize::from(value_len).min(tail.len()));
        rest = tail;
        encode_field(name, value, &mut section);
        assert_eq!(section.len() - before, encoded_field_len(name, value));
        expected.push((name.to_ascii_lowercase(), value.to_vec()));
    }
    assert_eq!(decode(&section).unwrap(), expected);
}
