//! One HTTP/2 connection (RFC 9113), sans-IO: fed the bytes the loop read,
//! it answers every request through `handler::answer`, as HTTP/1 does, and
//! writes all the frames of a loop turn into one `Output`.
//!
//! A request is answered as soon as its header section and, when it has
//! content, its END_STREAM have arrived: the HEADERS frame goes out at
//! once, the body follows in DATA frames straight from the pack mapping,
//! as flow control and RFC 9218 priorities allow.
//!
//! This file is the connection itself: the preface and SETTINGS, each
//! frame dispatched by type, stream states, flow-control windows both
//! ways, field blocks across CONTINUATION frames, GOAWAY. Apart from it,
//! as h2's `proto/streams/` and H2O's `scheduler.c` keep them:
//! - `respond.rs` — a response as frames: HEADERS and CONTINUATION from
//!   the prepared HPACK block, DATA from the mapping; counted and logged.
//! - `schedule.rs` — which stream's DATA goes next, and how much a turn.
//!
//! Limits (each with its reason at its constant): streams in flight,
//! header list and block sizes, frames that make the server work for
//! nothing (empty DATA, PING, SETTINGS, PRIORITY, resets of streams still
//! being answered: the rapid-reset attack), and the time a stream may wait
//! on a closed flow-control window (the header deadline).

mod respond;
mod schedule;
#[cfg(test)]
mod test_peer;

use std::sync::Arc;

use crate::hpack::{DecodeError, Decoder, SharedState};
use crate::serve::handler::Site;
use crate::serve::handler::cold::Parked;
use crate::serve::handler::live::EventStream;
use crate::serve::net::conn::Expiry;
use crate::serve::net::{Step, Wait};
use crate::serve::output::Output;
use crate::serve::request_context::RequestContext;

use super::frame::{self, ErrorCode, ErrorScope, Frame, FrameError, Parsed, setting};
use super::priority::Priority;
use crate::serve::request_fields::{FieldError, RequestFields};
use respond::Remaining;

/// Streams a client may have in flight (advertised in SETTINGS and
/// enforced with REFUSED_STREAM): browsers open up to 100.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// The header list a request may carry (SETTINGS_MAX_HEADER_LIST_SIZE,
/// counted as RFC 9113 §6.5.2 does): HTTP/1 takes a head of 64 KiB.
pub const MAX_HEADER_LIST: u32 = 64 * 1024;

/// A field block, HPACK-coded, across HEADERS and CONTINUATION frames:
/// beyond this the client is not sending a request but a flood
/// (CVE-2024-27316 class).
const MAX_BLOCK: usize = 64 * 1024;

/// CONTINUATION frames of one block: a real block needs one or two.
const MAX_CONTINUATIONS: u32 = 32;

/// Request content read and dropped per stream (as HTTP/1's
/// `MAX_DISCARDED_BODY`); more is refused with 413.
const MAX_DISCARDED_BODY: u64 = 64 * 1024;

/// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE), never
/// topped up: a client must be able to send the content kiln reads and
/// drops, and one octet more, for kiln to see it is past the limit. With
/// the default window (65,535, one octet below the limit) a client
/// sending 64 KiB or more waited on a closed window for a response that
/// never came, until the header deadline ended the connection.
const STREAM_WINDOW: u32 = MAX_DISCARDED_BODY as u32 + 1;

/// The connection-level receive window kiln keeps open: request content
/// is dropped as it arrives, so the window is topped up at once.
const CONNECTION_WINDOW: u32 = 1 << 20;

/// Frames that make the server work without serving anything: each costs
/// a unit, each response fully sent earns `EARNED_PER_RESPONSE`; beyond the
/// allowance the connection ends with ENHANCE_YOUR_CALM.
const FREE_UNITS: u32 = 1000;
const EARNED_PER_RESPONSE: u32 = 4;
/// A stream reset while it was still being answered costs more: that is
/// the rapid-reset attack (CVE-2023-44487).
const RESET_COST: u32 = 10;

/// PRIORITY_UPDATE frames kept for streams not opened yet (RFC 9218 §7.1).
const EARLY_PRIORITIES: usize = 8;

/// Streams kiln reset itself, remembered so that frames still in flight on
/// them are ignored (§5.1 "closed") instead of answered.
const RESET_MEMORY: usize = 16;

/// The dynamic table every HPACK decoder starts with (RFC 7541 §4.2), and
/// the most kiln uses of a larger one: the server's own fields take less.
const TABLE_SIZE: u32 = frame::DEFAULT_HEADER_TABLE_SIZE;
// The connection's model of the client's table holds a table of this size.
const _: () = assert!(TABLE_SIZE as usize <= crate::hpack::MAX_TABLE_SIZE);

/// Buffers every HTTP/2 connection of a thread shares, so that decoding a
/// request allocates nothing once they are warm.
#[derive(Default)]
pub struct Scratch {
    /// The request whose block is being decoded.
    fields: RequestFields,
    /// HPACK's Huffman-decoded strings.
    hpack: Vec<u8>,
}

