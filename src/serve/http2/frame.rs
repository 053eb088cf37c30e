//! HTTP/2 frames (RFC 9113 §4, §6; PRIORITY_UPDATE from RFC 9218 §7.1),
//! read in place from the connection's read buffer and written into the
//! caller's buffers, with no allocation of their own.
//!
//! Reading: [`parse`] looks at the start of the unread input and returns
//! the next whole frame, its payload borrowed from the input, or how many
//! bytes it needs, or the error the frame is. Everything RFC 9113 says of
//! one frame on its own is checked here: the size limit, fixed lengths,
//! stream identifier zero where it must not be and non-zero where it must
//! be, padding, SETTINGS values, a zero WINDOW_UPDATE increment. What
//! depends on the connection's state (stream states and identifier order,
//! a field block that must go on in CONTINUATION frames, flow-control
//! windows, whether a PUSH_PROMISE may arrive at all) is the connection's.
//!
//! An error the 9 header octets show is reported as soon as they have
//! arrived, so the payload of a frame that is refused is never waited for
//! or buffered. A stream error is reported only once its whole frame is in
//! the input: the caller resets the stream, skips the frame and reads on.
//!
//! Writing: fixed-size frames come back as arrays; SETTINGS and GOAWAY are
//! appended to a `Vec` the connection keeps (its capacity reused, so there
//! is no allocation once it has grown). DATA, HEADERS and CONTINUATION get
//! header-only writers: their payload is sent from where it already lies
//! (the pack's mapping, the HPACK encoder's output), never copied.

use std::fmt;

/// The client connection preface (§3.4): these 24 octets, then the client's
/// first SETTINGS frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Octets of a frame header (§4.1), which a frame's length does not count.
pub const FRAME_HEADER_LEN: usize = 9;

/// SETTINGS_MAX_FRAME_SIZE until a SETTINGS frame says otherwise, and the
/// least it may say (§4.2, §6.5.2): frames this large always get through.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 1 << 14;

/// The most SETTINGS_MAX_FRAME_SIZE may say: a frame's 24 length bits
/// (§4.2).
pub const MAX_FRAME_SIZE_LIMIT: u32 = (1 << 24) - 1;

/// The most a flow-control window may hold (§6.9.1), and so the most
/// SETTINGS_INITIAL_WINDOW_SIZE may say (§6.5.2).
pub const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

/// Every flow-control window at the start: a stream's until
/// SETTINGS_INITIAL_WINDOW_SIZE changes it, the connection's until a
/// WINDOW_UPDATE does (§6.9.2).
pub const DEFAULT_INITIAL_WINDOW_SIZE: u32 = 65_535;

/// SETTINGS_HEADER_TABLE_SIZE until a SETTINGS frame says otherwise
/// (§6.5.2): the HPACK dynamic table both ends start with.
pub const DEFAULT_HEADER_TABLE_SIZE: u32 = 4096;

/// The reserved bit above a 31-bit stream identifier or window increment:
/// ignored on receipt, left unset when sending (§4.1, §6.9).
const RESERVED_BIT: u32 = 1 << 31;

/// Frame types (RFC 9113 §6; PRIORITY_UPDATE: RFC 9218 §7.1). Any other
/// value is an extension frame, which a receiver ignores (§4.1, §5.5).
pub mod frame_type {
    /// Request or response content (§6.1).
    pub const DATA: u8 = 0x0;
    /// Opens a stream, or carries trailers: the first fragment of a field
    /// block (§6.2).
    pub const HEADERS: u8 = 0x1;
    /// The deprecated RFC 7540 priority of a stream (§6.3).
    pub const PRIORITY: u8 = 0x2;
    /// Ends a stream at once (§6.4).
    pub const RST_STREAM: u8 = 0x3;
    /// The sender's settings, or the acknowledgement of the peer's (§6.5).
    pub const SETTINGS: u8 = 0x4;
    /// Server push (§6.6); only servers send it.
    pub const PUSH_PROMISE: u8 = 0x5;
    /// A liveness check answered with the same payload (§6.7).
    pub const PING: u8 = 0x6;
    /// The end of the connection, and the last stream acted on (§6.8).
    pub const GOAWAY: u8 = 0x7;
    /// Flow-control credit for a stream or the connection (§6.9).
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// A further fragment of a field block (§6.10).
    pub const CONTINUATION: u8 = 0x9;
    /// A client's new priority for a stream (RFC 9218 §7.1).
    pub const PRIORITY_UPDATE: u8 = 0x10;
}

