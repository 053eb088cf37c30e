//! Writes the benchmark pack: `/index.txt` is the 12 bytes `Hello World!`;
//! `/16k`, `/64k`, `/256k` and `/1m` are bodies of those sizes, for placing
//! the `writev`/`sendfile` threshold.
//! Usage: `cargo run --release --example hello_pack -- OUT.pack`

use kiln::pack::{Encoding, HeadBlockBuilder, PackWriter, RouteIn, RouteKind, VariantIn};

fn main() -> std::io::Result<()> {
    let out = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "hello.pack".into());
    let mut w = PackWriter::create(&out)?;
    let body = w.add_body(b"Hello World!")?;
    let mut head = HeadBlockBuilder::new();
    head.line("ETag", "\"hello\"");
    head.begin_representation()
        .line("Content-Type", "text/plain; charset=utf-8");
    let head = head.finish(body.len);
    let set = w.add_variant_set(&[VariantIn {
        encoding: Encoding::Identity,
        head: &head,
        body,
    }])?;
    w.add_route(RouteIn {
        kind: RouteKind::Exact,
        key: b"/index.txt",
        status: 200,
        last_modified: 1_700_000_000,
        variants: set,
        validators: true,
    })?;
    for (key, size) in [
        ("/16k", 16 << 10),
        ("/64k", 64 << 10),
        ("/256k", 256 << 10),
        ("/1m", 1 << 20),
    ] {
        let bytes: Vec<u8> = (0..size as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let body = w.add_body(&bytes)?;
        let mut head = HeadBlockBuilder::new();
        head.begin_representation()
            .line("Content-Type", "application/octet-stream");
        let head = head.finish(body.len);
        let set = w.add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &head,
            body,
        }])?;
        w.add_route(RouteIn {
            kind: RouteKind::Exact,
            key: key.as_bytes(),
            status: 200,
            last_modified: 1_700_000_000,
            variants: set,
            validators: true,
        })?;
    }
    let stats = w.finish()?;
    println!("{}: {} bytes", out.display(), stats.file_len);
    Ok(())
}
