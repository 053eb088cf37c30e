//! Arbitrary bytes as HPACK, both ways.
//!
//! - **Decoding**: the first byte picks the dynamic table size (0 to 480,
//!   small so that eviction and the byte ring's wrap come within a few
//!   blocks) and the header list limit (0 to 1920); the rest is blocks,
//!   each a length byte then that many bytes, decoded in order on one
//!   decoder as a connection's are. It must never panic; the fields handed
//!   out must stay within the limit; the scratch buffer must stay within
//!   its bound; and after a stream-level failure (limit, callback) the
//!   connection goes on with the next block, as HTTP/2 would.
//! - **Round trip**: the same bytes read as fields (a name length byte,
//!   the name, a value length byte, the value; or `0xff` and a status code
//!   in two bytes), encoded, must decode to the same fields, names
//!   lowercased, on a decoder with no dynamic table (the encoder never
//!   uses it), and be as long as `encoded_*_len` said.
//! - **Shared fields**: the same bytes read as up to four variants' lines
//!   (a variant byte, a name length byte, the name, a value length byte,
//!   the value; both mapped to printable text), a shared set chosen from
//!   them as `kiln build` does, then responses (the variants in the order
//!   the rest of the bytes picks) written through one `SharedState` as a
//!   connection writes them, each after a `date`: a byte's top bits move
//!   the clock to another second (a new `date` to insert, which fills the
//!   table and evicts) or lower the table size (size updates at the start
//!   of the block, as after a SETTINGS frame). Each block must decode, on
//!   one decoder of the default table size as the client's, to the date
//!   and its variant's fields.

#![no_main]

use kiln::hpack::{
    DecodeError, Decoder, MAX_TABLE_SIZE, SharedState, SharedTable, SharedView, encode_field,
    encode_field_indexing, encode_lines, encode_status, encode_table_size_update,
    encoded_field_len, encoded_status_len, fields, is_connection_specific,
};
use libfuzzer_sys::fuzz_target;

/// What each field counts toward the header list besides name and value.
const FIELD_OVERHEAD: usize = 32;

fuzz_target!(|data: &[u8]| {
    decode_blocks(data);
    round_trip(data);
    shared_fields(data);
});

/// Variants the shared-fields part builds at most.
const VARIANTS: usize = 4;

fn shared_fields(data: &[u8]) {
    let mut heads = vec![Vec::new(); VARIANTS];
    let mut rest = data;
    while let [variant, name_len, tail @ ..] = rest {
        let (name, tail) = tail.split_at(usize::from(*name_len % 16).min(tail.len()));
        let Some((&value_len, tail)) = tail.split_first() else {
            break;
        };
        let (value, tail) = tail.split_at(usize::from(value_len % 64).min(tail.len()));
        rest = tail;
        if name.is_empty() {
            // The rest picks the responses.
            break;
        }
        let head = &mut heads[usize::from(*variant) % VARIANTS];
        head.extend(name.iter().map(|b| b'a' + b % 26));
        head.extend_from_slice(b": ");
        // Printable, no space: a value is sent without the whitespace
        // around it.
        head.extend(value.iter().map(|b| 0x21 + b % 94));
        head.extend_from_slice(b"\r\n");
    }
    let table = SharedTable::choose(heads.iter().map(Vec::as_slice));
    let encoded = table.encode();
    let Some(set) = SharedView::parse(&encoded) else {
        assert!(table.is_empty());
        return;
    };
    let mut state = SharedState::new(MAX_TABLE_SIZE);
    let mut decoder = Decoder::new(MAX_TABLE_SIZE);
    let mut block = Vec::new();
    let mut second = 0u8;
    let mut resize = false;
    for &pick in rest.iter().chain(&[0, 1, 2, 3, 0, 1, 2, 3]) {
        match pick >> 5 {
            // A new second: another date.
            1 | 2 => second = second.wrapping_add(1),
            // The client lowers its table (never below what it has now).
            3 => {
                let size = usize::from(pick & 0x1f) * 128;
                if size < state.table_max() {
                    state.reset(size);
                    resize = true;
                }
            }
            _ => {}
        }
        let head = &heads[usize::from(pick) % VARIANTS];
        let mut stateless = Vec::new();
        encode_lines(head, &mut stateless);
        let mut spans = Vec::new();
        table.spans(head).iter().for_each(|s| s.encode(&mut spans));
        assert!(set.spans_fit(&spans, stateless.len()));
        block.clear();
        if std::mem::take(&mut resize) {
            encode_table_size_update(0, &mut block);
            encode_table_size_update(state.table_max(), &mut block);
        }
        let date = format!(
            "Thu, 01 Jan 1970 00:{:02}:{:02} GMT",
            second / 60,
            second % 60
        );
        let (mut literal, mut indexing) = (Vec::new(), Vec::new());
        encode_field(b"date", date.as_bytes(), &mut literal);
        encode_field_indexing(b"date", date.as_bytes(), &mut indexing);
        state.write_date(i64::from(second), &literal, &indexing, &mut block);
        if state.accepts(&set, 0) {
            state.write_block(&set, &stateless, 0, &spans, &mut block);
        } else {
            block.extend_from_slice(&stateless);
        }
        let mut decoded = Vec::new();
        let result = decoder.decode(&block, &mut Vec::new(), usize::MAX, |name, value| {
            decoded.push((name.to_vec(), value.to_vec()));
            Ok::<(), ()>(())
        });
        assert_eq!(result, Ok(()));
        let expected: Vec<(Vec<u8>, Vec<u8>)> =
            std::iter::once((b"date".to_vec(), date.into_bytes()))
                .chain(
                    fields(head)
                        .filter(|(name, _)| !is_connection_specific(name))
                        .map(|(name, value)| (name.to_vec(), value.to_vec())),
                )
                .collect();
        assert_eq!(decoded, expected);
    }
}