/// Flag bits (§6). A bit means something only on the frame types named;
/// other bits are ignored on receipt and sent unset (§4.1).
pub mod flag {
    /// DATA, HEADERS: the sender's last frame on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement, not a new SETTINGS or PING.
    pub const ACK: u8 = 0x1;
    /// HEADERS, PUSH_PROMISE, CONTINUATION: the field block ends in this
    /// frame.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS, PUSH_PROMISE: a Pad Length octet and that much
    /// padding surround the content.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: the deprecated RFC 7540 priority fields come first.
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameter identifiers (RFC 9113 §6.5.2, RFC 8441 §3, RFC 9218
/// §2.1). A receiver ignores identifiers it does not know (§6.5.2).
pub mod setting {
    /// The most the peer's HPACK encoder may put in our decoder's dynamic
    /// table, in octets.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// Whether a client takes server push: 0 or 1.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// The most streams the receiver may have open at once.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// The flow-control window every new stream starts with; at most
    /// `MAX_WINDOW_SIZE`.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// The largest frame payload the sender takes; from
    /// `DEFAULT_MAX_FRAME_SIZE` to `MAX_FRAME_SIZE_LIMIT`.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// Advisory: the largest field section the sender takes.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// RFC 8441: a server takes extended CONNECT (WebSockets over HTTP/2).
    /// Its meaning is the server's to announce, so a value a client sends
    /// is not checked.
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
    /// RFC 9218: the sender ignores RFC 7540 priority signals; 0 or 1.
    pub const NO_RFC7540_PRIORITIES: u16 = 0x9;
}

/// An error code (§7) as RST_STREAM and GOAWAY carry it. A newtype over the
/// wire value rather than an enum: a peer may send codes no list here
/// knows, which must trigger nothing special (§7) but are still read.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Not an error: a graceful GOAWAY, or a stream no longer wanted after
    /// its response was sent.
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    /// A protocol error no more specific code describes.
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    /// The sender failed on its own side.
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    /// The peer broke flow control.
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    /// SETTINGS went unacknowledged too long.
    pub const SETTINGS_TIMEOUT: ErrorCode = ErrorCode(0x4);
    /// A frame arrived on a stream already half-closed.
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    /// A frame had a size its type does not allow.
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    /// The stream was refused before any processing: safe to retry.
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    /// The HPACK context cannot be kept in step.
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    /// The tunnel of a CONNECT request failed.
    pub const CONNECT_ERROR: ErrorCode = ErrorCode(0xa);
    /// The peer generates excessive load.
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
    /// The TLS connection is not good enough for HTTP/2 (§9.2).
    pub const INADEQUATE_SECURITY: ErrorCode = ErrorCode(0xc);
    /// The request must be retried over HTTP/1.1.
    pub const HTTP_1_1_REQUIRED: ErrorCode = ErrorCode(0xd);

    /// The code's name in RFC 9113 §7, or `None` for a code it does not
    /// define.
    pub fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        usize::try_from(self.0)
            .ok()
            .and_then(|i| NAMES.get(i).copied())
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "ErrorCode({:#x})", self.0),
        }
    }
}

/// A frame header (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Octets of payload after the header; 24 bits on the wire.
    pub len: u32,
    /// What the payload is (`frame_type`); a value none of those names is
    /// an extension frame.
    pub frame_type: u8,
    /// The flag octet as sent; which bits count depends on the type.
    pub flags: u8,
    /// The stream the frame belongs to, 0 for the connection as a whole;
    /// the reserved bit is dropped (ignored on receipt, unset when sent).
    pub stream: u32,
}

impl FrameHeader {
    /// Reads the 9 octets of a frame header.
    pub fn decode(bytes: &[u8; FRAME_HEADER_LEN]) -> FrameHeader {
        let [l0, l1, l2, frame_type, flags, s0, s1, s2, s3] = *bytes;
        FrameHeader {
            len: u32::from_be_bytes([0, l0, l1, l2]),
            frame_type,
            flags,
            stream: u32::from_be_bytes([s0, s1, s2, s3]) & !RESERVED_BIT,
        }
    }

