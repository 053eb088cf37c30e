//! Compression Dictionary Transport (RFC 9842): the two delta codings'
//! bodies, and the request field that names a dictionary.
//!
//! A delta body is the new version of a file compressed against an older
//! version the client already holds (the dictionary), preceded by a header
//! naming that dictionary by its SHA-256: `dcb` is `ff 44 43 42` and the
//! hash, then a brotli stream whose custom dictionary is the old bytes;
//! `dcz` is a zstd skippable frame (`5e 2a 4d 18`, length 32) holding the
//! hash, then a zstd frame whose raw-content prefix is the old bytes.
//!
//! Build time makes them (`encode`), `kiln verify` and the tests read them
//! back (`decode`); the server only parses `Available-Dictionary`
//! (`parse_available_dictionary`), without allocation.

use std::io::{self, Read};

use crate::pack::Encoding;

/// The start of a `dcb` body (RFC 9842 §4.1), before the dictionary's hash.
pub const DCB_MAGIC: [u8; 4] = [0xff, 0x44, 0x43, 0x42];
/// The start of a `dcz` body (RFC 9842 §4.2): a skippable frame of 32 bytes.
pub const DCZ_MAGIC: [u8; 8] = [0x5e, 0x2a, 0x4d, 0x18, 0x20, 0x00, 0x00, 0x00];

/// Brotli's window for `dcb`: 2^24, the largest a decoder must accept
/// without the large-window extension.
pub const DCB_LGWIN: u32 = 24;
/// The dictionary and the new file together must fit brotli's window
/// (2^24 − 16 bytes): within it, brotli's custom dictionary (the bytes
/// before the stream) and RFC 9842's raw dictionary (a separate prefix a
/// decoder attaches) name the same bytes by the same distances.
pub const DCB_MAX_TOTAL: u64 = (1 << DCB_LGWIN) - 16;
/// The largest window a `dcz` body may declare whatever the dictionary
/// (RFC 9842 §4.2: 128 MiB).
const DCZ_MAX_WINDOW: u64 = 128 << 20;
/// The window every `dcz` client accepts, however small the dictionary.
const DCZ_BASE_WINDOW: u64 = 8 << 20;

/// The SHA-256 of `bytes`: how RFC 9842 names a dictionary.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    digest.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// The header a delta body of `encoding` starts with.
fn magic(encoding: Encoding) -> Option<&'static [u8]> {
    match encoding {
        Encoding::Dcb => Some(&DCB_MAGIC),
        Encoding::Dcz => Some(&DCZ_MAGIC),
        _ => None,
    }
}

/// The dictionary hash a delta body of `encoding` names in its header, if
/// it has the header.
pub fn delta_header_dictionary(encoding: Encoding, body: &[u8]) -> Option<&[u8; 32]> {
    let magic = magic(encoding)?;
    body.strip_prefix(magic)?.get(..32)?.try_into().ok()
}

/// The brotli window log of a `dcb` body of `len` bytes against a
/// dictionary of `dictionary_len`: the smallest that reaches the whole
/// dictionary (a window of 2^lg bytes reaches back 2^lg − 16), at most
/// `DCB_LGWIN`. A larger one would make the same matches: quality 11's
/// hasher grows with the window, so the smallest is also the fastest.
pub fn dcb_window_log(dictionary_len: u64, len: u64) -> u32 {
    let needed = dictionary_len.saturating_add(len);
    (10..DCB_LGWIN)
        .find(|&lg| (1u64 << lg) - 16 >= needed)
        .unwrap_or(DCB_LGWIN)
}

/// The zstd window log of a `dcz` body of `len` bytes against a
/// dictionary of `dictionary_len`: the smallest that reaches the whole
/// dictionary, within what RFC 9842 lets a client refuse beyond (8 MiB or
/// 1.25 times the dictionary, whichever is larger, at most 128 MiB);
/// `None` when no such window holds both.
pub fn dcz_window_log(dictionary_len: u64, len: u64) -> Option<u32> {
    let limit = DCZ_BASE_WINDOW
        .max(dictionary_len.saturating_mul(5) / 4)
        .min(DCZ_MAX_WINDOW);
    let needed = dictionary_len.saturating_add(len).max(1 << 10);
    let log = 64 - (needed - 1).leading_zeros();
    ((1u64 << log) <= limit).then_some(log)
}

/// Whether a delta of `encoding` can be made for a file of `len` bytes
/// against a dictionary of `dictionary_len` bytes.
pub fn fits(encoding: Encoding, dictionary_len: u64, len: u64) -> bool {
    match encoding {
        Encoding::Dcb => dictionary_len.saturating_add(len) <= DCB_MAX_TOTAL,
        Encoding::Dcz => dcz_window_log(dictionary_len, len).is_some(),
        _ => false,
    }
}

/// The levels deltas are made at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaLevels {
    /// Brotli quality of `dcb`, 0–11.
    pub brotli_quality: u32,
    /// zstd level of `dcz`, 1–22.
    pub zstd_level: i32,
}

