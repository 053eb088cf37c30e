//! The example site every serving target answers from: the pack `./test`
//! fires into the pack_reader seeds, opened once per process.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use kiln::pack::Pack;
use kiln::serve::handler::Site;

pub fn site() -> &'static Arc<Site> {
    static SITE: OnceLock<Arc<Site>> = OnceLock::new();
    SITE.get_or_init(|| {
        let pack = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/seeds/pack_reader/example-site.pack"
        );
        Site::from_pack(Pack::open(Path::new(pack)).expect("the example-site seed pack"))
    })
}
