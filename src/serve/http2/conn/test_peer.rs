//! The tests' client side of a connection, shared by the tests of the
//! connection, the response writer and the scheduler.

use super::super::frame::{ErrorCode, FRAME_HEADER_LEN, PREFACE, flag, frame_type};
use super::{Conn, Scratch};
use crate::hpack;
use crate::serve::date::DateCache;
use crate::serve::handler::{Scratch as HandlerScratch, Site, Sites};
use crate::serve::net::Step;
use crate::serve::output::Output;
use crate::serve::request_context::RequestContext;
use crate::serve::server_headers::ServerHeaders;

/// A client side for the tests: frames built with the frame writers
/// and the HPACK encoder, the server's output read back with `parse`.
pub(super) struct Peer {
    pub(super) conn: Conn,
    pub(super) events: crate::serve::handler::live::EventStreams,
    pub(super) sites: std::sync::Arc<Sites>,
    pub(super) metrics: std::sync::Arc<crate::serve::metrics::Metrics>,
    pub(super) scratch: HandlerScratch,
    pub(super) date: DateCache,
    pub(super) headers: ServerHeaders,
    pub(super) h2: Scratch,
    pub(super) draining: bool,
}

/// One frame the server sent, owned.
#[derive(Debug)]
pub(super) struct Sent {
    pub(super) frame_type: u8,
    pub(super) flags: u8,
    pub(super) stream: u32,
    pub(super) payload: Vec<u8>,
}

impl Peer {
    pub(super) fn new() -> Peer {
        Peer {
            conn: Conn::new(),
            sites: Sites::single(Site::dummy(crate::serve::metrics::SiteStats::new(
                "_default", 1,
            ))),
            metrics: crate::serve::metrics::Metrics::new(1, 0),
            scratch: HandlerScratch::default(),
            date: DateCache::new(),
            headers: ServerHeaders::new(false, false),
            h2: Scratch::default(),
            draining: false,
            events: Default::default(),
        }
    }

    /// Sends `bytes`; returns the step and every frame the server
    /// wrote (with every `resume` it asked for).
    pub(super) fn send(&mut self, bytes: &[u8]) -> (Step, Vec<Sent>) {
        let mut ctx = RequestContext {
            sites: &self.sites,
            scratch: &mut self.scratch,
            date: &self.date,
            server_headers: &self.headers,
            log: None,
            peer: None,
            draining: self.draining,
            http01: None,
            https_redirect: None,
            scheme: crate::serve::metrics::Scheme::Http,
            metrics: &self.metrics,
            thread: 0,
            started_us: 0,
            events: &self.events,
        };
        let mut out = Output::new(0, u64::MAX);
        let mut step = self.conn.input(bytes, &mut ctx, &mut self.h2, &mut out);
        let mut wire = flatten(&out);
        while step.more() {
            out.clear();
            step = self.conn.resume(&mut ctx, &mut out);
            wire.extend(flatten(&out));
        }
        (step, frames(&wire))
    }

    /// Wakes the connection's held event streams (`Conn::wake`): its
    /// step, if it holds any, and every frame it wrote.
    pub(super) fn wake(&mut self, heartbeat: bool) -> (Option<Step>, Vec<Sent>) {
        let mut ctx = RequestContext {
            sites: &self.sites,
            scratch: &mut self.scratch,
            date: &self.date,
            server_headers: &self.headers,
            log: None,
            peer: None,
            draining: self.draining,
            http01: None,
            https_redirect: None,
            scheme: crate::serve::metrics::Scheme::Http,
            metrics: &self.metrics,
            thread: 0,
            started_us: 0,
            events: &self.events,
        };
        let mut out = Output::new(0, u64::MAX);
        let step = self.conn.wake(&mut ctx, heartbeat, &mut out);
        (step, frames(&flatten(&out)))
    }
}

pub(super) fn flatten(out: &Output) -> Vec<u8> {
    let mut bytes = Vec::new();
    for seg in &out.segs {
        match *seg {
            crate::serve::output::Seg::Own { start, end } => {
                bytes.extend_from_slice(&out.bytes[start..end]);
            }
            other => panic!("the dummy site has no pack: {other:?}"),
        }
    }
    bytes
}

pub(super) fn frames(mut wire: &[u8]) -> Vec<Sent> {
    let mut sent = Vec::new();
    while wire.len() >= FRAME_HEADER_LEN {
        let len = u32::from_be_bytes([0, wire[0], wire[1], wire[2]]) as usize;
        sent.push(Sent {
            frame_type: wire[3],
            flags: wire[4],
            stream: u32::from_be_bytes([wire[5], wire[6], wire[7], wire[8]]) & 0x7fff_ffff,
            payload: wire[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len].to_vec(),
        });
        wire = &wire[FRAME_HEADER_LEN + len..];
    }
    assert!(wire.is_empty(), "a partial frame in the output");
    sent
}

pub(super) fn header(len: usize, frame_type: u8, flags: u8, stream: u32) -> Vec<u8> {
    let mut h = (len as u32).to_be_bytes()[1..].to_vec();
    h.push(frame_type);
    h.push(flags);
    h.extend_from_slice(&stream.to_be_bytes());
    h
}

pub(super) fn get_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "localhost"),
        (":path", path),
    ]
    .iter()
    .chain(extra)
    {
        hpack::encode_field(name.as_bytes(), value.as_bytes(), &mut block);
    }
    block
}

pub(super) fn headers(stream: u32, end_stream: bool, block: &[u8]) -> Vec<u8> {
    let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    let mut f = header(block.len(), frame_type::HEADERS, flags, stream);
    f.extend_from_slice(block);
    f
}

pub(super) fn start() -> Vec<u8> {
    let mut bytes = PREFACE.to_vec();
    bytes.extend(header(0, frame_type::SETTINGS, 0, 0));
    bytes
}

pub(super) fn goaway_code(sent: &[Sent]) -> Option<ErrorCode> {
    sent.iter()
        .find(|f| f.frame_type == frame_type::GOAWAY)
        .map(|f| ErrorCode(u32::from_be_bytes(f.payload[4..8].try_into().unwrap())))
}
