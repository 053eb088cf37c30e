//! Round trip and corruption tests of the pack format.

use super::format::*;
use super::verify::verify;
use super::*;

/// The fields of an HPACK block, for comparisons.
fn decoded(block: &[u8]) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    crate::hpack::Decoder::new(0)
        .decode(block, &mut Vec::new(), usize::MAX, |n, v| {
            let leak = |b: &[u8]| &*String::from_utf8(b.to_vec()).unwrap().leak();
            out.push((leak(n), leak(v)));
            Ok::<(), ()>(())
        })
        .unwrap();
    out
}

/// The fields of QPACK field lines (a stored block, without its prefix).
fn qpack_decoded(lines: &[u8]) -> Vec<(&'static str, &'static str)> {
    let mut section = crate::qpack::FIELD_SECTION_PREFIX.to_vec();
    section.extend_from_slice(lines);
    let mut out = Vec::new();
    crate::qpack::decode_field_section(&section, &mut Vec::new(), usize::MAX, |n, v| {
        let leak = |b: &[u8]| &*String::from_utf8(b.to_vec()).unwrap().leak();
        out.push((leak(n), leak(v)));
        Ok::<(), ()>(())
    })
    .unwrap();
    out
}

/// The HPACK block `head` must produce for the identity variant of `/`.
fn h_id_hpack(len: u64) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        ("ETag", "\"id\""),
        ("Cache-Control", "public, max-age=60"),
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Length", &len.to_string()),
    ] {
        crate::hpack::encode_field(name.as_bytes(), value.as_bytes(), &mut block);
    }
    block
}

fn head(etag: &str, ct: &str, len: u64) -> HeadBlock {
    let mut b = HeadBlockBuilder::new();
    b.line("ETag", etag)
        .line("Cache-Control", "public, max-age=60");
    b.begin_representation().line("Content-Type", ct);
    b.finish(len)
}