    /// The 9 octets of this header. `len` must fit in 24 bits: the callers
    /// size frames by the peer's SETTINGS_MAX_FRAME_SIZE, which cannot say
    /// more.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        debug_assert!(
            self.len <= MAX_FRAME_SIZE_LIMIT,
            "frame length {}",
            self.len
        );
        let [_, l0, l1, l2] = self.len.to_be_bytes();
        let [s0, s1, s2, s3] = (self.stream & !RESERVED_BIT).to_be_bytes();
        [l0, l1, l2, self.frame_type, self.flags, s0, s1, s2, s3]
    }
}

/// The RFC 7540 priority fields of HEADERS and PRIORITY. RFC 9113 §5.3.2
/// deprecates them and kiln schedules by RFC 9218 instead; they are read so
/// that a stream made to depend on itself can be refused (RFC 7540 §5.3.1,
/// still checked by h2spec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamDependency {
    /// The stream this one would depend on; 0 for none.
    pub depends_on: u32,
    /// The Exclusive bit: this stream would become the only dependent of
    /// `depends_on`.
    pub exclusive: bool,
    /// The weight as sent, one less than the weight meant (1 to 256).
    pub weight: u8,
}

impl StreamDependency {
    /// Reads the 5 octets of the fields: Exclusive bit, Stream Dependency,
    /// Weight. Their presence was checked with the frame's length.
    fn read(fields: &[u8]) -> StreamDependency {
        let word = u32_at(fields, 0);
        StreamDependency {
            depends_on: word & !RESERVED_BIT,
            exclusive: word & RESERVED_BIT != 0,
            weight: fields.get(4).copied().unwrap_or_default(),
        }
    }
}

/// The parameters of a SETTINGS frame as (identifier, value), read in
/// place in the order sent, which is the order they must be applied in
/// (§6.5.3). Values have passed the checks of §6.5.2 (see [`parse`]);
/// identifiers `setting` does not name are yielded too, for the caller to
/// ignore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingsParams<'a> {
    /// The parameters not yet yielded: a whole number of 6-octet entries.
    rest: &'a [u8],
}

impl Iterator for SettingsParams<'_> {
    type Item = (u16, u32);

    fn next(&mut self) -> Option<(u16, u32)> {
        let (entry, rest) = self.rest.split_first_chunk::<6>()?;
        self.rest = rest;
        let [i0, i1, v0, v1, v2, v3] = *entry;
        Some((
            u16::from_be_bytes([i0, i1]),
            u32::from_be_bytes([v0, v1, v2, v3]),
        ))
    }
}

