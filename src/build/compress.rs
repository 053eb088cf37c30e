//! Produces the encoded variants of a body: brotli, zstd and gzip (deflate
//! or zopfli), at maximum levels by default (`Level::Max`), or at levels a
//! hundred times faster for previews (`Level::Fast`). Every encoder here is
//! deterministic (no timestamps, single-threaded per body) and streams: it
//! reads its input in pieces and its output does not depend on how the
//! input is cut, so a body held in memory and one too large to hold give the
//! same bytes, and a pack is reproducible; parallelism comes from
//! compressing many bodies at once.
//!
//! The keep rule: an encoded variant is stored only if it saves at least
//! 10 % of the identity size **and** at least 100 bytes. Below that a client
//! pays the decompression for (almost) nothing, and the pack grows for no gain.
//!
//! `settings_id` fingerprints what decides an encoding's output (encoder,
//! settings, keep rule); a pack records it with each encoded body, and the
//! next build reuses the body only when its fingerprint is the same.

use std::io::{self, Read, Write};
use std::num::NonZeroU64;

use clap::ValueEnum;

use crate::pack::Encoding;

/// Smallest saving, in bytes, for an encoded variant to be kept.
pub const MIN_SAVED_BYTES: usize = 100;
/// Smallest saving, in percent of the identity size, to be kept.
pub const MIN_SAVED_PERCENT: usize = 10;

/// Bumped whenever an encoder dependency (brotli, zstd, flate2 and its
/// back end, zopfli) or the way kiln drives it changes its output, so that
/// no build reuses a body the current encoders would not make. The test
/// `encoder_outputs_are_pinned` fails when that happens.
pub const ENCODER_EPOCH: u32 = 1;

/// Smallest and largest brotli window, log2 of bytes.
const BROTLI_MIN_LGWIN: u32 = 10;
const BROTLI_MAX_LGWIN: u32 = 24;

/// How gzip variants are produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GzipMode {
    /// zlib-compatible deflate at this level (0–9), via flate2.
    Deflate(u32),
    /// Zopfli: slower, a few percent smaller, still plain gzip.
    Zopfli,
}

/// A preset of compression levels (`--compression`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Level {
    /// The smallest bodies: brotli 11, zstd 19, gzip 9.
    Max,
    /// Fast enough to fire a site in about a second: brotli 3, zstd 3,
    /// gzip 1.
    Fast,
}

/// Which encodings to produce and how hard to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressOptions {
    /// Encoded variants to try, in `Encoding` order; never `Identity`.
    pub encodings: Vec<Encoding>,
    /// Brotli quality, 0–11.
    pub brotli_quality: u32,
    /// Largest brotli window, log2 of bytes, 10–24; a body gets the
    /// smallest window that holds it, up to this (as the brotli tool does).
    pub brotli_lgwin: u32,
    /// deflate level or zopfli, for gzip variants.
    pub gzip: GzipMode,
    /// zstd level, 1–22 (above 19 needs more memory on the client).
    pub zstd_level: i32,
}

impl Default for CompressOptions {
    /// Maximum compression of brotli and gzip, the default `br,gzip` set.
    fn default() -> Self {
        CompressOptions::at(Level::Max)
    }
}

impl CompressOptions {
    /// The levels of `level`, for the default `br,gzip` set.
    pub fn at(level: Level) -> Self {
        let (brotli_quality, gzip_level, zstd_level) = match level {
            Level::Max => (11, 9, 19),
            Level::Fast => (3, 1, 3),
        };
        CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Gzip],
            brotli_quality,
            brotli_lgwin: BROTLI_MAX_LGWIN,
            gzip: GzipMode::Deflate(gzip_level),
            zstd_level,
        }
    }
}

/// The keep rule (see the module documentation).
pub fn worth_keeping(identity_len: u64, encoded_len: u64) -> bool {
    let saved = identity_len.saturating_sub(encoded_len);
    saved >= MIN_SAVED_BYTES as u64 && saved * 100 >= identity_len * MIN_SAVED_PERCENT as u64
}

/// True when a body of `len` bytes is worth trying to compress at all: a
/// shorter one cannot save `MIN_SAVED_BYTES`.
pub fn worth_trying(len: u64) -> bool {
    len >= MIN_SAVED_BYTES as u64
}

/// The brotli window for a body of `len` bytes: the smallest that holds
/// it, within 10 and `max`.
fn brotli_window(len: u64, max: u32) -> u32 {
    let max = max.clamp(BROTLI_MIN_LGWIN, BROTLI_MAX_LGWIN);
    (BROTLI_MIN_LGWIN..max)
        // A window of 2^lg bytes reaches back 2^lg − 16 bytes.
        .find(|&lg| (1u64 << lg) - 16 >= len)
        .unwrap_or(max)
}

