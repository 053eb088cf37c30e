//! One HTTP/3 connection (RFC 9114) over QUIC streams it reaches through
//! [`Streams`]: the control streams and SETTINGS both ways, the QPACK
//! streams (a dynamic table of capacity 0: nothing on them may refer to
//! one), request streams (HEADERS, then DATA and trailers, each checked),
//! unknown frame and stream types ignored, GOAWAY, every error RFC 9114
//! names for what it names, and HTTP/2's limit on cancelled requests
//! (rapid reset). Requests go to `handler::answer` as HTTP/2's; one for
//! a cold site is parked on its stream and answered again as the
//! endpoint wakes the connection (`handler::cold`).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::frame::{self, Frame, FrameReader, ReadError};
use super::taken::Taken;
use crate::qpack;
use crate::serve::access_log::Entry;
use crate::serve::date::DateCache;
use crate::serve::handler::cold::Parked;
use crate::serve::handler::live::EventStream;
use crate::serve::handler::{self, Body, Extra, Method, Response};
use crate::serve::metrics::Protocol;
use crate::serve::net::Backing;
use crate::serve::request_context::RequestContext;
use crate::serve::request_fields::{FieldError, RequestFields};
use crate::serve::server_headers::ServerHeaders;

#[cfg(test)]
mod tests;

/// The QUIC streams of one connection, as HTTP/3 uses them. Stream IDs
/// are QUIC's; errors are HTTP/3 codes.
pub trait Streams {
    /// Opens a unidirectional stream of ours (`None`: the peer allows none).
    fn open_uni(&mut self) -> Option<u64>;
    /// Writes as much of `chunks` as flow control takes now; written
    /// chunks are left empty, a partly written one holds the rest.
    fn write(&mut self, id: u64, chunks: &mut [Bytes]);
    /// Ends our side of `id` once what was written is sent.
    fn finish(&mut self, id: u64);
    /// Abandons our side of `id` (RESET_STREAM).
    fn reset(&mut self, id: u64, code: u64);
    /// Asks the peer to stop sending on `id` (STOP_SENDING).
    fn stop(&mut self, id: u64, code: u64);
    /// Closes the connection with an application error.
    fn close(&mut self, code: u64, reason: &'static str);
}

/// The per-thread buffers requests are decoded and answered with.
#[derive(Default)]
pub struct Scratch {
    fields: RequestFields,
    qpack: Vec<u8>,
    section: Vec<u8>,
    head: Vec<u8>,
    /// Responses' frame heads.
    heads: HeadBlocks,
}

/// Where responses' frame heads are carved off, with `split().freeze()`,
/// so that one allocation serves many responses (QUIC holds each head
/// until it is acknowledged).
#[derive(Default)]
struct HeadBlocks {
    /// The block heads are carved off now.
    current: Option<BytesMut>,
    /// Blocks used up, oldest first, each held by the empty end of it
    /// that `current` was: once QUIC has dropped every head carved off
    /// the oldest, it is taken back whole (`try_reclaim`) instead of a new
    /// one allocated. A block's last heads are always still in flight
    /// when it fills, so reusing only the current block (as `reserve`
    /// does when it can) would allocate a new one at every fill.
    spent: VecDeque<BytesMut>,
}

/// The size of a head block: a few hundred heads.
const HEADS_BLOCK: usize = 64 * 1024;

/// Blocks kept in `HeadBlocks::spent` (1 MiB: the heads of thousands of
/// responses in flight on a thread). Past it the oldest is let go, to be
/// freed once QUIC drops its last head.
const SPENT_BLOCKS: usize = 16;

impl HeadBlocks {
    /// `head` copied into the current block and carved off it.
    fn carve(&mut self, head: &[u8]) -> Bytes {
        let block = match self.current.take() {
            Some(block) if block.capacity() >= head.len() => block,
            full => {
                if let Some(full) = full {
                    self.spent.push_back(full);
                    if self.spent.len() > SPENT_BLOCKS {
                        self.spent.pop_front();
                    }
                }
                let need = HEADS_BLOCK.max(head.len());
                let reclaimed = self
                    .spent
                    .front_mut()
                    .is_some_and(|oldest| oldest.try_reclaim(need))
                    .then(|| self.spent.pop_front())
                    .flatten();
                reclaimed.unwrap_or_else(|| BytesMut::with_capacity(need))
            }
        };
        let block = self.current.insert(block);
        block.extend_from_slice(head);
        block.split().freeze()
    }
}

/// The rapid-reset attack (CVE-2023-44487), as HTTP/2 meets it
/// (`http2::conn`'s constants of the same names): a request the client
/// cancels while it is being answered costs `RESET_COST` units, a
/// response written whole earns `EARNED_PER_RESPONSE`; past `FREE_UNITS`
/// more than earned, the connection ends with H3_EXCESSIVE_LOAD. About
/// 100 cancelled requests in a row, then; a client cancelling one request
/// in three or fewer is never cut off. A request stream reset before a
/// byte of it was read made the server do nothing but QUIC's bookkeeping:
/// it costs `UNREAD_RESET_COST`, as a frame that serves nothing does on
/// HTTP/2 (a flood of them is cut off after 1,000).
const FREE_UNITS: u32 = 1000;
const EARNED_PER_RESPONSE: u32 = 4;
const RESET_COST: u32 = 10;
const UNREAD_RESET_COST: u32 = 1;

/// The largest request field section kept (name + value + 32 per field,
/// as SETTINGS_MAX_FIELD_SECTION_SIZE counts): beyond it, 431.
const MAX_FIELD_SECTION: usize = 16 * 1024;

/// What a pack's bytes are handed to QUIC as: one `Bytes` over each
/// site's whole mapping, made once per generation of the sites, sliced per
/// response (a reference count, no copy): a body sent after a reload keeps
/// the mapping it started from.
#[derive(Default)]
pub struct Bodies {
    backing: Option<Arc<dyn Backing>>,
    packs: Vec<Option<Bytes>>,
}

/// One pack's mapping as `Bytes`' owner.
struct Mapping {
    backing: Arc<dyn Backing>,
    pack: u32,
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        self.backing.bytes(self.pack)
    }
}