/// A frame that passed the checks of its type, its payload borrowed from
/// the input. Stream identifiers have the reserved bit dropped; flags a
/// type does not define are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Request content (§6.1).
    Data {
        /// The stream the content belongs to (never 0).
        stream: u32,
        /// The client's last frame on the stream.
        end_stream: bool,
        /// The content, padding removed.
        data: &'a [u8],
        /// The frame's whole payload length, Pad Length and padding
        /// included: what the frame takes from the stream's and the
        /// connection's flow-control windows (§6.1, §6.9), whatever becomes
        /// of the frame.
        flow_controlled_len: u32,
    },
    /// A request's header section or trailers, opening the stream or ending
    /// it (§6.2).
    Headers {
        /// The stream (never 0).
        stream: u32,
        /// The request has no content (or these are its trailers).
        end_stream: bool,
        /// The field block is whole; otherwise CONTINUATION frames on the
        /// same stream must follow, and nothing else.
        end_headers: bool,
        /// The deprecated RFC 7540 priority fields, when the PRIORITY flag
        /// was set: reported so the connection can refuse a self-dependency
        /// after decoding the block, which HPACK state needs even when the
        /// stream is refused (§4.3).
        priority: Option<StreamDependency>,
        /// The first fragment of the field block, padding removed.
        block: &'a [u8],
    },
    /// The deprecated RFC 7540 priority of a stream (§6.3); a stream made
    /// to depend on itself is refused by [`parse`], as nothing else in the
    /// frame needs processing.
    Priority {
        /// The stream reprioritized (never 0; any state, even idle).
        stream: u32,
        /// The new priority fields.
        dependency: StreamDependency,
    },
    /// The peer ended a stream (§6.4).
    RstStream {
        /// The stream ended (never 0).
        stream: u32,
        /// Why; any value, known or not (§7).
        code: ErrorCode,
    },
    /// The peer's settings, or its acknowledgement of ours (§6.5).
    Settings {
        /// An acknowledgement of our SETTINGS (then `params` is empty); a
        /// frame without it must be acknowledged once applied.
        ack: bool,
        /// The settings, to be applied in order.
        params: SettingsParams<'a>,
    },
    /// Server push (§6.6). A server must treat receiving it as a connection
    /// error of type PROTOCOL_ERROR (§8.4); it is parsed anyway so that the
    /// connection decides, in one place, with the frame in hand.
    PushPromise {
        /// The stream the promise is made on (never 0).
        stream: u32,
        /// The stream the promise reserves.
        promised_stream: u32,
        /// The field block is whole in this frame.
        end_headers: bool,
        /// The first fragment of the promised request's field block,
        /// padding removed.
        block: &'a [u8],
    },
    /// A liveness check, or the answer to ours (§6.7).
    Ping {
        /// An answer: it must not be answered.
        ack: bool,
        /// The opaque data, echoed in the answer.
        payload: [u8; 8],
    },
    /// The peer is closing the connection (§6.8).
    GoAway {
        /// The highest stream the peer may have acted on.
        last_stream: u32,
        /// Why; any value, known or not (§7).
        code: ErrorCode,
        /// Additional debug data: diagnostics, no meaning.
        debug: &'a [u8],
    },
    /// Flow-control credit (§6.9).
    WindowUpdate {
        /// The stream credited, or 0 for the connection.
        stream: u32,
        /// Octets added to the window: 1 to `MAX_WINDOW_SIZE`.
        increment: u32,
    },
    /// A further fragment of a field block (§6.10).
    Continuation {
        /// The stream (never 0); must be the one whose block is open.
        stream: u32,
        /// The field block ends in this frame.
        end_headers: bool,
        /// The fragment.
        block: &'a [u8],
    },
    /// A client's new priority for a stream (RFC 9218 §7.1).
    PriorityUpdate {
        /// The stream whose response is reprioritized (never 0); it may not
        /// be open yet.
        prioritized_stream: u32,
        /// The Priority Field Value: the same Structured Fields dictionary
        /// as the `priority` header, for `priority::Priority::parse`.
        field_value: &'a [u8],
    },
    /// A frame of a type this code does not know: ignored and discarded
    /// (§4.1, §5.5), except in the middle of a field block, where any frame
    /// but CONTINUATION is a connection error.
    Unknown {
        /// The type octet, for logs and tests.
        frame_type: u8,
    },
}

/// What the start of the input holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole frame.
    Frame {
        /// The frame.
        frame: Frame<'a>,
        /// Octets of the input it took, header included: where the next
        /// frame starts.
        len: usize,
    },
    /// The input ends within the next frame, which is fine so far.
    Incomplete {
        /// Octets the input must hold before another call can say more: the
        /// header's 9, then the whole frame's.
        needed: usize,
    },
}

/// Which part of the connection an error ends (§5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorScope {
    /// §5.4.1: send GOAWAY with the code and close the connection; nothing
    /// after the frame can be read.
    Connection,
    /// §5.4.2: send RST_STREAM with the code on `stream`, then go on with
    /// the next frame. The connection checks the stream's state first: a
    /// frame the stream's state forbids may be a connection error, which
    /// takes precedence, and as RST_STREAM must not be sent on an idle
    /// stream (§6.4), there the error ends the connection (§5.4.1 allows
    /// it).
    Stream {
        /// The stream to reset.
        stream: u32,
        /// Octets of the input the bad frame took, all of them present: the
        /// next frame starts after them.
        frame_len: usize,
    },
}

/// A frame that breaks RFC 9113 (or RFC 9218), as the RFC classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameError {
    /// Connection or stream error.
    pub scope: ErrorScope,
    /// The code to send in GOAWAY or RST_STREAM.
    pub code: ErrorCode,
    /// What was wrong, for logs and GOAWAY debug data.
    pub reason: &'static str,
}