/// A stream kiln is still busy with: content arriving, or a body to send.
struct Stream {
    /// The client's stream identifier (odd).
    id: u32,
    /// The request, kept while its content arrives; answered at its
    /// END_STREAM.
    request: Option<Box<RequestFields>>,
    /// The client has not ended its side yet.
    receiving: bool,
    /// Content received so far, against `content-length` and the cap.
    received: u64,
    /// What the client may still send on the stream (our window).
    recv_window: i64,
    /// The response body still to send; `None` before the response.
    body: Option<Remaining>,
    /// The response's HEADERS went out.
    answered: bool,
    /// What kiln may still send on the stream (the client's window).
    send_window: i64,
    /// RFC 9218 urgency and incremental flag.
    priority: Priority,
    /// The site a pack body's offsets point into, taken once the body
    /// outlives the loop turn it started in: a reload may replace the
    /// thread's site before the rest is sent, and a stream finishes on the
    /// pack it started on. `None` for the many bodies sent in one turn,
    /// which so cost no reference count.
    site: Option<Arc<Site>>,
    /// The live preview's event stream, held open on this stream: its
    /// events go as DATA frames as the connection is woken.
    events: Option<EventStream>,
    /// A request for a cold site, parked: answered again as the
    /// connection is woken (`handler::cold`).
    parked: Option<Box<(RequestFields, Parked)>>,
}

/// A field block arriving over several frames.
struct Block {
    /// The stream the block is for.
    stream: u32,
    /// The HEADERS frame had END_STREAM.
    end_stream: bool,
    /// The HEADERS frame made the stream depend on itself (refused once
    /// the block is decoded).
    self_dependent: bool,
    /// The fragments so far.
    bytes: Vec<u8>,
    /// CONTINUATION frames so far.
    continuations: u32,
}

/// The state of one HTTP/2 connection. Boxed by the caller: it is a few
/// hundred bytes, and allocates its buffers only when a client needs them.
pub struct Conn {
    /// The client preface has arrived.
    preface_done: bool,
    /// Our SETTINGS went out.
    settings_sent: bool,
    /// The start of a frame that has not arrived whole.
    partial: Vec<u8>,
    /// HPACK state of the client's blocks.
    decoder: Decoder,
    /// A field block waiting for CONTINUATION frames.
    block: Option<Block>,
    /// Streams in flight, in the order they were opened.
    streams: Vec<Stream>,
    /// The highest stream the client opened.
    last_stream: u32,
    /// Streams kiln reset, most recent last.
    reset: [u32; RESET_MEMORY],
    /// Where the next entry of `reset` goes.
    reset_next: usize,
    /// Priorities that arrived before their stream.
    early_priorities: [(u32, Priority); EARLY_PRIORITIES],
    /// The client's SETTINGS_MAX_FRAME_SIZE.
    peer_max_frame: u32,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE, for new streams.
    peer_initial_window: i64,
    /// What kiln may still send on the connection.
    send_window: i64,
    /// Content received since the connection window was last topped up.
    recv_consumed: u32,
    /// Units of work done for nothing so far (see `FREE_UNITS`).
    wasted: u32,
    /// Units earned by responses sent.
    earned: u32,
    /// GOAWAY went out: no stream above `last_stream` is served.
    goaway_sent: bool,
    /// The client sent GOAWAY: finish what is in flight, then close.
    peer_goaway: bool,
    /// Close once the output is sent.
    closing: bool,
    /// Round-robin position among incremental streams of one urgency.
    round_robin: u32,
    /// The client lowered its table size: the next block starts by
    /// emptying the table and setting its new size (RFC 7541 §4.2, §6.3).
    table_resize: bool,
    /// What this connection's blocks put into the client's dynamic table
    /// (`hpack::SharedState`): 4096 bytes until the client's
    /// SETTINGS_HEADER_TABLE_SIZE says less.
    table: SharedState,
}

impl Default for Conn {
    fn default() -> Self {
        Conn::new()
    }
}

/// A connection error: GOAWAY, then close.
struct ConnectionError {
    code: ErrorCode,
    reason: &'static str,
}

fn connection_error(code: ErrorCode, reason: &'static str) -> ConnectionError {
    ConnectionError { code, reason }
}

impl Conn {
    /// A connection that starts with the client preface (ALPN `h2`).
    pub fn new() -> Conn {
        Conn {
            preface_done: false,
            settings_sent: false,
            partial: Vec::new(),
            decoder: Decoder::new(frame::DEFAULT_HEADER_TABLE_SIZE as usize),
            block: None,
            streams: Vec::new(),
            last_stream: 0,
            reset: [0; RESET_MEMORY],
            reset_next: 0,
            early_priorities: [(0, Priority::default()); EARLY_PRIORITIES],
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: i64::from(frame::DEFAULT_INITIAL_WINDOW_SIZE),
            send_window: i64::from(frame::DEFAULT_INITIAL_WINDOW_SIZE),
            recv_consumed: 0,
            wasted: 0,
            earned: 0,
            goaway_sent: false,
            peer_goaway: false,
            closing: false,
            round_robin: 0,
            table_resize: false,
            table: SharedState::new(TABLE_SIZE as usize),
        }
    }

    /// A cleartext connection whose preface the caller already recognised
    /// (h2c by prior knowledge).
    pub fn after_preface() -> Conn {
        Conn {
            preface_done: true,
            ..Conn::new()
        }
    }

    /// Takes what the loop read; answers into `out`.
    pub fn input(
        &mut self,
        bytes: &[u8],
        ctx: &mut RequestContext<'_>,
        h2: &mut Scratch,
        out: &mut Output,
    ) -> Step {
        self.send_settings(out);
        let mut partial = std::mem::take(&mut self.partial);
        let buf: &[u8] = if partial.is_empty() {
            bytes
        } else {
            partial.extend_from_slice(bytes);
            &partial
        };
        let mut answered = false;
        let used = match self.frames(buf, ctx, h2, out, &mut answered) {
            Ok(used) => used,
            Err(error) => {
                self.go_away(error.code, error.reason, out);
                self.closing = true;
                buf.len()
            }
        };
        if used < buf.len() && !self.closing {
            if partial.is_empty() {
                self.partial = buf[used..].to_vec();
            } else {
                partial.drain(..used);
                self.partial = partial;
            }
        }
        self.finish_turn(ctx, out, answered)
    }

