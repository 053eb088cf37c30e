//! Tests across the codec: the static table, RFC 9204 Appendix B where it
//! applies without a dynamic table, every decoding error, the field
//! section limit, encoder output read back by the decoder, and both
//! directions against the independent `pylsqpack` (ls-qpack).

use super::table::STATIC_TABLE;
use super::*;
use crate::hpack::tests::hex;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn decode_with_limit(section: &[u8], limit: usize) -> (Fields, Result<(), DecodeError<()>>) {
    let mut fields = Vec::new();
    let mut scratch = Vec::new();
    let result = decode_field_section(section, &mut scratch, limit, |name, value| {
        fields.push((name.to_vec(), value.to_vec()));
        Ok(())
    });
    (fields, result)
}

fn decode(section: &[u8]) -> Result<Fields, DecodeError<()>> {
    let (fields, result) = decode_with_limit(section, usize::MAX);
    result.map(|()| fields)
}

fn error(section: &[u8]) -> Error {
    match decode(section) {
        Err(DecodeError::Compression(error)) => error,
        other => panic!("{section:02x?}: expected a decompression error, got {other:?}"),
    }
}

fn owned(pairs: &[(&str, &str)]) -> Fields {
    pairs
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// A section of `pairs` as kiln encodes one: the prefix, then each field.
fn section(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = FIELD_SECTION_PREFIX.to_vec();
    for (name, value) in pairs {
        let before = out.len();
        encode_field(name, value, &mut out);
        assert_eq!(out.len() - before, encoded_field_len(name, value));
    }
    out
}

/// A value no static entry has, for every name.
const OTHER_VALUE: &[u8] = b"kiln-other-value";

#[test]
fn every_static_entry_is_one_indexed_line_and_decodes_back() {
    for (index, &(name, value)) in STATIC_TABLE.iter().enumerate() {
        let mut out = Vec::new();
        encode_field(name, value, &mut out);
        // The first entry with this name and value; a later duplicate
        // would be encoded as the first.
        let first = STATIC_TABLE
            .iter()
            .position(|&entry| entry == (name, value))
            .unwrap();
        assert_eq!(first, index, "duplicate static entry {index}");
        let expected: &[u8] = if index < 63 {
            &[0xc0 | index as u8]
        } else {
            &[0xff, index as u8 - 63]
        };
        assert_eq!(out, expected, "entry {index}");
        let mut with_prefix = FIELD_SECTION_PREFIX.to_vec();
        with_prefix.extend_from_slice(&out);
        assert_eq!(
            decode(&with_prefix).unwrap(),
            vec![(name.to_vec(), value.to_vec())],
            "entry {index}"
        );
    }
}

#[test]
fn every_static_name_is_referenced_with_a_literal_value() {
    for (index, &(name, _)) in STATIC_TABLE.iter().enumerate() {
        let first = STATIC_TABLE.iter().position(|&(n, _)| n == name).unwrap();
        let encoded = section(&[(name, OTHER_VALUE)]);
        // 01 N=0 T=1 and the first index with the name, 4-bit prefix.
        if first < 15 {
            assert_eq!(encoded[2], 0x50 | first as u8, "entry {index}");
        } else {
            assert_eq!(encoded[2..4], [0x5f, first as u8 - 15], "entry {index}");
        }
        assert_eq!(
            decode(&encoded).unwrap(),
            vec![(name.to_vec(), OTHER_VALUE.to_vec())]
        );
    }
}

/// RFC 9204 Appendix B.1: a literal field line with a static name
/// reference, the value raw.
#[test]
fn appendix_b_1_literal_with_name_reference() {
    assert_eq!(
        decode(&hex("0000 510b 2f69 6e64 6578 2e68 746d 6c")).unwrap(),
        owned(&[(":path", "/index.html")])
    );
}

/// RFC 9204 Appendix B.2 and B.4: the sections that reference the dynamic
/// table are refused, as a decoder with capacity 0 must (§2.2.3).
#[test]
fn appendix_b_dynamic_sections_are_refused() {
    // B.2, stream 4: Required Insert Count 2, post-base references.
    assert_eq!(error(&hex("0381 10 11")), Error::RequiredInsertCount);
    // B.4, stream 8: Required Insert Count 4, relative references.
    assert_eq!(error(&hex("0500 80 c1 81")), Error::RequiredInsertCount);
}

#[test]
fn dynamic_references_are_refused() {
    for (line, what) in [
        ("80", "indexed, T=0"),
        ("bf 01", "indexed, T=0, long index"),
        ("10", "indexed with post-base index"),
        ("1f 05", "indexed with post-base index, long"),
        ("40 03 616263", "literal with dynamic name reference"),
        ("60 03 616263", "literal with dynamic name reference, N=1"),
        ("00 03 616263", "literal with post-base name reference"),
        ("08 03 616263", "literal with post-base name reference, N=1"),
    ] {
        let mut section = hex("0000");
        section.extend(hex(line));
        assert_eq!(error(&section), Error::DynamicReference, "{what}");
        // After a valid field too.
        let mut section = hex("0000 d1");
        section.extend(hex(line));
        assert_eq!(error(&section), Error::DynamicReference, "{what}, second");
    }
}

#[test]
fn field_section_prefix() {
    // Required Insert Count 0 and Base 0, no field: an empty list.
    assert_eq!(decode(&FIELD_SECTION_PREFIX).unwrap(), Fields::new());
    // Any Delta Base with sign 0 is valid (§4.5.1.2), even 62 bits.
    assert_eq!(
        decode(&hex("00 05 d1")).unwrap(),
        owned(&[(":method", "GET")])
    );
    assert_eq!(
        decode(&hex("00 7f 80ffffffffffffff3f d1")).unwrap(),
        owned(&[(":method", "GET")])
    );
    // Sign 1 with Required Insert Count 0: Base would be negative.
    assert_eq!(error(&hex("00 80")), Error::NegativeBase);
    assert_eq!(error(&hex("00 85 d1")), Error::NegativeBase);
    // Any Required Insert Count but 0, however written.
    assert_eq!(error(&hex("01 00")), Error::RequiredInsertCount);
    assert_eq!(error(&hex("ff 00 00")), Error::RequiredInsertCount);
    // Cut short.
    for cut in ["", "00", "ff", "00 7f", "00 7f 80"] {
        assert_eq!(
            error(&hex(cut)),
            Error::Primitive(hpack::Error::Truncated),
            "{cut:?}"
        );
    }
}

#[test]
fn static_index_past_the_table() {
    // 98 is the last entry: 0xff then 98 - 63 = 35.
    assert_eq!(
        decode(&hex("0000 ff23")).unwrap(),
        owned(&[("x-frame-options", "sameorigin")])
    );
    assert_eq!(error(&hex("0000 ff24")), Error::StaticIndexOutOfRange);
    // As a name reference: 15 + 84 = 99.
    assert_eq!(error(&hex("0000 5f54 00")), Error::StaticIndexOutOfRange);
    // A 62-bit index.
    assert_eq!(
        error(&hex("0000 ff c0ffffffffffffff3f")),
        Error::StaticIndexOutOfRange
    );
}

#[test]
fn integers_up_to_62_bits_and_no_further() {
    // 2^62 - 1 as a Delta Base is accepted (above); 2^62 is not.
    assert_eq!(
        error(&hex("00 7f 81ffffffffffffff3f")),
        Error::Primitive(hpack::Error::IntegerTooLong)
    );
    // Ten continuation bytes, even of zeros: past any 62-bit value.
    assert_eq!(
        error(&hex("00 7f 80808080808080808000")),
        Error::Primitive(hpack::Error::IntegerTooLong)
    );
    // Nine, with leading zero groups, are read (an index of 63 + 0).
    assert_eq!(
        decode(&hex("0000 ff 808080808080808000")).unwrap(),
        owned(&[(":status", "100")])
    );
}

#[test]
fn truncated_and_overlong_strings() {
    for (line, expected) in [
        // A name reference without its value.
        ("51", hpack::Error::Truncated),
        // A value longer than the rest of the section.
        ("51 05 2f61", hpack::Error::StringPastEnd),
        // A literal name longer than the rest.
        ("27 01 6162", hpack::Error::StringPastEnd),
        // A literal name without a value.
        ("23 616263", hpack::Error::Truncated),
        // A name length cut inside its integer.
        ("27", hpack::Error::Truncated),
        // A value length cut inside its integer.
        ("51 7f", hpack::Error::Truncated),
    ] {
        let mut section = hex("0000");
        section.extend(hex(line));
        assert_eq!(error(&section), Error::Primitive(expected), "{line}");
    }
}

#[test]
fn huffman_errors_in_names_and_values() {
    // EOS (30 ones) inside a string; padding of 8 ones; padding with a 0.
    for (coded, expected) in [
        ("ffffffff", hpack::Error::HuffmanEos),
        ("1fff", hpack::Error::HuffmanPaddingTooLong),
        ("1e", hpack::Error::HuffmanPaddingNotOnes),
    ] {
        let coded = hex(coded);
        // As a value, after a static name reference (`:path`).
        let mut section = hex("0000 51");
        section.push(0x80 | coded.len() as u8);
        section.extend(&coded);
        assert_eq!(error(&section), Error::Primitive(expected), "value");
        // As a literal name: 001 N=0 H=1 and a 3-bit length.
        let mut section = hex("0000");
        section.push(0x28 | coded.len() as u8);
        section.extend(&coded);
        section.extend(hex("00"));
        assert_eq!(error(&section), Error::Primitive(expected), "name");
    }
}

#[test]
fn never_indexed_bit_is_accepted() {
    // 01 N=1 T=1, `:path` (1).
    assert_eq!(
        decode(&hex("0000 71 02 2f61")).unwrap(),
        owned(&[(":path", "/a")])
    );
    // 001 N=1 H=0, name "ab".
    assert_eq!(
        decode(&hex("0000 32 6162 01 63")).unwrap(),
        owned(&[("ab", "c")])
    );
}

#[test]
fn long_literal_names_use_the_3_bit_prefix() {
    let name = b"x-a-rather-long-custom-field-name-that-takes-several-length-bytes".repeat(3);
    let value = b"v".repeat(300);
    let encoded = section(&[(&name, &value)]);
    // 001 N=0 H: Huffman-coded (shorter for these letters), length past 7.
    assert_eq!(encoded[2] & 0xf7, 0x27);
    assert_eq!(decode(&encoded).unwrap(), vec![(name, value)]);
    // The same name raw: H=0.
    let mut raw = FIELD_SECTION_PREFIX.to_vec();
    raw.extend([
        0x27, 0x01, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h', 0x00,
    ]);
    assert_eq!(decode(&raw).unwrap(), owned(&[("abcdefgh", "")]));
}

#[test]
fn field_section_limit_counts_name_value_and_32() {
    let encoded = section(&[(b":path", b"/abc"), (b"x-a", b"b")]);
    let exact = (5 + 4 + 32) + (3 + 1 + 32);
    let (fields, result) = decode_with_limit(&encoded, exact);
    assert_eq!(result, Ok(()));
    assert_eq!(fields.len(), 2);
    let (fields, result) = decode_with_limit(&encoded, exact - 1);
    assert_eq!(result, Err(DecodeError::ListTooLarge));
    assert_eq!(fields, owned(&[(":path", "/abc")]));
    let (fields, result) = decode_with_limit(&encoded, 0);
    assert_eq!(result, Err(DecodeError::ListTooLarge));
    assert!(fields.is_empty());
}

#[test]
fn a_decompression_error_after_the_limit_still_wins() {
    let mut encoded = section(&[(b"x-long", &b"a".repeat(100))]);
    encoded.push(0x80);
    let (fields, result) = decode_with_limit(&encoded, 10);
    assert!(fields.is_empty());
    assert_eq!(
        result,
        Err(DecodeError::Compression(Error::DynamicReference))
    );
    // A broken Huffman string after the limit is still checked.
    let mut encoded = section(&[(b"x-long", &b"a".repeat(100))]);
    encoded.extend(hex("51 81 1e"));
    let (_, result) = decode_with_limit(&encoded, 10);
    assert_eq!(
        result,
        Err(DecodeError::Compression(Error::Primitive(
            hpack::Error::HuffmanPaddingNotOnes
        )))
    );
}

#[test]
fn field_error_stops_the_callbacks() {
    let encoded = section(&[(b":method", b"GET"), (b":path", b"/x"), (b"x-a", b"b")]);
    let mut seen = 0;
    let result = decode_field_section(&encoded, &mut Vec::new(), usize::MAX, |_, _| {
        seen += 1;
        if seen == 2 { Err("refused") } else { Ok(()) }
    });
    assert_eq!(result, Err(DecodeError::Field("refused")));
    assert_eq!(seen, 2);
}

#[test]
fn scratch_stops_growing_once_warm() {
    let encoded = section(&[
        (
            b"x-huffman-name",
            b"a value long enough to be huffman coded",
        ),
        (b":path", b"/some/path/to/a/page.html"),
        (b"content-type", b"text/html; charset=utf-8"),
    ]);
    let mut scratch = Vec::new();
    decode_field_section(&encoded, &mut scratch, usize::MAX, |_, _| Ok::<(), ()>(())).unwrap();
    let capacity = scratch.capacity();
    let pointer = scratch.as_ptr();
    for _ in 0..10 {
        decode_field_section(&encoded, &mut scratch, usize::MAX, |_, _| Ok::<(), ()>(())).unwrap();
    }
    assert_eq!(scratch.capacity(), capacity);
    assert_eq!(scratch.as_ptr(), pointer);
}

#[test]
fn raw_strings_are_borrowed_from_the_section() {
    let encoded = hex("0000 23 616263 03 646566");
    let range = encoded.as_ptr_range();
    decode_field_section(&encoded, &mut Vec::new(), usize::MAX, |name, value| {
        assert!(range.contains(&name.as_ptr()));
        assert!(range.contains(&value.as_ptr()));
        Ok::<(), ()>(())
    })
    .unwrap();
}

#[test]
fn encoder_output_decodes_to_the_same_fields() {
    let pairs: &[(&[u8], &[u8])] = &[
        (b":status", b"200"),
        (b"Content-Type", b"text/html; charset=utf-8"),
        (b"content-type", b"text/css; charset=utf-8"),
        (b"ETag", b"\"abc123\""),
        (b"Cache-Control", b"public, max-age=31536000"),
        (b"X-Custom", b"Mixed Case Value"),
        (b"x-empty", b""),
        (b"x-binary", &[0x01, 0x7f, 0xff, 0x00]),
        (b"link", b"</style.css>; rel=preload; as=style"),
        (b"vary", b"accept-encoding"),
        (b"content-length", b"0"),
        (b"content-length", b"1234567"),
    ];
    let decoded = decode(&section(pairs)).unwrap();
    let expected: Fields = pairs
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
        .collect();
    assert_eq!(decoded, expected);
}

#[test]
fn huffman_only_when_strictly_shorter() {
    // A value of bytes with long codes: raw.
    let encoded = section(&[(b"x", &[0x01, 0x02])]);
    assert_eq!(encoded[2..], [0x21, b'x', 0x02, 0x01, 0x02]);
    // "/index.html" Huffman-coded is shorter than its 11 bytes.
    let encoded = section(&[(b":path", b"/index.html")]);
    assert_eq!(encoded[2], 0x51);
    assert_eq!(encoded[3] & 0x80, 0x80);
    assert!(encoded.len() < 2 + 2 + 11);
}

#[test]
fn status_codes() {
    for code in (0..1000).chain([9999, 10000, u16::MAX]) {
        let mut out = Vec::new();
        encode_status(code, &mut out);
        assert_eq!(out.len(), encoded_status_len(code), "{code}");
        let digits = code.to_string();
        assert_eq!(
            out,
            section(&[(b":status", digits.as_bytes())])[2..],
            "{code}"
        );
    }
    let mut out = Vec::new();
    encode_status(200, &mut out);
    assert_eq!(out, [0xd9]);
    out.clear();
    encode_status(500, &mut out);
    assert_eq!(out, [0xff, 0x08]);
    out.clear();
    encode_status(418, &mut out);
    assert_eq!(out[..2], [0x5f, 0x09]);
}

#[test]
fn lines_leave_out_connection_specific_fields() {
    let mut out = FIELD_SECTION_PREFIX.to_vec();
    encode_lines(
        b"ETag: \"x\"\r\nConnection: close\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n",
        &mut out,
    );
    assert_eq!(
        decode(&out).unwrap(),
        owned(&[("etag", "\"x\""), ("content-length", "3")])
    );
}

#[test]
fn first_literal_len_spans_the_first_field() {
    // Field lines as a pack stores them, without the section prefix.
    let lines = |pairs: &[(&[u8], &[u8])]| section(pairs)[FIELD_SECTION_PREFIX.len()..].to_vec();
    let encoded = lines(&[(b"location", b"/elsewhere/"), (b"content-length", b"0")]);
    let end = first_literal_len(&encoded).unwrap();
    assert_eq!(encoded[end..], [0xc4]);
    let encoded = lines(&[(b"x-a", b"b"), (b"age", b"0")]);
    assert_eq!(encoded[first_literal_len(&encoded).unwrap()..], [0xc2]);
    // An indexed first field, a dynamic one, none, a cut one: none.
    assert_eq!(first_literal_len(&lines(&[(b"age", b"0")])), None);
    assert_eq!(first_literal_len(&hex("40 00")), None);
    assert_eq!(first_literal_len(&[]), None);
    assert_eq!(first_literal_len(&hex("51 05 2f")), None);
    assert_eq!(first_literal_len(&hex("5f 54 00")), None);
}

/// `script` run against `pylsqpack`, an independent QPACK codec.
fn pylsqpack(script: &str, input: &str) -> Option<String> {
    crate::hpack::tests::run_python("pylsqpack", "pip install aioquic", script, input)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Field lists both directions use: every static entry, each static name
/// with another value, names the table lacks, long and binary values.
fn interop_lists() -> Vec<Fields> {
    let mut lists: Vec<Fields> = STATIC_TABLE
        .chunks(10)
        .map(|entries| {
            entries
                .iter()
                .map(|&(n, v)| (n.to_vec(), v.to_vec()))
                .collect()
        })
        .collect();
    lists.push(
        STATIC_TABLE
            .iter()
            .map(|&(n, _)| (n.to_vec(), OTHER_VALUE.to_vec()))
            .collect(),
    );
    lists.push(vec![
        (b"x-custom".to_vec(), b"Mixed Case".to_vec()),
        (b"x-empty".to_vec(), Vec::new()),
        (b"x-binary".to_vec(), vec![0x01, 0x7f, 0xfe, 0xff]),
        (b"x-long".to_vec(), b"0123456789abcdef".repeat(64)),
        (b"a".repeat(200), b"b".to_vec()),
    ]);
    lists
}

/// kiln's sections decoded by ls-qpack with a dynamic table capacity of
/// 0, an independent decoder.
#[test]
fn pylsqpack_decodes_our_sections() {
    const SCRIPT: &str = r#"
d = pylsqpack.Decoder(max_table_capacity=0, blocked_streams=0)
out = []
for i, line in enumerate(sys.stdin):
    _, headers = d.feed_header(4 * i, bytes.fromhex(line.strip()))
    out.append([[n.hex(), v.hex()] for n, v in headers])
print(json.dumps(out))
"#;
    let lists = interop_lists();
    let input: String = lists
        .iter()
        .map(|fields| {
            let pairs: Vec<(&[u8], &[u8])> = fields
                .iter()
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .collect();
            to_hex(&section(&pairs)) + "\n"
        })
        .collect();
    let Some(stdout) = pylsqpack(SCRIPT, &input) else {
        return;
    };
    let decoded: Vec<Vec<(String, String)>> = serde_json::from_str(&stdout).unwrap();
    let decoded: Vec<Fields> = decoded
        .iter()
        .map(|fields| fields.iter().map(|(n, v)| (hex(n), hex(v))).collect())
        .collect();
    assert_eq!(decoded, lists);
}

/// ls-qpack's sections, encoded for a peer with a dynamic table capacity
/// of 0, decoded by kiln.
#[test]
fn we_decode_pylsqpack_sections() {
    const SCRIPT: &str = r#"
e = pylsqpack.Encoder()
e.apply_settings(max_table_capacity=0, blocked_streams=0)
out = []
for i, line in enumerate(sys.stdin):
    fields = [(bytes.fromhex(n), bytes.fromhex(v)) for n, v in json.loads(line)]
    control, section = e.encode(4 * i, fields)
    assert control == b""
    out.append(section.hex())
print(json.dumps(out))
"#;
    let lists = interop_lists();
    let input: String = lists
        .iter()
        .map(|fields| {
            let pairs: Vec<(String, String)> =
                fields.iter().map(|(n, v)| (to_hex(n), to_hex(v))).collect();
            serde_json::to_string(&pairs).unwrap() + "\n"
        })
        .collect();
    let Some(stdout) = pylsqpack(SCRIPT, &input) else {
        return;
    };
    let sections: Vec<String> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(sections.len(), lists.len());
    for (section, fields) in sections.iter().zip(&lists) {
        assert_eq!(&decode(&hex(section)).unwrap(), fields, "{section}");
    }
}
