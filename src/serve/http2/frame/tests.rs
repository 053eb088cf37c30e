//! Tests of the frame layer: every frame type read and written, and each
//! check of RFC 9113 §4–§6 the reader makes.

use super::*;
use ErrorCode as E;
use frame_type as t;

/// A frame written out by hand, independent of `FrameHeader::encode`.
fn raw(frame_type: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let [_, l0, l1, l2] = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut bytes = vec![l0, l1, l2, frame_type, flags];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// The 9 octets of a header announcing `len` octets of payload.
fn header_only(frame_type: u8, flags: u8, stream: u32, len: u32) -> Vec<u8> {
    let [_, l0, l1, l2] = len.to_be_bytes();
    let mut bytes = vec![l0, l1, l2, frame_type, flags];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes
}

/// A PING, to follow a frame under test as the next one would.
const NEXT: [u8; 17] = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

/// What `parse` makes of `bytes`, which hold exactly one frame, checked
/// to agree with what it makes of every prefix (incomplete, or an error
/// the header already shows) and of `bytes` with a next frame after.
fn outcome(bytes: &[u8], max_frame_size: u32) -> Result<Parsed<'_>, FrameError> {
    let whole = parse(bytes, max_frame_size);
    for cut in 0..bytes.len() {
        match parse(&bytes[..cut], max_frame_size) {
            Ok(Parsed::Incomplete { needed }) => {
                let expected = if cut < FRAME_HEADER_LEN {
                    FRAME_HEADER_LEN
                } else {
                    bytes.len()
                };
                assert_eq!(needed, expected, "cut at {cut} of {bytes:?}");
            }
            Err(error) => {
                assert!(cut >= FRAME_HEADER_LEN, "cut at {cut} of {bytes:?}");
                assert_eq!(error.scope, ErrorScope::Connection, "{bytes:?}");
                assert_eq!(Err(error), whole, "cut at {cut} of {bytes:?}");
            }
            Ok(Parsed::Frame { .. }) => panic!("a frame from {cut} of {bytes:?}"),
        }
    }
    let mut followed = bytes.to_vec();
    followed.extend_from_slice(&NEXT);
    assert_eq!(parse(&followed, max_frame_size), whole, "{bytes:?}");
    match whole {
        Ok(Parsed::Frame { len, .. }) => assert_eq!(len, bytes.len()),
        Ok(Parsed::Incomplete { .. }) => panic!("incomplete: {bytes:?}"),
        Err(FrameError {
            scope: ErrorScope::Stream { frame_len, .. },
            ..
        }) => assert_eq!(frame_len, bytes.len()),
        Err(_) => {}
    }
    whole
}

fn frame_of(bytes: &[u8]) -> Frame<'_> {
    match outcome(bytes, DEFAULT_MAX_FRAME_SIZE) {
        Ok(Parsed::Frame { frame, .. }) => frame,
        other => panic!("{other:?} from {bytes:?}"),
    }
}

fn error_of(bytes: &[u8]) -> FrameError {
    match outcome(bytes, DEFAULT_MAX_FRAME_SIZE) {
        Err(error) => error,
        other => panic!("{other:?} from {bytes:?}"),
    }
}

#[test]
fn the_preface_is_the_octets_of_section_3_4() {
    let hex = "505249202a20485454502f322e300d0a0d0a534d0d0a0d0a";
    let octets: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(&octets[..], &PREFACE[..]);
}

#[test]
fn data_frames_lose_their_padding_but_count_it() {
    assert_eq!(
        frame_of(&raw(t::DATA, 0, 1, b"hello")),
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"hello",
            flow_controlled_len: 5
        }
    );
    assert_eq!(
        frame_of(&raw(t::DATA, flag::END_STREAM, 3, b"")),
        Frame::Data {
            stream: 3,
            end_stream: true,
            data: b"",
            flow_controlled_len: 0
        }
    );
    for (payload, data) in [
        (&b"\x03hi\0\0\0"[..], &b"hi"[..]),
        (b"\x00x", b"x"),
        (b"\x00", b""),
        (b"\x04\0\0\0\0", b""),
    ] {
        assert_eq!(
            frame_of(&raw(t::DATA, flag::PADDED | flag::END_STREAM, 5, payload)),
            Frame::Data {
                stream: 5,
                end_stream: true,
                data,
                flow_controlled_len: payload.len() as u32
            },
            "{payload:?}"
        );
    }
}

