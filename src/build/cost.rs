//! What compressing costs, for the progress and its time left: the
//! encoders differ by two orders of magnitude per byte (brotli 11 against
//! gzip 9), so a count of bytes races while the cheap bodies are made
//! (first, or beside a large brotli body) and crawls after, and a time
//! left read from it is far too low early. Work is counted in cost units
//! instead: a byte made at a level counts its figure below, the CPU
//! milliseconds a MiB takes at that level, so that a count of units
//! divided by 2^20 is about the CPU milliseconds the work takes, and the
//! rate so far predicts the rest whatever order the bodies come in.
//!
//! The figures, CPU milliseconds (user + sys) per MiB of the 200 MiB text
//! of bench/COMPRESSION.md, are rough and only their ratios matter:
//! `/usr/bin/time kiln build --encodings E` (release build) over its first
//! 16 MiB, less the 4 ms per MiB of `--encodings none`, at the levels the
//! presets use and a few between, on the shared 2-core machine (load 1.8
//! to 3.3 from other builds):
//!
//! | encoding, level | CPU per MiB |
//! | --- | --: |
//! | gzip 1, 6, 9 | 11, 36, 38 ms |
//! | zstd 3, 19 | 6, 324 ms |
//! | brotli 3, 5, 9 | 14, 37, 110 ms |
//! | brotli 10, 11 | 783, 1,353 ms |
//!
//! A body over `BROTLI_LARGE_BYTES` is made in pieces primed with more
//! history, which quality 10 and 11 put through their binary-tree match
//! finder: the first 48 MiB at `--brotli-quality 10` took 1,015 ms per MiB
//! (1.3 times 16 MiB's), at the default `high` 369 ms (half its bytes in
//! quality-10 pieces, half at the brotli crate's quality 9.5, 175 ms per
//! MiB in bench/COMPRESSION.md's table: the quality-10 ones 560 ms, 0.7
//! times 16 MiB's, their history being shorter). The levels not measured
//! lie between their neighbours.

use super::compress::{
    BROTLI_LARGE_BYTES, BROTLI_PIECE_BYTES, BrotliPiece, CompressOptions, GzipMode, brotli_layout,
    brotli_quality,
};
use crate::pack::Encoding;

/// CPU milliseconds per MiB, by brotli quality 0–11, a body up to
/// `BROTLI_LARGE_BYTES`.
const BROTLI_PER_MIB: [u64; 12] = [6, 9, 12, 14, 25, 37, 50, 65, 85, 110, 783, 1_353];
/// The quality-10 or 11 pieces of a larger body, in tenths of the figure
/// above: 8 MiB pieces primed with 16 MiB, and the long pieces among
/// quality-9.5 ones at `Level::High`.
const LARGE_PIECES_TENTHS: u64 = 13;
const HIGH_SLOW_PIECES_TENTHS: u64 = 7;
/// The brotli crate's quality 9.5.
const BROTLI_9_5_PER_MIB: u64 = 175;
/// By deflate level 0–9.
const DEFLATE_PER_MIB: [u64; 10] = [3, 11, 14, 18, 24, 30, 36, 37, 38, 38];
/// Zopfli, not measured here: tens of times gzip 9.
const ZOPFLI_PER_MIB: u64 = 3_000;
/// By zstd level 1–22.
const ZSTD_PER_MIB: [u64; 22] = [
    4, 5, 6, 10, 15, 22, 30, 40, 50, 60, 75, 90, 110, 130, 160, 190, 230, 280, 324, 450, 600, 800,
];

/// Cost units of one byte of a body of `len` bytes made in one stream
/// with `encoding` (brotli at the quality `len` gets).
pub fn per_byte(encoding: Encoding, len: u64, opts: &CompressOptions) -> u64 {
    match encoding {
        Encoding::Br => BROTLI_PER_MIB[(brotli_quality(len, opts) as usize).min(11)],
        Encoding::Gzip => match opts.gzip {
            GzipMode::Deflate(level) => DEFLATE_PER_MIB[(level as usize).min(9)],
            GzipMode::Zopfli => ZOPFLI_PER_MIB,
        },
        Encoding::Zstd => ZSTD_PER_MIB[(opts.zstd_level.clamp(1, 22) - 1) as usize],
        // Not compressed by a build's compression: never counted.
        Encoding::Identity | Encoding::Dcb | Encoding::Dcz => 0,
    }
}