fn connection_error(code: ErrorCode, reason: &'static str) -> FrameError {
    FrameError {
        scope: ErrorScope::Connection,
        code,
        reason,
    }
}

fn stream_error(
    stream: u32,
    frame_len: usize,
    code: ErrorCode,
    reason: &'static str,
) -> FrameError {
    FrameError {
        scope: ErrorScope::Stream { stream, frame_len },
        code,
        reason,
    }
}

/// Reads the frame at the start of `input`, where the connection's
/// SETTINGS_MAX_FRAME_SIZE is `max_frame_size` (what we announced; at
/// least `DEFAULT_MAX_FRAME_SIZE`).
///
/// A frame over the limit is a connection error (FRAME_SIZE_ERROR) whatever
/// its type. §4.2 would allow a stream error for some, but then the
/// oversized payload, up to 16 MiB that may not have arrived, would have to
/// be read and dropped across calls; a peer that ignores the limit it was
/// given is not worth that, and §5.4.1 lets any stream error end the
/// connection instead.
pub fn parse(input: &[u8], max_frame_size: u32) -> Result<Parsed<'_>, FrameError> {
    let Some(header) = input.first_chunk::<FRAME_HEADER_LEN>() else {
        return Ok(Parsed::Incomplete {
            needed: FRAME_HEADER_LEN,
        });
    };
    let header = FrameHeader::decode(header);
    if header.len > max_frame_size {
        return Err(connection_error(
            ErrorCode::FRAME_SIZE_ERROR,
            "frame larger than SETTINGS_MAX_FRAME_SIZE",
        ));
    }
    check_header(&header)?;
    // At most 2^24 - 1 + 9: no overflow, even on 32 bits.
    let len = FRAME_HEADER_LEN + header.len as usize;
    let Some(payload) = input.get(FRAME_HEADER_LEN..len) else {
        return Ok(Parsed::Incomplete { needed: len });
    };
    let frame = read_payload(&header, payload, len)?;
    Ok(Parsed::Frame { frame, len })
}