#[test]
fn headers_frames_with_padding_and_priority_fields() {
    let block = b"\x82\x86\x84";
    assert_eq!(
        frame_of(&raw(t::HEADERS, flag::END_HEADERS, 1, block)),
        Frame::Headers {
            stream: 1,
            end_stream: false,
            end_headers: true,
            priority: None,
            block
        }
    );
    assert_eq!(
        frame_of(&raw(t::HEADERS, flag::END_STREAM, 3, block)),
        Frame::Headers {
            stream: 3,
            end_stream: true,
            end_headers: false,
            priority: None,
            block
        }
    );
    let padded = [&[2][..], block, &[0, 0]].concat();
    assert_eq!(
        frame_of(&raw(
            t::HEADERS,
            flag::PADDED | flag::END_HEADERS,
            5,
            &padded
        )),
        Frame::Headers {
            stream: 5,
            end_stream: false,
            end_headers: true,
            priority: None,
            block
        }
    );
    let dependency = StreamDependency {
        depends_on: 3,
        exclusive: true,
        weight: 255,
    };
    let prioritized = [&[0x80, 0, 0, 3, 255][..], block].concat();
    assert_eq!(
        frame_of(&raw(
            t::HEADERS,
            flag::PRIORITY | flag::END_HEADERS,
            7,
            &prioritized
        )),
        Frame::Headers {
            stream: 7,
            end_stream: false,
            end_headers: true,
            priority: Some(dependency),
            block
        }
    );
    let both = [&[1, 0x80, 0, 0, 3, 255][..], block, &[0]].concat();
    let flags = flag::PADDED | flag::PRIORITY | flag::END_HEADERS | flag::END_STREAM;
    assert_eq!(
        frame_of(&raw(t::HEADERS, flags, 9, &both)),
        Frame::Headers {
            stream: 9,
            end_stream: true,
            end_headers: true,
            priority: Some(dependency),
            block
        }
    );
    // A stream depending on itself is the connection's to refuse, once
    // the block is decoded.
    let own = [&[0, 0, 0, 1, 15][..], block].concat();
    assert_eq!(
        frame_of(&raw(
            t::HEADERS,
            flag::PRIORITY | flag::END_HEADERS,
            1,
            &own
        )),
        Frame::Headers {
            stream: 1,
            end_stream: false,
            end_headers: true,
            priority: Some(StreamDependency {
                depends_on: 1,
                exclusive: false,
                weight: 15
            }),
            block
        }
    );
    // Priority fields and no block at all.
    assert_eq!(
        frame_of(&raw(t::HEADERS, flag::PRIORITY, 1, &[0, 0, 0, 0, 0])),
        Frame::Headers {
            stream: 1,
            end_stream: false,
            end_headers: false,
            priority: Some(StreamDependency {
                depends_on: 0,
                exclusive: false,
                weight: 0
            }),
            block: b""
        }
    );
}

#[test]
fn priority_frames_in_any_stream_state() {
    assert_eq!(
        frame_of(&raw(t::PRIORITY, 0, 5, &[0x80, 0, 0, 1, 7])),
        Frame::Priority {
            stream: 5,
            dependency: StreamDependency {
                depends_on: 1,
                exclusive: true,
                weight: 7
            }
        }
    );
    assert_eq!(
        frame_of(&raw(t::PRIORITY, 0, 2, &[0, 0, 0, 0, 255])),
        Frame::Priority {
            stream: 2,
            dependency: StreamDependency {
                depends_on: 0,
                exclusive: false,
                weight: 255
            }
        }
    );
}

#[test]
fn rst_stream_frames_carry_any_code() {
    assert_eq!(
        frame_of(&raw(t::RST_STREAM, 0, 1, &[0, 0, 0, 8])),
        Frame::RstStream {
            stream: 1,
            code: E::CANCEL
        }
    );
    // h2spec 7 #2: an unknown code is read like any other.
    assert_eq!(
        frame_of(&raw(t::RST_STREAM, 0, 1, &[0, 0, 0, 0xff])),
        Frame::RstStream {
            stream: 1,
            code: ErrorCode(0xff)
        }
    );
}

