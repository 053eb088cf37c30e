//! Arbitrary bytes as what a client sent on an HTTP/2 connection after the
//! preface: frames of every type, HPACK blocks, flow control, priorities,
//! against the example-site pack. The connection must never panic, must
//! consume or keep every byte, must keep its promises (`more` means output
//! comes without input, and ends), and everything it writes must be whole
//! frames a client can read: lengths within the frame size the client
//! allowed, HEADERS blocks that decode (with an HPACK decoder that keeps
//! state across blocks, as a client's does) and start with `:status`, DATA
//! only on streams the client opened.
//!
//! The input is served twice, as the connection layer would: in one read,
//! then in reads of sizes drawn from a hash of the input, so that frames
//! are cut at arbitrary places.

#![no_main]

use std::cell::RefCell;

use kiln::hpack::Decoder;
use kiln::serve::date::DateCache;
use kiln::serve::handler::Scratch;
use kiln::serve::http2::frame::{self, frame_type};
use kiln::serve::http2::{Conn, Scratch as H2Scratch};
use kiln::serve::metrics::Scheme;
use kiln::serve::net::Step;
use kiln::serve::output::{Output, Seg};
use kiln::serve::request_context::RequestContext;
use kiln::serve::server_headers::ServerHeaders;
use libfuzzer_sys::fuzz_target;

mod example_site;
mod read_sizes;
use example_site::{metrics, site};
use read_sizes::read_sizes;

/// At most this many `resume` calls after one read: each sends at least a
/// frame, and no response of the example site needs this many.
const MAX_RESUMES: usize = 10_000;

/// What a serving thread keeps from one connection to the next.
struct Thread {
    scratch: Scratch,
    h2: H2Scratch,
    date: DateCache,
    headers: ServerHeaders,
    out: Output,
}

thread_local! {
    static THREAD: RefCell<Thread> = RefCell::new({
        let mut date = DateCache::new();
        date.update(1_700_000_000);
        Thread {
            scratch: Scratch::default(),
            h2: H2Scratch::default(),
            date,
            headers: ServerHeaders::new(true, true),
            out: Output::new(64 * 1024, 256 * 1024),
        }
    });
}

/// The client's view of what the server wrote.
struct Client {
    /// Bytes of a frame cut between two outputs.
    wire: Vec<u8>,
    /// The server's blocks, decoded as a client would.
    decoder: Decoder,
    /// Scratch for Huffman strings.
    strings: Vec<u8>,
    /// The highest stream identifier the client used (a bound for what the
    /// server may answer on).
    max_stream: u32,
}

impl Client {
    /// Appends one output to the wire and checks every whole frame on it.
    fn take(&mut self, out: &Output) {
        let pack = site()
            .site(0)
            .and_then(|s| s.pack())
            .map_or(&[][..], |p| p.bytes());
        for seg in &out.segs {
            match *seg {
                Seg::Own { start, end } => self.wire.extend_from_slice(&out.bytes[start..end]),
                Seg::Mapped { off, len, .. } => self.wire.extend_from_slice(&pack[off..off + len]),
                Seg::File { off, len, .. } => {
                    self.wire
                        .extend_from_slice(&pack[off as usize..(off + len) as usize]);
                }
                // The fixture's pack is never written in place: the held
                // byte goes out as it was read.
                Seg::Checked { at, .. } => self.wire.push(out.bytes[at]),
            }
        }
        let mut at = 0;
        while self.wire.len() - at >= frame::FRAME_HEADER_LEN {
            let h = &self.wire[at..at + frame::FRAME_HEADER_LEN];
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            if self.wire.len() - at - frame::FRAME_HEADER_LEN < len {
                break;
            }
            let kind = h[3];
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            let payload = &self.wire[at + frame::FRAME_HEADER_LEN..][..len];
            assert!(len <= frame::MAX_FRAME_SIZE_LIMIT as usize);
            match kind {
                frame_type::HEADERS => {
                    assert!(stream % 2 == 1 && stream <= self.max_stream);
                    // kiln sets neither PADDED nor PRIORITY, and its blocks
                    // fit one frame unless the client shrank the frame
                    // size (then CONTINUATION follows, checked whole by
                    // h2spec, not here).
                    if h[4] & frame::flag::END_HEADERS != 0 {
                        let mut first = None;
                        self.decoder
                            .decode(payload, &mut self.strings, usize::MAX, |name, _| {
                                first.get_or_insert(name.to_vec());
                                Ok::<(), ()>(())
                            })
                            .expect("the server's HEADERS decode");
                        assert_eq!(first.as_deref(), Some(&b":status"[..]));
                    }
                }
                frame_type::DATA => assert!(stream % 2 == 1 && stream <= self.max_stream),
                frame_type::CONTINUATION
                | frame_type::RST_STREAM
                | frame_type::SETTINGS
                | frame_type::PING
                | frame_type::GOAWAY
                | frame_type::WINDOW_UPDATE => {}
                other => panic!("kiln sent a frame of type {other}"),
            }
            at += frame::FRAME_HEADER_LEN + len;
        }
        self.wire.drain(..at);
    }
}

/// The highest odd stream identifier of any HEADERS frame header in the
/// input, read loosely: an upper bound for the streams the server opens.
fn highest_stream(data: &[u8]) -> u32 {
    data.windows(frame::FRAME_HEADER_LEN)
        .filter(|h| h[3] == frame_type::HEADERS)
        .map(|h| u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff)
        .max()
        .unwrap_or(0)
}

fn serve_connection(data: &[u8], read_len: impl FnMut() -> usize) {
    THREAD.with_borrow_mut(|thread| serve_on(thread, data, read_len));
}

fn serve_on(thread: &mut Thread, data: &[u8], mut read_len: impl FnMut() -> usize) {
    let Thread {
        scratch,
        h2,
        date,
        headers,
        out,
    } = thread;
    let mut conn = Box::new(Conn::after_preface());
    let mut client = Client {
        wire: Vec::new(),
        decoder: Decoder::new(frame::DEFAULT_HEADER_TABLE_SIZE as usize),
        strings: Vec::new(),
        max_stream: highest_stream(data),
    };
    let mut unread = data;
    while !unread.is_empty() {
        let (read, rest) = unread.split_at(read_len().clamp(1, unread.len()));
        unread = rest;
        let mut ctx = RequestContext {
            sites: site(),
            scratch,
            date,
            server_headers: headers,
            log: None,
            peer: None,
            draining: false,
            http01: None,
            https_redirect: None,
            scheme: Scheme::Http,
            metrics: metrics(),
            thread: 0,
            started_us: 0,
            events: &kiln::serve::handler::live::EventStreams::default(),
        };
        out.clear();
        let mut step: Step = conn.input(read, &mut ctx, h2, out);
        client.take(out);
        let mut resumes = 0;
        while step.more() && !step.closes() {
            resumes += 1;
            assert!(resumes <= MAX_RESUMES, "`more` without end");
            out.clear();
            step = conn.resume(&mut ctx, out);
            assert!(!out.is_empty(), "`more` promised output");
            client.take(out);
        }
        if step.closes() {
            return;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    serve_connection(data, || usize::MAX);
    serve_connection(data, read_sizes(data, 64));
});