/// Writes a small pack: two routes sharing one resource, a gzip variant, a
/// wildcard, a not-found page and a rule.
fn sample(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("site.pack");
    let mut w = PackWriter::create(&path).unwrap();
    let body = w.add_body(b"<h1>hello</h1>").unwrap();
    let gz = w.add_body(b"gzipped-bytes").unwrap();
    let h_id = head("\"id\"", "text/html; charset=utf-8", body.len);
    let h_gz = head("\"gz\"", "text/html; charset=utf-8", gz.len);
    let set = w
        .add_variant_set(&[
            VariantIn {
                encoding: Encoding::Gzip,
                head: &h_gz,
                body: gz,
            },
            VariantIn {
                encoding: Encoding::Identity,
                head: &h_id,
                body,
            },
        ])
        .unwrap();
    for key in [&b"/"[..], b"/index.html"] {
        w.add_route(RouteIn {
            kind: RouteKind::Exact,
            key,
            status: 200,
            last_modified: 1_700_000_000,
            variants: set,
            validators: true,
        })
        .unwrap();
    }
    let dup = w.add_body(b"<h1>hello</h1>").unwrap();
    assert!(!dup.fresh);
    assert_eq!(dup.off, body.off);
    let nf_body = w.add_body(b"not here").unwrap();
    let nf_head = head("\"nf\"", "text/plain; charset=utf-8", nf_body.len);
    let nf = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &nf_head,
            body: nf_body,
        }])
        .unwrap();
    for (kind, key) in [
        (RouteKind::Wildcard, &b"/app/"[..]),
        (RouteKind::NotFound, b""),
    ] {
        w.add_route(RouteIn {
            kind,
            key,
            status: 404,
            last_modified: 0,
            variants: nf,
            validators: false,
        })
        .unwrap();
    }
    w.add_rule(RuleIn {
        from: b"/old/*",
        to: b"/new/:splat",
        status: 301,
        force: false,
    });
    // Added out of order and once twice: stored sorted, once.
    for record in [
        ProvenanceIn {
            source_hash: body.hash,
            encoding: Encoding::Gzip,
            settings: 7,
            body: Some(gz),
        },
        ProvenanceIn {
            source_hash: body.hash,
            encoding: Encoding::Br,
            settings: 8,
            body: None,
        },
        ProvenanceIn {
            source_hash: body.hash,
            encoding: Encoding::Gzip,
            settings: 7,
            body: Some(gz),
        },
    ] {
        w.add_provenance(record);
    }
    let stats = w.finish().unwrap();
    assert_eq!(stats.routes, 4);
    assert_eq!(stats.bodies, 3);
    assert_eq!(stats.dedup_saved, 14);
    path
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let pack = Pack::open(&sample(dir.path())).unwrap();
    verify(&pack).unwrap();
    let root = pack.lookup(RouteKind::Exact, b"/").unwrap();
    assert_eq!(root.status(), 200);
    assert!(root.has_validators());
    assert_eq!(root.last_modified(), 1_700_000_000);
    let id = root.variant(Encoding::Identity).unwrap();
    assert_eq!(id.body, b"<h1>hello</h1>");
    assert_eq!(id.etag, b"\"id\"");
    assert!(id.head.ends_with(b"Content-Length: 14\r\n"));
    assert!(id.head[..id.repr_at].ends_with(b"max-age=60\r\n"));
    assert!(id.head[id.repr_at..id.length_at].starts_with(b"Content-Type: text/html"));
    assert_eq!(id.hpack, h_id_hpack(id.body.len() as u64));
    assert_eq!(
        decoded(&id.hpack[..id.hpack_repr_at]),
        [("etag", "\"id\""), ("cache-control", "public, max-age=60")]
    );
    assert_eq!(
        decoded(&id.hpack[id.hpack_repr_at..id.hpack_length_at]),
        [("content-type", "text/html; charset=utf-8")]
    );
    assert_eq!(
        decoded(&id.hpack[id.hpack_length_at..]),
        [("content-length", "14")]
    );
    let qpack = id.qpack_block();
    assert_eq!(
        qpack_decoded(&qpack[..id.qpack_repr_at()]),
        [("etag", "\"id\""), ("cache-control", "public, max-age=60")]
    );
    assert_eq!(
        qpack_decoded(&qpack[id.qpack_repr_at()..id.qpack_length_at()]),
        [("content-type", "text/html; charset=utf-8")]
    );
    assert_eq!(
        qpack_decoded(&qpack[id.qpack_length_at()..]),
        [("content-length", "14")]
    );
    let gz = root.variant(Encoding::Gzip).unwrap();
    assert_eq!(
        decoded(&gz.hpack[..gz.hpack_repr_at])[0],
        ("etag", "\"gz\"")
    );
    assert_eq!(
        qpack_decoded(&gz.qpack_block()[..gz.qpack_repr_at()])[0],
        ("etag", "\"gz\"")
    );
    assert_eq!(root.variant(Encoding::Gzip).unwrap().body, b"gzipped-bytes");
    assert!(root.variant(Encoding::Br).is_none());
    assert_eq!(root.variants().count(), 2);
    let alias = pack.lookup(RouteKind::Exact, b"/index.html").unwrap();
    assert_eq!(
        alias.variant(Encoding::Identity).unwrap().body_off,
        id.body_off
    );
    assert!(pack.lookup(RouteKind::Exact, b"/app/").is_none());
    assert_eq!(
        pack.lookup(RouteKind::Wildcard, b"/app/").unwrap().status(),
        404
    );
    assert_eq!(
        pack.not_found()
            .unwrap()
            .variant(Encoding::Identity)
            .unwrap()
            .body,
        b"not here"
    );
    let rules: Vec<_> = pack.rules().collect();
    assert_eq!(
        (rules[0].from, rules[0].to, rules[0].status),
        (&b"/old/*"[..], &b"/new/:splat"[..], 301)
    );
    assert!(!pack.has_forced_rules());
    let hash = *blake3::hash(b"<h1>hello</h1>").as_bytes();
    assert_eq!(pack.provenance_count(), 2);
    let records: Vec<_> = pack.provenance_records().map(|p| p.encoding).collect();
    assert_eq!(records, [Encoding::Br, Encoding::Gzip]);
    let gz_made = pack.provenance(&hash, Encoding::Gzip).unwrap();
    assert_eq!(gz_made.settings, 7);
    let (off, len, body_hash) = gz_made.body.unwrap();
    assert_eq!(
        &pack.bytes()[off as usize..(off + len) as usize],
        b"gzipped-bytes"
    );
    assert_eq!(body_hash, blake3::hash(b"gzipped-bytes").as_bytes());
    let br_tried = pack.provenance(&hash, Encoding::Br).unwrap();
    assert_eq!((br_tried.settings, br_tried.body), (8, None));
    assert!(pack.provenance(&hash, Encoding::Zstd).is_none());
    assert!(pack.provenance(&[0; 32], Encoding::Gzip).is_none());
}