impl Bodies {
    /// `len` bytes at `off` of pack `pack` of `backing`.
    fn slice(&mut self, backing: &Arc<dyn Backing>, pack: u32, off: u64, len: u64) -> Bytes {
        if !self
            .backing
            .as_ref()
            .is_some_and(|b| Arc::ptr_eq(b, backing))
        {
            self.backing = Some(Arc::clone(backing));
            self.packs.clear();
        }
        let slot = pack as usize;
        if self.packs.len() <= slot {
            self.packs.resize(slot + 1, None);
        }
        let whole = self.packs[slot].get_or_insert_with(|| {
            Bytes::from_owner(Mapping {
                backing: Arc::clone(backing),
                pack,
            })
        });
        let (start, end) = (off as usize, (off + len) as usize);
        if end > whole.len() || start > end {
            return Bytes::new();
        }
        whole.slice(start..end)
    }
}

/// What a unidirectional stream of the peer's turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UniKind {
    /// Its type has not arrived yet.
    Untyped,
    Control,
    /// QPACK's: with a table of capacity 0 the encoder may send nothing
    /// but a capacity of 0, and the decoder nothing this server needs.
    Encoder,
    Decoder,
    /// An unknown type: reading stopped.
    Ignored,
}

struct Uni {
    id: u64,
    kind: UniKind,
    /// The stream's first bytes until its type is whole.
    head: Vec<u8>,
    frames: FrameReader,
}

/// Where a request stream is in RFC 9114 §4.1's sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the request's HEADERS.
    Headers,
    /// After it: DATA, or trailers.
    Content,
    /// After trailers: nothing but unknown frames.
    Done,
}

struct Request {
    id: u64,
    phase: Phase,
    frames: FrameReader,
    /// `content-length`, if the request gave one, and DATA bytes seen.
    content_length: Option<u64>,
    received: u64,
    /// Once answered, the response's bytes not taken by flow control yet:
    /// the frames' heads (HEADERS, a DATA header), then the body.
    unsent: Option<[Bytes; 2]>,
    /// The response was written whole and the stream finished.
    answered: bool,
    /// The request is read to its end (or reading was stopped).
    read_done: bool,
    /// The live preview's event stream, held open on this stream: the
    /// response is never finished while it is here.
    events: Option<EventStream>,
    /// A request for a cold site, parked: its fields kept, answered again
    /// as the connection is woken (`handler::cold`).
    parked: Option<Box<(RequestFields, Parked)>>,
}

/// A connection error: the code the connection closes with, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnError {
    pub code: u64,
    pub reason: &'static str,
}

fn conn_error(code: u64, reason: &'static str) -> ConnError {
    ConnError { code, reason }
}

/// What went wrong on a request stream.
enum StreamFault {
    /// A stream error: reading stopped and the stream reset with this
    /// code (`H3_MESSAGE_ERROR` for a malformed request, §4.1.2).
    Stream(u64),
    Conn(ConnError),
}

const MALFORMED: StreamFault = StreamFault::Stream(frame::H3_MESSAGE_ERROR);

impl From<ConnError> for StreamFault {
    fn from(e: ConnError) -> StreamFault {
        StreamFault::Conn(e)
    }
}

/// One connection's HTTP/3 state.
#[derive(Default)]
pub struct Conn {
    /// Our control stream, once opened.
    control: Option<u64>,
    /// The peer's unidirectional streams.
    unis: Vec<Uni>,
    /// Request streams being read or answered.
    requests: Vec<Request>,
    /// The peer's SETTINGS arrived.
    settings: bool,
    /// The highest request stream ID taken, for GOAWAY.
    last_request: Option<u64>,
    /// Every request stream taken (or refused), whatever the order their
    /// first bytes came in: the bytes of one forgotten are ignored.
    taken: Taken,
    /// GOAWAY was sent: no new request is taken.
    goaway: bool,
    /// The connection was closed with an error.
    closed: bool,
    /// Units spent on requests cancelled, and earned by responses
    /// (`FREE_UNITS`).
    wasted: u32,
    earned: u32,
}