/// The ACK flag and the parameters of the SETTINGS frame `bytes` hold.
fn settings_of(bytes: &[u8]) -> (bool, Vec<(u16, u32)>) {
    match frame_of(bytes) {
        Frame::Settings { ack, params } => (ack, params.collect()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn settings_frames_yield_every_parameter_in_order() {
    assert_eq!(settings_of(&raw(t::SETTINGS, 0, 0, b"")), (false, vec![]));
    let payload = [
        0, 4, 0, 0, 0, 1, // INITIAL_WINDOW_SIZE 1
        0x99, 0x99, 0xff, 0xff, 0xff, 0xff, // unknown, yielded for the caller to ignore
        0, 4, 0, 1, 0, 0, // INITIAL_WINDOW_SIZE again: applied in order
        0, 3, 0, 0, 0, 100, // MAX_CONCURRENT_STREAMS 100
    ];
    assert_eq!(
        settings_of(&raw(t::SETTINGS, 0, 0, &payload)),
        (
            false,
            vec![
                (setting::INITIAL_WINDOW_SIZE, 1),
                (0x9999, u32::MAX),
                (setting::INITIAL_WINDOW_SIZE, 65_536),
                (setting::MAX_CONCURRENT_STREAMS, 100),
            ]
        )
    );
    assert_eq!(
        settings_of(&raw(t::SETTINGS, flag::ACK, 0, b"")),
        (true, vec![])
    );
}

#[test]
fn settings_values_at_their_limits_are_accepted() {
    for (id, value) in [
        (setting::HEADER_TABLE_SIZE, u32::MAX),
        (setting::ENABLE_PUSH, 0),
        (setting::ENABLE_PUSH, 1),
        (setting::MAX_CONCURRENT_STREAMS, 0),
        (setting::INITIAL_WINDOW_SIZE, 0),
        (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW_SIZE),
        (setting::MAX_FRAME_SIZE, DEFAULT_MAX_FRAME_SIZE),
        (setting::MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT),
        (setting::MAX_HEADER_LIST_SIZE, 0),
        (setting::ENABLE_CONNECT_PROTOCOL, 7),
        (setting::NO_RFC7540_PRIORITIES, 0),
        (setting::NO_RFC7540_PRIORITIES, 1),
        (0, u32::MAX),
        (0xffff, u32::MAX),
    ] {
        let payload = settings_payload(&[(id, value)]);
        assert_eq!(
            settings_of(&raw(t::SETTINGS, 0, 0, &payload)),
            (false, vec![(id, value)])
        );
    }
}

#[test]
fn push_promise_frames_are_parsed_for_the_connection_to_refuse() {
    let block = b"\x82";
    assert_eq!(
        frame_of(&raw(
            t::PUSH_PROMISE,
            flag::END_HEADERS,
            1,
            &[0x80, 0, 0, 2, 0x82]
        )),
        Frame::PushPromise {
            stream: 1,
            promised_stream: 2,
            end_headers: true,
            block
        }
    );
    assert_eq!(
        frame_of(&raw(
            t::PUSH_PROMISE,
            flag::PADDED,
            3,
            &[1, 0, 0, 0, 4, 0x82, 0]
        )),
        Frame::PushPromise {
            stream: 3,
            promised_stream: 4,
            end_headers: false,
            block
        }
    );
}

#[test]
fn ping_frames_with_and_without_ack() {
    assert_eq!(
        frame_of(&raw(t::PING, 0, 0, b"12345678")),
        Frame::Ping {
            ack: false,
            payload: *b"12345678"
        }
    );
    assert_eq!(
        frame_of(&raw(t::PING, flag::ACK, 0, b"abcdefgh")),
        Frame::Ping {
            ack: true,
            payload: *b"abcdefgh"
        }
    );
}

#[test]
fn goaway_frames() {
    assert_eq!(
        frame_of(&raw(t::GOAWAY, 0, 0, b"\x80\0\0\x07\0\0\0\x0bcalm down")),
        Frame::GoAway {
            last_stream: 7,
            code: E::ENHANCE_YOUR_CALM,
            debug: b"calm down"
        }
    );
    // h2spec 7 #1: an unknown code triggers nothing special.
    assert_eq!(
        frame_of(&raw(t::GOAWAY, 0, 0, b"\0\0\0\0\0\0\x01\0")),
        Frame::GoAway {
            last_stream: 0,
            code: ErrorCode(0x100),
            debug: b""
        }
    );
}

#[test]
fn window_update_frames_for_a_stream_or_the_connection() {
    assert_eq!(
        frame_of(&raw(t::WINDOW_UPDATE, 0, 0, &[0, 0, 0x10, 0])),
        Frame::WindowUpdate {
            stream: 0,
            increment: 4096
        }
    );
    assert_eq!(
        frame_of(&raw(t::WINDOW_UPDATE, 0, 1, &[0x7f, 0xff, 0xff, 0xff])),
        Frame::WindowUpdate {
            stream: 1,
            increment: MAX_WINDOW_SIZE
        }
    );
    // The reserved bit above the increment is ignored.
    assert_eq!(
        frame_of(&raw(t::WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 1])),
        Frame::WindowUpdate {
            stream: 1,
            increment: 1
        }
    );
}

#[test]
fn continuation_frames() {
    assert_eq!(
        frame_of(&raw(t::CONTINUATION, flag::END_HEADERS, 1, b"\x84")),
        Frame::Continuation {
            stream: 1,
            end_headers: true,
            block: b"\x84"
        }
    );
    assert_eq!(
        frame_of(&raw(t::CONTINUATION, 0, 1, b"")),
        Frame::Continuation {
            stream: 1,
            end_headers: false,
            block: b""
        }
    );
}

#[test]
fn priority_update_frames() {
    assert_eq!(
        frame_of(&raw(t::PRIORITY_UPDATE, 0, 0, b"\0\0\0\x05u=0, i")),
        Frame::PriorityUpdate {
            prioritized_stream: 5,
            field_value: b"u=0, i"
        }
    );
    assert_eq!(
        frame_of(&raw(t::PRIORITY_UPDATE, 0xff, 0, b"\x80\0\0\x01")),
        Frame::PriorityUpdate {
            prioritized_stream: 1,
            field_value: b""
        }
    );
}

#[test]
fn unknown_frame_types_are_skipped_whole() {
    // h2spec 4.1 #1 and 5.5 #1: type 0x16, 8 octets of payload.
    let h2spec = b"\x00\x00\x08\x16\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    assert_eq!(frame_of(h2spec), Frame::Unknown { frame_type: 0x16 });
    for frame_type in [0x0a, 0x0c, 0x11, 0xff] {
        for stream in [0, 1, 0x8000_0003] {
            assert_eq!(
                frame_of(&raw(frame_type, 0xff, stream, b"anything")),
                Frame::Unknown { frame_type }
            );
            assert_eq!(
                frame_of(&raw(frame_type, 0, stream, b"")),
                Frame::Unknown { frame_type }
            );
        }
    }
}

#[test]
fn the_reserved_bit_of_a_stream_identifier_is_ignored() {
    // h2spec 4.1 #3: a PING with the reserved bit and undefined flags.
    let h2spec = b"\x00\x00\x08\x06\x16\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    assert_eq!(
        frame_of(h2spec),
        Frame::Ping {
            ack: false,
            payload: [0; 8]
        }
    );
    assert_eq!(
        frame_of(&raw(t::DATA, 0, 0x8000_0001, b"x")),
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"x",
            flow_controlled_len: 1
        }
    );
    // Stream 0 with the bit set is still stream 0.
    let error = error_of(&raw(t::DATA, 0, 0x8000_0000, b"x"));
    assert_eq!(
        (error.scope, error.code),
        (ErrorScope::Connection, E::PROTOCOL_ERROR)
    );
}