#[test]
fn streamed_bodies_are_stored_once_and_can_be_cut_off() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let mut w = PackWriter::create(&path).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let first = w.add_body_from(&mut &big[..]).unwrap();
    assert!(first.fresh);
    assert_eq!(first.hash, *blake3::hash(&big).as_bytes());
    // The same bytes again, whole or streamed: the first copy.
    let again = w.add_body_from(&mut &big[..]).unwrap();
    assert_eq!((again.off, again.fresh), (first.off, false));
    assert_eq!(w.add_body(&big).unwrap().off, first.off);
    // A body given up half-way leaves nothing behind.
    let mut dropped = w.body_writer();
    dropped.write_all(b"not kept").unwrap();
    assert_eq!(dropped.written(), 8);
    dropped.discard().unwrap();
    let mut read_back = Vec::new();
    w.body_reader(&first)
        .unwrap()
        .read_to_end(&mut read_back)
        .unwrap();
    assert!(read_back == big);
    let small = w.add_body(b"after").unwrap();
    assert_eq!(small.off, first.off + first.len);
    let h = head("\"x\"", "text/plain", small.len);
    let set = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &h,
            body: small,
        }])
        .unwrap();
    w.add_route(RouteIn {
        kind: RouteKind::Exact,
        key: b"/x",
        status: 200,
        last_modified: 0,
        variants: set,
        validators: true,
    })
    .unwrap();
    let stats = w.finish().unwrap();
    assert_eq!(stats.bodies, 2);
    assert_eq!(stats.body_bytes, big.len() as u64 + 5);
    let pack = Pack::open(&path).unwrap();
    verify(&pack).unwrap();
    let (_, bodies_len, _) = pack.section(Section::Bodies);
    assert_eq!(
        bodies_len,
        big.len() as u64 + 5,
        "the cut-off bodies are gone"
    );
}

#[test]
fn an_in_memory_pack_opens_from_its_file() {
    let mut w = PackWriter::in_memory().unwrap();
    let body = w.add_body(b"preview").unwrap();
    let h = head("\"p\"", "text/plain", body.len);
    let set = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &h,
            body,
        }])
        .unwrap();
    w.add_route(RouteIn {
        kind: RouteKind::Exact,
        key: b"/p",
        status: 200,
        last_modified: 0,
        variants: set,
        validators: true,
    })
    .unwrap();
    let (file, _) = w.finish_in_memory().unwrap();
    let pack = Pack::from_file(file, std::path::Path::new("preview")).unwrap();
    verify(&pack).unwrap();
    let route = pack.lookup(RouteKind::Exact, b"/p").unwrap();
    assert_eq!(route.variant(Encoding::Identity).unwrap().body, b"preview");
}