impl Conn {
    /// Once the handshake is done: our control stream and SETTINGS (a
    /// QPACK table of capacity 0, no blocked streams; §7.2.4.2), with a
    /// reserved setting so that peers keep ignoring unknown ones.
    pub fn start(&mut self, streams: &mut impl Streams) {
        let Some(id) = streams.open_uni() else {
            self.fail(
                streams,
                conn_error(frame::H3_STREAM_CREATION_ERROR, "no stream"),
            );
            return;
        };
        self.control = Some(id);
        let mut settings = Vec::with_capacity(16);
        for (setting, value) in [
            (frame::SETTINGS_QPACK_MAX_TABLE_CAPACITY, 0),
            (frame::SETTINGS_QPACK_BLOCKED_STREAMS, 0),
            (0x1f * 7 + 0x21, 0),
        ] {
            frame::write_varint(setting, &mut settings);
            frame::write_varint(value, &mut settings);
        }
        let mut out = Vec::with_capacity(24);
        frame::write_varint(frame::CONTROL_STREAM, &mut out);
        frame::write_frame_header(frame::SETTINGS, settings.len() as u64, &mut out);
        out.extend_from_slice(&settings);
        streams.write(id, &mut [Bytes::from(out)]);
    }

    /// Whether the connection is closed (an error was sent).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// No request is being read or answered.
    pub fn is_idle(&self) -> bool {
        self.requests.is_empty()
    }

    /// GOAWAY was sent (or the connection closed).
    pub fn sent_goaway(&self) -> bool {
        self.goaway || self.closed
    }

    /// Whether a request stream holds the live preview's event stream or
    /// a request parked for a cold site: what `wake` acts on.
    pub fn holds_woken(&self) -> bool {
        self.requests
            .iter()
            .any(|r| r.events.is_some() || r.parked.is_some())
    }

    /// Whether a request for a cold site is parked.
    pub fn holds_parked(&self) -> bool {
        self.requests.iter().any(|r| r.parked.is_some())
    }

    /// Answers the parked requests again (each answered now that its site
    /// landed or the store is down, 503 once its wait ran out, else parked
    /// on), and writes what the held event streams are owed now (with
    /// `heartbeat`, a comment if nothing else), each as a DATA frame.
    pub fn wake(
        &mut self,
        streams: &mut impl Streams,
        cx: &mut Answering<'_, '_>,
        heartbeat: bool,
    ) {
        if self.closed {
            return;
        }
        // From the end: a request answered whole is forgotten in place of
        // the last one, which was looked at already.
        for i in (0..self.requests.len()).rev() {
            if let Some(parked) = self.requests[i].parked.take() {
                let (fields, parked) = *parked;
                let deadline = if parked.expired() {
                    0
                } else {
                    parked.deadline_ms
                };
                drop(parked);
                self.respond(i, Fields::Parked(&fields, deadline), streams, cx);
                self.stop_reading_once_answered(i, streams);
                self.retire(i);
                continue;
            }
            let request = &mut self.requests[i];
            let Some(stream) = request.events.as_mut() else {
                continue;
            };
            let Some(event) = stream.owed(cx.ctx.sites, heartbeat) else {
                continue;
            };
            let frame = data_frame(event);
            match &mut request.unsent {
                // Behind what flow control has not taken yet.
                Some(unsent) if unsent.iter().any(|b| !b.is_empty()) => {
                    let mut joined = BytesMut::from(&unsent[1][..]);
                    joined.extend_from_slice(&frame);
                    unsent[1] = joined.freeze();
                }
                _ => request.unsent = Some([Bytes::new(), frame]),
            }
            self.send(i, streams);
        }
    }

    /// Shutdown or reload: GOAWAY naming the first request not taken
    /// (§5.2), once; requests taken are still answered, held event
    /// streams end.
    pub fn go_away(&mut self, streams: &mut impl Streams) {
        if self.goaway || self.closed {
            return;
        }
        for i in (0..self.requests.len()).rev() {
            if self.requests[i].events.take().is_some() {
                self.send(i, streams);
                self.stop_reading_once_answered(i, streams);
                self.retire(i);
            }
        }
        self.goaway = true;
        let Some(control) = self.control else {
            return;
        };
        let next = self.last_request.map_or(0, |id| id + 4);
        let mut out = Vec::with_capacity(10);
        let mut id = Vec::with_capacity(8);
        frame::write_varint(next, &mut id);
        frame::write_frame_header(frame::GOAWAY, id.len() as u64, &mut out);
        out.extend_from_slice(&id);
        streams.write(control, &mut [Bytes::from(out)]);
    }

    fn fail(&mut self, streams: &mut impl Streams, error: ConnError) {
        if !self.closed {
            self.closed = true;
            streams.close(error.code, error.reason);
        }
    }