#[test]
fn undefined_flags_are_ignored() {
    // h2spec 4.1 #2: PING with flags 0x16 (no ACK).
    let h2spec = b"\x00\x00\x08\x06\x16\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    assert_eq!(
        frame_of(h2spec),
        Frame::Ping {
            ack: false,
            payload: [0; 8]
        }
    );
    // Every bit but PADDED and END_STREAM, PRIORITY among them, on DATA.
    assert_eq!(
        frame_of(&raw(t::DATA, 0xf6, 1, b"x")),
        Frame::Data {
            stream: 1,
            end_stream: false,
            data: b"x",
            flow_controlled_len: 1
        }
    );
    assert_eq!(
        frame_of(&raw(t::RST_STREAM, 0xff, 1, &[0, 0, 0, 0])),
        Frame::RstStream {
            stream: 1,
            code: E::NO_ERROR
        }
    );
    assert_eq!(
        frame_of(&raw(t::CONTINUATION, 0xfb, 1, b"")),
        Frame::Continuation {
            stream: 1,
            end_headers: false,
            block: b""
        }
    );
}

/// Whom an error ends, as the tables below write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ends {
    /// `ErrorScope::Connection`.
    Connection,
    /// `ErrorScope::Stream` on this stream, skipping the whole frame.
    Stream(u32),
}

fn settings_payload(params: &[(u16, u32)]) -> Vec<u8> {
    params
        .iter()
        .flat_map(|(id, value)| [&id.to_be_bytes()[..], &value.to_be_bytes()].concat())
        .collect()
}

