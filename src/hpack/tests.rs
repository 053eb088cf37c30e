//! Tests across the codec: RFC 7541 Appendix C, every decoding error, the
//! header list limit, and encoder output read back by the decoder.

use super::table::ENTRY_OVERHEAD;
use super::*;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// The Python the cross-checks run: `KILN_TEST_PYTHON` (`./test` points it
/// at the virtual environment it makes from tests/requirements.txt), else
/// `python3`.
pub(crate) fn python() -> std::ffi::OsString {
    std::env::var_os("KILN_TEST_PYTHON").unwrap_or_else(|| "python3".into())
}

/// Runs `script` under the tests' Python with `module` imported and
/// `input` on stdin, and returns its stdout; `None`, saying why, when
/// Python or the module is missing (`install` says how to get it). For
/// checks against an independent decoder (`hpack`, `pylsqpack`). Whether
/// the module imports is asked first, in a run of its own: a script that
/// exits before reading its input would break the pipe under the write.
pub(crate) fn run_python(module: &str, install: &str, script: &str, input: &str) -> Option<String> {
    use std::io::Write;
    let python = python();
    let probe = std::process::Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .stderr(std::process::Stdio::null())
        .status();
    match probe {
        Err(e) => {
            eprintln!("skipped: no Python at {python:?} ({e})");
            return None;
        }
        Ok(status) if !status.success() => {
            eprintln!(
                "skipped: the Python {module} package is not installed for {python:?} \
                 (./test installs it from tests/requirements.txt; or {install})"
            );
            return None;
        }
        Ok(_) => {}
    }
    let mut child = std::process::Command::new(&python)
        .args(["-c", &format!("import sys, json, {module}\n{script}")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("Python ran a moment ago");
    let written = child.stdin.take().unwrap().write_all(input.as_bytes());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success() && written.is_ok(),
        "python {module} failed ({written:?}): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8(output.stdout).unwrap())
}

/// Bytes written as hex digits (whitespace ignored), as the RFC prints them.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn decode_with_limit(
    decoder: &mut Decoder,
    block: &[u8],
    limit: usize,
) -> (Fields, Result<(), DecodeError<()>>) {
    let mut fields = Vec::new();
    let mut scratch = Vec::new();
    let result = decoder.decode(block, &mut scratch, limit, |name, value| {
        fields.push((name.to_vec(), value.to_vec()));
        Ok(())
    });
    (fields, result)
}

fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<Fields, DecodeError<()>> {
    let (fields, result) = decode_with_limit(decoder, block, usize::MAX);
    result.map(|()| fields)
}

fn error(decoder: &mut Decoder, block: &[u8]) -> Error {
    match decode(decoder, block) {
        Err(DecodeError::Compression(error)) => error,
        other => panic!("{block:02x?}: expected a compression error, got {other:?}"),
    }
}

fn owned(pairs: &[(&str, &str)]) -> Fields {
    pairs
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

fn table_entries(decoder: &Decoder) -> Fields {
    let table = decoder.table();
    (1..=table.len())
        .map(|i| {
            let (n, v) = table.get(i).unwrap();
            (n.to_vec(), v.to_vec())
        })
        .collect()
}

/// One block of an Appendix C example, with the fields it decodes to and
/// the dynamic table after it (newest first) and its size.
struct Example {
    block: &'static str,
    fields: &'static [(&'static str, &'static str)],
    table: &'static [(&'static str, &'static str)],
    size: usize,
}

/// Decodes `examples` in order on one decoder of table size `max`.
fn run(max: usize, examples: &[Example]) {
    let mut decoder = Decoder::new(max);
    for (i, example) in examples.iter().enumerate() {
        let fields = decode(&mut decoder, &hex(example.block)).unwrap();
        assert_eq!(fields, owned(example.fields), "block {}", i + 1);
        assert_eq!(
            table_entries(&decoder),
            owned(example.table),
            "block {}",
            i + 1
        );
        assert_eq!(decoder.table().size(), example.size, "block {}", i + 1);
    }
}

const REQUEST_1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQUEST_2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQUEST_3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];
const AFTER_REQUEST_1: &[(&str, &str)] = &[(":authority", "www.example.com")];
const AFTER_REQUEST_2: &[(&str, &str)] = &[
    ("cache-control", "no-cache"),
    (":authority", "www.example.com"),
];
const AFTER_REQUEST_3: &[(&str, &str)] = &[
    ("custom-key", "custom-value"),
    ("cache-control", "no-cache"),
    (":authority", "www.example.com"),
];

const DATE_1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE_2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOCATION: &str = "https://www.example.com";
const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
const RESPONSE_1: &[(&str, &str)] = &[
    (":status", "302"),
    ("cache-control", "private"),
    ("date", DATE_1),
    ("location", LOCATION),
];
const RESPONSE_2: &[(&str, &str)] = &[
    (":status", "307"),
    ("cache-control", "private"),
    ("date", DATE_1),
    ("location", LOCATION),
];
const RESPONSE_3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", DATE_2),
    ("location", LOCATION),
    ("content-encoding", "gzip"),
    ("set-cookie", COOKIE),
];
const AFTER_RESPONSE_1: &[(&str, &str)] = &[
    ("location", LOCATION),
    ("date", DATE_1),
    ("cache-control", "private"),
    (":status", "302"),
];
const AFTER_RESPONSE_2: &[(&str, &str)] = &[
    (":status", "307"),
    ("location", LOCATION),
    ("date", DATE_1),
    ("cache-control", "private"),
];
const AFTER_RESPONSE_3: &[(&str, &str)] = &[
    ("set-cookie", COOKIE),
    ("content-encoding", "gzip"),
    ("date", DATE_2),
];