    /// The loop sent the last output and the step had `more`: more DATA.
    pub fn resume(&mut self, ctx: &mut RequestContext<'_>, out: &mut Output) -> Step {
        self.finish_turn(ctx, out, true)
    }

    /// The loop ends the connection: a GOAWAY, saying "timeout" when
    /// the header deadline passed (a header block or a frame stalled, or
    /// the client kept a window closed on a stream kiln is answering);
    /// held event streams end first.
    pub fn expire(&mut self, expiry: Expiry, out: &mut Output) {
        let reason = match expiry {
            Expiry::Stalled => "timeout",
            Expiry::Idle => "",
            Expiry::Close => return,
        };
        self.end_events(out);
        self.go_away(ErrorCode::NO_ERROR, reason, out);
        out.seal();
    }

    /// Writes what the held event streams are owed now (with
    /// `heartbeat`, a comment if nothing else), and what else the
    /// connection can send; `None` when it holds none.
    pub fn wake(
        &mut self,
        ctx: &mut RequestContext<'_>,
        heartbeat: bool,
        out: &mut Output,
    ) -> Option<Step> {
        if !self
            .streams
            .iter()
            .any(|s| s.events.is_some() || s.parked.is_some())
        {
            return None;
        }
        let mut answered = false;
        for i in 0..self.streams.len() {
            if let Some(parked) = self.streams[i].parked.take() {
                let (request, parked) = *parked;
                let deadline = if parked.expired() {
                    0
                } else {
                    parked.deadline_ms
                };
                drop(parked);
                self.respond_parked(i, &request, Some(deadline), ctx, out);
                answered |= self.streams[i].answered;
            }
            self.write_events(i, ctx, heartbeat, out);
        }
        Some(self.finish_turn(ctx, out, answered))
    }

    /// The event stream on `self.streams[i]`, if it is one: what it is
    /// owed, as one DATA frame. An event the windows cannot take now is
    /// let go, and the stream owes its page a reload instead (a client
    /// whose windows are full reads nothing anyway).
    fn write_events(
        &mut self,
        i: usize,
        ctx: &RequestContext<'_>,
        heartbeat: bool,
        out: &mut Output,
    ) {
        let s = &mut self.streams[i];
        let Some(stream) = s.events.as_mut() else {
            return;
        };
        let Some(event) = stream.owed(ctx.sites, heartbeat) else {
            return;
        };
        let n = event.len() as i64;
        if n > self.send_window.min(s.send_window) || n > i64::from(self.peer_max_frame) {
            stream.missed();
            return;
        }
        out.bytes
            .extend_from_slice(&frame::data_frame_header(s.id, n as u32, false));
        out.bytes.extend_from_slice(event);
        s.send_window -= n;
        self.send_window -= n;
    }

    /// Ends every held event stream (DATA with END_STREAM): shutdown.
    fn end_events(&mut self, out: &mut Output) {
        self.streams.retain(|s| {
            if s.events.is_none() {
                return true;
            }
            out.bytes
                .extend_from_slice(&frame::data_frame_header(s.id, 0, true));
            // The client's side ended with its request; else it is asked
            // to stop, as `stream_sent` does.
            if s.receiving {
                out.bytes
                    .extend_from_slice(&frame::rst_stream(s.id, ErrorCode::NO_ERROR));
            }
            false
        });
    }

    fn send_settings(&mut self, out: &mut Output) {
        if self.settings_sent {
            return;
        }
        self.settings_sent = true;
        frame::write_settings(
            &mut out.bytes,
            &[
                (setting::MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST),
                (setting::NO_RFC7540_PRIORITIES, 1),
            ],
        );
        let top_up = CONNECTION_WINDOW - frame::DEFAULT_INITIAL_WINDOW_SIZE;
        out.bytes
            .extend_from_slice(&frame::window_update(0, top_up));
    }

    fn go_away(&mut self, code: ErrorCode, reason: &'static str, out: &mut Output) {
        if !self.goaway_sent {
            self.goaway_sent = true;
            frame::write_goaway(&mut out.bytes, self.last_stream, code, reason.as_bytes());
        }
    }

    /// Sends what flow control and the step allow, and says what next.
    fn finish_turn(
        &mut self,
        ctx: &mut RequestContext<'_>,
        out: &mut Output,
        progress: bool,
    ) -> Step {
        if ctx.draining && !self.goaway_sent {
            self.end_events(out);
            self.go_away(ErrorCode::NO_ERROR, "", out);
        }
        let sent = if self.closing {
            0
        } else {
            self.send_data(ctx.sites, out)
        };
        for s in &mut self.streams {
            if s.site.is_none()
                && let Some(Remaining::Pack { pack, .. }) = s.body
            {
                s.site = ctx.sites.site(pack).cloned();
            }
        }
        let done = self.closing
            || ((self.goaway_sent || self.peer_goaway)
                && self.streams.is_empty()
                && self.block.is_none());
        out.seal();
        let more = !done && self.can_send();
        let fresh = progress || sent > 0;
        // A response with body left waits on the client's window: in
        // flight, which shutdown must let finish, unlike a request still
        // arriving.
        let in_flight = self.streams.iter().any(|s| s.body.is_some());
        // A held event stream is neither: it waits on nobody; nor does a
        // parked request (the loop wakes it).
        let answering = self
            .streams
            .iter()
            .any(|s| s.events.is_none() && s.parked.is_none());
        let waiting = !self.partial.is_empty() || self.block.is_some() || answering;
        if done {
            return Step::Close {
                linger: true,
                more: false,
            };
        }
        let wait = if in_flight {
            Wait::InFlight { restart: fresh }
        } else if waiting {
            Wait::Input { restart: fresh }
        } else if !self.streams.is_empty() {
            Wait::Held
        } else {
            Wait::Idle
        };
        Step::Open { wait, more }
    }