#[test]
fn every_validation_error_with_its_code_and_scope() {
    use Ends::{Connection, Stream};
    let settings = |params: &[(u16, u32)]| raw(t::SETTINGS, 0, 0, &settings_payload(params));
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<u8>, Ends, ErrorCode)> = vec![
        // Stream identifier 0 where a stream is needed.
        ("DATA on 0 (h2spec 6.1 #1)", raw(t::DATA, 1, 0, b"test"), Connection, E::PROTOCOL_ERROR),
        ("HEADERS on 0 (h2spec 6.2 #3)", raw(t::HEADERS, 4, 0, b"\x82"), Connection, E::PROTOCOL_ERROR),
        ("PRIORITY on 0 (h2spec 6.3 #1)", raw(t::PRIORITY, 0, 0, &[0, 0, 0, 1, 0]), Connection, E::PROTOCOL_ERROR),
        ("RST_STREAM on 0 (h2spec 6.4 #1)", raw(t::RST_STREAM, 0, 0, &[0; 4]), Connection, E::PROTOCOL_ERROR),
        ("PUSH_PROMISE on 0", raw(t::PUSH_PROMISE, 4, 0, &[0, 0, 0, 2]), Connection, E::PROTOCOL_ERROR),
        ("CONTINUATION on 0 (h2spec 6.10 #3)", raw(t::CONTINUATION, 4, 0, b"\x82"), Connection, E::PROTOCOL_ERROR),
        // A stream where only the connection may be named.
        ("SETTINGS on 1 (h2spec 6.5 #2)", raw(t::SETTINGS, 0, 1, b""), Connection, E::PROTOCOL_ERROR),
        ("PING on 1 (h2spec 6.7 #3)", raw(t::PING, 0, 1, &[0; 8]), Connection, E::PROTOCOL_ERROR),
        ("GOAWAY on 1 (h2spec 6.8 #1)", raw(t::GOAWAY, 0, 1, &[0; 8]), Connection, E::PROTOCOL_ERROR),
        ("PRIORITY_UPDATE on 1", raw(t::PRIORITY_UPDATE, 0, 1, &[0, 0, 0, 1]), Connection, E::PROTOCOL_ERROR),
        // Fixed lengths.
        ("RST_STREAM of 3 (h2spec 6.4 #3)", raw(t::RST_STREAM, 0, 1, &[0; 3]), Connection, E::FRAME_SIZE_ERROR),
        ("RST_STREAM of 5", raw(t::RST_STREAM, 0, 1, &[0; 5]), Connection, E::FRAME_SIZE_ERROR),
        ("PING of 0", raw(t::PING, 0, 0, b""), Connection, E::FRAME_SIZE_ERROR),
        ("PING of 7", raw(t::PING, 0, 0, &[0; 7]), Connection, E::FRAME_SIZE_ERROR),
        ("PING of 9 (h2spec 6.7 #4)", raw(t::PING, 0, 0, &[0; 9]), Connection, E::FRAME_SIZE_ERROR),
        ("WINDOW_UPDATE of 3 (h2spec 6.9 #3)", b"\x00\x00\x03\x08\x00\x00\x00\x00\x00\x00\x00\x01".to_vec(), Connection, E::FRAME_SIZE_ERROR),
        ("WINDOW_UPDATE of 5 on a stream", raw(t::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 0, 1]), Connection, E::FRAME_SIZE_ERROR),
        ("SETTINGS of 5", raw(t::SETTINGS, 0, 0, &[0; 5]), Connection, E::FRAME_SIZE_ERROR),
        ("SETTINGS of 7 (h2spec 6.5 #3)", raw(t::SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100, 0]), Connection, E::FRAME_SIZE_ERROR),
        ("SETTINGS ACK with a payload (h2spec 6.5 #1)", raw(t::SETTINGS, flag::ACK, 0, &[0, 3, 0, 0, 0, 100]), Connection, E::FRAME_SIZE_ERROR),
        ("GOAWAY of 7", raw(t::GOAWAY, 0, 0, &[0; 7]), Connection, E::FRAME_SIZE_ERROR),
        ("PRIORITY_UPDATE of 3", raw(t::PRIORITY_UPDATE, 0, 0, &[0, 0, 1]), Connection, E::FRAME_SIZE_ERROR),
        ("PRIORITY of 4 (h2spec 6.3 #2)", b"\x00\x00\x04\x02\x00\x00\x00\x00\x01\x80\x00\x00\x01".to_vec(), Stream(1), E::FRAME_SIZE_ERROR),
        ("PRIORITY of 6", raw(t::PRIORITY, 0, 3, &[0, 0, 0, 1, 0, 0]), Stream(3), E::FRAME_SIZE_ERROR),
        // Too short for mandatory fields.
        ("padded DATA of 0", raw(t::DATA, flag::PADDED, 1, b""), Connection, E::FRAME_SIZE_ERROR),
        ("padded HEADERS of 0", raw(t::HEADERS, flag::PADDED, 1, b""), Connection, E::FRAME_SIZE_ERROR),
        ("HEADERS of 4 with priority", raw(t::HEADERS, flag::PRIORITY, 1, &[0; 4]), Connection, E::FRAME_SIZE_ERROR),
        ("padded HEADERS of 5 with priority", raw(t::HEADERS, flag::PRIORITY | flag::PADDED, 1, &[0; 5]), Connection, E::FRAME_SIZE_ERROR),
        ("PUSH_PROMISE of 3", raw(t::PUSH_PROMISE, 0, 1, &[0; 3]), Connection, E::FRAME_SIZE_ERROR),
        ("padded PUSH_PROMISE of 4", raw(t::PUSH_PROMISE, flag::PADDED, 1, &[0; 4]), Connection, E::FRAME_SIZE_ERROR),
        // Padding that does not fit.
        ("DATA pad 6 of 5 (h2spec 6.1 #3)", b"\x00\x00\x05\x00\x09\x00\x00\x00\x01\x06\x54\x65\x73\x74".to_vec(), Connection, E::PROTOCOL_ERROR),
        ("DATA pad as long as the payload", raw(t::DATA, flag::PADDED, 1, &[3, 0, 0]), Connection, E::PROTOCOL_ERROR),
        ("HEADERS pad past the block (h2spec 6.2 #4)", raw(t::HEADERS, 0x0d, 1, &[5, 0x82, 0x86, 0x84]), Connection, E::PROTOCOL_ERROR),
        ("HEADERS pad into the priority fields", raw(t::HEADERS, flag::PADDED | flag::PRIORITY, 1, &[2, 0, 0, 0, 0, 0, 0x82]), Connection, E::PROTOCOL_ERROR),
        ("PUSH_PROMISE pad into the promised stream", raw(t::PUSH_PROMISE, flag::PADDED, 1, &[1, 0, 0, 0, 2]), Connection, E::PROTOCOL_ERROR),
        // Values.
        ("WINDOW_UPDATE of 0 on the connection (h2spec 6.9 #1)", raw(t::WINDOW_UPDATE, 0, 0, &[0; 4]), Connection, E::PROTOCOL_ERROR),
        ("WINDOW_UPDATE of only the reserved bit", raw(t::WINDOW_UPDATE, 0, 0, &[0x80, 0, 0, 0]), Connection, E::PROTOCOL_ERROR),
        ("WINDOW_UPDATE of 0 on a stream (h2spec 6.9 #2)", raw(t::WINDOW_UPDATE, 0, 1, &[0; 4]), Stream(1), E::PROTOCOL_ERROR),
        ("PRIORITY on itself (h2spec 5.3.1 #2)", raw(t::PRIORITY, 0, 1, &[0, 0, 0, 1, 255]), Stream(1), E::PROTOCOL_ERROR),
        ("PRIORITY exclusively on itself", raw(t::PRIORITY, 0, 3, &[0x80, 0, 0, 3, 0]), Stream(3), E::PROTOCOL_ERROR),
        ("PRIORITY_UPDATE for stream 0", raw(t::PRIORITY_UPDATE, 0, 0, b"\0\0\0\0u=1"), Connection, E::PROTOCOL_ERROR),
        ("PRIORITY_UPDATE for 0 with the reserved bit", raw(t::PRIORITY_UPDATE, 0, 0, b"\x80\0\0\0"), Connection, E::PROTOCOL_ERROR),
        // SETTINGS values (h2spec 6.5.2 #1-#4, 6.9.2 #3).
        ("ENABLE_PUSH 2", settings(&[(setting::ENABLE_PUSH, 2)]), Connection, E::PROTOCOL_ERROR),
        ("INITIAL_WINDOW_SIZE 2^31", settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]), Connection, E::FLOW_CONTROL_ERROR),
        ("INITIAL_WINDOW_SIZE 2^32-1", settings(&[(setting::INITIAL_WINDOW_SIZE, u32::MAX)]), Connection, E::FLOW_CONTROL_ERROR),
        ("MAX_FRAME_SIZE 2^14-1", settings(&[(setting::MAX_FRAME_SIZE, (1 << 14) - 1)]), Connection, E::PROTOCOL_ERROR),
        ("MAX_FRAME_SIZE 0", settings(&[(setting::MAX_FRAME_SIZE, 0)]), Connection, E::PROTOCOL_ERROR),
        ("MAX_FRAME_SIZE 2^24", settings(&[(setting::MAX_FRAME_SIZE, 1 << 24)]), Connection, E::PROTOCOL_ERROR),
        ("NO_RFC7540_PRIORITIES 2", settings(&[(setting::NO_RFC7540_PRIORITIES, 2)]), Connection, E::PROTOCOL_ERROR),
        ("a bad value after good ones", settings(&[(setting::INITIAL_WINDOW_SIZE, 1), (0x42, 9), (setting::ENABLE_PUSH, 5)]), Connection, E::PROTOCOL_ERROR),
    ];
    for (name, bytes, ends, code) in cases {
        let error = error_of(&bytes);
        let scope = match ends {
            Connection => ErrorScope::Connection,
            Stream(stream) => ErrorScope::Stream {
                stream,
                frame_len: bytes.len(),
            },
        };
        assert_eq!((error.scope, error.code), (scope, code), "{name}");
        assert!(!error.reason.is_empty(), "{name}");
    }
}