#[test]
fn verify_catches_a_provenance_record_unlike_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let good = bytes.clone();
    let (off, _, _) = Pack::open(&path).unwrap().section(Section::Provenance);
    // The second record (gzip, kept): one byte of its body hash.
    bytes[off as usize + PROVENANCE_LEN + P_BODY_HASH] ^= 1;
    reseal(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    let err = verify(&Pack::open(&path).unwrap()).unwrap_err().0;
    assert_eq!(err, "provenance record 1: the body does not match its hash");
    // Records out of order.
    let mut swapped = good;
    let (a, b) = (off as usize, off as usize + PROVENANCE_LEN);
    let first = swapped[a..b].to_vec();
    swapped.copy_within(b..b + PROVENANCE_LEN, a);
    swapped[b..b + PROVENANCE_LEN].copy_from_slice(&first);
    reseal(&mut swapped);
    std::fs::write(&path, &swapped).unwrap();
    let err = verify(&Pack::open(&path).unwrap()).unwrap_err().0;
    assert_eq!(err, "provenance record 1: out of order or repeated");
}

/// A variant record's reserved bytes, changed behind valid checksums:
/// refused by name.
#[test]
fn verify_catches_reserved_and_dictionary_bytes_of_a_variant() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    let (off, _, _) = Pack::open(&path).unwrap().section(Section::Variants);
    for at in V_SPANS_COUNT + 4..V_QPACK_OFF {
        let mut bad = good.clone();
        bad[off as usize + VARIANT_LEN + at] = 1;
        reseal(&mut bad);
        std::fs::write(&path, &bad).unwrap();
        let err = verify(&Pack::open(&path).unwrap()).unwrap_err().0;
        assert_eq!(err, "variant 1: reserved bytes are not zero");
    }
}

/// Fields longer than the u16 positions of a variant record can say: the
/// QPACK lines before `Content-Length`, an ETag value.
#[test]
fn positions_past_u16_are_refused() {
    // '~' has a 13-bit Huffman code: the value stays raw, 70000 bytes. Hex
    // digits take 5 or 6 bits: the QPACK lines stay under 64 KiB, so the
    // ETag's own length is what is refused.
    let tilde = "~".repeat(70_000);
    let hex = format!("\"{}\"", "0123456789abcdef".repeat(4_375));
    for (name, value, refused) in [
        ("X-Long", &tilde, "QPACK before Content-Length"),
        ("ETag", &hex, "an ETag of 70002 bytes"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut w = PackWriter::create(&dir.path().join("p")).unwrap();
        let body = w.add_body(b"x").unwrap();
        let mut b = HeadBlockBuilder::new();
        b.line(name, value);
        let h = b.finish(body.len);
        let err = w
            .add_variant_set(&[VariantIn {
                encoding: Encoding::Identity,
                head: &h,
                body,
            }])
            .unwrap_err()
            .to_string();
        assert!(err.contains(refused), "{err}");
        assert!(err.contains("more than the 65535 a pack records"), "{err}");
    }
}

#[test]
fn duplicate_route_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = PackWriter::create(&dir.path().join("p")).unwrap();
    let body = w.add_body(b"x").unwrap();
    let h = head("\"x\"", "text/plain", 1);
    let set = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &h,
            body,
        }])
        .unwrap();
    let r = || RouteIn {
        kind: RouteKind::Exact,
        key: b"/x",
        status: 200,
        last_modified: 0,
        variants: set,
        validators: true,
    };
    w.add_route(r()).unwrap();
    assert!(
        w.add_route(r())
            .unwrap_err()
            .to_string()
            .contains("duplicate")
    );
}

#[test]
fn failed_build_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("site.pack");
    let w = PackWriter::create(&target).unwrap();
    drop(w);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn every_flipped_byte_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        let caught = match Pack::open(&path) {
            Err(_) => true,
            Ok(p) => verify(&p).is_err(),
        };
        // Section padding is the only place a flip can go unnoticed.
        let in_padding = {
            let p = Pack::open(&dir.path().join("site.pack")).ok();
            p.is_some_and(|p| {
                SECTIONS.iter().all(|&s| {
                    let (o, l, _) = p.section(s);
                    !(o..o + l).contains(&(at as u64))
                }) && at >= HEADER_LEN
            })
        };
        assert!(caught || in_padding, "flip at byte {at} not detected");
    }
}