    /// Bytes arrived on stream `id` (`fin`: its end).
    pub fn on_data(
        &mut self,
        id: u64,
        data: &[u8],
        fin: bool,
        streams: &mut impl Streams,
        cx: &mut Answering<'_, '_>,
    ) {
        if self.closed {
            return;
        }
        let result = if id & 2 == 0 {
            self.on_request_data(id, data, fin, streams, cx)
        } else {
            self.on_uni_data(id, data, fin, streams)
        };
        if let Err(e) = result {
            self.fail(streams, e);
        }
    }

    /// The peer reset stream `id`.
    pub fn on_reset(&mut self, id: u64, streams: &mut impl Streams) {
        if self.closed {
            return;
        }
        if let Some(uni) = self.unis.iter().find(|u| u.id == id)
            && matches!(
                uni.kind,
                UniKind::Control | UniKind::Encoder | UniKind::Decoder
            )
        {
            self.fail(
                streams,
                conn_error(frame::H3_CLOSED_CRITICAL_STREAM, "critical stream reset"),
            );
            return;
        }
        match self.requests.iter().position(|r| r.id == id) {
            Some(i) => {
                let request = self.requests.swap_remove(i);
                if !request.answered {
                    streams.reset(id, frame::H3_REQUEST_CANCELLED);
                    self.cancelled(RESET_COST, streams);
                }
            }
            // A request stream reset before a byte of it was read: our
            // side of it is open all the same, and QUIC frees a stream
            // (and gives its credit back with MAX_STREAMS) only once both
            // sides are closed. Left so, each such stream kept one of the
            // client's concurrent streams until the connection ended.
            // (A request answered and forgotten is never reported reset:
            // QUIC forgets a stream read to its end, or stopped, itself.)
            None if id & 3 == 0 && !self.taken.contains(id) => {
                self.taken.take(id, |held| refuse(held, streams));
                streams.reset(id, frame::H3_REQUEST_CANCELLED);
                self.cancelled(UNREAD_RESET_COST, streams);
            }
            None => {}
        }
    }

    /// A request was cancelled before its response was written whole:
    /// past the allowance, the connection ends (`FREE_UNITS`).
    fn cancelled(&mut self, cost: u32, streams: &mut impl Streams) {
        self.wasted = self.wasted.saturating_add(cost);
        if self.wasted > FREE_UNITS.saturating_add(self.earned) {
            self.fail(
                streams,
                conn_error(frame::H3_EXCESSIVE_LOAD, "too many requests cancelled"),
            );
        }
    }

    /// The peer asked us to stop sending on `id`: the response is reset.
    pub fn on_stopped(&mut self, id: u64, code: u64, streams: &mut impl Streams) {
        if self.closed {
            return;
        }
        if Some(id) == self.control {
            self.fail(
                streams,
                conn_error(frame::H3_CLOSED_CRITICAL_STREAM, "control stream stopped"),
            );
            return;
        }
        if let Some(i) = self.requests.iter().position(|r| r.id == id) {
            streams.reset(id, code);
            if !self.requests.swap_remove(i).answered {
                self.cancelled(RESET_COST, streams);
            }
        }
    }

    /// Stream `id` may take more of its response.
    pub fn on_writable(&mut self, id: u64, streams: &mut impl Streams) {
        if self.closed {
            return;
        }
        if let Some(i) = self.requests.iter().position(|r| r.id == id) {
            self.send(i, streams);
            self.stop_reading_once_answered(i, streams);
            self.retire(i);
        }
    }

    fn on_uni_data(
        &mut self,
        id: u64,
        data: &[u8],
        fin: bool,
        streams: &mut impl Streams,
    ) -> Result<(), ConnError> {
        let i = match self.unis.iter().position(|u| u.id == id) {
            Some(i) => i,
            None => {
                self.unis.push(Uni {
                    id,
                    kind: UniKind::Untyped,
                    head: Vec::new(),
                    frames: FrameReader::default(),
                });
                self.unis.len() - 1
            }
        };
        let mut data = data;
        if self.unis[i].kind == UniKind::Untyped {
            let uni = &mut self.unis[i];
            uni.head.extend_from_slice(data);
            let Some((stream_type, n)) = frame::read_varint(&uni.head) else {
                if fin {
                    // Ended before its type: nothing more will come.
                    self.unis.swap_remove(i);
                }
                return Ok(());
            };
            let kind = match stream_type {
                frame::CONTROL_STREAM => UniKind::Control,
                frame::QPACK_ENCODER_STREAM => UniKind::Encoder,
                frame::QPACK_DECODER_STREAM => UniKind::Decoder,
                frame::PUSH_STREAM => {
                    return Err(conn_error(
                        frame::H3_STREAM_CREATION_ERROR,
                        "a client opened a push stream",
                    ));
                }
                _ => UniKind::Ignored,
            };
            if kind != UniKind::Ignored && self.unis.iter().any(|u| u.kind == kind) {
                return Err(conn_error(
                    frame::H3_STREAM_CREATION_ERROR,
                    "a second control or QPACK stream",
                ));
            }
            if kind == UniKind::Ignored {
                // §6.2: unknown stream types are not read. Stopped, it
                // leaves nothing behind: a client opening such streams
                // without end (QUIC returns their credit) must not grow
                // the list.
                streams.stop(id, frame::H3_STREAM_CREATION_ERROR);
                self.unis.swap_remove(i);
                return Ok(());
            }
            let uni = &mut self.unis[i];
            uni.kind = kind;
            let rest = uni.head.split_off(n);
            uni.head = Vec::new();
            return self.on_typed_uni(i, &rest, fin);
        }
        if self.unis[i].kind == UniKind::Ignored {
            data = &[];
        }
        self.on_typed_uni(i, data, fin)
    }

