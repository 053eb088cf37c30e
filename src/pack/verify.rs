//! `kiln verify`: checks every checksum and every offset of a pack, and stops
//! at the first problem.

use super::format::*;
use super::reader::{Pack, PackError};

fn within(range: &std::ops::Range<usize>, off: u64, len: u64) -> bool {
    off.checked_add(len)
        .is_some_and(|end| off >= range.start as u64 && end <= range.end as u64)
}

/// Checks the whole pack; `Ok` holds the number of bytes checksummed.
pub fn verify(pack: &Pack) -> Result<u64, PackError> {
    let bytes = pack.bytes();
    let mut checked = 0u64;
    for s in SECTIONS {
        let range = pack.section_range(s);
        let (_, len, stored) = pack.section(s);
        let sum = xxhash_rust::xxh3::xxh3_64(&bytes[range]);
        if sum != stored {
            return Err(PackError(format!(
                "{} section checksum mismatch (stored {stored:016x}, computed {sum:016x})",
                s.name()
            )));
        }
        checked += len;
    }

    let blobs = pack.section_range(Section::Blobs);
    let bodies = pack.section_range(Section::Bodies);
    let variants = pack.section_range(Section::Variants);
    for (i, v) in bytes[variants].chunks_exact(VARIANT_LEN).enumerate() {
        let problem = if Encoding::from_u8(v[V_ENCODING]).is_none() {
            Some("unknown encoding")
        } else if !within(&bodies, get_u64(v, V_BODY_OFF), get_u64(v, V_BODY_LEN)) {
            Some("body outside the bodies section")
        } else if !within(
            &blobs,
            get_u64(v, V_HEAD_OFF),
            get_u32(v, V_HEAD_LEN) as u64,
        ) {
            Some("header block outside the blobs section")
        } else {
            let head_len = get_u32(v, V_HEAD_LEN) as u64;
            let (repr, length) = (get_u32(v, V_REPR_AT) as u64, get_u32(v, V_LENGTH_AT) as u64);
            let etag_end = get_u32(v, V_ETAG_AT) as u64 + get_u16(v, V_ETAG_LEN) as u64;
            (repr > length || length > head_len || etag_end > head_len)
                .then_some("header block offsets out of order")
        };
        if let Some(p) = problem {
            return Err(PackError(format!("variant {i}: {p}")));
        }
    }

    for route in pack.routes() {
        let i = route.index();
        let fail = |p: &str| Err(PackError(format!("route {i}: {p}")));
        let Some(kind) = route.kind() else {
            return fail("unknown kind");
        };
        let Some(key) = route.key() else {
            return fail("key outside the pack");
        };
        let rec_key = pack.section_range(Section::Blobs);
        let key_off = key.as_ptr() as usize - bytes.as_ptr() as usize;
        if !within(&rec_key, key_off as u64, key.len() as u64) {
            return fail("key outside the blobs section");
        }
        if route.encodings() & Encoding::Identity.bit() == 0 {
            return fail("no identity variant");
        }
        for e in ENCODINGS {
            if route.encodings() & e.bit() != 0 && route.variant(e).is_none() {
                return Err(PackError(format!(
                    "route {i}: {} variant missing or mismatched",
                    e.token()
                )));
            }
        }
        match kind {
            RouteKind::NotFound => {
                if pack.not_found().map(|r| r.index()) != Some(i) {
                    return fail("stray not-found route");
                }
            }
            kind => {
                if pack.lookup(kind, key).map(|r| r.index()) != Some(i) {
                    return Err(PackError(format!(
                        "route {i} ({}) not reachable through the index",
                        String::from_utf8_lossy(key)
                    )));
                }
            }
        }
    }

    let rules = pack.section_range(Section::Rules);
    for (i, r) in bytes[rules].chunks_exact(RULE_LEN).enumerate() {
        if !within(
            &blobs,
            get_u64(r, U_FROM_OFF),
            get_u32(r, U_FROM_LEN) as u64,
        ) || !within(&blobs, get_u64(r, U_TO_OFF), get_u32(r, U_TO_LEN) as u64)
        {
            return Err(PackError(format!(
                "rule {i}: pattern outside the blobs section"
            )));
        }
    }
    Ok(checked)
}
