//! `kiln verify`: checks every checksum and every offset of a pack, that
//! each variant's HPACK block and QPACK field lines carry the fields of its
//! HTTP/1 block (the HPACK block also as a connection sends it with the
//! shared fields inserted, then indexed), that
//! the provenance records are in order and name bodies with their hashes,
//! and stops at the first problem.

use super::format::*;
use super::reader::{Pack, PackError};
use crate::{hpack, qpack};

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
    let mut scratch = Vec::new();
    let mut shared = pack.shared_fields().map(SharedCheck::new);
    for (i, v) in bytes[variants].chunks_exact(VARIANT_LEN).enumerate() {
        let span_count = get_u32(v, V_SPANS_COUNT) as u64;
        let problem = if Encoding::from_u8(v[V_ENCODING]).is_none() {
            Some("unknown encoding")
        } else if v[V_SPANS_COUNT + 4..V_QPACK_OFF].iter().any(|&b| b != 0) {
            Some("reserved bytes are not zero")
        } else if !within(&bodies, get_u64(v, V_BODY_OFF), get_u64(v, V_BODY_LEN)) {
            Some("body outside the bodies section")
        } else if !within(
            &blobs,
            get_u64(v, V_HEAD_OFF),
            get_u32(v, V_HEAD_LEN) as u64,
        ) {
            Some("header block outside the blobs section")
        } else if !within(
            &blobs,
            get_u64(v, V_HPACK_OFF),
            get_u32(v, V_HPACK_LEN) as u64,
        ) {
            Some("HPACK block outside the blobs section")
        } else if !within(
            &blobs,
            get_u64(v, V_QPACK_OFF),
            get_u32(v, V_QPACK_LEN) as u64,
        ) {
            Some("QPACK field lines outside the blobs section")
        } else if span_count > 0
            && !within(
                &blobs,
                get_u64(v, V_SPANS_OFF),
                span_count * hpack::SPAN_LEN as u64,
            )
        {
            Some("shared-field spans outside the blobs section")
        } else if span_count > 0 && shared.is_none() {
            Some("shared-field spans in a pack without shared fields")
        } else {
            let head_len = get_u32(v, V_HEAD_LEN) as u64;
            let (repr, length) = (get_u32(v, V_REPR_AT) as u64, get_u32(v, V_LENGTH_AT) as u64);
            let etag_end = get_u32(v, V_ETAG_AT) as u64 + get_u16(v, V_ETAG_LEN) as u64;
            let hpack_len = get_u32(v, V_HPACK_LEN);
            let (hpack_repr, hpack_length) =
                (get_u32(v, V_HPACK_REPR_AT), get_u32(v, V_HPACK_LENGTH_AT));
            let qpack_len = get_u32(v, V_QPACK_LEN);
            let (qpack_repr, qpack_length) =
                (get_u16(v, V_QPACK_REPR_AT), get_u16(v, V_QPACK_LENGTH_AT));
            if repr > length || length > head_len || etag_end > head_len {
                Some("header block offsets out of order")
            } else if hpack_repr > hpack_length || hpack_length > hpack_len {
                Some("HPACK block offsets out of order")
            } else if qpack_repr > qpack_length || u32::from(qpack_length) > qpack_len {
                Some("QPACK field lines offsets out of order")
            } else {
                None
            }
        };
        if let Some(p) = problem {
            return Err(PackError(format!("variant {i}: {p}")));
        }
        let checked = same_fields(v, bytes, &mut scratch).and_then(|()| match &mut shared {
            Some(shared) if span_count > 0 => shared.check(v, bytes, &mut scratch),
            _ => Ok(()),
        });
        if let Err(p) = checked {
            return Err(PackError(format!(
                "{}: {p}",
                variant_owner(pack, bytes, i as u64)
            )));
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
        if let Some(p) = delta_problem(&route) {
            return fail(&p);
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
    verify_provenance(pack, bytes)?;
    Ok(checked)
}

/// What `verify_deltas` found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaCheck {
    /// Delta variants decoded against their dictionary, each to its
    /// route's identity body.
    pub decoded: u64,
    /// Delta variants whose dictionary neither the pack nor `earlier`
    /// holds: checked by their header only (`verify`).
    pub without_dictionary: u64,
}

/// Decodes every delta variant of `pack` whose dictionary (an identity
/// body of `pack` or of one of the `earlier` packs, by SHA-256) is at
/// hand, and checks that it gives its route's identity body.
pub fn verify_deltas(pack: &Pack, earlier: &[&Pack]) -> Result<DeltaCheck, PackError> {
    use std::collections::{HashMap, HashSet};
    let mut dictionaries: HashMap<[u8; 32], &[u8]> = HashMap::new();
    for p in std::iter::once(pack).chain(earlier.iter().copied()) {
        let mut seen = HashSet::new();
        for route in p.routes() {
            if let Some(v) = route.variant(Encoding::Identity)
                && seen.insert(v.body_off)
            {
                dictionaries.insert(crate::dictionary::sha256(v.body), v.body);
            }
        }
    }
    let mut check = DeltaCheck::default();
    for route in pack.routes() {
        let Some(identity) = route.variant(Encoding::Identity) else {
            continue;
        };
        for v in route.deltas() {
            let Some(dictionary) = dictionaries.get(v.dictionary) else {
                check.without_dictionary += 1;
                continue;
            };
            let decoded = crate::dictionary::decode(
                v.encoding,
                dictionary,
                v.body,
                identity.body.len() as u64,
            );
            if decoded.as_deref().ok() != Some(identity.body) {
                return Err(PackError(format!(
                    "route {} ({}): its {} variant does not decode to its identity body",
                    route.index(),
                    String::from_utf8_lossy(route.key().unwrap_or(b"?")),
                    v.encoding.token()
                )));
            }
            check.decoded += 1;
        }
    }
    Ok(check)
}

/// What is wrong with a route's delta variants, if anything: each a
/// `dcb` or `dcz` whose body starts with the RFC 9842 header naming its
/// dictionary, in (dictionary, encoding) order, each pair once; and no
/// plain variant naming a dictionary.
fn delta_problem(route: &crate::pack::Route<'_>) -> Option<String> {
    if route.variants().any(|v| v.dictionary != &[0; 32]) {
        return Some("a plain variant names a dictionary".into());
    }
    let mut previous: Option<([u8; 32], Encoding)> = None;
    for i in 0..route.delta_count() {
        let Some(v) = route.delta(i) else {
            return Some(format!("delta variant {i} missing or not a delta"));
        };
        let key = (*v.dictionary, v.encoding);
        if previous.is_some_and(|p| p >= key) {
            return Some("delta variants out of order or repeated".into());
        }
        previous = Some(key);
        if crate::dictionary::delta_header_dictionary(v.encoding, v.body) != Some(v.dictionary) {
            return Some(format!(
                "{} variant: its body does not start with the header naming its dictionary",
                v.encoding.token()
            ));
        }
    }
    None
}

/// Checks the provenance records: sorted by (source hash, encoding), each
/// pair once, a known encoding other than identity, reserved bytes zero; a
/// kept body inside the bodies section with the BLAKE3 the record gives, a
/// record of a body not kept all zero in its body fields.
fn verify_provenance(pack: &Pack, bytes: &[u8]) -> Result<(), PackError> {
    let bodies = pack.section_range(Section::Bodies);
    let records = &bytes[pack.section_range(Section::Provenance)];
    let mut previous: Option<(&[u8], u8)> = None;
    for (i, r) in records.chunks_exact(PROVENANCE_LEN).enumerate() {
        let fail = |p: &str| Err(PackError(format!("provenance record {i}: {p}")));
        let key = (&r[P_SOURCE_HASH..P_SOURCE_HASH + 32], r[P_ENCODING]);
        if previous.is_some_and(|p| p >= key) {
            return fail("out of order or repeated");
        }
        previous = Some(key);
        match Encoding::from_u8(r[P_ENCODING]) {
            None => return fail("unknown encoding"),
            Some(Encoding::Identity) => return fail("identity is never encoded"),
            Some(_) => {}
        }
        if r[P_KEPT + 1..].iter().any(|&b| b != 0) {
            return fail("reserved bytes are not zero");
        }
        let (off, len) = (get_u64(r, P_BODY_OFF), get_u64(r, P_BODY_LEN));
        let body_hash = &r[P_BODY_HASH..P_BODY_HASH + 32];
        match r[P_KEPT] {
            0 if off != 0 || len != 0 || body_hash.iter().any(|&b| b != 0) => {
                return fail("a body that was not kept has a body");
            }
            0 => {}
            1 if !within(&bodies, off, len) => return fail("body outside the bodies section"),
            1 => {
                let body = &bytes[off as usize..(off + len) as usize];
                if blake3::hash(body).as_bytes() != body_hash {
                    return fail("the body does not match its hash");
                }
            }
            _ => return fail("unknown kept flag"),
        }
    }
    Ok(())
}

/// Checks that the HPACK block and the QPACK field lines of the variant
/// record `v` (its offsets already checked) carry exactly the fields of its
/// HTTP/1 block, in order, names lowercased, connection-specific fields
/// left out, and that all three are cut at the same fields: each of the
/// three parts (before `repr_at`, up to `length_at`, the rest) is decoded
/// on its own and compared with the same part of the lines. A part cut
/// inside a field fails to decode or to match.
///
/// Each HPACK part is decoded by a fresh decoder whose dynamic table holds
/// nothing (`SETTINGS_HEADER_TABLE_SIZE` 0), so a block that refers to the
/// dynamic table or resizes it fails: what it means would depend on the
/// connection. (A block could still insert an entry that nothing refers
/// to; a client would only store it. kiln's encoder inserts nothing.)
/// Each QPACK part is decoded as a field section of its own, after
/// `qpack::FIELD_SECTION_PREFIX`, by kiln's decoder, which has no dynamic
/// table at all.
fn same_fields(v: &[u8], bytes: &[u8], scratch: &mut Vec<u8>) -> Result<(), String> {
    let at = |off: usize, len: u32| {
        let start = get_u64(v, off) as usize;
        &bytes[start..start + len as usize]
    };
    let head = at(V_HEAD_OFF, get_u32(v, V_HEAD_LEN));
    let block = at(V_HPACK_OFF, get_u32(v, V_HPACK_LEN));
    let qpack_lines = at(V_QPACK_OFF, get_u32(v, V_QPACK_LEN));
    let cut = |b: &[u8], repr: usize, length: usize| [0..repr, repr..length, length..b.len()];
    let lines = cut(
        head,
        get_u32(v, V_REPR_AT) as usize,
        get_u32(v, V_LENGTH_AT) as usize,
    );
    let parts = cut(
        block,
        get_u32(v, V_HPACK_REPR_AT) as usize,
        get_u32(v, V_HPACK_LENGTH_AT) as usize,
    );
    let qpack_parts = cut(
        qpack_lines,
        get_u16(v, V_QPACK_REPR_AT) as usize,
        get_u16(v, V_QPACK_LENGTH_AT) as usize,
    );
    let mut section = Vec::new();
    for (part, (lines, (encoded, qpack_encoded))) in
        ["validators", "representation", "content-length"]
            .iter()
            .zip(lines.into_iter().zip(parts.into_iter().zip(qpack_parts)))
    {
        let lines = &head[lines];
        let decoder = &mut hpack::Decoder::new(0);
        let problem = decodes_to(decoder, &block[encoded], lines, scratch).or_else(|| {
            section.clear();
            section.extend_from_slice(&qpack::FIELD_SECTION_PREFIX);
            section.extend_from_slice(&qpack_lines[qpack_encoded]);
            qpack_decodes_to(&section, lines, scratch)
        });
        if let Some(p) = problem {
            return Err(format!("{part} part: {p}"));
        }
    }
    Ok(())
}

/// What is wrong, if anything, with `block` decoded by `decoder` against
/// the fields of `lines` (in order, names lowercased, connection-specific
/// fields left out).
fn decodes_to(
    decoder: &mut hpack::Decoder,
    block: &[u8],
    lines: &[u8],
    scratch: &mut Vec<u8>,
) -> Option<String> {
    let mut expected = expected_fields(lines);
    let decoded = decoder.decode(block, scratch, usize::MAX, |name, value| {
        next_matches(&mut expected, "HPACK", name, value)
    });
    outcome(decoded, expected, "HPACK block")
}

/// [`decodes_to`] for a QPACK field section.
fn qpack_decodes_to(section: &[u8], lines: &[u8], scratch: &mut Vec<u8>) -> Option<String> {
    let mut expected = expected_fields(lines);
    let decoded = qpack::decode_field_section(section, scratch, usize::MAX, |name, value| {
        next_matches(&mut expected, "QPACK", name, value)
    });
    outcome(decoded, expected, "QPACK field lines")
}

/// The fields of `lines` a prepared block must carry: in order,
/// connection-specific fields left out.
fn expected_fields(lines: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    hpack::fields(lines).filter(|(name, _)| !hpack::is_connection_specific(name))
}

/// Whether the field `name: value` a `codec` block decoded to is the next
/// of `expected`, its name lowercased.
fn next_matches<'a>(
    expected: &mut impl Iterator<Item = (&'a [u8], &'a [u8])>,
    codec: &str,
    name: &[u8],
    value: &[u8],
) -> Result<(), String> {
    match expected.next() {
        Some((n, v))
            if v == value
                && n.len() == name.len()
                && n.iter()
                    .zip(name)
                    .all(|(n, m)| n.to_ascii_lowercase() == *m) =>
        {
            Ok(())
        }
        Some((n, _)) => Err(format!(
            "{codec} field {} does not match the line {}",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(n)
        )),
        None => Err(format!(
            "{codec} field {} has no line",
            String::from_utf8_lossy(name)
        )),
    }
}

