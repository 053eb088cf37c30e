//! Measures how long `Pack::open` takes on a given pack (header check and
//! mapping only, so it should not grow with the site), plus one lookup.
//!
//! Run: `cargo run --release --example pack_open -- SITE.pack [KEY]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kiln::pack::{Pack, RouteKind};

/// Opens measured; the median is reported to smooth out scheduling noise.
const ROUNDS: usize = 201;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: pack_open SITE.pack [KEY]"))?,
    );
    let key = args.next().unwrap_or_else(|| "/".to_owned());
    let mut opens: Vec<Duration> = Vec::with_capacity(ROUNDS);
    let mut lookups: Vec<Duration> = Vec::with_capacity(ROUNDS);
    let mut found = false;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let pack = Pack::open(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        opens.push(started.elapsed());
        let started = Instant::now();
        found = std::hint::black_box(pack.lookup(RouteKind::Exact, key.as_bytes())).is_some();
        lookups.push(started.elapsed());
    }
    opens.sort();
    lookups.sort();
    let len = std::fs::metadata(&path)?.len();
    println!(
        "{}: {len} bytes; Pack::open median {:?} (min {:?}, max {:?}); lookup {key:?} ({}) median {:?}",
        path.display(),
        opens[ROUNDS / 2],
        opens[0],
        opens[ROUNDS - 1],
        if found { "found" } else { "missing" },
        lookups[ROUNDS / 2],
    );
    Ok(())
}