#[test]
fn connection_errors_in_the_header_need_no_payload() {
    for bytes in [
        header_only(t::SETTINGS, 0, 0, 7),
        header_only(t::SETTINGS, flag::ACK, 0, 6),
        header_only(t::PING, 0, 0, 9),
        header_only(t::RST_STREAM, 0, 1, 1000),
        header_only(t::WINDOW_UPDATE, 0, 1, 16_000),
        header_only(t::DATA, 0, 0, 16_000),
        header_only(t::GOAWAY, 0, 3, 8),
    ] {
        let error = parse(&bytes, DEFAULT_MAX_FRAME_SIZE).unwrap_err();
        assert_eq!(error.scope, ErrorScope::Connection, "{bytes:?}");
    }
    // A stream error waits for its whole frame, to be skipped.
    assert_eq!(
        parse(&header_only(t::PRIORITY, 0, 1, 100), DEFAULT_MAX_FRAME_SIZE),
        Ok(Parsed::Incomplete { needed: 109 })
    );
}

#[test]
fn frame_size_limits() {
    // h2spec 4.2 #1: 2^14 octets always get through.
    let largest = raw(t::DATA, flag::END_STREAM, 1, &[b'x'; 1 << 14]);
    let Frame::Data { data, .. } = frame_of(&largest) else {
        panic!()
    };
    assert_eq!(data.len(), 1 << 14);
    // h2spec 4.2 #2, #3: one more, on DATA or HEADERS, is refused from
    // the header alone, and so is a frame of an unknown type.
    for frame_type in [t::DATA, t::HEADERS, t::CONTINUATION, 0x42] {
        let over = header_only(frame_type, 0, 1, (1 << 14) + 1);
        let error = parse(&over, DEFAULT_MAX_FRAME_SIZE).unwrap_err();
        assert_eq!(
            (error.scope, error.code),
            (ErrorScope::Connection, E::FRAME_SIZE_ERROR)
        );
        let whole = raw(frame_type, 0, 1, &[0; (1 << 14) + 1]);
        assert_eq!(outcome(&whole, DEFAULT_MAX_FRAME_SIZE), Err(error));
        // Under a larger announced limit, the same frame is fine.
        assert!(matches!(
            outcome(&whole, (1 << 14) + 1),
            Ok(Parsed::Frame { .. })
        ));
    }
    // A SETTINGS frame over the limit is a size error whatever its
    // parameters.
    let settings = header_only(t::SETTINGS, 0, 0, 16_386);
    assert_eq!(
        parse(&settings, DEFAULT_MAX_FRAME_SIZE).unwrap_err().code,
        E::FRAME_SIZE_ERROR
    );
    // The largest frame of the largest limit is awaited whole.
    let huge = header_only(t::DATA, 0, 1, MAX_FRAME_SIZE_LIMIT);
    assert_eq!(
        parse(&huge, MAX_FRAME_SIZE_LIMIT),
        Ok(Parsed::Incomplete {
            needed: FRAME_HEADER_LEN + MAX_FRAME_SIZE_LIMIT as usize
        })
    );
    assert!(parse(&huge, MAX_FRAME_SIZE_LIMIT - 1).is_err());
}