/// The connection errors a frame's header shows: the stream identifier and
/// length rules of §6 for each type, stream identifier first. Lengths
/// checked here make the reads in `read_payload` safe.
fn check_header(header: &FrameHeader) -> Result<(), FrameError> {
    use ErrorCode as E;
    use frame_type as t;
    let FrameHeader {
        len,
        frame_type,
        flags,
        stream,
    } = *header;
    let pad_octet = u32::from(flags & flag::PADDED != 0);
    let has_priority = flags & flag::PRIORITY != 0;
    let ack = flags & flag::ACK != 0;
    let (code, reason) = match frame_type {
        t::DATA if stream == 0 => (E::PROTOCOL_ERROR, "DATA on stream 0"),
        t::DATA if len < pad_octet => (E::FRAME_SIZE_ERROR, "DATA too short for its Pad Length"),
        t::HEADERS if stream == 0 => (E::PROTOCOL_ERROR, "HEADERS on stream 0"),
        t::HEADERS if len < pad_octet + if has_priority { 5 } else { 0 } => (
            E::FRAME_SIZE_ERROR,
            "HEADERS too short for its Pad Length and priority fields",
        ),
        t::PRIORITY if stream == 0 => (E::PROTOCOL_ERROR, "PRIORITY on stream 0"),
        t::RST_STREAM if stream == 0 => (E::PROTOCOL_ERROR, "RST_STREAM on stream 0"),
        t::RST_STREAM if len != 4 => (E::FRAME_SIZE_ERROR, "RST_STREAM length other than 4"),
        t::SETTINGS if stream != 0 => (E::PROTOCOL_ERROR, "SETTINGS on a stream"),
        t::SETTINGS if ack && len != 0 => (
            E::FRAME_SIZE_ERROR,
            "SETTINGS acknowledgement with a payload",
        ),
        t::SETTINGS if len % 6 != 0 => (E::FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6"),
        t::PUSH_PROMISE if stream == 0 => (E::PROTOCOL_ERROR, "PUSH_PROMISE on stream 0"),
        t::PUSH_PROMISE if len < pad_octet + 4 => (
            E::FRAME_SIZE_ERROR,
            "PUSH_PROMISE too short for its Pad Length and Promised Stream ID",
        ),
        t::PING if stream != 0 => (E::PROTOCOL_ERROR, "PING on a stream"),
        t::PING if len != 8 => (E::FRAME_SIZE_ERROR, "PING length other than 8"),
        t::GOAWAY if stream != 0 => (E::PROTOCOL_ERROR, "GOAWAY on a stream"),
        t::GOAWAY if len < 8 => (E::FRAME_SIZE_ERROR, "GOAWAY shorter than 8"),
        t::WINDOW_UPDATE if len != 4 => (E::FRAME_SIZE_ERROR, "WINDOW_UPDATE length other than 4"),
        t::CONTINUATION if stream == 0 => (E::PROTOCOL_ERROR, "CONTINUATION on stream 0"),
        t::PRIORITY_UPDATE if stream != 0 => (E::PROTOCOL_ERROR, "PRIORITY_UPDATE on a stream"),
        t::PRIORITY_UPDATE if len < 4 => (
            E::FRAME_SIZE_ERROR,
            "PRIORITY_UPDATE too short for its Prioritized Stream ID",
        ),
        _ => return Ok(()),
    };
    Err(connection_error(code, reason))
}

/// Reads a whole frame's payload; `frame_len` (header included) is what a
/// stream error tells the caller to skip.
fn read_payload<'a>(
    header: &FrameHeader,
    payload: &'a [u8],
    frame_len: usize,
) -> Result<Frame<'a>, FrameError> {
    use ErrorCode as E;
    use frame_type as t;
    let FrameHeader {
        len,
        frame_type,
        flags,
        stream,
    } = *header;
    let frame = match frame_type {
        t::DATA => Frame::Data {
            stream,
            end_stream: flags & flag::END_STREAM != 0,
            data: unpadded(flags, payload, 0)?,
            flow_controlled_len: len,
        },
        t::HEADERS => {
            let has_priority = flags & flag::PRIORITY != 0;
            let content = unpadded(flags, payload, if has_priority { 5 } else { 0 })?;
            let (priority, block) = match content.split_at_checked(5) {
                Some((fields, block)) if has_priority => {
                    (Some(StreamDependency::read(fields)), block)
                }
                _ => (None, content),
            };
            Frame::Headers {
                stream,
                end_stream: flags & flag::END_STREAM != 0,
                end_headers: flags & flag::END_HEADERS != 0,
                priority,
                block,
            }
        }
        t::PRIORITY => {
            if len != 5 {
                return Err(stream_error(
                    stream,
                    frame_len,
                    E::FRAME_SIZE_ERROR,
                    "PRIORITY length other than 5",
                ));
            }
            let dependency = StreamDependency::read(payload);
            if dependency.depends_on == stream {
                return Err(stream_error(
                    stream,
                    frame_len,
                    E::PROTOCOL_ERROR,
                    "PRIORITY makes a stream depend on itself",
                ));
            }
            Frame::Priority { stream, dependency }
        }
        t::RST_STREAM => Frame::RstStream {
            stream,
            code: ErrorCode(u32_at(payload, 0)),
        },
        t::SETTINGS => {
            let params = SettingsParams { rest: payload };
            for (id, value) in params {
                check_setting(id, value)?;
            }
            Frame::Settings {
                ack: flags & flag::ACK != 0,
                params,
            }
        }
        t::PUSH_PROMISE => {
            let content = unpadded(flags, payload, 4)?;
            Frame::PushPromise {
                stream,
                promised_stream: u32_at(content, 0) & !RESERVED_BIT,
                end_headers: flags & flag::END_HEADERS != 0,
                block: content.get(4..).unwrap_or_default(),
            }
        }
        t::PING => Frame::Ping {
            ack: flags & flag::ACK != 0,
            payload: payload.first_chunk().copied().unwrap_or_default(),
        },
        t::GOAWAY => Frame::GoAway {
            last_stream: u32_at(payload, 0) & !RESERVED_BIT,
            code: ErrorCode(u32_at(payload, 4)),
            debug: payload.get(8..).unwrap_or_default(),
        },
        t::WINDOW_UPDATE => {
            let increment = u32_at(payload, 0) & !RESERVED_BIT;
            if increment == 0 {
                // §6.9: a stream error, but one on the connection's own
                // window is a connection error.
                let reason = "WINDOW_UPDATE increment of 0";
                return Err(if stream == 0 {
                    connection_error(E::PROTOCOL_ERROR, reason)
                } else {
                    stream_error(stream, frame_len, E::PROTOCOL_ERROR, reason)
                });
            }
            Frame::WindowUpdate { stream, increment }
        }
        t::CONTINUATION => Frame::Continuation {
            stream,
            end_headers: flags & flag::END_HEADERS != 0,
            block: payload,
        },
        t::PRIORITY_UPDATE => {
            let prioritized_stream = u32_at(payload, 0) & !RESERVED_BIT;
            if prioritized_stream == 0 {
                return Err(connection_error(
                    E::PROTOCOL_ERROR,
                    "PRIORITY_UPDATE for stream 0",
                ));
            }
            Frame::PriorityUpdate {
                prioritized_stream,
                field_value: payload.get(4..).unwrap_or_default(),
            }
        }
        _ => Frame::Unknown { frame_type },
    };
    Ok(frame)
}