/// What is wrong, if anything, once `what` was decoded against `expected`
/// with [`next_matches`]: its error, or a line it lacks.
fn outcome<'a, C: std::fmt::Display>(
    decoded: Result<(), hpack::DecodeError<String, C>>,
    mut expected: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    what: &str,
) -> Option<String> {
    match decoded {
        Ok(()) => expected.next().map(|(n, _)| {
            format!(
                "line {} missing from the {what}",
                String::from_utf8_lossy(n)
            )
        }),
        Err(hpack::DecodeError::Field(p)) => Some(p),
        Err(e) => Some(e.to_string()),
    }
}

/// One connection's view of the shared HPACK fields: every variant's block
/// written with them as a server writes it, twice (the first time
/// inserting the fields not yet in the table, then naming them by index),
/// decoded by one decoder of the default table size and compared with the
/// variant's lines.
struct SharedCheck<'p> {
    set: hpack::SharedView<'p>,
    state: hpack::SharedState,
    decoder: hpack::Decoder,
    block: Vec<u8>,
}

impl<'p> SharedCheck<'p> {
    fn new(set: hpack::SharedView<'p>) -> SharedCheck<'p> {
        SharedCheck {
            set,
            state: hpack::SharedState::new(hpack::MAX_TABLE_SIZE),
            decoder: hpack::Decoder::new(4096),
            block: Vec::new(),
        }
    }

    /// The variant record `v`'s spans (their range already checked).
    fn check(&mut self, v: &[u8], bytes: &[u8], scratch: &mut Vec<u8>) -> Result<(), String> {
        let at = |off: usize, len: usize| {
            let start = get_u64(v, off) as usize;
            &bytes[start..start + len]
        };
        let head = at(V_HEAD_OFF, get_u32(v, V_HEAD_LEN) as usize);
        let stateless = at(V_HPACK_OFF, get_u32(v, V_HPACK_LEN) as usize);
        let spans = at(
            V_SPANS_OFF,
            get_u32(v, V_SPANS_COUNT) as usize * hpack::SPAN_LEN,
        );
        if !self.set.spans_fit(spans, stateless.len()) {
            return Err("shared-field spans out of order or past the block".into());
        }
        for pass in ["inserting", "indexed"] {
            self.block.clear();
            self.state
                .write_block(&self.set, stateless, 0, spans, &mut self.block);
            if let Some(p) = decodes_to(&mut self.decoder, &self.block, head, scratch) {
                return Err(format!("{pass} HPACK block: {p}"));
            }
        }
        Ok(())
    }
}

/// Names the variant at `index` for a message: a route that serves it and
/// the encoding, or the bare index if no route does.
fn variant_owner(pack: &Pack, bytes: &[u8], index: u64) -> String {
    let routes = &bytes[pack.section_range(Section::Routes)];
    for (i, r) in routes.chunks_exact(ROUTE_LEN).enumerate() {
        let first = get_u32(r, R_VARIANT_FIRST) as u64;
        let set = r[R_ENCODINGS];
        if (first..first + set.count_ones() as u64).contains(&index) {
            let key = pack.route(i as u32).and_then(|r| r.key()).unwrap_or(b"?");
            let nth = (index - first) as u32;
            let encoding = ENCODINGS
                .into_iter()
                .filter(|e| set & e.bit() != 0)
                .nth(nth as usize)
                .map_or("?", |e| e.token());
            let name = match key {
                b"" => "the not-found page".into(),
                key => String::from_utf8_lossy(key),
            };
            return format!("route {i} ({name}), {encoding} variant");
        }
    }
    format!("variant {index} (no route serves it)")
}