#[test]
fn appendix_c_2_literal_representations() {
    // Each on a fresh decoder, as in the RFC.
    run(
        4096,
        &[Example {
            block: "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            fields: &[("custom-key", "custom-header")],
            table: &[("custom-key", "custom-header")],
            size: 55,
        }],
    );
    run(
        4096,
        &[Example {
            block: "040c 2f73 616d 706c 652f 7061 7468",
            fields: &[(":path", "/sample/path")],
            table: &[],
            size: 0,
        }],
    );
    run(
        4096,
        &[Example {
            block: "1008 7061 7373 776f 7264 0673 6563 7265 74",
            fields: &[("password", "secret")],
            table: &[],
            size: 0,
        }],
    );
    run(
        4096,
        &[Example {
            block: "82",
            fields: &[(":method", "GET")],
            table: &[],
            size: 0,
        }],
    );
}

#[test]
fn appendix_c_3_requests_without_huffman() {
    run(
        4096,
        &[
            Example {
                block: "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                fields: REQUEST_1,
                table: AFTER_REQUEST_1,
                size: 57,
            },
            Example {
                block: "8286 84be 5808 6e6f 2d63 6163 6865",
                fields: REQUEST_2,
                table: AFTER_REQUEST_2,
                size: 110,
            },
            Example {
                block: "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
                fields: REQUEST_3,
                table: AFTER_REQUEST_3,
                size: 164,
            },
        ],
    );
}

#[test]
fn appendix_c_4_requests_with_huffman() {
    run(
        4096,
        &[
            Example {
                block: "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                fields: REQUEST_1,
                table: AFTER_REQUEST_1,
                size: 57,
            },
            Example {
                block: "8286 84be 5886 a8eb 1064 9cbf",
                fields: REQUEST_2,
                table: AFTER_REQUEST_2,
                size: 110,
            },
            Example {
                block: "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
                fields: REQUEST_3,
                table: AFTER_REQUEST_3,
                size: 164,
            },
        ],
    );
}

#[test]
fn appendix_c_5_responses_without_huffman_evicting_at_256() {
    run(
        256,
        &[
            Example {
                block: "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 \
                        7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 \
                        3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                fields: RESPONSE_1,
                table: AFTER_RESPONSE_1,
                size: 222,
            },
            Example {
                block: "4803 3330 37c1 c0bf",
                fields: RESPONSE_2,
                table: AFTER_RESPONSE_2,
                size: 222,
            },
            Example {
                block: "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 \
                        3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 \
                        514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 \
                        2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
                fields: RESPONSE_3,
                table: AFTER_RESPONSE_3,
                size: 215,
            },
        ],
    );
}