    fn on_typed_uni(&mut self, i: usize, data: &[u8], fin: bool) -> Result<(), ConnError> {
        let kind = self.unis[i].kind;
        match kind {
            UniKind::Control => {
                let mut frames = std::mem::take(&mut self.unis[i].frames);
                let result = frames.read(data, |f| self.control_frame(f));
                self.unis[i].frames = frames;
                match result {
                    Ok(()) => {}
                    Err(ReadError::TooLarge) => {
                        return Err(conn_error(
                            frame::H3_EXCESSIVE_LOAD,
                            "control frame too large",
                        ));
                    }
                    Err(ReadError::Frame(e)) => return Err(e),
                }
            }
            // With a capacity of 0, an encoder may only set the capacity
            // to 0 (001xxxxx with value 0); anything else inserts into a
            // table this server has not got (RFC 9204 §4.3, §3.2.3).
            UniKind::Encoder => {
                if data.iter().any(|&b| b != 0x20) {
                    return Err(conn_error(
                        frame::QPACK_ENCODER_STREAM_ERROR,
                        "an encoder instruction beyond a table of capacity 0",
                    ));
                }
            }
            UniKind::Decoder | UniKind::Ignored | UniKind::Untyped => {}
        }
        if fin && kind != UniKind::Ignored {
            return Err(conn_error(
                frame::H3_CLOSED_CRITICAL_STREAM,
                "a critical stream ended",
            ));
        }
        Ok(())
    }

    /// One frame on the peer's control stream (§6.2.1, §7.2).
    fn control_frame(&mut self, f: Frame<'_>) -> Result<(), ConnError> {
        let frame_type = match f {
            Frame::Whole { frame_type, .. } | Frame::Skipped { frame_type, .. } => frame_type,
        };
        if !self.settings {
            if frame_type != frame::SETTINGS {
                return Err(conn_error(
                    frame::H3_MISSING_SETTINGS,
                    "the control stream did not start with SETTINGS",
                ));
            }
            self.settings = true;
            let Frame::Whole { payload, .. } = f else {
                return Ok(());
            };
            return check_settings(payload);
        }
        match f {
            Frame::Whole {
                frame_type: frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH,
                payload,
            } => match frame::read_varint(payload) {
                Some((_, n)) if n == payload.len() => Ok(()),
                _ => Err(conn_error(
                    frame::H3_FRAME_ERROR,
                    "a malformed control frame",
                )),
            },
            Frame::Whole {
                frame_type: frame::SETTINGS,
                ..
            } => Err(conn_error(frame::H3_FRAME_UNEXPECTED, "a second SETTINGS")),
            Frame::Whole { .. }
            | Frame::Skipped {
                frame_type: frame::DATA,
                ..
            } => Err(conn_error(
                frame::H3_FRAME_UNEXPECTED,
                "a frame not allowed on the control stream",
            )),
            Frame::Skipped { .. } => Ok(()),
        }
    }

    fn on_request_data(
        &mut self,
        id: u64,
        data: &[u8],
        fin: bool,
        streams: &mut impl Streams,
        cx: &mut Answering<'_, '_>,
    ) -> Result<(), ConnError> {
        let i = match self.requests.iter().position(|r| r.id == id) {
            Some(i) => i,
            None => {
                if self.taken.contains(id) {
                    // The rest of a request answered and forgotten, or
                    // refused.
                    return Ok(());
                }
                self.taken.take(id, |held| refuse(held, streams));
                if self.goaway && self.last_request.is_none_or(|last| id > last) {
                    // §5.2: after GOAWAY, a request at or above the ID it
                    // named (those below it may still come, out of order).
                    refuse(id, streams);
                    return Ok(());
                }
                self.last_request = self.last_request.max(Some(id));
                self.requests.push(Request {
                    id,
                    phase: Phase::Headers,
                    frames: FrameReader::default(),
                    content_length: None,
                    received: 0,
                    unsent: None,
                    answered: false,
                    read_done: false,
                    events: None,
                    parked: None,
                });
                self.requests.len() - 1
            }
        };
        if self.requests[i].read_done {
            return Ok(());
        }
        let mut frames = std::mem::take(&mut self.requests[i].frames);
        let result = frames.read(data, |f| self.request_frame(i, f, streams, cx));
        let mid_frame = frames.mid_frame();
        self.requests[i].frames = frames;
        let fault = match result {
            Ok(()) if fin => self.request_end(i, mid_frame).err(),
            Ok(()) => None,
            Err(ReadError::TooLarge) => Some(StreamFault::Conn(conn_error(
                frame::H3_EXCESSIVE_LOAD,
                "a request frame too large",
            ))),
            Err(ReadError::Frame(fault)) => Some(fault),
        };
        match fault {
            None => {
                if fin {
                    self.requests[i].read_done = true;
                }
                self.stop_reading_once_answered(i, streams);
                self.retire(i);
                Ok(())
            }
            Some(StreamFault::Conn(e)) => Err(e),
            Some(StreamFault::Stream(code)) => {
                streams.stop(id, code);
                streams.reset(id, code);
                self.requests.swap_remove(i);
                Ok(())
            }
        }
    }