#[test]
fn frames_follow_one_another_in_one_buffer() {
    let mut input = Vec::new();
    input.extend_from_slice(&raw(t::SETTINGS, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]));
    input.extend_from_slice(&raw(t::WINDOW_UPDATE, 0, 0, &[0, 0xff, 0, 0]));
    input.extend_from_slice(&raw(t::HEADERS, 0, 1, b"\x82"));
    input.extend_from_slice(&raw(t::CONTINUATION, flag::END_HEADERS, 1, b"\x84"));
    input.extend_from_slice(&raw(0x21, 0, 0, b"ext"));
    input.extend_from_slice(&raw(t::DATA, flag::END_STREAM, 1, b"body"));
    input.extend_from_slice(&raw(t::SETTINGS, flag::ACK, 0, b""));
    input.extend_from_slice(&NEXT[..12]);
    let mut at = 0;
    let mut seen = Vec::new();
    loop {
        match parse(&input[at..], DEFAULT_MAX_FRAME_SIZE).unwrap() {
            Parsed::Frame { frame, len } => {
                seen.push(match frame {
                    Frame::Settings { ack: false, .. } => "SETTINGS",
                    Frame::WindowUpdate { .. } => "WINDOW_UPDATE",
                    Frame::Headers { .. } => "HEADERS",
                    Frame::Continuation { .. } => "CONTINUATION",
                    Frame::Unknown { .. } => "unknown",
                    Frame::Data { .. } => "DATA",
                    Frame::Settings { ack: true, .. } => "SETTINGS ACK",
                    other => panic!("{other:?}"),
                });
                at += len;
            }
            Parsed::Incomplete { needed } => {
                assert_eq!(needed, 17);
                assert_eq!(input.len() - at, 12);
                break;
            }
        }
    }
    assert_eq!(
        seen,
        [
            "SETTINGS",
            "WINDOW_UPDATE",
            "HEADERS",
            "CONTINUATION",
            "unknown",
            "DATA",
            "SETTINGS ACK"
        ]
    );
}

#[test]
fn frame_headers_decode_what_they_encode() {
    let header = FrameHeader {
        len: 0x12_3456,
        frame_type: 0xab,
        flags: 0xcd,
        stream: 0x7fff_fffe,
    };
    let bytes = header.encode();
    assert_eq!(
        bytes,
        [0x12, 0x34, 0x56, 0xab, 0xcd, 0x7f, 0xff, 0xff, 0xfe]
    );
    assert_eq!(FrameHeader::decode(&bytes), header);
    let mut reserved = bytes;
    reserved[5] |= 0x80;
    assert_eq!(FrameHeader::decode(&reserved), header);
}

#[test]
fn writers_produce_the_octets_of_section_6() {
    assert_eq!(
        data_frame_header(1, 5, true),
        [0, 0, 5, t::DATA, flag::END_STREAM, 0, 0, 0, 1]
    );
    assert_eq!(
        data_frame_header(0x101, 0x4000, false),
        [0, 0x40, 0, t::DATA, 0, 0, 0, 1, 1]
    );
    assert_eq!(
        headers_frame_header(3, 0x1234, false, true),
        [0, 0x12, 0x34, t::HEADERS, flag::END_HEADERS, 0, 0, 0, 3]
    );
    assert_eq!(
        headers_frame_header(3, 1, true, false),
        [0, 0, 1, t::HEADERS, flag::END_STREAM, 0, 0, 0, 3]
    );
    assert_eq!(
        continuation_frame_header(3, 7, true),
        [0, 0, 7, t::CONTINUATION, flag::END_HEADERS, 0, 0, 0, 3]
    );
    assert_eq!(settings_ack(), [0, 0, 0, 4, 1, 0, 0, 0, 0]);
    assert_eq!(
        ping_ack(*b"12345678"),
        *b"\0\0\x08\x06\x01\0\0\0\x0012345678"
    );
    assert_eq!(
        rst_stream(5, E::REFUSED_STREAM),
        [0, 0, 4, 3, 0, 0, 0, 0, 5, 0, 0, 0, 7]
    );
    assert_eq!(
        window_update(0, 0x00ff_0000),
        [0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0xff, 0, 0]
    );
    let mut out = Vec::new();
    write_settings(&mut out, &[]);
    assert_eq!(out, [0, 0, 0, 4, 0, 0, 0, 0, 0]);
    out.clear();
    write_settings(
        &mut out,
        &[
            (setting::MAX_CONCURRENT_STREAMS, 100),
            (setting::ENABLE_PUSH, 0),
        ],
    );
    assert_eq!(
        out,
        [
            0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100, 0, 2, 0, 0, 0, 0
        ]
    );
    out.clear();
    write_goaway(&mut out, 7, E::PROTOCOL_ERROR, b"why");
    assert_eq!(out, *b"\0\0\x0b\x07\0\0\0\0\0\0\0\0\x07\0\0\0\x01why");
}