/// Fingerprint of everything that decides the output of `encoding` for a
/// given input: the encoder and its version (`ENCODER_EPOCH`), its
/// settings, the keep rule. Two builds with the same fingerprint make the
/// same bytes of the same source.
pub fn settings_id(encoding: Encoding, opts: &CompressOptions) -> u64 {
    let settings = match encoding {
        Encoding::Identity => "identity".to_owned(),
        Encoding::Br => format!(
            "br quality={} max-lgwin={}",
            opts.brotli_quality,
            opts.brotli_lgwin.clamp(BROTLI_MIN_LGWIN, BROTLI_MAX_LGWIN)
        ),
        Encoding::Zstd => format!("zstd level={}", opts.zstd_level),
        Encoding::Gzip => match opts.gzip {
            GzipMode::Deflate(level) => format!("gzip deflate level={}", level.min(9)),
            GzipMode::Zopfli => "gzip zopfli iterations=15".to_owned(),
        },
    };
    let text = format!(
        "kiln encoders {ENCODER_EPOCH}; {settings}; keep if saves {MIN_SAVED_BYTES} bytes and {MIN_SAVED_PERCENT}%"
    );
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// Encodes the `len` bytes `input` yields, read in pieces, into `out`.
pub fn encode_to(
    input: &mut dyn Read,
    len: u64,
    encoding: Encoding,
    opts: &CompressOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    match encoding {
        Encoding::Identity => {
            io::copy(input, out)?;
        }
        Encoding::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: opts.brotli_quality as i32,
                lgwin: brotli_window(len, opts.brotli_lgwin) as i32,
                size_hint: usize::try_from(len).unwrap_or(usize::MAX),
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &mut *input, &mut &mut *out, &params)?;
        }
        Encoding::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(out, opts.zstd_level)?;
            // The size in the frame header, and parameters fitted to it, as
            // a one-shot compression would choose them.
            enc.set_pledged_src_size(Some(len))?;
            enc.include_contentsize(true)?;
            io::copy(input, &mut enc)?;
            enc.finish()?;
        }
        Encoding::Gzip => match opts.gzip {
            GzipMode::Deflate(level) => {
                // GzBuilder writes mtime 0 and no name: the output depends on
                // the data alone.
                let mut enc =
                    flate2::GzBuilder::new().write(out, flate2::Compression::new(level.min(9)));
                io::copy(input, &mut enc)?;
                enc.finish()?;
            }
            GzipMode::Zopfli => {
                let options = zopfli::Options {
                    iteration_count: NonZeroU64::new(15).expect("non-zero"),
                    ..Default::default()
                };
                zopfli::compress(options, zopfli::Format::Gzip, input, out)?;
            }
        },
    }
    Ok(())
}

/// Encodes `data` with one encoding.
pub fn encode(data: &[u8], encoding: Encoding, opts: &CompressOptions) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    encode_to(&mut &data[..], data.len() as u64, encoding, opts, &mut out)?;
    Ok(out)
}