#[test]
fn appendix_c_6_responses_with_huffman_evicting_at_256() {
    run(
        256,
        &[
            Example {
                block: "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 \
                        0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae \
                        43d3",
                fields: RESPONSE_1,
                table: AFTER_RESPONSE_1,
                size: 222,
            },
            Example {
                block: "4883 640e ffc1 c0bf",
                fields: RESPONSE_2,
                table: AFTER_RESPONSE_2,
                size: 222,
            },
            Example {
                block: "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff \
                        c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af \
                        2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
                fields: RESPONSE_3,
                table: AFTER_RESPONSE_3,
                size: 215,
            },
        ],
    );
}

#[test]
fn index_zero() {
    assert_eq!(error(&mut Decoder::new(4096), &[0x80]), Error::ZeroIndex);
}

#[test]
fn index_past_the_tables() {
    let mut decoder = Decoder::new(4096);
    // 62 with an empty dynamic table: indexed, and as a literal's name.
    assert_eq!(error(&mut decoder, &[0xbe]), Error::IndexOutOfRange);
    assert_eq!(error(&mut decoder, &[0x7e, 0x00]), Error::IndexOutOfRange);
    assert_eq!(
        error(&mut decoder, &[0x0f, 0x2f, 0x00]),
        Error::IndexOutOfRange
    );
    // The largest integer accepted.
    assert_eq!(
        error(&mut decoder, &[0xff, 0xff, 0xff, 0xff, 0x7f]),
        Error::IndexOutOfRange
    );
    // One entry: 62 is valid, 63 is not.
    decode(&mut decoder, &hex("4001 6101 62")).unwrap();
    assert_eq!(decode(&mut decoder, &[0xbe]).unwrap(), owned(&[("a", "b")]));
    assert_eq!(error(&mut decoder, &[0xbf]), Error::IndexOutOfRange);
}

#[test]
fn integer_with_too_many_continuation_bytes() {
    let mut decoder = Decoder::new(4096);
    assert_eq!(
        error(&mut decoder, &[0xff, 0x80, 0x80, 0x80, 0x80, 0x01]),
        Error::IntegerTooLong
    );
    assert_eq!(error(&mut decoder, &[0xff; 64]), Error::IntegerTooLong);
    // A string length: past any block, and past the bound.
    assert_eq!(
        error(&mut decoder, &[0x04, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x7f]),
        Error::IntegerTooLong
    );
    // Redundant continuation bytes within the bound are still an integer:
    // 62 as 0x7f + 0x80 0x80 0x00 is a valid (if odd) encoding of 127.
    assert_eq!(
        error(&mut decoder, &[0xff, 0x80, 0x80, 0x00]),
        Error::IndexOutOfRange
    );
}

#[test]
fn truncated_block() {
    let mut decoder = Decoder::new(4096);
    for block in [
        &[0xff][..],         // integer cut
        &[0x3f],             // size update cut
        &[0x40],             // literal name missing
        &[0x40, 0x01, b'a'], // value missing
        &[0x04],             // value missing
        &[0x0f],             // 4-bit prefix continuation missing
        &[0x04, 0x7f],       // string length cut
        &[0x82, 0x41],       // second field's value missing
    ] {
        assert_eq!(error(&mut decoder, block), Error::Truncated, "{block:02x?}");
    }
}

#[test]
fn string_past_the_end_of_the_block() {
    let mut decoder = Decoder::new(4096);
    assert_eq!(
        error(&mut decoder, &[0x40, 0x05, b'a']),
        Error::StringPastEnd
    );
    assert_eq!(
        error(&mut decoder, &[0x04, 0x85, 0x00]),
        Error::StringPastEnd
    );
    assert_eq!(
        error(&mut decoder, &[0x04, 0x02, b'a']),
        Error::StringPastEnd
    );
}