#[test]
fn truncated_and_foreign_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, &good[..good.len() - 1]).unwrap();
    assert!(Pack::open(&path).unwrap_err().0.contains("truncated"));
    std::fs::write(&path, b"<html>not a pack</html>").unwrap();
    assert!(Pack::open(&path).unwrap_err().0.contains("not a kiln pack"));
}

/// Rewrites the section checksums and the header checksum of a pack whose
/// bytes were changed on purpose, so that only the deeper checks see it.
fn reseal(pack: &mut [u8]) {
    for i in 0..SECTION_COUNT {
        let at = H_SECTIONS + i * SECTION_ENTRY_LEN;
        let (off, len) = (get_u64(pack, at) as usize, get_u64(pack, at + 8) as usize);
        let sum = xxhash_rust::xxh3::xxh3_64(&pack[off..off + len]);
        put_u64(pack, at + 16, sum);
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&pack[..HEADER_CHECKSUM_AT]);
    put_u64(pack, HEADER_CHECKSUM_AT, sum);
}

#[test]
fn a_pack_of_another_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let mut old = std::fs::read(&path).unwrap();
    assert_eq!(get_u32(&old, H_VERSION), 5);
    // A version 4 header, as kiln before 128-byte variant records wrote it.
    put_u32(&mut old, H_VERSION, 4);
    reseal(&mut old);
    std::fs::write(&path, &old).unwrap();
    let err = Pack::open(&path).unwrap_err().0;
    assert_eq!(
        err,
        "built by another kiln version (pack format 4, this kiln reads format 5); \
         rebuild it with `kiln build`"
    );
    put_u32(&mut old, H_VERSION, 6);
    reseal(&mut old);
    std::fs::write(&path, &old).unwrap();
    assert!(Pack::open(&path).unwrap_err().0.contains("pack format 6"));
}

/// A sample pack whose `/` identity variant has its head block changed by
/// `spoil` before it is written; the verify error.
fn verify_with_spoiled_head(spoil: impl FnOnce(&mut HeadBlock)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let mut w = PackWriter::create(&path).unwrap();
    let body = w.add_body(b"<h1>hello</h1>").unwrap();
    let mut h = head("\"id\"", "text/html", body.len);
    spoil(&mut h);
    let set = w
        .add_variant_set(&[VariantIn {
            encoding: Encoding::Identity,
            head: &h,
            body,
        }])
        .unwrap();
    w.add_route(RouteIn {
        kind: RouteKind::Exact,
        key: b"/page",
        status: 200,
        last_modified: 0,
        variants: set,
        validators: true,
    })
    .unwrap();
    w.finish().unwrap();
    let pack = Pack::open(&path).unwrap();
    verify(&pack).unwrap_err().0
}

#[test]
fn verify_catches_an_hpack_block_unlike_the_lines() {
    let field = |name: &str, value: &str| {
        let mut b = Vec::new();
        crate::hpack::encode_field(name.as_bytes(), value.as_bytes(), &mut b);
        b
    };
    // A value that differs.
    let err = verify_with_spoiled_head(|h| {
        let etag = field("etag", "\"id\"");
        h.hpack.splice(..etag.len(), field("etag", "\"xx\""));
    });
    assert_eq!(
        err,
        "route 0 (/page), identity variant: validators part: HPACK field etag does not match \
         the line ETag"
    );
    // The last field missing.
    let err = verify_with_spoiled_head(|h| h.hpack.truncate(h.hpack_length_at as usize));
    assert!(
        err.ends_with("content-length part: line Content-Length missing from the HPACK block"),
        "{err}"
    );
    // A field more.
    let err = verify_with_spoiled_head(|h| h.hpack.extend(field("x-more", "1")));
    assert!(err.ends_with("HPACK field x-more has no line"), "{err}");
    // A name not lowercased: the decoder hands it out as it is stored.
    let err = verify_with_spoiled_head(|h| {
        let at = h.hpack_repr_at as usize;
        let ct = field("content-type", "text/html");
        let mut upper = vec![0x00, 12];
        upper.extend(b"Content-Type");
        upper.extend(&ct[2..]);
        h.hpack.splice(at..at + ct.len(), upper.clone());
        h.hpack_length_at += (upper.len() - ct.len()) as u32;
    });
    assert!(
        err.contains("HPACK field Content-Type does not match"),
        "{err}"
    );
    // A cut point one field off: the representation starts too early.
    let err = verify_with_spoiled_head(|h| {
        h.hpack_repr_at = field("etag", "\"id\"").len() as u32;
    });
    assert!(
        err.contains("validators part: line Cache-Control missing"),
        "{err}"
    );
    // A cut point inside a field.
    let err = verify_with_spoiled_head(|h| h.hpack_length_at -= 1);
    assert!(err.contains("representation part: HPACK:"), "{err}");
    // A reference to the dynamic table, which means something else on
    // every connection.
    let err = verify_with_spoiled_head(|h| h.hpack.splice(..0, [0xbe]).for_each(drop));
    assert!(err.contains("HPACK: index past the tables"), "{err}");
    // A dynamic table size update.
    let err = verify_with_spoiled_head(|h| h.hpack.splice(..0, [0x3f, 0xe1, 0x1f]).for_each(drop));
    assert!(
        err.contains("validators part: HPACK: table size update"),
        "{err}"
    );
}

