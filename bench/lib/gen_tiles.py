#!/usr/bin/env python3
"""Generate a deterministic map-tile corpus: many small files in `z/x/y.png` layout.

The shape imitates an OpenStreetMap tile set (the kawipiko tiles scenario): most tiles
are tiny (sea, empty land: ~100 bytes), a minority carry detail and weigh a few KiB,
so the median is about 100 B and the mean about 1.3 KiB. Tiles fill zoom levels in
order (z0 has 1 tile, z1 has 4, ...), the last level partly, so the layout has the same
deep, wide directory tree as a real tile server.

Every file is a valid PNG (a 1x1 image) padded to its target size with a private
ancillary chunk of random bytes, which decoders skip. Random padding does not compress,
so no server gains from compressing tiles, as with real PNGs.

Output is a pure function of (--count, --seed): the same arguments always give
byte-identical files, so benchmark runs and pack builds can be compared.
"""

import argparse
import random
import struct
import sys
import zlib
from pathlib import Path

# PNG file signature (fixed by the PNG specification).
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Share of tiles that are "empty" ones of about 100 bytes; sets the median.
SMALL_SHARE = 0.7
# Size range of the empty tiles, in bytes.
SMALL_SIZE_RANGE = (82, 112)
# Log-normal size of the detailed tiles: median ~3 KiB, wide spread, capped at 64 KiB.
# With SMALL_SHARE this puts the mean of the whole corpus near 1.3 KiB.
LARGE_MEDIAN = 3200
LARGE_SIGMA = 0.75
LARGE_CAP = 64 * 1024


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC of type+data."""
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def minimal_png_parts(rng: random.Random) -> tuple[bytes, bytes]:
    """The head (signature + IHDR) and tail (IDAT + IEND) of a 1x1 RGB image.

    The pixel colour is random so that tiles of equal size still differ in content.
    """
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    pixel_row = b"\x00" + bytes(rng.getrandbits(8) for _ in range(3))
    idat = png_chunk(b"IDAT", zlib.compress(pixel_row, 9))
    iend = png_chunk(b"IEND", b"")
    return PNG_SIGNATURE + ihdr, idat + iend


def tile_bytes(rng: random.Random, target_size: int) -> bytes:
    """A valid PNG of exactly `target_size` bytes (or the minimum PNG if smaller)."""
    head, tail = minimal_png_parts(rng)
    # A padding chunk costs 12 bytes of framing on top of its data.
    pad_len = target_size - len(head) - len(tail) - 12
    if pad_len < 0:
        return head + tail
    padding = png_chunk(b"pdNg", rng.randbytes(pad_len))
    return head + padding + tail


def target_size(rng: random.Random) -> int:
    """Draw one tile size from the two-population distribution described above."""
    if rng.random() < SMALL_SHARE:
        return rng.randint(*SMALL_SIZE_RANGE)
    size = int(rng.lognormvariate(0.0, LARGE_SIGMA) * LARGE_MEDIAN)
    return max(SMALL_SIZE_RANGE[1], min(size, LARGE_CAP))


def tile_coordinates(count: int):
    """Yield (z, x, y) for the first `count` tiles, zoom level by zoom level."""
    produced = 0
    zoom = 0
    while produced < count:
        side = 1 << zoom
        for x in range(side):
            for y in range(side):
                if produced == count:
                    return
                yield zoom, x, y
                produced += 1
        zoom += 1


def generate(out_dir: Path, count: int, seed: int) -> tuple[int, int]:
    """Write the corpus under `out_dir`; return (file count, total bytes)."""
    rng = random.Random(seed)
    total = 0
    made_dirs = set()
    for zoom, x, y in tile_coordinates(count):
        column = out_dir / str(zoom) / str(x)
        if column not in made_dirs:
            column.mkdir(parents=True, exist_ok=True)
            made_dirs.add(column)
        data = tile_bytes(rng, target_size(rng))
        (column / f"{y}.png").write_bytes(data)
        total += len(data)
    return count, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to fill (created if missing)")
    parser.add_argument("--count", type=int, default=100_000, help="number of tiles")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    args = parser.parse_args()
    if args.count < 1:
        print("gen_tiles: error: --count must be at least 1", file=sys.stderr)
        return 2
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        files, total = generate(args.out_dir, args.count, args.seed)
    except OSError as err:
        print(f"gen_tiles: error: {args.out_dir}: {err.strerror}", file=sys.stderr)
        return 1
    print(f"gen_tiles: {files} tiles, {total} bytes, mean {total // files} B in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