#[test]
fn huffman_errors_in_names_and_values() {
    let mut decoder = Decoder::new(4096);
    // Values.
    assert_eq!(
        error(&mut decoder, &[0x04, 0x84, 0xff, 0xff, 0xff, 0xff]),
        Error::HuffmanEos
    );
    assert_eq!(
        error(&mut decoder, &[0x04, 0x82, 0x1f, 0xff]),
        Error::HuffmanPaddingTooLong
    );
    assert_eq!(
        error(&mut decoder, &[0x04, 0x81, 0x18]),
        Error::HuffmanPaddingNotOnes
    );
    // Names, and a field to be indexed.
    assert_eq!(
        error(&mut decoder, &[0x00, 0x81, 0x18, 0x00]),
        Error::HuffmanPaddingNotOnes
    );
    assert_eq!(
        error(&mut decoder, &[0x40, 0x81, 0xff, 0x00]),
        Error::HuffmanPaddingTooLong
    );
    // Also when the limit stopped handing fields out (nothing is stored).
    let (_, result) = decode_with_limit(&mut decoder, &[0x82, 0x04, 0x81, 0x18], 0);
    assert_eq!(
        result,
        Err(DecodeError::Compression(Error::HuffmanPaddingNotOnes))
    );
}

#[test]
fn size_update_above_the_settings_maximum() {
    let mut decoder = Decoder::new(4096);
    // 4096 is 31 + 0x61 + (0x1f << 7): allowed; 4097 is not.
    decode(&mut decoder, &[0x3f, 0xe1, 0x1f]).unwrap();
    assert_eq!(
        error(&mut decoder, &[0x3f, 0xe2, 0x1f]),
        Error::SizeUpdateAboveMax
    );
    assert_eq!(
        error(&mut Decoder::new(0), &[0x21]),
        Error::SizeUpdateAboveMax
    );
}

#[test]
fn size_update_after_a_field() {
    let mut decoder = Decoder::new(4096);
    assert_eq!(
        error(&mut decoder, &[0x82, 0x20]),
        Error::SizeUpdateNotAtStart
    );
    assert_eq!(
        error(&mut decoder, &[0x20, 0x82, 0x20]),
        Error::SizeUpdateNotAtStart
    );
    assert_eq!(
        error(&mut decoder, &hex("4001 6101 62 20")),
        Error::SizeUpdateNotAtStart
    );
}

#[test]
fn more_than_two_size_updates() {
    let mut decoder = Decoder::new(4096);
    assert_eq!(
        error(&mut decoder, &[0x20, 0x20, 0x20]),
        Error::TooManySizeUpdates
    );
    // Two are fine: the smallest size, then the final one.
    decode(&mut decoder, &[0x20, 0x3f, 0xe1, 0x1f, 0x82]).unwrap();
    // Each block starts afresh.
    decode(&mut decoder, &[0x20, 0x20]).unwrap();
    decode(&mut decoder, &[0x20, 0x20]).unwrap();
}

#[test]
fn size_updates_evict_and_bound_insertions() {
    let mut decoder = Decoder::new(4096);
    decode(&mut decoder, &hex("4001 6101 62 4001 6301 64")).unwrap();
    assert_eq!(decoder.table().size(), 68);
    // Down to 34: only the newest entry stays.
    decode(&mut decoder, &[0x3f, 0x03]).unwrap();
    assert_eq!(table_entries(&decoder), owned(&[("c", "d")]));
    // An entry of 35 no longer fits: the table empties.
    decode(&mut decoder, &hex("4001 6102 6262")).unwrap();
    assert_eq!(decoder.table().len(), 0);
    // To 0 and back.
    decode(&mut decoder, &hex("20 3fe1 1f 4001 6101 62")).unwrap();
    assert_eq!(table_entries(&decoder), owned(&[("a", "b")]));
}

#[test]
fn never_indexed_and_without_indexing_leave_the_table_alone() {
    let mut decoder = Decoder::new(4096);
    let fields = decode(&mut decoder, &hex("0001 6101 62 1001 6301 64")).unwrap();
    assert_eq!(fields, owned(&[("a", "b"), ("c", "d")]));
    assert_eq!(decoder.table().len(), 0);
}

