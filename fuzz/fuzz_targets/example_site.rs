//! The example site every serving target answers from: the pack `./test`
//! fires into the pack_reader seeds, opened once per process, and the
//! metrics its responses are counted in.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use kiln::pack::Pack;
use kiln::serve::handler::{Site, Sites};
use kiln::serve::metrics::Metrics;

pub fn site() -> &'static Arc<Sites> {
    static SITE: OnceLock<Arc<Sites>> = OnceLock::new();
    SITE.get_or_init(|| {
        let pack = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/seeds/pack_reader/example-site.pack"
        );
        Sites::single(Site::from_pack(
            Pack::open(Path::new(pack)).expect("the example-site seed pack"),
        ))
    })
}

pub fn metrics() -> &'static Arc<Metrics> {
    static METRICS: OnceLock<Arc<Metrics>> = OnceLock::new();
    METRICS.get_or_init(|| Metrics::new(1, 0))
}
