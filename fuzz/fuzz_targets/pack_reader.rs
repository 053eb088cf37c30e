//! Arbitrary bytes as a pack: opening, verifying, looking up and walking every
//! route and variant, and the provenance records a build reuses, must never
//! panic, whatever the bytes.

#![no_main]

use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::path::Path;

use kiln::pack::{Encoding, Pack, RouteKind};
use libfuzzer_sys::fuzz_target;

fn memfd_with(data: &[u8]) -> File {
    // SAFETY: memfd_create with a valid C string; the fd is owned by the File.
    let fd = unsafe { libc::memfd_create(c"pack".as_ptr(), 0) };
    assert!(fd >= 0, "memfd_create failed");
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(data).expect("write to memfd");
    file
}

fuzz_target!(|data: &[u8]| {
    let Ok(pack) = Pack::from_file(memfd_with(data), Path::new("fuzz.pack")) else {
        return;
    };
    let _ = kiln::pack::verify::verify(&pack);
    // Every delta whose dictionary the pack itself holds is decoded.
    let _ = kiln::pack::verify::verify_deltas(&pack, &[]);
    for key in [&b"/"[..], b"/index.html", b"/a/"] {
        for kind in [RouteKind::Exact, RouteKind::Wildcard] {
            if let Some(r) = pack.lookup(kind, key) {
                let _ = r.variant(Encoding::Gzip).map(|v| v.body.len());
            }
        }
    }
    for route in pack.routes().take(64) {
        let _ = (
            route.key(),
            route.status(),
            route.kind(),
            route.last_modified(),
        );
        for v in route.variants().chain(route.deltas()) {
            let _ = (
                v.dictionary,
                &v.head[..v.repr_at],
                &v.head[..v.length_at],
                &v.hpack[..v.hpack_repr_at],
                &v.hpack[..v.hpack_length_at],
                v.etag,
                v.body.len(),
            );
        }
    }
    let _ = pack.not_found().map(|r| r.variants().count());
    let _ = pack.rules().take(64).count();
    let mut last = None;
    for p in pack.provenance_records().take(64) {
        let _ = (
            p.encoding,
            p.settings,
            p.body.map(|(off, len, _)| (off, len)),
        );
        last = Some(*p.source_hash);
    }
    let hash = last.unwrap_or([0; 32]);
    for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
        let _ = pack.provenance(&hash, encoding).map(|p| p.settings);
    }
});
