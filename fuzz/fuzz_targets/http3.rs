//! Arbitrary bytes as what a client sent on the streams of an HTTP/3
//! connection: control and QPACK streams, streams of unknown types,
//! request streams with any frames, ends and resets, against the
//! example-site pack. The connection must never panic, and what it writes
//! on a request stream must be whole frames a client can read: HEADERS
//! whose QPACK section decodes and starts with `:status`, then DATA.
//!
//! The input is a list of records: a byte naming the stream (its low two
//! bits the QUIC stream type, client-initiated; the next three its index),
//! a byte of flags (1: the stream ends after this; 2: the peer resets
//! it; 4: flow control lets 7 bytes per write through), a length byte and
//! that many bytes.

#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use kiln::serve::date::DateCache;
use kiln::serve::handler::Scratch;
use kiln::serve::http3::frame::{self, Frame, FrameReader};
use kiln::serve::http3::{Answering, Bodies, Conn, Scratch as H3Scratch, Streams};
use kiln::serve::metrics::Scheme;
use kiln::serve::net::Backing;
use kiln::serve::request_context::RequestContext;
use kiln::serve::server_headers::ServerHeaders;
use libfuzzer_sys::fuzz_target;

mod example_site;
use example_site::{metrics, site};

/// What a serving thread keeps from one connection to the next.
struct Thread {
    scratch: Scratch,
    h3: H3Scratch,
    bodies: Bodies,
    date: DateCache,
    headers: ServerHeaders,
}

thread_local! {
    static THREAD: RefCell<Thread> = RefCell::new({
        let mut date = DateCache::new();
        date.update(1_700_000_000);
        Thread {
            scratch: Scratch::default(),
            h3: H3Scratch::default(),
            bodies: Bodies::default(),
            date,
            headers: ServerHeaders::new(true, true),
        }
    });
}

/// QUIC as the connection sees it: what it wrote, per stream.
#[derive(Default)]
struct Quic {
    written: HashMap<u64, Vec<u8>>,
    next_uni: u64,
    budget: Option<usize>,
    closed: bool,
}

impl Streams for Quic {
    fn open_uni(&mut self) -> Option<u64> {
        self.next_uni += 1;
        Some(4 * self.next_uni - 1)
    }

    fn write(&mut self, id: u64, chunks: &mut [Bytes]) {
        assert!(!self.closed || id % 4 == 3, "a write after the close");
        let out = self.written.entry(id).or_default();
        let mut left = self.budget.unwrap_or(usize::MAX);
        for chunk in chunks {
            let n = chunk.len().min(left);
            out.extend_from_slice(&chunk.split_to(n));
            left -= n;
        }
    }

    fn finish(&mut self, _id: u64) {}

    fn reset(&mut self, _id: u64, code: u64) {
        assert!((0x100..=0x110).contains(&code) || code == 0x200, "{code:#x}");
    }

    fn stop(&mut self, _id: u64, _code: u64) {}

    fn close(&mut self, code: u64, _reason: &'static str) {
        assert!((0x100..=0x202).contains(&code), "{code:#x}");
        self.closed = true;
    }
}

/// Every response written on a request stream is HEADERS (a section that
/// decodes, `:status` first) and then only DATA.
fn check_responses(quic: &Quic) {
    for (&id, bytes) in &quic.written {
        if id % 4 != 0 {
            continue;
        }
        let mut reader = FrameReader::default();
        let mut seen = 0;
        let mut scratch = Vec::new();
        let result = reader.read::<()>(bytes, |f| {
            match f {
                Frame::Whole {
                    frame_type: frame::HEADERS,
                    payload,
                } if seen == 0 => {
                    let mut first = None;
                    kiln::qpack::decode_field_section::<()>(payload, &mut scratch, 1 << 20, |n, _| {
                        first.get_or_insert_with(|| n.to_vec());
                        Ok(())
                    })
                    .expect("a section that decodes");
                    assert_eq!(first.as_deref(), Some(&b":status"[..]));
                }
                Frame::Skipped {
                    frame_type: frame::DATA,
                    ..
                } if seen > 0 => {}
                other => panic!("{other:?} on a response"),
            }
            seen += 1;
            Ok(())
        });
        assert!(result.is_ok());
    }
}

fuzz_target!(|data: &[u8]| {
    THREAD.with(|thread| {
        let thread = &mut *thread.borrow_mut();
        let mut ctx = RequestContext {
            sites: site(),
            scratch: &mut thread.scratch,
            date: &thread.date,
            server_headers: &thread.headers,
            log: None,
            peer: None,
            draining: false,
            http01: None,
            https_redirect: None,
            scheme: Scheme::Https,
            metrics: metrics(),
            thread: 0,
            started_us: 0,
            events: &kiln::serve::handler::live::EventStreams::default(),
        };
        let backing: Arc<dyn Backing> = site().clone();
        let mut cx = Answering {
            ctx: &mut ctx,
            scratch: &mut thread.h3,
            bodies: &mut thread.bodies,
            backing: &backing,
        };
        let mut conn = Conn::default();
        let mut quic = Quic::default();
        conn.start(&mut quic);
        let mut rest = data;
        while let [stream, flags, len, tail @ ..] = rest {
            let n = usize::from(*len).min(tail.len());
            let (bytes, next) = tail.split_at(n);
            rest = next;
            let id = u64::from(stream & 3) | (u64::from(stream >> 2 & 7) << 2);
            if id % 2 == 1 {
                // Server-initiated: the client cannot send on ours.
                continue;
            }
            quic.budget = (flags & 4 != 0).then_some(7);
            conn.on_data(id, bytes, flags & 1 != 0, &mut quic, &mut cx);
            if flags & 2 != 0 {
                conn.on_reset(id, &mut quic);
            }
            quic.budget = None;
            conn.on_writable(id, &mut quic);
        }
        if !quic.closed {
            conn.go_away(&mut quic);
            check_responses(&quic);
        }
    });
});