#[test]
fn verify_catches_qpack_lines_unlike_the_lines() {
    let field = |name: &str, value: &str| {
        let mut b = Vec::new();
        crate::qpack::encode_field(name.as_bytes(), value.as_bytes(), &mut b);
        b
    };
    // A value that differs.
    let err = verify_with_spoiled_head(|h| {
        let etag = field("etag", "\"id\"");
        h.qpack.splice(..etag.len(), field("etag", "\"xx\""));
    });
    assert_eq!(
        err,
        "route 0 (/page), identity variant: validators part: QPACK field etag does not match \
         the line ETag"
    );
    // The last field missing; a field more.
    let err = verify_with_spoiled_head(|h| h.qpack.truncate(h.qpack_length_at as usize));
    assert!(
        err.ends_with(
            "content-length part: line Content-Length missing from the QPACK field lines"
        ),
        "{err}"
    );
    let err = verify_with_spoiled_head(|h| h.qpack.extend(field("x-more", "1")));
    assert!(err.ends_with("QPACK field x-more has no line"), "{err}");
    // Cut points one field off, and inside a field.
    let err = verify_with_spoiled_head(|h| {
        h.qpack_repr_at = field("etag", "\"id\"").len() as u32;
    });
    assert!(
        err.contains("validators part: line Cache-Control missing"),
        "{err}"
    );
    let err = verify_with_spoiled_head(|h| h.qpack_length_at -= 1);
    assert!(err.contains("representation part: QPACK:"), "{err}");
    // A dynamic table reference, which no connection can resolve.
    let err = verify_with_spoiled_head(|h| h.qpack.splice(..0, [0x80]).for_each(drop));
    assert!(
        err.contains("validators part: QPACK: dynamic table reference"),
        "{err}"
    );
}

/// Every byte of the `/` identity variant's block that `block` picks,
/// changed behind valid checksums: never silently accepted.
#[test]
fn verify_catches_a_corrupted_block_behind_valid_checksums() {
    verify_catches_each_changed_byte(|v| v.hpack);
    verify_catches_each_changed_byte(|v| v.qpack_block());
}

fn verify_catches_each_changed_byte(block: impl for<'p> Fn(&Variant<'p>) -> &'p [u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    let pack = Pack::open(&path).unwrap();
    let id = pack
        .lookup(RouteKind::Exact, b"/")
        .unwrap()
        .variant(Encoding::Identity)
        .unwrap();
    let at = block(&id).as_ptr() as usize - pack.bytes().as_ptr() as usize;
    let len = block(&id).len();
    assert!(len > 0);
    drop(pack);
    // Every byte of the block, changed: never silently accepted.
    for i in at..at + len {
        let mut bad = good.clone();
        bad[i] ^= 0x01;
        reseal(&mut bad);
        std::fs::write(&path, &bad).unwrap();
        let pack = Pack::open(&path).unwrap();
        let err = verify(&pack).unwrap_err().0;
        assert!(
            err.starts_with("route 0 (/), identity variant: "),
            "byte {i}: {err}"
        );
    }
}