/// `input` compressed with `encoding` against `dictionary`, header first.
/// Deterministic: the same input, dictionary and levels give the same
/// bytes. Fails for a pair that does not `fit`.
pub fn encode(
    encoding: Encoding,
    dictionary: &[u8],
    input: &[u8],
    levels: DeltaLevels,
) -> io::Result<Vec<u8>> {
    let (dict_len, len) = (dictionary.len() as u64, input.len() as u64);
    if !fits(encoding, dict_len, len) {
        return Err(io::Error::other(format!(
            "a {} body of {len} bytes against a dictionary of {dict_len} does not fit its window",
            encoding.token()
        )));
    }
    let mut out = magic(encoding).expect("a delta encoding").to_vec();
    out.extend_from_slice(&sha256(dictionary));
    match encoding {
        Encoding::Dcb => encode_dcb(dictionary, input, levels.brotli_quality, &mut out)?,
        _ => encode_dcz(dictionary, input, levels.zstd_level, &mut out)?,
    }
    Ok(out)
}

fn encode_dcb(dictionary: &[u8], input: &[u8], quality: u32, out: &mut Vec<u8>) -> io::Result<()> {
    use brotli::enc::backward_references::UnionHasher;
    use brotli::enc::encode::{BrotliEncoderOperation, BrotliEncoderStateStruct};

    let mut state = BrotliEncoderStateStruct::new(brotli::enc::StandardAlloc::default());
    state.params = brotli::enc::BrotliEncoderParams {
        quality: quality.min(11) as i32,
        lgwin: dcb_window_log(dictionary.len() as u64, input.len() as u64) as i32,
        size_hint: input.len(),
        ..Default::default()
    };
    if !dictionary.is_empty() {
        state.set_custom_dictionary_with_optional_precomputed_hasher(
            dictionary.len(),
            dictionary,
            UnionHasher::Uninit,
            true,
        );
    }
    let mut buf = vec![0u8; 64 << 10];
    let (mut available_in, mut next_in) = (input.len(), 0usize);
    while !state.is_finished() {
        let (mut available_out, mut next_out) = (buf.len(), 0usize);
        let progressed = state.compress_stream(
            BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
            &mut available_in,
            input,
            &mut next_in,
            &mut available_out,
            &mut buf,
            &mut next_out,
            &mut None,
            &mut |_, _, _, _| (),
        );
        if !progressed {
            return Err(io::Error::other("brotli could not compress a dcb body"));
        }
        out.extend_from_slice(&buf[..next_out]);
    }
    Ok(())
}

fn encode_dcz(dictionary: &[u8], input: &[u8], level: i32, out: &mut Vec<u8>) -> io::Result<()> {
    use zstd::zstd_safe::{CCtx, CParameter};

    let zstd_err =
        |code: usize| io::Error::other(format!("zstd: {}", zstd::zstd_safe::get_error_name(code)));
    let window_log = dcz_window_log(dictionary.len() as u64, input.len() as u64)
        .ok_or_else(|| io::Error::other("a dcz body beyond its window"))?;
    let mut cctx = CCtx::create();
    cctx.set_parameter(CParameter::CompressionLevel(level))
        .map_err(zstd_err)?;
    cctx.set_parameter(CParameter::WindowLog(window_log))
        .map_err(zstd_err)?;
    cctx.set_parameter(CParameter::ContentSizeFlag(true))
        .map_err(zstd_err)?;
    cctx.set_parameter(CParameter::ChecksumFlag(false))
        .map_err(zstd_err)?;
    cctx.set_pledged_src_size(Some(input.len() as u64))
        .map_err(zstd_err)?;
    cctx.ref_prefix(dictionary).map_err(zstd_err)?;
    let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(input.len()));
    cctx.compress2(&mut frame, input).map_err(zstd_err)?;
    out.extend_from_slice(&frame);
    Ok(())
}

/// Decodes a delta body of `encoding` against `dictionary`, checking that
/// its header names that dictionary; at most `max_len` bytes.
pub fn decode(
    encoding: Encoding,
    dictionary: &[u8],
    body: &[u8],
    max_len: u64,
) -> io::Result<Vec<u8>> {
    let named = delta_header_dictionary(encoding, body)
        .ok_or_else(|| io::Error::other(format!("not a {} body", encoding.token())))?;
    if *named != sha256(dictionary) {
        return Err(io::Error::other("the body names another dictionary"));
    }
    let data = &body[magic(encoding).expect("a delta encoding").len() + 32..];
    let mut out = Vec::new();
    match encoding {
        Encoding::Dcb => {
            let mut reader =
                brotli::Decompressor::new_with_custom_dict(data, 4096, dictionary.to_vec().into())
                    .take(max_len.saturating_add(1));
            reader.read_to_end(&mut out)?;
        }
        _ => {
            let mut dctx = zstd::zstd_safe::DCtx::create();
            let zstd_err = |code: usize| {
                io::Error::other(format!("zstd: {}", zstd::zstd_safe::get_error_name(code)))
            };
            dctx.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(27))
                .map_err(zstd_err)?;
            let size = match zstd::zstd_safe::get_frame_content_size(data) {
                Ok(Some(size)) if size <= max_len => size,
                _ => {
                    return Err(io::Error::other(
                        "a dcz body without a fitting content size",
                    ));
                }
            };
            out.reserve_exact(size as usize);
            dctx.ref_prefix(dictionary).map_err(zstd_err)?;
            dctx.decompress(&mut out, data).map_err(zstd_err)?;
        }
    }
    if out.len() as u64 > max_len {
        return Err(io::Error::other("the body decodes to more than expected"));
    }
    Ok(out)
}