#[test]
fn writers_append_and_leave_the_reserved_bit_unset() {
    let mut out = b"before".to_vec();
    write_settings(&mut out, &[(setting::INITIAL_WINDOW_SIZE, 1)]);
    write_goaway(&mut out, 0x8000_0001, E::NO_ERROR, b"");
    assert_eq!(&out[..6], b"before");
    assert_eq!(out.len(), 6 + 15 + 17);
    assert_eq!(&out[6 + 15 + 9..6 + 15 + 13], [0, 0, 0, 1]);
    assert_eq!(&rst_stream(0x8000_0001, E::CANCEL)[5..9], [0, 0, 0, 1]);
    assert_eq!(&window_update(0x8000_0000, 1)[5..9], [0, 0, 0, 0]);
    assert_eq!(
        &data_frame_header(0xffff_ffff, 0, false)[5..9],
        [0x7f, 0xff, 0xff, 0xff]
    );
}

#[test]
fn what_the_writers_write_parses_back() {
    let body = b"<!doctype html>";
    let data = [&data_frame_header(1, body.len() as u32, true)[..], body].concat();
    assert_eq!(
        frame_of(&data),
        Frame::Data {
            stream: 1,
            end_stream: true,
            data: body,
            flow_controlled_len: body.len() as u32
        }
    );
    let block = b"\x88\x5f\x87";
    let headers = [&headers_frame_header(3, 3, false, false)[..], block].concat();
    assert_eq!(
        frame_of(&headers),
        Frame::Headers {
            stream: 3,
            end_stream: false,
            end_headers: false,
            priority: None,
            block
        }
    );
    let continuation = [&continuation_frame_header(3, 3, true)[..], block].concat();
    assert_eq!(
        frame_of(&continuation),
        Frame::Continuation {
            stream: 3,
            end_headers: true,
            block
        }
    );
    let params = [
        (setting::MAX_CONCURRENT_STREAMS, 128),
        (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW_SIZE),
        (setting::MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT),
        (setting::NO_RFC7540_PRIORITIES, 1),
    ];
    let mut settings = Vec::new();
    write_settings(&mut settings, &params);
    assert_eq!(settings_of(&settings), (false, params.to_vec()));
    assert_eq!(settings_of(&settings_ack()), (true, vec![]));
    assert_eq!(
        frame_of(&ping_ack([8, 7, 6, 5, 4, 3, 2, 1])),
        Frame::Ping {
            ack: true,
            payload: [8, 7, 6, 5, 4, 3, 2, 1]
        }
    );
    let mut goaway = Vec::new();
    write_goaway(&mut goaway, 41, E::FRAME_SIZE_ERROR, b"frame too large");
    assert_eq!(
        frame_of(&goaway),
        Frame::GoAway {
            last_stream: 41,
            code: E::FRAME_SIZE_ERROR,
            debug: b"frame too large"
        }
    );
    assert_eq!(
        frame_of(&rst_stream(9, E::STREAM_CLOSED)),
        Frame::RstStream {
            stream: 9,
            code: E::STREAM_CLOSED
        }
    );
    for (stream, increment) in [(0, 1), (0, MAX_WINDOW_SIZE), (7, 65_535)] {
        assert_eq!(
            frame_of(&window_update(stream, increment)),
            Frame::WindowUpdate { stream, increment }
        );
    }
}

#[test]
fn error_codes_print_their_names() {
    assert_eq!(format!("{:?}", E::NO_ERROR), "NO_ERROR");
    assert_eq!(format!("{:?}", E::FRAME_SIZE_ERROR), "FRAME_SIZE_ERROR");
    assert_eq!(E::HTTP_1_1_REQUIRED.name(), Some("HTTP_1_1_REQUIRED"));
    assert_eq!(E::HTTP_1_1_REQUIRED, ErrorCode(0xd));
    assert_eq!(ErrorCode(0xe).name(), None);
    assert_eq!(format!("{:?}", ErrorCode(0xe)), "ErrorCode(0xe)");
    assert_eq!(
        format!("{:?}", ErrorCode(u32::MAX)),
        "ErrorCode(0xffffffff)"
    );
}