    /// The request stream ended: a request cut short is incomplete, one
    /// whose DATA does not add up to its `content-length` malformed.
    fn request_end(&mut self, i: usize, mid_frame: bool) -> Result<(), StreamFault> {
        let request = &self.requests[i];
        if request.phase == Phase::Headers || mid_frame {
            // §4.1: too little of a request to answer.
            return Err(StreamFault::Stream(frame::H3_REQUEST_INCOMPLETE));
        }
        if request
            .content_length
            .is_some_and(|length| length != request.received)
        {
            return Err(MALFORMED);
        }
        Ok(())
    }

    /// Forgets a request read to its end and answered whole.
    fn retire(&mut self, i: usize) {
        let r = &self.requests[i];
        if r.read_done && r.answered {
            self.requests.swap_remove(i);
        }
    }

    /// One frame on a request stream (§4.1, §7.2).
    fn request_frame(
        &mut self,
        i: usize,
        f: Frame<'_>,
        streams: &mut impl Streams,
        cx: &mut Answering<'_, '_>,
    ) -> Result<(), StreamFault> {
        let phase = self.requests[i].phase;
        match f {
            Frame::Whole {
                frame_type: frame::HEADERS,
                payload,
            } => match phase {
                Phase::Headers => {
                    self.requests[i].phase = Phase::Content;
                    self.request_headers(i, payload, streams, cx)
                }
                Phase::Content => {
                    self.requests[i].phase = Phase::Done;
                    check_trailers(payload, cx.scratch)
                }
                Phase::Done => Err(StreamFault::Conn(conn_error(
                    frame::H3_FRAME_UNEXPECTED,
                    "HEADERS after trailers",
                ))),
            },
            Frame::Skipped {
                frame_type: frame::DATA,
                len,
            } => {
                if phase != Phase::Content {
                    return Err(StreamFault::Conn(conn_error(
                        frame::H3_FRAME_UNEXPECTED,
                        "DATA before HEADERS or after trailers",
                    )));
                }
                let request = &mut self.requests[i];
                request.received += len;
                if request
                    .content_length
                    .is_some_and(|length| request.received > length)
                {
                    return Err(MALFORMED);
                }
                Ok(())
            }
            Frame::Whole { .. } => Err(StreamFault::Conn(conn_error(
                frame::H3_FRAME_UNEXPECTED,
                "a frame not allowed on a request stream",
            ))),
            Frame::Skipped { .. } => Ok(()),
        }
    }

    /// The request's field section: checked as HTTP/2's (RFC 9114
    /// §4.2–4.3 asks the same), then answered.
    fn request_headers(
        &mut self,
        i: usize,
        section: &[u8],
        streams: &mut impl Streams,
        cx: &mut Answering<'_, '_>,
    ) -> Result<(), StreamFault> {
        let scratch = &mut *cx.scratch;
        scratch.fields.clear();
        let fields = &mut scratch.fields;
        let decoded = qpack::decode_field_section(
            section,
            &mut scratch.qpack,
            MAX_FIELD_SECTION,
            |name, value| fields.field(name, value),
        );
        let from = match decoded {
            Ok(()) => match fields.finish() {
                Ok(()) => Fields::Scratch,
                Err(_) => return Err(MALFORMED),
            },
            Err(qpack::DecodeError::Compression(_)) => {
                return Err(StreamFault::Conn(conn_error(
                    frame::QPACK_DECOMPRESSION_FAILED,
                    "a field section QPACK cannot decode",
                )));
            }
            Err(qpack::DecodeError::Field(FieldError::Malformed(_))) => {
                return Err(MALFORMED);
            }
            Err(qpack::DecodeError::Field(FieldError::TooManyLines))
            | Err(qpack::DecodeError::ListTooLarge) => Fields::TooLarge,
        };
        self.requests[i].content_length = scratch.fields.content_length();
        self.respond(i, from, streams, cx);
        Ok(())
    }