    /// Handles every whole frame at the start of `buf`; returns the bytes
    /// used.
    fn frames(
        &mut self,
        buf: &[u8],
        ctx: &mut RequestContext<'_>,
        h2: &mut Scratch,
        out: &mut Output,
        answered: &mut bool,
    ) -> Result<usize, ConnectionError> {
        let mut used = 0;
        if !self.preface_done {
            let preface = frame::PREFACE;
            let have = buf.len().min(preface.len());
            if buf[..have] != preface[..have] {
                return Err(connection_error(ErrorCode::PROTOCOL_ERROR, "bad preface"));
            }
            if have < preface.len() {
                return Ok(0);
            }
            self.preface_done = true;
            used = preface.len();
        }
        while used < buf.len() && !self.closing {
            let parsed = match frame::parse(&buf[used..], frame::DEFAULT_MAX_FRAME_SIZE) {
                Ok(parsed) => parsed,
                Err(FrameError {
                    scope: ErrorScope::Stream { stream, frame_len },
                    code,
                    ..
                }) if self.block.is_none() && stream <= self.last_stream => {
                    self.reset_stream(stream, code, out);
                    used += frame_len;
                    continue;
                }
                Err(error) => return Err(connection_error(error.code, error.reason)),
            };
            let Parsed::Frame { frame, len } = parsed else {
                break;
            };
            used += len;
            self.frame(frame, ctx, h2, out, answered)?;
        }
        Ok(used)
    }