fn decode_blocks(data: &[u8]) {
    let Some((&settings, mut rest)) = data.split_first() else {
        return;
    };
    let max_table_size = usize::from(settings & 0x0f) * 32;
    let limit = usize::from(settings >> 4) * 128;
    let mut decoder = Decoder::new(max_table_size);
    let mut scratch = Vec::new();
    // The most one field can put in scratch, and hence (with `Vec`'s
    // doubling growth, and its smallest allocation of 8) its capacity.
    let scratch_bound = limit.max(max_table_size);
    let capacity_bound = (2 * scratch_bound).max(8);
    while let Some((&len, tail)) = rest.split_first() {
        let (block, tail) = tail.split_at(usize::from(len).min(tail.len()));
        rest = tail;
        let mut list_size = 0;
        let mut fail_at = block.first().copied();
        let result = decoder.decode(block, &mut scratch, limit, |name, value| {
            list_size += name.len() + value.len() + FIELD_OVERHEAD;
            // Now and then the callback refuses a field, as the HTTP/2
            // layer refuses a malformed request.
            if fail_at == Some(name.len() as u8) {
                fail_at = None;
                return Err(());
            }
            Ok(())
        });
        assert!(list_size <= limit);
        assert!(scratch.len() <= scratch_bound);
        assert!(scratch.len() <= block.len() * 8 / 5);
        assert!(scratch.capacity() <= capacity_bound);
        if let Err(DecodeError::Compression(_)) = result {
            // Connection-fatal.
            return;
        }
    }
}

fn round_trip(data: &[u8]) {
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut block = Vec::new();
    let mut rest = data;
    while let Some((&first, tail)) = rest.split_first() {
        let before = block.len();
        if first == 0xff {
            let Some((code, tail)) = tail.split_first_chunk::<2>() else {
                break;
            };
            rest = tail;
            let code = u16::from_be_bytes(*code);
            encode_status(code, &mut block);
            assert_eq!(block.len() - before, encoded_status_len(code));
            expected.push((b":status".to_vec(), code.to_string().into_bytes()));
            continue;
        }
        let (name, tail) = tail.split_at(usize::from(first).min(tail.len()));
        let Some((&value_len, tail)) = tail.split_first() else {
            break;
        };
        let (value, tail) = tail.split_at(usize::from(value_len).min(tail.len()));
        rest = tail;
        encode_field(name, value, &mut block);
        assert_eq!(block.len() - before, encoded_field_len(name, value));
        expected.push((name.to_ascii_lowercase(), value.to_vec()));
    }
    let mut decoded = Vec::with_capacity(expected.len());
    let result = Decoder::new(0).decode(&block, &mut Vec::new(), usize::MAX, |name, value| {
        decoded.push((name.to_vec(), value.to_vec()));
        Ok::<(), ()>(())
    });
    assert_eq!(result, Ok(()));
    assert_eq!(decoded, expected);
}