/// The payload of a frame that may be PADDED, without the Pad Length octet
/// and the padding: what is left for `fixed` octets of fields and the
/// content. Padding that does not fit is a connection error (§6.1, §6.2,
/// §6.6); that the Pad Length octet and the fields fit was checked with the
/// header.
fn unpadded(flags: u8, payload: &[u8], fixed: usize) -> Result<&[u8], FrameError> {
    if flags & flag::PADDED == 0 {
        return Ok(payload);
    }
    let Some((&pad_len, rest)) = payload.split_first() else {
        return Ok(payload);
    };
    let pad_len = usize::from(pad_len);
    match rest.len().checked_sub(fixed) {
        Some(room) if pad_len <= room => Ok(&rest[..rest.len() - pad_len]),
        _ => Err(connection_error(
            ErrorCode::PROTOCOL_ERROR,
            "padding does not fit in the payload",
        )),
    }
}

/// The big-endian 32-bit word at `at`. Frame lengths are checked before any
/// read, so the word is there; were it not, it would read as 0 rather than
/// panic.
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..)
        .and_then(|rest| rest.first_chunk::<4>())
        .map_or(0, |word| u32::from_be_bytes(*word))
}

/// The value checks of §6.5.2 (and RFC 9218 §2.1), each a connection error.
fn check_setting(id: u16, value: u32) -> Result<(), FrameError> {
    use ErrorCode as E;
    match id {
        setting::ENABLE_PUSH if value > 1 => Err(connection_error(
            E::PROTOCOL_ERROR,
            "SETTINGS_ENABLE_PUSH other than 0 or 1",
        )),
        setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW_SIZE => Err(connection_error(
            E::FLOW_CONTROL_ERROR,
            "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
        )),
        setting::MAX_FRAME_SIZE
            if !(DEFAULT_MAX_FRAME_SIZE..=MAX_FRAME_SIZE_LIMIT).contains(&value) =>
        {
            Err(connection_error(
                E::PROTOCOL_ERROR,
                "SETTINGS_MAX_FRAME_SIZE outside 2^14..2^24-1",
            ))
        }
        setting::NO_RFC7540_PRIORITIES if value > 1 => Err(connection_error(
            E::PROTOCOL_ERROR,
            "SETTINGS_NO_RFC7540_PRIORITIES other than 0 or 1",
        )),
        _ => Ok(()),
    }
}

/// The header of a DATA frame of `len` octets on `stream`; the content
/// follows from wherever it lies. `len` is within the peer's
/// SETTINGS_MAX_FRAME_SIZE and both flow-control windows (the caller's
/// checks).
pub fn data_frame_header(stream: u32, len: u32, end_stream: bool) -> [u8; FRAME_HEADER_LEN] {
    FrameHeader {
        len,
        frame_type: frame_type::DATA,
        flags: if end_stream { flag::END_STREAM } else { 0 },
        stream,
    }
    .encode()
}

