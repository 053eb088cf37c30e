//! Arbitrary bytes as what a client sent on one connection: parsing, the
//! request bodies dropped along the way (chunked ones decoded), the
//! handler's lookups against a real pack (the example site, with rules,
//! wildcards and compressed variants) and response assembly must never
//! panic, every batch must either consume input or wait for more, and what
//! a connection keeps between reads must stay bounded.
//!
//! The input is served twice, as the connection layer would serve it: in
//! one read, then in reads of sizes drawn from a hash of the input, so that
//! heads and bodies are cut at arbitrary places and the body state carries
//! from batch to batch.

#![no_main]

use std::cell::RefCell;

use kiln::serve::date::DateCache;
use kiln::serve::handler::Scratch;
use kiln::serve::http1::parse::MAX_HEAD;
use kiln::serve::http1::{Discard, MAX_BATCH, Park, serve_batch};
use kiln::serve::metrics::Scheme;
use kiln::serve::output::Output;
use kiln::serve::request_context::RequestContext;
use kiln::serve::server_headers::ServerHeaders;
use libfuzzer_sys::fuzz_target;

mod example_site;
mod read_sizes;
use example_site::{metrics, site};
use read_sizes::read_sizes;

/// What a serving thread keeps from one connection to the next, reused
/// across inputs as the thread reuses it across connections (and because
/// making it anew for each input was most of the time per execution).
struct Thread {
    scratch: Scratch,
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
            date,
            headers: ServerHeaders::new(true, true),
            out: Output::new(64 * 1024, 256 * 1024),
        }
    });
}

/// Serves `data` arriving in reads of `read_len()` bytes, keeping between
/// reads what a connection keeps: the bytes not consumed yet and the
/// request body still being dropped.
fn serve_connection(data: &[u8], read_len: impl FnMut() -> usize) {
    THREAD.with_borrow_mut(|thread| serve_on(thread, data, read_len));
}

fn serve_on(thread: &mut Thread, data: &[u8], mut read_len: impl FnMut() -> usize) {
    let Thread {
        scratch,
        date,
        headers,
        out,
    } = thread;
    let mut discard = Discard::default();
    let mut kept: Vec<u8> = Vec::new();
    let mut unread = data;
    while !unread.is_empty() {
        let (read, rest) = unread.split_at(read_len().clamp(1, unread.len()));
        unread = rest;
        kept.extend_from_slice(read);
        loop {
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
            let batch = serve_batch(&kept, &mut discard, &mut ctx, out, Park::New);
            assert!(batch.consumed <= kept.len());
            assert!(batch.responses <= MAX_BATCH);
            if batch.close {
                return;
            }
            // A body that goes on past the buffer took all of it.
            assert!(discard.is_done() || batch.consumed == kept.len());
            kept.drain(..batch.consumed);
            if !batch.more {
                break;
            }
        }
        // Only an incomplete head within limits is waited for.
        assert!(kept.len() <= MAX_HEAD);
    }
}

fuzz_target!(|data: &[u8]| {
    serve_connection(data, || usize::MAX);
    serve_connection(data, read_sizes(data, 128));
});