#[test]
fn header_list_limit_counts_name_value_and_32() {
    // ":method: GET" is 7 + 3 + 32 = 42; "custom-key: custom-value" 54.
    let block = hex("82 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
    let (fields, result) = decode_with_limit(&mut Decoder::new(4096), &block, 96);
    assert_eq!(result, Ok(()));
    assert_eq!(fields.len(), 2);
    let (fields, result) = decode_with_limit(&mut Decoder::new(4096), &block, 95);
    assert_eq!(result, Err(DecodeError::ListTooLarge));
    assert_eq!(fields, owned(&[(":method", "GET")]));
    let (fields, result) = decode_with_limit(&mut Decoder::new(4096), &block, 41);
    assert_eq!(result, Err(DecodeError::ListTooLarge));
    assert!(fields.is_empty());
}

/// After the limit, the rest of the block still updates the table: the
/// next block's references resolve as the peer meant.
#[test]
fn header_list_limit_keeps_the_table_in_step() {
    let mut decoder = Decoder::new(4096);
    // Three fields to be indexed, the first two Huffman-coded, the limit
    // reached at the second.
    let block = hex("4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf \
         5886 a8eb 1064 9cbf \
         4001 7801 79");
    let (fields, result) = decode_with_limit(&mut decoder, &block, 60);
    assert_eq!(result, Err(DecodeError::ListTooLarge));
    assert_eq!(fields, owned(&[("custom-key", "custom-value")]));
    assert_eq!(
        table_entries(&decoder),
        owned(&[
            ("x", "y"),
            ("cache-control", "no-cache"),
            ("custom-key", "custom-value")
        ])
    );
    assert_eq!(
        decode(&mut decoder, &[0xbe, 0xbf, 0xc0]).unwrap(),
        owned(&[
            ("x", "y"),
            ("cache-control", "no-cache"),
            ("custom-key", "custom-value")
        ])
    );
}

/// The callback's error stops the callbacks, not the block.
#[test]
fn field_error_keeps_the_table_in_step() {
    let mut decoder = Decoder::new(4096);
    let block = hex("4001 6101 62 4001 6301 64");
    let mut calls = 0;
    let result = decoder.decode(&block, &mut Vec::new(), usize::MAX, |name, _| {
        calls += 1;
        if name == b"a" { Err("refused") } else { Ok(()) }
    });
    assert_eq!(result, Err(DecodeError::Field("refused")));
    assert_eq!(calls, 1);
    assert_eq!(table_entries(&decoder), owned(&[("c", "d"), ("a", "b")]));
}

/// A block referring 1000 times to a 4000-byte entry: 4 MB of header list
/// from a 4 KB block. Decoding stops handing out fields at the limit and
/// copies nothing: the scratch buffer holds at most the one string the
/// table had to store.
#[test]
fn hpack_bomb_stops_at_the_limit() {
    const LIMIT: usize = 16 * 1024;
    let value = vec![b'a'; 4000 - 1 - ENTRY_OVERHEAD];
    for huffman in [false, true] {
        let mut block = Vec::new();
        // "x: aaa…" with incremental indexing, then index 62, 1000 times.
        block.extend_from_slice(&[0x40, 0x01, b'x']);
        if huffman {
            let mut coded = Vec::new();
            huffman::encode(value.iter().copied(), &mut coded);
            encode::encode_integer(coded.len(), 7, 0x80, &mut block);
            block.extend_from_slice(&coded);
        } else {
            encode::encode_integer(value.len(), 7, 0, &mut block);
            block.extend_from_slice(&value);
        }
        block.extend(std::iter::repeat_n(0xbe, 1000));

        let mut decoder = Decoder::new(4096);
        let mut scratch = Vec::new();
        let mut total = 0;
        let mut calls = 0;
        let result = decoder.decode(&block, &mut scratch, LIMIT, |name, value| {
            total += name.len() + value.len() + ENTRY_OVERHEAD;
            calls += 1;
            Ok::<(), ()>(())
        });
        assert_eq!(result, Err(DecodeError::ListTooLarge));
        assert_eq!(calls, 4);
        assert!(total <= LIMIT);
        if huffman {
            assert!((value.len()..=4096).contains(&scratch.capacity()));
        } else {
            assert_eq!(scratch.capacity(), 0);
        }
        assert_eq!(decoder.table().size(), 4000);
        // In step: the entry is still there for the next block.
        let fields = decode(&mut decoder, &[0xbe]).unwrap();
        assert_eq!(fields[0].1, value);
    }
}

/// A reused scratch buffer stops growing: the same blocks again allocate
/// nothing.
#[test]
fn scratch_stops_growing_once_warm() {
    let blocks = [
        hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
        hex("8286 84be 5886 a8eb 1064 9cbf"),
        hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
    ];
    let mut scratch = Vec::new();
    let mut warm = None;
    for round in 0..3 {
        let mut decoder = Decoder::new(4096);
        for block in &blocks {
            decoder
                .decode(block, &mut scratch, 16 * 1024, |_, _| Ok::<(), ()>(()))
                .unwrap();
        }
        let now = (scratch.as_ptr(), scratch.capacity());
        if round > 0 {
            assert_eq!(Some(now), warm);
        }
        warm = Some(now);
    }
}

/// Names and values hand out the block's bytes in place when not
/// Huffman-coded.
#[test]
fn raw_strings_are_borrowed_from_the_block() {
    let block = hex("040c 2f73 616d 706c 652f 7061 7468");
    let range = block.as_ptr_range();
    let mut decoder = Decoder::new(4096);
    decoder
        .decode(&block, &mut Vec::new(), usize::MAX, |_, value| {
            assert!(range.contains(&value.as_ptr()));
            Ok::<(), ()>(())
        })
        .unwrap();
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn encoder_output_decodes_to_the_same_fields() {
    let mut fields: Fields = owned(&[
        (":status", "200"),
        (":status", "302"),
        ("content-type", "text/html; charset=utf-8"),
        ("Content-Length", "1234"),
        ("accept-encoding", "gzip, deflate"),
        ("accept-encoding", "br"),
        ("x-empty", ""),
        ("", ""),
        ("ETag", "\"5f3a-1b2c\""),
        (
            "strict-transport-security",
            "max-age=63072000; includeSubDomains",
        ),
    ]);
    fields.push((b"x-long".to_vec(), vec![b'z'; 300]));
    fields.push((b"x-binary".to_vec(), (0..=255).collect()));
    let mut rng = 0x1234_5678_9abc_def0;
    for _ in 0..200 {
        let name_len = (xorshift(&mut rng) % 20) as usize;
        let value_len = (xorshift(&mut rng) % 200) as usize;
        let name = (0..name_len).map(|_| xorshift(&mut rng) as u8).collect();
        let value = (0..value_len)
            .map(|_| b' ' + (xorshift(&mut rng) % 95) as u8)
            .collect();
        fields.push((name, value));
    }
    let mut block = Vec::new();
    let mut expected_len = 0;
    for (name, value) in &fields {
        encode_field(name, value, &mut block);
        expected_len += encoded_field_len(name, value);
    }
    for code in [100, 101, 200, 204, 301, 404, 418, 503, 999] {
        encode_status(code, &mut block);
        expected_len += encoded_status_len(code);
        fields.push((b":status".to_vec(), code.to_string().into_bytes()));
    }
    assert_eq!(block.len(), expected_len);
    let decoded = decode(&mut Decoder::new(4096), &block).unwrap();
    let lowercased: Fields = fields
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value))
        .collect();
    assert_eq!(decoded, lowercased);
}