/// The dictionary hash an `Available-Dictionary` field value names: a
/// Structured Field byte sequence (RFC 8941 §3.3.5, `:` base64 `:`) of
/// exactly 32 bytes, optional whitespace around it; `None` for anything
/// else (parameters included: RFC 9842 defines none). No allocation.
pub fn parse_available_dictionary(value: &[u8]) -> Option<[u8; 32]> {
    let inner = value.trim_ascii().strip_prefix(b":")?.strip_suffix(b":")?;
    // 32 bytes are 44 base64 characters, the last one `=`.
    if inner.len() != 44 || inner[43] != b'=' {
        return None;
    }
    let mut out = [0u8; 32];
    let mut acc = 0u32;
    let mut bits = 0;
    let mut at = 0;
    for &c in &inner[..43] {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out[at] = (acc >> bits) as u8;
            at += 1;
            acc &= (1 << bits) - 1;
        }
    }
    // The 43rd character carries 2 bits of padding, which must be zero.
    (at == 32 && acc == 0).then_some(out)
}

/// The field value naming `hash` as `Available-Dictionary` does (for
/// tests and tools; the server only parses it).
pub fn available_dictionary_value(hash: &[u8; 32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from(":");
    for chunk in hash.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out.push(':');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEVELS: DeltaLevels = DeltaLevels {
        brotli_quality: 11,
        zstd_level: 19,
    };

    fn versions() -> (Vec<u8>, Vec<u8>) {
        let old: Vec<u8> = (0..4000)
            .flat_map(|i| format!("function f{i}(a) {{ return a * {i}; }}\n").into_bytes())
            .collect();
        let mut new = old.clone();
        new.splice(1000..1000, b"/* a change */".iter().copied());
        (old, new)
    }

    #[test]
    fn both_codings_round_trip_and_are_far_smaller_than_without_the_dictionary() {
        let (old, new) = versions();
        for encoding in [Encoding::Dcb, Encoding::Dcz] {
            let body = encode(encoding, &old, &new, LEVELS).unwrap();
            assert_eq!(
                delta_header_dictionary(encoding, &body),
                Some(&sha256(&old))
            );
            assert!(
                body.len() < 200,
                "{} is {} bytes",
                encoding.token(),
                body.len()
            );
            let back = decode(encoding, &old, &body, new.len() as u64).unwrap();
            assert_eq!(back, new);
            assert!(decode(encoding, &new, &body, new.len() as u64).is_err());
            assert_eq!(encode(encoding, &old, &new, LEVELS).unwrap(), body);
        }
    }

    #[test]
    fn the_dcz_window_stays_within_the_rfc_limits() {
        assert_eq!(dcz_window_log(0, 100), Some(10));
        assert_eq!(dcz_window_log(3000, 3000), Some(13));
        assert_eq!(dcz_window_log(4 << 20, 4 << 20), Some(23));
        assert_eq!(dcz_window_log(4 << 20, 5 << 20), None);
        assert_eq!(dcz_window_log(60 << 20, 4 << 20), Some(26));
        assert_eq!(dcz_window_log(64 << 20, 10 << 20), None);
        assert_eq!(dcz_window_log(126 << 20, 4 << 20), None);
        assert!(fits(Encoding::Dcb, 8 << 20, (8 << 20) - 16));
        assert!(!fits(Encoding::Dcb, 8 << 20, 8 << 20));
    }

    #[test]
    fn available_dictionary_is_a_byte_sequence_of_32_bytes() {
        let hash = sha256(b"dictionary");
        let value = available_dictionary_value(&hash);
        assert_eq!(parse_available_dictionary(value.as_bytes()), Some(hash));
        assert_eq!(
            parse_available_dictionary(format!("  {value} ").as_bytes()),
            Some(hash)
        );
        let inner = &value[1..value.len() - 1];
        for bad in [
            inner.to_owned(),
            format!(":{inner}"),
            format!("{value};p=1"),
            format!(":{}:", &inner[..40]),
            format!(":{}==:", &inner[..42]),
            format!(":{}*=:", &inner[..42]),
            format!("\"{inner}\""),
            String::new(),
        ] {
            assert_eq!(parse_available_dictionary(bad.as_bytes()), None, "{bad}");
        }
        // Non-zero padding bits: not the canonical encoding of 32 bytes.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut odd = value.into_bytes();
        let last = ALPHABET.iter().position(|&c| c == odd[43]).unwrap();
        odd[43] = ALPHABET[last | 1];
        assert_eq!(parse_available_dictionary(&odd), None);
    }
}