/// `data` in `encoding` if that passes the keep rule, else `None`. Data too
/// short to save `MIN_SAVED_BYTES` is not even tried.
pub fn encode_if_worth(
    data: &[u8],
    encoding: Encoding,
    opts: &CompressOptions,
) -> io::Result<Option<Vec<u8>>> {
    if !worth_trying(data.len() as u64) || encoding == Encoding::Identity {
        return Ok(None);
    }
    let encoded = encode(data, encoding, opts)?;
    Ok(worth_keeping(data.len() as u64, encoded.len() as u64).then_some(encoded))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn keep_rule_needs_ten_percent_and_a_hundred_bytes() {
        assert!(worth_keeping(1000, 900));
        assert!(!worth_keeping(1000, 901));
        assert!(!worth_keeping(500, 401), "saves 99 bytes");
        assert!(worth_keeping(500, 400));
        assert!(!worth_keeping(100_000, 99_000), "saves 1 %");
        assert!(!worth_keeping(100, 120));
    }

    fn decode(encoding: Encoding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match encoding {
            Encoding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Encoding::Zstd => out = zstd::decode_all(data).unwrap(),
            Encoding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Encoding::Identity => out = data.to_vec(),
        }
        out
    }

    #[test]
    fn every_encoding_round_trips_and_is_deterministic() {
        let text = "<p>kiln fires a site into one pack</p>\n".repeat(200);
        for gzip in [GzipMode::Deflate(9), GzipMode::Zopfli] {
            let opts = CompressOptions {
                encodings: vec![Encoding::Gzip, Encoding::Br, Encoding::Zstd],
                gzip,
                ..Default::default()
            };
            for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
                let first = encode_if_worth(text.as_bytes(), encoding, &opts)
                    .unwrap()
                    .expect("repetitive text is worth compressing");
                assert_eq!(decode(encoding, &first), text.as_bytes());
                let again = encode_if_worth(text.as_bytes(), encoding, &opts).unwrap();
                assert_eq!(again.as_deref(), Some(&first[..]), "deterministic");
            }
        }
    }

    #[test]
    fn incompressible_and_tiny_data_keep_no_variant() {
        let opts = CompressOptions::default();
        let short = b"short text, short text, short text, short text";
        for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
            assert_eq!(encode_if_worth(short, encoding, &opts).unwrap(), None);
        }
        let mut noise = Vec::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..4096 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push(x as u8);
        }
        for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
            assert_eq!(encode_if_worth(&noise, encoding, &opts).unwrap(), None);
        }
    }

    /// Yields its data in pieces of varying, odd sizes.
    struct Pieces<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.step = self.step * 7 % 4093 + 1;
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// Text that compresses, long enough for several blocks of each encoder.
    fn sample_text() -> Vec<u8> {
        (0..10_000)
            .map(|i| {
                format!(
                    "<li id=\"n{i}\">item {} of the list</li>\n",
                    i * 7919 % 1000
                )
            })
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn output_does_not_depend_on_how_the_input_is_cut() {
        let text = sample_text();
        for gzip in [GzipMode::Deflate(9), GzipMode::Deflate(1), GzipMode::Zopfli] {
            let opts = CompressOptions {
                gzip,
                brotli_quality: 5,
                ..CompressOptions::default()
            };
            let input = if gzip == GzipMode::Zopfli {
                &text[..50_000]
            } else {
                &text[..]
            };
            for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
                let whole = encode(input, encoding, &opts).unwrap();
                let mut pieces = Vec::new();
                let mut reader = Pieces {
                    data: input,
                    step: 1,
                };
                encode_to(
                    &mut reader,
                    input.len() as u64,
                    encoding,
                    &opts,
                    &mut pieces,
                )
                .unwrap();
                assert!(
                    whole == pieces,
                    "{encoding:?} {gzip:?} depends on the pieces"
                );
                assert_eq!(decode(encoding, &whole), input);
            }
        }
    }

    /// The fingerprints below pin what this version of the encoders makes
    /// of a sample: when one fails, an encoder's output changed (a
    /// dependency update): bump `ENCODER_EPOCH` so that no build reuses
    /// bodies the new encoders would not make, then update the fingerprint.
    #[test]
    fn encoder_outputs_are_pinned() {
        let text = sample_text();
        let mut found = Vec::new();
        for level in [Level::Max, Level::Fast] {
            let opts = CompressOptions::at(level);
            for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
                let input = &text[..60_000];
                found.push(xxhash_rust::xxh3::xxh3_64(
                    &encode(input, encoding, &opts).unwrap(),
                ));
            }
        }
        let zopfli = CompressOptions {
            gzip: GzipMode::Zopfli,
            ..CompressOptions::default()
        };
        found.push(xxhash_rust::xxh3::xxh3_64(
            &encode(&text[..20_000], Encoding::Gzip, &zopfli).unwrap(),
        ));
        let pinned: [u64; 7] = [
            3433015516318168187,
            16829636905182446001,
            8762734602420972752,
            2333225495293503579,
            4919763787906748158,
            11728379866317396790,
            6095646125570836955,
        ];
        assert_eq!(found, pinned, "encoder output changed: bump ENCODER_EPOCH");
    }

    #[test]
    fn settings_ids_differ_by_encoder_and_level() {
        let max = CompressOptions::at(Level::Max);
        let fast = CompressOptions::at(Level::Fast);
        let mut ids = Vec::new();
        for opts in [&max, &fast] {
            for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
                ids.push(settings_id(encoding, opts));
            }
        }
        ids.push(settings_id(
            Encoding::Gzip,
            &CompressOptions {
                gzip: GzipMode::Zopfli,
                ..max.clone()
            },
        ));
        let mut distinct = ids.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), ids.len());
        assert_eq!(
            settings_id(Encoding::Br, &max),
            settings_id(Encoding::Br, &max.clone())
        );
    }

    #[test]
    fn a_body_gets_the_smallest_brotli_window_that_holds_it() {
        assert_eq!(brotli_window(0, 24), 10);
        assert_eq!(brotli_window(1008, 24), 10);
        assert_eq!(brotli_window(1009, 24), 11);
        assert_eq!(brotli_window(1 << 20, 24), 21);
        assert_eq!(brotli_window(1 << 30, 24), 24);
        assert_eq!(brotli_window(1 << 30, 22), 22);
    }
}