    /// Answers request `i` (its fields in the scratch, unless parked
    /// before) and writes what flow control takes; a request for a cold
    /// site is parked instead while its wait lasts.
    fn respond(
        &mut self,
        i: usize,
        from: Fields<'_>,
        streams: &mut impl Streams,
        cx: &mut Answering<'_, '_>,
    ) {
        let scratch = &mut *cx.scratch;
        let ctx = &mut *cx.ctx;
        let fields = match from {
            Fields::Parked(fields, _) => fields,
            Fields::Scratch | Fields::TooLarge => &scratch.fields,
        };
        let req = fields.request();
        let (server_headers, date) = (ctx.server_headers, ctx.date);
        let refused = matches!(from, Fields::TooLarge);
        let mut resp = match from {
            Fields::TooLarge => handler::builtin(431, b"431 Request Header Fields Too Large\n"),
            _ if req.target.len() > 8 * 1024 => handler::builtin(414, b"414 URI Too Long\n"),
            _ => handler::answer(ctx.sites, &req, ctx.http01, ctx.https_redirect, ctx.scratch),
        };
        let head_only = req.method == Method::Head && !refused;
        if resp.body == Body::Cold {
            let parked = match from {
                _ if ctx.draining || self.goaway => None,
                Fields::Parked(_, 0) => None,
                Fields::Parked(_, deadline) => ctx.events.park(ctx.sites, Some(deadline)),
                Fields::Scratch | Fields::TooLarge => ctx.events.park(ctx.sites, None),
            };
            match parked {
                Some(parked) if !parked.expired() => {
                    // The cold path: the request's fields kept, answered
                    // again as the endpoint wakes the connection.
                    self.requests[i].parked = Some(Box::new((fields.clone(), parked)));
                    return;
                }
                _ => resp = handler::cold::gave_up(ctx.sites),
            }
        }
        let mut events = None;
        if resp.body == Body::Events && !head_only {
            match ctx.events.hold(resp.site) {
                Some(stream) => events = Some(stream),
                None => resp = handler::live::busy(),
            }
        }
        let body = match resp.body {
            _ if head_only => Bytes::new(),
            Body::Empty | Body::Events | Body::Cold => Bytes::new(),
            Body::Static(bytes) => Bytes::from_static(bytes),
            Body::Pack { pack, off, len } => cx.bodies.slice(cx.backing, pack, off, len),
        };
        encode_response(&resp, &mut scratch.section, server_headers, date);
        let head = &mut scratch.head;
        head.clear();
        frame::write_frame_header(frame::HEADERS, scratch.section.len() as u64, head);
        head.extend_from_slice(&scratch.section);
        if !body.is_empty() {
            frame::write_frame_header(frame::DATA, body.len() as u64, head);
        }
        let sent = body.len() as u64;
        let (status, encoding, site) = (resp.status, resp.encoding, resp.site);
        let head = scratch.heads.carve(head);
        let request = &mut self.requests[i];
        // An event stream's hello goes with its HEADERS.
        let body = match events.as_mut().and_then(|e| e.owed(ctx.sites, false)) {
            Some(hello) => data_frame(hello),
            None => body,
        };
        request.events = events;
        request.unsent = Some([head, body]);
        ctx.count(Protocol::Http3, site, status, sent, encoding);
        if ctx.logs() {
            ctx.log(Entry {
                peer: None,
                request: Some((fields.method_token(), fields.target(), "HTTP/3")),
                host: fields.host(),
                status,
                bytes: sent,
                encoding,
                duration_us: 0,
                referer: fields.referer(),
                user_agent: fields.user_agent(),
            });
        }
        self.send(i, streams);
    }

    /// Writes what is left of request `i`'s response; finishes the stream
    /// once all is written.
    fn send(&mut self, i: usize, streams: &mut impl Streams) {
        let request = &mut self.requests[i];
        let Some(unsent) = request.unsent.as_mut().filter(|_| !request.answered) else {
            return;
        };
        streams.write(request.id, unsent);
        if unsent.iter().all(Bytes::is_empty) && request.events.is_none() {
            streams.finish(request.id);
            request.answered = true;
            self.earned = self.earned.saturating_add(EARNED_PER_RESPONSE);
        }
    }

    /// §4.1: once the response is complete, the rest of the request is not
    /// needed: reading stops. Called once the data that came with the
    /// response's turn is read, so that a request whose end came with it
    /// (the usual case) is not stopped: QUIC has forgotten that stream.
    fn stop_reading_once_answered(&mut self, i: usize, streams: &mut impl Streams) {
        let request = &mut self.requests[i];
        if request.answered && !request.read_done {
            streams.stop(request.id, frame::H3_NO_ERROR);
            request.read_done = true;
        }
    }
}

/// Where `Conn::respond` finds the request it answers.
#[derive(Clone, Copy)]
enum Fields<'f> {
    /// In the scratch: the request whose HEADERS was just read.
    Scratch,
    /// That request, refused with 431: its fields are beyond what is read.
    TooLarge,
    /// Kept on the stream: a request parked before, until this deadline
    /// (`cold::now_ms`; 0: its wait ran out).
    Parked(&'f RequestFields, u64),
}

/// The parts of the thread a request is answered with.
pub struct Answering<'a, 'w> {
    pub ctx: &'a mut RequestContext<'w>,
    pub scratch: &'a mut Scratch,
    pub bodies: &'a mut Bodies,
    pub backing: &'a Arc<dyn Backing>,
}