/// Cost units of one byte of `piece` of a brotli body of `len` bytes,
/// its history's share included (see the module documentation).
pub fn brotli_piece_per_byte(piece: &BrotliPiece, len: u64, opts: &CompressOptions) -> u64 {
    if piece.fast {
        return BROTLI_9_5_PER_MIB;
    }
    let quality = brotli_quality(len, opts);
    let stream = BROTLI_PER_MIB[(quality as usize).min(11)];
    match (
        len > BROTLI_LARGE_BYTES && quality >= 10,
        opts.brotli_large_mixed,
    ) {
        (false, _) => stream,
        (true, true) => stream * HIGH_SLOW_PIECES_TENTHS / 10,
        (true, false) => stream * LARGE_PIECES_TENTHS / 10,
    }
}

/// Cost units of making the whole `encoding` of a body of `len` bytes:
/// the sum of what its progress reports (`per_byte`, or each brotli
/// piece's bytes at `brotli_piece_per_byte`).
pub fn body(encoding: Encoding, len: u64, opts: &CompressOptions) -> u64 {
    if encoding == Encoding::Br && len > BROTLI_PIECE_BYTES {
        brotli_layout(len, opts)
            .iter()
            .map(|p| (p.end - p.start) * brotli_piece_per_byte(p, len, opts))
            .sum()
    } else {
        len * per_byte(encoding, len, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::compress::Level;

    /// The order of the figures is the order of the encoders' speed: the
    /// fast preset is cheap everywhere, brotli 11 is the dearest, and a
    /// large body at `high` costs between 9.5 and 10 per byte.
    #[test]
    fn costs_follow_the_encoders_speed() {
        let high = CompressOptions::at(Level::High);
        let fast = CompressOptions::at(Level::Fast);
        let small = 1 << 20;
        let br11 = per_byte(Encoding::Br, small, &high);
        let gzip9 = per_byte(Encoding::Gzip, small, &high);
        let zstd19 = per_byte(Encoding::Zstd, small, &high);
        assert!(br11 > 20 * gzip9, "{br11} {gzip9}");
        assert!(br11 > zstd19 && zstd19 > gzip9);
        for e in [Encoding::Br, Encoding::Gzip, Encoding::Zstd] {
            assert!(
                per_byte(e, small, &fast) * 3 < per_byte(e, small, &high),
                "{e:?}"
            );
        }
        for w in BROTLI_PER_MIB.windows(2) {
            assert!(w[0] < w[1]);
        }
        for w in DEFLATE_PER_MIB.windows(2) {
            assert!(w[0] <= w[1]);
        }
        for w in ZSTD_PER_MIB.windows(2) {
            assert!(w[0] < w[1]);
        }
        let large = 200 << 20;
        let per_mib = body(Encoding::Br, large, &high) / large;
        assert!(
            BROTLI_9_5_PER_MIB < per_mib && per_mib < 2 * BROTLI_PER_MIB[10],
            "{per_mib}"
        );
        let max = CompressOptions::at(Level::Max);
        assert!(body(Encoding::Br, large, &max) > 3 * body(Encoding::Br, large, &high));
        assert_eq!(per_byte(Encoding::Identity, small, &high), 0);
    }

    /// A body's cost is what its progress adds up to: each piece's bytes
    /// at its figure for a brotli body in pieces, else its bytes at one
    /// figure.
    #[test]
    fn a_body_costs_the_sum_of_its_pieces() {
        let high = CompressOptions::at(Level::High);
        for len in [
            1000,
            BROTLI_PIECE_BYTES + 1,
            BROTLI_LARGE_BYTES,
            BROTLI_LARGE_BYTES + 1,
            (200 << 20) + 12_345,
        ] {
            let pieces: u64 = if len > BROTLI_PIECE_BYTES {
                brotli_layout(len, &high)
                    .iter()
                    .map(|p| (p.end - p.start) * brotli_piece_per_byte(p, len, &high))
                    .sum()
            } else {
                len * per_byte(Encoding::Br, len, &high)
            };
            assert_eq!(body(Encoding::Br, len, &high), pieces, "{len}");
            assert_eq!(
                body(Encoding::Gzip, len, &high),
                len * DEFLATE_PER_MIB[9],
                "{len}"
            );
        }
        // In a large body at `high`, a quality-10 piece costs a few times a
        // 9.5 one; at `max`, every piece costs more than quality 11's
        // figure (its pieces are primed with the whole window).
        let large = 200 << 20;
        let layout = brotli_layout(large, &high);
        let slow = layout.iter().find(|p| !p.fast).unwrap();
        let fast = layout.iter().find(|p| p.fast).unwrap();
        assert!(brotli_piece_per_byte(slow, large, &high) > 2 * BROTLI_9_5_PER_MIB);
        assert_eq!(
            brotli_piece_per_byte(fast, large, &high),
            BROTLI_9_5_PER_MIB
        );
        let max = CompressOptions::at(Level::Max);
        for piece in brotli_layout(large, &max) {
            assert!(brotli_piece_per_byte(&piece, large, &max) > BROTLI_PER_MIB[11]);
        }
    }
}