/// The header of a HEADERS frame carrying `len` octets of a field block,
/// unpadded and without priority fields (a server has no use for either).
pub fn headers_frame_header(
    stream: u32,
    len: u32,
    end_stream: bool,
    end_headers: bool,
) -> [u8; FRAME_HEADER_LEN] {
    let mut flags = 0;
    if end_stream {
        flags |= flag::END_STREAM;
    }
    if end_headers {
        flags |= flag::END_HEADERS;
    }
    FrameHeader {
        len,
        frame_type: frame_type::HEADERS,
        flags,
        stream,
    }
    .encode()
}

/// The header of a CONTINUATION frame carrying `len` more octets of a field
/// block.
pub fn continuation_frame_header(
    stream: u32,
    len: u32,
    end_headers: bool,
) -> [u8; FRAME_HEADER_LEN] {
    FrameHeader {
        len,
        frame_type: frame_type::CONTINUATION,
        flags: if end_headers { flag::END_HEADERS } else { 0 },
        stream,
    }
    .encode()
}

/// Appends a SETTINGS frame with `params` (identifier, value) in order;
/// none at all makes the empty SETTINGS that may open a connection (§3.4).
pub fn write_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    let len = params.len() * 6;
    out.extend_from_slice(
        &FrameHeader {
            len: u32::try_from(len).unwrap_or(u32::MAX),
            frame_type: frame_type::SETTINGS,
            flags: 0,
            stream: 0,
        }
        .encode(),
    );
    for &(id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// A SETTINGS acknowledgement (§6.5.3).
pub fn settings_ack() -> [u8; FRAME_HEADER_LEN] {
    FrameHeader {
        len: 0,
        frame_type: frame_type::SETTINGS,
        flags: flag::ACK,
        stream: 0,
    }
    .encode()
}

/// The answer to a PING: the same opaque data, with ACK (§6.7).
pub fn ping_ack(payload: [u8; 8]) -> [u8; FRAME_HEADER_LEN + 8] {
    let mut frame = [0; FRAME_HEADER_LEN + 8];
    let (header, data) = frame.split_at_mut(FRAME_HEADER_LEN);
    header.copy_from_slice(
        &FrameHeader {
            len: 8,
            frame_type: frame_type::PING,
            flags: flag::ACK,
            stream: 0,
        }
        .encode(),
    );
    data.copy_from_slice(&payload);
    frame
}

/// Appends a GOAWAY frame (§6.8): `last_stream` is the highest client
/// stream that was or may be acted on; `debug` is diagnostic text (a
/// `FrameError::reason`), meaningless to the peer.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    let len = 8 + debug.len();
    out.extend_from_slice(
        &FrameHeader {
            len: u32::try_from(len).unwrap_or(u32::MAX),
            frame_type: frame_type::GOAWAY,
            flags: 0,
            stream: 0,
        }
        .encode(),
    );
    out.extend_from_slice(&(last_stream & !RESERVED_BIT).to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// A RST_STREAM frame ending `stream` with `code` (§6.4).
pub fn rst_stream(stream: u32, code: ErrorCode) -> [u8; FRAME_HEADER_LEN + 4] {
    fixed_word_frame(frame_type::RST_STREAM, stream, code.0)
}

/// A WINDOW_UPDATE frame crediting `stream` (0: the connection) with
/// `increment` octets, 1 to `MAX_WINDOW_SIZE` (§6.9).
pub fn window_update(stream: u32, increment: u32) -> [u8; FRAME_HEADER_LEN + 4] {
    debug_assert!(
        (1..=MAX_WINDOW_SIZE).contains(&increment),
        "window increment {increment}"
    );
    fixed_word_frame(frame_type::WINDOW_UPDATE, stream, increment & !RESERVED_BIT)
}

/// A frame whose payload is one 32-bit word and that has no flags.
fn fixed_word_frame(frame_type: u8, stream: u32, word: u32) -> [u8; FRAME_HEADER_LEN + 4] {
    let mut frame = [0; FRAME_HEADER_LEN + 4];
    let (header, payload) = frame.split_at_mut(FRAME_HEADER_LEN);
    header.copy_from_slice(
        &FrameHeader {
            len: 4,
            frame_type,
            flags: 0,
            stream,
        }
        .encode(),
    );
    payload.copy_from_slice(&word.to_be_bytes());
    frame
}

#[cfg(test)]
mod tests;