/// `payload` as one DATA frame (an event of a held stream: small, rare).
/// A request stream refused unread (§4.1.1: the client may retry it).
fn refuse(id: u64, streams: &mut impl Streams) {
    streams.stop(id, frame::H3_REQUEST_REJECTED);
    streams.reset(id, frame::H3_REQUEST_REJECTED);
}

fn data_frame(payload: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(payload.len() + 9);
    frame::write_frame_header(frame::DATA, payload.len() as u64, &mut frame);
    frame.extend_from_slice(payload);
    Bytes::from(frame)
}

/// The peer's SETTINGS (§7.2.4): HTTP/2's settings and repeats are
/// errors; unknown ones are ignored.
fn check_settings(mut payload: &[u8]) -> Result<(), ConnError> {
    let mut seen: [u64; 8] = [u64::MAX; 8];
    let mut count = 0;
    while !payload.is_empty() {
        let bad = || conn_error(frame::H3_FRAME_ERROR, "a malformed SETTINGS frame");
        let (id, n) = frame::read_varint(payload).ok_or_else(bad)?;
        let (_, m) = frame::read_varint(&payload[n..]).ok_or_else(bad)?;
        payload = &payload[n + m..];
        if frame::HTTP2_SETTINGS.contains(&id) {
            return Err(conn_error(frame::H3_SETTINGS_ERROR, "an HTTP/2 setting"));
        }
        if seen[..count].contains(&id) {
            return Err(conn_error(frame::H3_SETTINGS_ERROR, "a repeated setting"));
        }
        if count < seen.len() {
            seen[count] = id;
            count += 1;
        }
    }
    Ok(())
}

/// Trailers (§4.1.2): decoded, so that QPACK errors are caught, and
/// refused if they carry pseudo-header fields; their fields are not used.
fn check_trailers(section: &[u8], scratch: &mut Scratch) -> Result<(), StreamFault> {
    let decoded = qpack::decode_field_section(
        section,
        &mut scratch.qpack,
        MAX_FIELD_SECTION,
        |name: &[u8], _value: &[u8]| {
            if name.starts_with(b":") {
                Err(())
            } else {
                Ok(())
            }
        },
    );
    match decoded {
        Ok(()) | Err(qpack::DecodeError::ListTooLarge) => Ok(()),
        Err(qpack::DecodeError::Field(())) => Err(MALFORMED),
        Err(qpack::DecodeError::Compression(_)) => Err(StreamFault::Conn(conn_error(
            frame::QPACK_DECOMPRESSION_FAILED,
            "trailers QPACK cannot decode",
        ))),
    }
}

/// The response's field section: `:status`, `server`, the server's own
/// fields (`alt-svc` among them), `date`, the pack's prepared field lines,
/// and those of this response.
fn encode_response(
    resp: &Response<'_>,
    out: &mut Vec<u8>,
    server_headers: &ServerHeaders,
    date: &DateCache,
) {
    out.clear();
    out.extend_from_slice(&qpack::FIELD_SECTION_PREFIX);
    qpack::encode_status(resp.status, out);
    // `server: kiln` and the server's own fields, then the date: prepared
    // once (per start and per second), copied.
    out.extend_from_slice(server_headers.qpack(resp.overrides));
    out.extend_from_slice(date.qpack());
    // The pack's prepared field lines, copied; a built-in response's
    // few lines encoded now.
    match resp.qpack {
        Some(prepared) => out.extend_from_slice(prepared),
        None => qpack::encode_lines(resp.head, out),
    }
    let mut digits = itoa::Buffer::new();
    let mut range = [0u8; 80];
    match resp.extra {
        Extra::Nothing => {}
        Extra::Length => {
            qpack::encode_field(
                b"content-length",
                digits.format(resp.body.len()).as_bytes(),
                out,
            );
        }
        Extra::Range { start, end, total } => {
            let value = formatted(&mut range, format_args!("bytes {start}-{end}/{total}"));
            qpack::encode_field(b"content-range", value, out);
            let length = end - start + 1;
            qpack::encode_field(b"content-length", digits.format(length).as_bytes(), out);
        }
        Extra::Unsatisfiable { total } => {
            let value = formatted(&mut range, format_args!("bytes */{total}"));
            qpack::encode_field(b"content-range", value, out);
            qpack::encode_field(b"content-length", b"0", out);
        }
        Extra::Location(location) => {
            qpack::encode_field(b"location", location, out);
            qpack::encode_field(b"content-length", b"0", out);
        }
        Extra::Open => {}
    }
}

/// `args` written into `buf` (long enough for three u64s and a few
/// letters), without allocating.
fn formatted<'b>(buf: &'b mut [u8; 80], args: std::fmt::Arguments<'_>) -> &'b [u8] {
    use std::io::Write;
    let mut rest = &mut buf[..];
    // 80 bytes hold "bytes " and three 20-digit numbers.
    let _ = rest.write_fmt(args);
    let left = rest.len();
    &buf[..80 - left]
}