/// The encoder never indexes: a decoder's table is empty after any block.
#[test]
fn encoder_output_leaves_the_table_empty() {
    let mut block = Vec::new();
    encode_field(b"custom-key", b"custom-value", &mut block);
    encode_status(302, &mut block);
    let mut decoder = Decoder::new(4096);
    decode(&mut decoder, &block).unwrap();
    assert_eq!(decoder.table().len(), 0);
}

/// `first_literal_len` spans exactly the first field the encoder wrote,
/// whether its name is a static index or a literal, and refuses the other
/// representations.
#[test]
fn first_literal_len_spans_the_first_field() {
    for (name, value) in [
        (&b"location"[..], &b"/new"[..]),
        (b"x-custom", b"value"),
        (b"location", &[b'a'; 300][..]),
    ] {
        let mut block = Vec::new();
        encode_field(name, value, &mut block);
        let first = block.len();
        encode_field(b"cache-control", b"no-cache", &mut block);
        assert_eq!(super::first_literal_len(&block), Some(first));
        assert_eq!(super::first_literal_len(&block[..first - 1]), None);
    }
    let mut indexed = Vec::new();
    encode_status(200, &mut indexed);
    assert_eq!(super::first_literal_len(&indexed), None);
    assert_eq!(super::first_literal_len(b""), None);
}