/// A pack whose `/app.js` has `old`'s dcb delta of `new` (a delta body of
/// `delta` when given instead), with `old` itself at `/old.js`; the
/// `verify` and `verify_deltas` results.
fn delta_pack(
    delta: Option<Vec<u8>>,
) -> (
    Result<u64, PackError>,
    Result<verify::DeltaCheck, PackError>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.pack");
    let old = "function f(a) { return a + 1; }\n".repeat(40);
    let new = format!("{old}f(2);\n");
    let levels = crate::dictionary::DeltaLevels {
        brotli_quality: 5,
        zstd_level: 3,
    };
    let made =
        crate::dictionary::encode(Encoding::Dcb, old.as_bytes(), new.as_bytes(), levels).unwrap();
    let mut w = PackWriter::create(&path).unwrap();
    for (key, bytes, delta) in [
        ("/old.js", &old, None),
        ("/app.js", &new, Some(delta.unwrap_or(made))),
    ] {
        let body = w.add_body(bytes.as_bytes()).unwrap();
        let h = head("\"i\"", "text/javascript", body.len);
        let deltas: Vec<(BodyRef, HeadBlock)> = delta
            .iter()
            .map(|d| {
                let b = w.add_body(d).unwrap();
                (b, head("\"d\"", "text/javascript", b.len))
            })
            .collect();
        let deltas: Vec<DeltaIn<'_>> = deltas
            .iter()
            .map(|(b, h)| DeltaIn {
                encoding: Encoding::Dcb,
                dictionary: crate::dictionary::sha256(old.as_bytes()),
                head: h,
                body: *b,
            })
            .collect();
        let set = w
            .add_variant_set_with_deltas(
                &[VariantIn {
                    encoding: Encoding::Identity,
                    head: &h,
                    body,
                }],
                &deltas,
            )
            .unwrap();
        w.add_route(RouteIn {
            kind: RouteKind::Exact,
            key: key.as_bytes(),
            status: 200,
            last_modified: 0,
            variants: set,
            validators: true,
        })
        .unwrap();
    }
    w.finish().unwrap();
    let pack = Pack::open(&path).unwrap();
    let route = pack.lookup(RouteKind::Exact, b"/app.js").unwrap();
    assert_eq!((route.variants().count(), route.delta_count()), (1, 1));
    (verify(&pack), verify::verify_deltas(&pack, &[]))
}

#[test]
fn deltas_are_checked_and_decoded_against_their_dictionary() {
    let (checked, decoded) = delta_pack(None);
    checked.unwrap();
    assert_eq!(
        decoded.unwrap(),
        verify::DeltaCheck {
            decoded: 1,
            without_dictionary: 0
        }
    );
    // A body naming another dictionary: `verify` refuses it.
    let mut wrong = crate::dictionary::DCB_MAGIC.to_vec();
    wrong.extend_from_slice(&[7; 32]);
    wrong.extend_from_slice(b"brotli");
    assert!(
        delta_pack(Some(wrong))
            .0
            .unwrap_err()
            .0
            .contains("naming its dictionary")
    );
    // The right header, other bytes: decoding finds out.
    let other = "function g() {}\n".repeat(30);
    let old = "function f(a) { return a + 1; }\n".repeat(40);
    let levels = crate::dictionary::DeltaLevels {
        brotli_quality: 5,
        zstd_level: 3,
    };
    let lie =
        crate::dictionary::encode(Encoding::Dcb, old.as_bytes(), other.as_bytes(), levels).unwrap();
    let (checked, decoded) = delta_pack(Some(lie));
    checked.unwrap();
    assert!(
        decoded
            .unwrap_err()
            .0
            .contains("does not decode to its identity body")
    );
}
