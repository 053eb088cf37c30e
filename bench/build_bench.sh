#!/bin/sh
# Measures `kiln build` (wall/CPU time, pack size per encoding) and
# `Pack::open` on two corpora: the Python 3.11 HTML docs and a generated
# 100,000-tile map corpus. Results go to stdout; see bench/BUILD.md.
#
# Needs: `apt-get install python3.11-doc`, GNU time (/usr/bin/time), and the
# tile generator bench/lib/gen_tiles.py (from the main branch).
# Usage: bench/build_bench.sh [WORKDIR]   (default /tmp/kiln-build-bench)
set -eu
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/kiln-build-bench}
DOCS=/usr/share/doc/python3.11/html
GEN=${GEN_TILES:-bench/lib/gen_tiles.py}
mkdir -p "$WORK"
cargo build --release --bin kiln --example pack_open
KILN=target/release/kiln
OPEN=target/release/examples/pack_open
[ -d "$WORK/tiles" ] || python3 "$GEN" "$WORK/tiles" --count 100000 --seed 1
echo "python docs: $(du -sbL "$DOCS" | cut -f1) bytes, $(find -L "$DOCS" -type f | wc -l) files"
echo "tiles: $(du -sb "$WORK/tiles" | cut -f1) bytes on disk"
for set in none gzip zstd br br,gzip br,zstd,gzip; do
    echo "== python docs --compress $set"
    /usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" \
        "$KILN" build "$DOCS" -o "$WORK/py-$set.pack" --compress "$set"
done
echo "== python docs --compress gzip --gzip zopfli"
/usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" \
    "$KILN" build "$DOCS" -o "$WORK/py-zopfli.pack" --compress gzip --gzip zopfli
for set in none br,gzip; do
    echo "== tiles --compress $set"
    /usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" \
        "$KILN" build "$WORK/tiles" -o "$WORK/tiles-$set.pack" --compress "$set"
done
"$OPEN" "$WORK/py-br,gzip.pack" /index.html
"$OPEN" "$WORK/tiles-br,gzip.pack" /8/0/0.png