    fn frame(
        &mut self,
        frame: Frame<'_>,
        ctx: &mut RequestContext<'_>,
        h2: &mut Scratch,
        out: &mut Output,
        answered: &mut bool,
    ) -> Result<(), ConnectionError> {
        if self.block.is_some() && !matches!(frame, Frame::Continuation { .. }) {
            return Err(connection_error(
                ErrorCode::PROTOCOL_ERROR,
                "a frame inside a field block",
            ));
        }
        match frame {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_controlled_len,
            } => {
                let len = data.len();
                self.data(
                    stream,
                    end_stream,
                    len,
                    flow_controlled_len,
                    ctx,
                    out,
                    answered,
                )
            }
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                priority,
                block,
            } => {
                if stream % 2 == 0 {
                    return Err(connection_error(
                        ErrorCode::PROTOCOL_ERROR,
                        "even stream identifier from a client",
                    ));
                }
                let opened = Block {
                    stream,
                    end_stream,
                    self_dependent: priority.is_some_and(|p| p.depends_on == stream),
                    bytes: Vec::new(),
                    continuations: 0,
                };
                if end_headers {
                    // The usual case: the whole block in this frame,
                    // decoded where it was read.
                    self.field_block(&opened, block, ctx, h2, out, answered)
                } else {
                    self.block = Some(Block {
                        bytes: block.to_vec(),
                        ..opened
                    });
                    Ok(())
                }
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                let Some(open) = self.block.as_mut().filter(|b| b.stream == stream) else {
                    return Err(connection_error(
                        ErrorCode::PROTOCOL_ERROR,
                        "CONTINUATION without its HEADERS",
                    ));
                };
                open.continuations += 1;
                if open.continuations > MAX_CONTINUATIONS
                    || open.bytes.len() + block.len() > MAX_BLOCK
                {
                    return Err(connection_error(
                        ErrorCode::ENHANCE_YOUR_CALM,
                        "field block too large",
                    ));
                }
                open.bytes.extend_from_slice(block);
                if !end_headers {
                    return Ok(());
                }
                let Some(whole) = self.block.take() else {
                    return Ok(());
                };
                self.field_block(&whole, &whole.bytes, ctx, h2, out, answered)
            }
            Frame::Priority { .. } => self.waste(1),
            Frame::RstStream { stream, .. } => {
                if stream > self.last_stream {
                    return Err(connection_error(
                        ErrorCode::PROTOCOL_ERROR,
                        "RST_STREAM on an idle stream",
                    ));
                }
                if let Some(i) = self.find(stream) {
                    let s = self.streams.remove(i);
                    if s.body.is_some_and(|b| b.len() > 0) {
                        self.waste(RESET_COST)?;
                    }
                }
                Ok(())
            }
            Frame::Settings { ack, params } => {
                if ack {
                    return Ok(());
                }
                self.waste(1)?;
                for (id, value) in params {
                    self.setting(id, value)?;
                }
                out.bytes.extend_from_slice(&frame::settings_ack());
                Ok(())
            }
            Frame::PushPromise { .. } => Err(connection_error(
                ErrorCode::PROTOCOL_ERROR,
                "PUSH_PROMISE from a client",
            )),
            Frame::Ping { ack, payload } => {
                if !ack {
                    self.waste(1)?;
                    out.bytes.extend_from_slice(&frame::ping_ack(payload));
                }
                Ok(())
            }
            Frame::GoAway { .. } => {
                self.peer_goaway = true;
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.window_update(stream, increment, out),
            Frame::PriorityUpdate {
                prioritized_stream,
                field_value,
            } => {
                self.waste(1)?;
                let priority = Priority::parse(field_value).unwrap_or_default();
                match self.find(prioritized_stream) {
                    Some(i) => self.streams[i].priority = priority,
                    None if prioritized_stream > self.last_stream => {
                        let slot = self
                            .early_priorities
                            .iter()
                            .position(|(id, _)| *id == 0 || *id == prioritized_stream)
                            .unwrap_or(prioritized_stream as usize % EARLY_PRIORITIES);
                        self.early_priorities[slot] = (prioritized_stream, priority);
                    }
                    None => {}
                }
                Ok(())
            }
            Frame::Unknown { .. } => Ok(()),
        }
    }

    /// Counts work done for nothing; too much ends the connection.
    fn waste(&mut self, units: u32) -> Result<(), ConnectionError> {
        self.wasted = self.wasted.saturating_add(units);
        if self.wasted > FREE_UNITS.saturating_add(self.earned) {
            return Err(connection_error(
                ErrorCode::ENHANCE_YOUR_CALM,
                "too many frames that serve nothing",
            ));
        }
        Ok(())
    }

    fn setting(&mut self, id: u16, value: u32) -> Result<(), ConnectionError> {
        match id {
            setting::INITIAL_WINDOW_SIZE => {
                let delta = i64::from(value) - self.peer_initial_window;
                self.peer_initial_window = i64::from(value);
                for s in &mut self.streams {
                    s.send_window += delta;
                    if s.send_window > i64::from(frame::MAX_WINDOW_SIZE) {
                        return Err(connection_error(
                            ErrorCode::FLOW_CONTROL_ERROR,
                            "a stream window above 2^31-1",
                        ));
                    }
                }
            }
            setting::MAX_FRAME_SIZE => self.peer_max_frame = value,
            setting::HEADER_TABLE_SIZE if (value as usize) < self.table.table_max() => {
                // What kiln inserted may not fit any more: start over.
                self.table.reset(value as usize);
                self.table_resize = true;
            }
            _ => {}
        }
        Ok(())
    }

    fn window_update(
        &mut self,
        stream: u32,
        increment: u32,
        out: &mut Output,
    ) -> Result<(), ConnectionError> {
        let max = i64::from(frame::MAX_WINDOW_SIZE);
        if stream == 0 {
            self.send_window += i64::from(increment);
            if self.send_window > max {
                return Err(connection_error(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window above 2^31-1",
                ));
            }
            return Ok(());
        }
        if stream > self.last_stream {
            return Err(connection_error(
                ErrorCode::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream",
            ));
        }
        if let Some(i) = self.find(stream) {
            let s = &mut self.streams[i];
            s.send_window += i64::from(increment);
            if s.send_window > max {
                self.streams.remove(i);
                self.reset_stream(stream, ErrorCode::FLOW_CONTROL_ERROR, out);
            }
        }
        Ok(())
    }

    fn find(&self, stream: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == stream)
    }

    fn reset_stream(&mut self, stream: u32, code: ErrorCode, out: &mut Output) {
        if let Some(i) = self.find(stream) {
            self.streams.remove(i);
        }
        out.bytes
            .extend_from_slice(&frame::rst_stream(stream, code));
        self.reset[self.reset_next] = stream;
        self.reset_next = (self.reset_next + 1) % RESET_MEMORY;
    }

    fn was_reset(&self, stream: u32) -> bool {
        self.reset.contains(&stream)
    }

    #[allow(clippy::too_many_arguments)]
    fn data(
        &mut self,
        stream: u32,
        end_stream: bool,
        len: usize,
        flow_len: u32,
        ctx: &mut RequestContext<'_>,
        out: &mut Output,
        answered: &mut bool,
    ) -> Result<(), ConnectionError> {
        if stream > self.last_stream {
            return Err(connection_error(
                ErrorCode::PROTOCOL_ERROR,
                "DATA on an idle stream",
            ));
        }
        // Whatever becomes of the frame, it used the connection window:
        // top it up once a good part is used.
        self.recv_consumed += flow_len;
        if self.recv_consumed >= CONNECTION_WINDOW / 2 {
            out.bytes
                .extend_from_slice(&frame::window_update(0, self.recv_consumed));
            self.recv_consumed = 0;
        }
        if len == 0 && !end_stream {
            self.waste(1)?;
        }
        let Some(i) = self.find(stream).filter(|&i| self.streams[i].receiving) else {
            if !self.was_reset(stream) {
                self.reset_stream(stream, ErrorCode::STREAM_CLOSED, out);
            }
            return Ok(());
        };
        let s = &mut self.streams[i];
        s.recv_window -= i64::from(flow_len);
        s.received += len as u64;
        let received = s.received;
        let over_window = s.recv_window < 0;
        let declared = s.request.as_ref().and_then(|r| r.content_length());
        if over_window {
            self.reset_stream(stream, ErrorCode::FLOW_CONTROL_ERROR, out);
            return Ok(());
        }
        if s.answered {
            // Refused (413, 431) while the client was still sending: the
            // rest is dropped, and its end spares the client the
            // RST_STREAM that `stream_sent` would ask it to stop with.
            s.receiving = !end_stream;
            return Ok(());
        }
        if declared.is_some_and(|l| received > l || (end_stream && received != l)) {
            self.reset_stream(stream, ErrorCode::PROTOCOL_ERROR, out);
            return Ok(());
        }
        if received > MAX_DISCARDED_BODY || end_stream {
            let s = &mut self.streams[i];
            // Past the limit the client is still sending: the stream goes
            // on receiving, so that once the 413 is sent the client is
            // asked to stop (`stream_sent`, §8.1) instead of being told
            // at its next DATA that the stream is closed.
            s.receiving = !end_stream;
            let request = s.request.take();
            if received > MAX_DISCARDED_BODY {
                let body: &'static [u8] = b"413 Content Too Large\n";
                self.respond_builtin(i, 413, body, request.as_deref(), ctx, out);
            } else if let Some(request) = request {
                self.respond(i, &request, ctx, out);
            }
            *answered = true;
        }
        Ok(())
    }

    /// A field block is whole: decode it (always, to keep HPACK in step),
    /// then open the stream and answer, or refuse.
    fn field_block(
        &mut self,
        block: &Block,
        bytes: &[u8],
        ctx: &mut RequestContext<'_>,
        h2: &mut Scratch,
        out: &mut Output,
        answered: &mut bool,
    ) -> Result<(), ConnectionError> {
        let stream = block.stream;
        let fields = &mut h2.fields;
        fields.clear();
        let decoded = self.decoder.decode(
            bytes,
            &mut h2.hpack,
            MAX_HEADER_LIST as usize,
            |name, value| fields.field(name, value),
        );
        // 0 for a malformed section (reset the stream), else the status
        // to answer with.
        let fields_ok = match decoded {
            Err(DecodeError::Compression(_)) => {
                return Err(connection_error(
                    ErrorCode::COMPRESSION_ERROR,
                    "HPACK decoding failed",
                ));
            }
            Err(DecodeError::ListTooLarge) => Err(431),
            Err(DecodeError::Field(FieldError::TooManyLines)) => Err(431),
            Err(DecodeError::Field(FieldError::Malformed(_))) => Err(0),
            Ok(()) => Ok(()),
        };

        // Trailers, or a second HEADERS, on a stream in flight.
        if stream <= self.last_stream {
            match self.find(stream) {
                // Half-closed (remote): the client ended its side (§5.1).
                Some(i) if !self.streams[i].receiving => {
                    self.reset_stream(stream, ErrorCode::STREAM_CLOSED, out);
                }
                // Trailers carry no pseudo-header field (§8.1).
                Some(_) if fields_ok.is_err() || h2.fields.has_pseudo() => {
                    self.reset_stream(stream, ErrorCode::PROTOCOL_ERROR, out);
                }
                Some(i) if block.end_stream => {
                    self.streams[i].receiving = false;
                    if let Some(request) = self.streams[i].request.take() {
                        if request
                            .content_length()
                            .is_some_and(|l| l != self.streams[i].received)
                        {
                            self.reset_stream(stream, ErrorCode::PROTOCOL_ERROR, out);
                        } else {
                            self.respond(i, &request, ctx, out);
                            *answered = true;
                        }
                    }
                }
                Some(_) => self.reset_stream(stream, ErrorCode::PROTOCOL_ERROR, out),
                None if stream == self.last_stream => {
                    return Err(connection_error(
                        ErrorCode::STREAM_CLOSED,
                        "HEADERS on a closed stream",
                    ));
                }
                None => {
                    return Err(connection_error(
                        ErrorCode::PROTOCOL_ERROR,
                        "a stream identifier below the last one",
                    ));
                }
            }
            return Ok(());
        }

        self.last_stream = stream;
        if self.goaway_sent {
            // Opened after our GOAWAY: not served (§6.8).
            return Ok(());
        }
        if block.self_dependent {
            self.reset_stream(stream, ErrorCode::PROTOCOL_ERROR, out);
            return Ok(());
        }
        if self.streams.len() >= MAX_CONCURRENT_STREAMS as usize {
            self.reset_stream(stream, ErrorCode::REFUSED_STREAM, out);
            return Ok(());
        }
        let early = self
            .early_priorities
            .iter_mut()
            .find(|(id, _)| *id == stream)
            .map(|slot| std::mem::take(slot).1);
        let priority =
            early.unwrap_or_else(|| Priority::from_field_lines(h2.fields.priority_lines()));
        self.streams.push(Stream {
            id: stream,
            request: None,
            receiving: !block.end_stream,
            received: 0,
            // The window we advertise, though the client may not have
            // our SETTINGS yet: until then it keeps to a smaller one.
            recv_window: i64::from(STREAM_WINDOW),
            body: None,
            answered: false,
            send_window: self.peer_initial_window,
            priority,
            site: None,
            events: None,
            parked: None,
        });
        let i = self.streams.len() - 1;
        let decoded = fields_ok.and_then(|()| {
            h2.fields.finish().map_err(|e| match e {
                FieldError::TooManyLines => 431,
                FieldError::Malformed(_) => 0,
            })
        });
        match decoded {
            Err(0) => self.reset_stream(stream, ErrorCode::PROTOCOL_ERROR, out),
            Err(status) => {
                self.respond_builtin(
                    i,
                    status,
                    b"431 Request Header Fields Too Large\n",
                    None,
                    ctx,
                    out,
                );
                *answered = true;
            }
            Ok(()) if block.end_stream => {
                self.respond(i, &h2.fields, ctx, out);
                *answered = true;
            }
            Ok(()) => self.streams[i].request = Some(Box::new(h2.fields.clone())),
        }
        Ok(())
    }

    /// The response on `self.streams[i]` is all sent: forget the stream,
    /// unless the request is still arriving (then ask the client to stop,
    /// §8.1).
    fn stream_sent(&mut self, i: usize, out: &mut Output) {
        self.earned = self.earned.saturating_add(EARNED_PER_RESPONSE);
        let s = self.streams.remove(i);
        if s.receiving {
            self.reset_stream(s.id, ErrorCode::NO_ERROR, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::frame::{PREFACE, flag, frame_type};
    use super::test_peer::*;
    use super::*;

    #[test]
    fn a_get_is_answered_with_headers_and_data() {
        let mut peer = Peer::new();
        let mut bytes = start();
        bytes.extend(headers(1, true, &get_block("/", &[])));
        let (step, sent) = peer.send(&bytes);
        let types: Vec<u8> = sent.iter().map(|f| f.frame_type).collect();
        assert_eq!(
            types,
            [
                frame_type::SETTINGS,
                frame_type::WINDOW_UPDATE,
                frame_type::SETTINGS,
                frame_type::HEADERS,
                frame_type::DATA
            ]
        );
        let mut decoder = Decoder::new(4096);
        let mut fields = Vec::new();
        decoder
            .decode(&sent[3].payload, &mut Vec::new(), 1 << 16, |n, v| {
                fields.push((n.to_vec(), v.to_vec()));
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(fields[0], (b":status".to_vec(), b"200".to_vec()));
        assert!(fields.contains(&(b"server".to_vec(), b"kiln".to_vec())));
        assert_eq!(sent[4].payload, b"Hello World!");
        assert_eq!(sent[4].flags & flag::END_STREAM, flag::END_STREAM);
        assert_eq!(step.wait(), Some(Wait::Idle));
    }

    #[test]
    fn rapid_resets_end_the_connection() {
        let mut peer = Peer::new();
        let mut bytes = start();
        for i in 0..200u32 {
            let stream = 2 * i + 1;
            bytes.extend(headers(stream, true, &get_block("/", &[])));
            bytes.extend(header(4, frame_type::RST_STREAM, 0, stream));
            bytes.extend(ErrorCode::CANCEL.0.to_be_bytes());
        }
        let (step, sent) = peer.send(&bytes);
        assert_eq!(goaway_code(&sent), Some(ErrorCode::ENHANCE_YOUR_CALM));
        assert!(step.closes());
    }

    #[test]
    fn a_continuation_flood_ends_the_connection() {
        let mut peer = Peer::new();
        let mut bytes = start();
        let block = get_block("/", &[]);
        bytes.extend(header(
            block.len(),
            frame_type::HEADERS,
            flag::END_STREAM,
            1,
        ));
        bytes.extend(&block);
        for _ in 0..=MAX_CONTINUATIONS {
            bytes.extend(header(0, frame_type::CONTINUATION, 0, 1));
        }
        let (step, sent) = peer.send(&bytes);
        assert_eq!(goaway_code(&sent), Some(ErrorCode::ENHANCE_YOUR_CALM));
        assert!(step.closes());
    }

    #[test]
    fn ping_and_settings_floods_end_the_connection() {
        for frame in [
            [header(8, frame_type::PING, 0, 0), vec![0; 8]].concat(),
            header(0, frame_type::SETTINGS, 0, 0),
        ] {
            let mut peer = Peer::new();
            let mut bytes = start();
            for _ in 0..FREE_UNITS + 1 {
                bytes.extend(&frame);
            }
            let (step, sent) = peer.send(&bytes);
            assert_eq!(goaway_code(&sent), Some(ErrorCode::ENHANCE_YOUR_CALM));
            assert!(step.closes());
        }
    }

    #[test]
    fn streams_beyond_the_limit_are_refused() {
        let mut peer = Peer::new();
        let mut bytes = start();
        for i in 0..=MAX_CONCURRENT_STREAMS {
            bytes.extend(headers(2 * i + 1, false, &get_block("/", &[])));
        }
        let (step, sent) = peer.send(&bytes);
        let refused: Vec<_> = sent
            .iter()
            .filter(|f| f.frame_type == frame_type::RST_STREAM)
            .map(|f| {
                (
                    f.stream,
                    u32::from_be_bytes(f.payload[..4].try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(
            refused,
            [(2 * MAX_CONCURRENT_STREAMS + 1, ErrorCode::REFUSED_STREAM.0)]
        );
        assert_eq!(step.wait(), Some(Wait::Input { restart: false }));
    }

    #[test]
    fn a_header_list_over_the_limit_gets_431_and_the_connection_goes_on() {
        let mut peer = Peer::new();
        let mut bytes = start();
        // An entry indexed once, then referenced past the list limit: an
        // HPACK bomb.
        let mut block = get_block("/", &[]);
        let big = "x".repeat(4000);
        block.push(0x40);
        block.push(0x01);
        block.push(b'a');
        block.push(0x7f);
        let mut n = big.len() - 127;
        while n >= 128 {
            block.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        block.push(n as u8);
        block.extend_from_slice(big.as_bytes());
        block.extend(std::iter::repeat_n(0xbe, 100));
        bytes.extend(headers(1, true, &block));
        bytes.extend(headers(3, true, &get_block("/", &[])));
        let (step, sent) = peer.send(&bytes);
        let statuses: Vec<(u32, Vec<u8>)> = sent
            .iter()
            .filter(|f| f.frame_type == frame_type::HEADERS)
            .map(|f| (f.stream, f.payload[..1].to_vec()))
            .collect();
        assert_eq!(statuses.len(), 2);
        assert!(goaway_code(&sent).is_none());
        assert!(!step.closes());
    }

    #[test]
    fn a_closed_window_waits_under_the_header_deadline() {
        let mut peer = Peer::new();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(header(6, frame_type::SETTINGS, 0, 0));
        bytes.extend(setting::INITIAL_WINDOW_SIZE.to_be_bytes());
        bytes.extend(0u32.to_be_bytes());
        bytes.extend(headers(1, true, &get_block("/", &[])));
        let (step, sent) = peer.send(&bytes);
        assert!(sent.iter().any(|f| f.frame_type == frame_type::HEADERS));
        assert!(!sent.iter().any(|f| f.frame_type == frame_type::DATA));
        assert_eq!(
            step,
            Step::Open {
                wait: Wait::InFlight { restart: true },
                more: false
            }
        );
        // One byte of window: one byte of DATA.
        let mut update = header(4, frame_type::WINDOW_UPDATE, 0, 1);
        update.extend(1u32.to_be_bytes());
        let (_, sent) = peer.send(&update);
        let data: Vec<_> = sent
            .iter()
            .filter(|f| f.frame_type == frame_type::DATA)
            .collect();
        assert_eq!(data.len(), 1);
        assert_eq!(data[0].payload, b"H");
        let mut out = Output::new(0, u64::MAX);
        peer.conn.expire(Expiry::Stalled, &mut out);
        assert_eq!(
            goaway_code(&frames(&flatten(&out))),
            Some(ErrorCode::NO_ERROR)
        );
    }

    #[test]
    fn draining_sends_goaway_and_closes_when_done() {
        let mut peer = Peer::new();
        peer.draining = true;
        let mut bytes = start();
        bytes.extend(headers(1, true, &get_block("/", &[])));
        let (step, sent) = peer.send(&bytes);
        assert_eq!(goaway_code(&sent), Some(ErrorCode::NO_ERROR));
        assert!(sent.iter().any(|f| f.frame_type == frame_type::DATA));
        assert!(step.closes());
    }

    #[test]
    fn an_event_stream_is_held_open_and_woken() {
        let mut peer = Peer::new();
        peer.sites = crate::serve::handler::live::testing::preview(0);
        let mut bytes = start();
        bytes.extend(headers(1, true, &get_block("/_kiln/events", &[])));
        let (step, sent) = peer.send(&bytes);
        let on_stream: Vec<&Sent> = sent.iter().filter(|f| f.stream == 1).collect();
        assert_eq!(on_stream[0].frame_type, frame_type::HEADERS);
        assert_eq!(on_stream[0].flags & flag::END_STREAM, 0, "held open");
        assert_eq!(on_stream[1].frame_type, frame_type::DATA);
        assert!(
            on_stream[1]
                .payload
                .starts_with(b"retry: 1000\ndata: {\"hello\":true")
        );
        assert_eq!(on_stream[1].flags & flag::END_STREAM, 0);
        assert_eq!(step.wait(), Some(Wait::Held), "no deadline");
        assert_eq!(peer.events.held(), 1);

        // Nothing new: nothing, or a comment.
        assert_eq!(peer.wake(false).1.len(), 0);
        let (_, sent) = peer.wake(true);
        assert_eq!(sent[0].payload, b":\n\n");
        // The next generation: its change.
        peer.sites = crate::serve::handler::live::testing::preview(1);
        let (step, sent) = peer.wake(false);
        assert_eq!(step.and_then(Step::wait), Some(Wait::Held));
        assert_eq!(sent.len(), 1);
        assert!(
            sent[0]
                .payload
                .starts_with(b"data: {\"css\":[\"/style.css\"]")
        );

        // A drain ends it (END_STREAM), then GOAWAY, and the connection.
        peer.draining = true;
        let (step, sent) = peer.wake(false);
        assert!(step.is_some_and(Step::closes));
        assert_eq!(sent[0].frame_type, frame_type::DATA);
        assert_eq!(sent[0].flags & flag::END_STREAM, flag::END_STREAM);
        assert_eq!(goaway_code(&sent), Some(ErrorCode::NO_ERROR));
        assert_eq!(peer.events.held(), 0);
    }

    #[test]
    fn a_reset_event_stream_gives_its_place_back() {
        let mut peer = Peer::new();
        peer.sites = crate::serve::handler::live::testing::preview(0);
        let mut bytes = start();
        bytes.extend(headers(1, true, &get_block("/_kiln/events", &[])));
        peer.send(&bytes);
        assert_eq!(peer.events.held(), 1);
        let mut reset = header(4, frame_type::RST_STREAM, 0, 1);
        reset.extend(ErrorCode::CANCEL.0.to_be_bytes());
        let (step, _) = peer.send(&reset);
        assert_eq!(step.wait(), Some(Wait::Idle));
        assert_eq!(peer.events.held(), 0);
        assert_eq!(peer.wake(true).0, None, "nothing held");
    }

    #[test]
    fn frames_split_at_every_byte_give_the_same_answer() {
        let mut bytes = start();
        bytes.extend(headers(1, true, &get_block("/", &[])));
        let (_, whole) = Peer::new().send(&bytes);
        let mut peer = Peer::new();
        let mut sent = Vec::new();
        for byte in &bytes {
            sent.extend(peer.send(std::slice::from_ref(byte)).1);
        }
        let kinds = |s: &[Sent]| {
            s.iter()
                .map(|f| (f.frame_type, f.stream))
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(&whole), kinds(&sent));
    }
}
