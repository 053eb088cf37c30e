#!/bin/sh
# Regenerates bench/BUILD.md: `kiln build` (clean and incremental, directory and
# archives, both compression levels), `kiln serve DIR --watch` (start and
# reload), `Pack::open`, with `tar | gzip -9` as the baseline, on the Python
# 3.11 HTML docs and a generated 100,000-tile corpus; see bench/lib/build_bench.py.
#
# Needs: `apt-get install python3.11-doc`, GNU time (/usr/bin/time), python3;
# perf (optional) profiles a missed goal.
# Usage: bench/build_bench.sh [WORKDIR]   (default /tmp/kiln-build-bench; the
# tiles are generated there once, the docs copied there on every run)
set -eu
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/kiln-build-bench}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release --locked --bin kiln --example pack_open
exec python3 bench/lib/build_bench.py --kiln "$TARGET/release/kiln" \
    --pack-open "$TARGET/release/examples/pack_open" --work "$WORK" --out bench/BUILD.md
