//! Arbitrary bytes as what a client sent on one connection: parsing, the
//! handler's lookups against a real pack (the example site, with rules,
//! wildcards and compressed variants) and response assembly must never
//! panic, and every batch must either consume input or wait for more.

#![no_main]

use std::path::Path;
use std::sync::{Arc, OnceLock};

use kiln::pack::Pack;
use kiln::serve::date::DateCache;
use kiln::serve::handler::{Scratch, Site};
use kiln::serve::http1::{Context, serve_batch};
use kiln::serve::output::Output;
use kiln::serve::server_headers::ServerHeaders;
use libfuzzer_sys::fuzz_target;

fn site() -> &'static Arc<Site> {
    static SITE: OnceLock<Arc<Site>> = OnceLock::new();
    SITE.get_or_init(|| {
        let pack = concat!(env!("CARGO_MANIFEST_DIR"), "/seeds/pack_reader/example-site.pack");
        Site::from_pack(Pack::open(Path::new(pack)).expect("the example-site seed pack"))
    })
}

fuzz_target!(|data: &[u8]| {
    let mut scratch = Scratch::default();
    let mut date = DateCache::new();
    date.update(1_700_000_000);
    let headers = ServerHeaders::new(true, true);
    let mut out = Output::new(64 * 1024, 256 * 1024);
    let mut rest = data;
    while !rest.is_empty() {
        let mut ctx = Context {
            site: site(),
            scratch: &mut scratch,
            date: &date,
            server_headers: &headers,
            log: None,
            peer: None,
            draining: false,
            https_redirect: None,
        };
        out.clear();
        let batch = serve_batch(rest, &mut ctx, &mut out);
        assert!(batch.consumed <= rest.len());
        if batch.consumed == 0 || batch.close {
            break;
        }
        rest = &rest[batch.consumed..];
    }
});
