//! Produces the encoded variants of a body: brotli, zstd and gzip (deflate
//! or zopfli), at maximum levels by default. Every encoder here is
//! deterministic (no timestamps, single-threaded per body), so a pack is
//! reproducible; parallelism comes from compressing many bodies at once.
//!
//! The keep rule: an encoded variant is stored only if it saves at least
//! 10 % of the identity size **and** at least 100 bytes. Below that a client
//! pays the decompression for (almost) nothing, and the pack grows for no gain.

use std::io::{self, Write};
use std::num::NonZeroU64;

use crate::pack::Encoding;

/// Smallest saving, in bytes, for an encoded variant to be kept.
pub const MIN_SAVED_BYTES: usize = 100;
/// Smallest saving, in percent of the identity size, to be kept.
pub const MIN_SAVED_PERCENT: usize = 10;

/// How gzip variants are produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GzipMode {
    /// zlib-compatible deflate at this level (0–9), via flate2.
    Deflate(u32),
    /// Zopfli: slower, a few percent smaller, still plain gzip.
    Zopfli,
}

/// Which encodings to produce and how hard to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressOptions {
    /// Encoded variants to try, in `Encoding` order; never `Identity`.
    pub encodings: Vec<Encoding>,
    /// Brotli quality, 0–11.
    pub brotli_quality: u32,
    /// Brotli window, log2 of bytes, 10–24.
    pub brotli_lgwin: u32,
    /// deflate level or zopfli, for gzip variants.
    pub gzip: GzipMode,
    /// zstd level, 1–22 (above 19 needs more memory on the client).
    pub zstd_level: i32,
}

impl Default for CompressOptions {
    /// Maximum compression of brotli and gzip, the default `br,gzip` set.
    fn default() -> Self {
        CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Gzip],
            brotli_quality: 11,
            brotli_lgwin: 24,
            gzip: GzipMode::Deflate(9),
            zstd_level: 19,
        }
    }
}

/// The keep rule (see the module documentation).
pub fn worth_keeping(identity_len: usize, encoded_len: usize) -> bool {
    let saved = identity_len.saturating_sub(encoded_len);
    saved >= MIN_SAVED_BYTES && saved * 100 >= identity_len * MIN_SAVED_PERCENT
}

/// Encodes `data` with one encoding.
pub fn encode(data: &[u8], encoding: Encoding, opts: &CompressOptions) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    match encoding {
        Encoding::Identity => out.extend_from_slice(data),
        Encoding::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: opts.brotli_quality as i32,
                lgwin: opts.brotli_lgwin as i32,
                size_hint: data.len(),
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &data[..], &mut out, &params)?;
        }
        Encoding::Zstd => out = zstd::bulk::compress(data, opts.zstd_level)?,
        Encoding::Gzip => match opts.gzip {
            GzipMode::Deflate(level) => {
                // GzBuilder writes mtime 0 and no name: the output depends on
                // the data alone.
                let mut enc = flate2::GzBuilder::new()
                    .write(&mut out, flate2::Compression::new(level.min(9)));
                enc.write_all(data)?;
                enc.finish()?;
            }
            GzipMode::Zopfli => {
                let options = zopfli::Options {
                    iteration_count: NonZeroU64::new(15).expect("non-zero"),
                    ..Default::default()
                };
                zopfli::compress(options, zopfli::Format::Gzip, data, &mut out)?;
            }
        },
    }
    Ok(out)
}

/// `data` in `encoding` if that passes the keep rule, else `None`. Data too
/// short to save `MIN_SAVED_BYTES` is not even tried.
pub fn encode_if_worth(
    data: &[u8],
    encoding: Encoding,
    opts: &CompressOptions,
) -> io::Result<Option<Vec<u8>>> {
    if data.len() < MIN_SAVED_BYTES || encoding == Encoding::Identity {
        return Ok(None);
    }
    let encoded = encode(data, encoding, opts)?;
    Ok(worth_keeping(data.len(), encoded.len()).then_some(encoded))
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
}
