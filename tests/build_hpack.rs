//! The HTTP/2 header blocks of a real build: every variant of
//! `examples/site` carries an HPACK block that decodes, with a decoder that
//! has no dynamic table, to the fields of its HTTP/1 lines (names
//! lowercased, same order), cut at the same fields; and every response the
//! handler gives (200, 304, 206, 416, 404, redirects, built-ins) carries
//! the HPACK form of its `head`. The same for the HTTP/3 field lines: every
//! variant's QPACK lines decode, as field sections of their own, to the
//! same fields, cut at the same fields.

use std::path::Path;

use kiln::build::{BuildOptions, build_pack};
use kiln::hpack::{self, Decoder};
use kiln::pack::{Encoding, Pack, RouteKind};
use kiln::serve::handler::{self, Method, Request, Scratch, Site, Sites};

/// The fields of an HPACK block as `name: value` strings.
fn decoded(block: &[u8]) -> Vec<String> {
    let mut fields = Vec::new();
    Decoder::new(0)
        .decode(block, &mut Vec::new(), usize::MAX, |name, value| {
            fields.push(format!(
                "{}: {}",
                String::from_utf8(name.to_vec()).unwrap(),
                String::from_utf8(value.to_vec()).unwrap()
            ));
            Ok::<(), ()>(())
        })
        .unwrap_or_else(|e| panic!("{e:?}: {block:02x?}"));
    fields
}

/// The fields of QPACK field lines (without the section prefix, as the
/// pack stores them) as `name: value` strings.
fn qpack_decoded(lines: &[u8]) -> Vec<String> {
    let mut section = kiln::qpack::FIELD_SECTION_PREFIX.to_vec();
    section.extend_from_slice(lines);
    let mut fields = Vec::new();
    kiln::qpack::decode_field_section(&section, &mut Vec::new(), usize::MAX, |name, value| {
        fields.push(format!(
            "{}: {}",
            String::from_utf8(name.to_vec()).unwrap(),
            String::from_utf8(value.to_vec()).unwrap()
        ));
        Ok::<(), ()>(())
    })
    .unwrap_or_else(|e| panic!("{e:?}: {lines:02x?}"));
    fields
}

/// The fields HTTP/2 and HTTP/3 must carry for HTTP/1 `lines`: names lowercased,
/// connection-specific fields left out.
fn expected(lines: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(lines).unwrap();
    assert!(text.is_empty() || text.ends_with("\r\n"), "{text:?}");
    text.split_terminator("\r\n")
        .map(|line| {
            let (name, value) = line.split_once(": ").unwrap();
            (name.to_ascii_lowercase(), value)
        })
        .filter(|(name, _)| !hpack::is_connection_specific(name.as_bytes()))
        .map(|(name, value)| format!("{name}: {value}"))
        .collect()
}

fn example_pack(dir: &Path) -> Pack {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/site");
    let out = dir.join("site.pack");
    build_pack(&src, &out, &BuildOptions::default()).unwrap();
    let pack = Pack::open(&out).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    pack
}

#[test]
fn every_variant_hpack_block_is_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    let pack = example_pack(dir.path());
    let mut variants = 0;
    for route in pack.routes() {
        let key = String::from_utf8_lossy(route.key().unwrap()).into_owned();
        for v in route.variants() {
            let what = format!("{key} {}", v.encoding.token());
            variants += 1;
            assert_eq!(decoded(v.hpack), expected(v.head), "{what}");
            // Each part on its own: the cut points fall between the same
            // fields in both blocks.
            for ((lines, block), part) in [
                (&v.head[..v.repr_at], &v.hpack[..v.hpack_repr_at]),
                (
                    &v.head[v.repr_at..v.length_at],
                    &v.hpack[v.hpack_repr_at..v.hpack_length_at],
                ),
                (&v.head[v.length_at..], &v.hpack[v.hpack_length_at..]),
            ]
            .into_iter()
            .zip(["validators", "representation", "content-length"])
            {
                assert_eq!(decoded(block), expected(lines), "{what} {part}");
            }
            assert_eq!(
                decoded(&v.hpack[v.hpack_length_at..]),
                [format!("content-length: {}", v.body.len())],
                "{what}"
            );
            // The block inserts nothing into the dynamic table: after it,
            // index 62 (the first dynamic entry) is still out of range.
            let mut decoder = Decoder::new(4096);
            decoder
                .decode(
                    v.hpack,
                    &mut Vec::new(),
                    usize::MAX,
                    |_, _| Ok::<(), ()>(()),
                )
                .unwrap();
            assert_eq!(
                decoder.decode(
                    &[0xbe],
                    &mut Vec::new(),
                    usize::MAX,
                    |_, _| Ok::<(), ()>(())
                ),
                Err(hpack::DecodeError::Compression(
                    hpack::Error::IndexOutOfRange
                )),
                "{what}"
            );
            assert!(v.hpack.len() < v.head.len(), "{what}: HPACK is smaller");
        }
    }
    assert!(variants > 20, "{variants}");
}

#[test]
fn every_variant_qpack_lines_are_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    let pack = example_pack(dir.path());
    let mut variants = 0;
    for route in pack.routes() {
        let key = String::from_utf8_lossy(route.key().unwrap()).into_owned();
        for v in route.variants() {
            let what = format!("{key} {}", v.encoding.token());
            variants += 1;
            let qpack = v.qpack_block();
            assert_eq!(qpack_decoded(qpack), expected(v.head), "{what}");
            let (repr_at, length_at) = (v.qpack_repr_at(), v.qpack_length_at());
            for ((lines, block), part) in [
                (&v.head[..v.repr_at], &qpack[..repr_at]),
                (&v.head[v.repr_at..v.length_at], &qpack[repr_at..length_at]),
                (&v.head[v.length_at..], &qpack[length_at..]),
            ]
            .into_iter()
            .zip(["validators", "representation", "content-length"])
            {
                assert_eq!(qpack_decoded(block), expected(lines), "{what} {part}");
            }
            assert_eq!(
                qpack_decoded(&qpack[length_at..]),
                [format!("content-length: {}", v.body.len())],
                "{what}"
            );
            assert!(qpack.len() < v.head.len(), "{what}: QPACK is smaller");
        }
    }
    assert!(variants > 20, "{variants}");
}

#[test]
fn every_handler_response_carries_its_head_as_hpack() {
    let dir = tempfile::tempdir().unwrap();
    let pack = example_pack(dir.path());
    let keys: Vec<Vec<u8>> = pack
        .routes()
        .filter(|r| r.kind() == Some(RouteKind::Exact))
        .map(|r| r.key().unwrap().to_vec())
        .collect();
    let etags: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| {
            let route = pack.lookup(RouteKind::Exact, k).unwrap();
            route.variant(Encoding::Identity).unwrap().etag.to_vec()
        })
        .collect();
    let site = Sites::single(Site::from_pack(pack));
    let mut scratch = Scratch::default();
    let mut statuses = std::collections::BTreeSet::new();
    let targets = keys.iter().map(Vec::as_slice).chain([
        &b"/missing"[..],
        b"/blog/x",
        b"/app/deep/link",
        b"*",
    ]);
    for (i, target) in targets.enumerate() {
        let etag = etags.get(i).map_or(&b"\"none\""[..], Vec::as_slice);
        for (ask, method) in [
            ("plain", Method::Get),
            ("head", Method::Head),
            ("br", Method::Get),
            ("304", Method::Get),
            ("412", Method::Get),
            ("206", Method::Get),
            ("416", Method::Get),
            ("options", Method::Options),
            ("post", Method::NotAllowed),
        ] {
            let mut req = Request::new(method, target);
            match ask {
                "br" => req.accept_encoding.push(b"br, gzip").unwrap(),
                "304" => req.if_none_match.push(etag).unwrap(),
                "412" => req.if_match.push(b"\"other\"").unwrap(),
                "206" => req.range = Some(b"bytes=0-0"),
                "416" => req.range = Some(b"bytes=999999999-"),
                _ => {}
            }
            let resp = handler::answer(&site, &req, None, None, &mut scratch);
            statuses.insert(resp.status);
            let what = format!(
                "{} {ask} -> {}",
                String::from_utf8_lossy(target),
                resp.status
            );
            assert_eq!(decoded(resp.hpack), expected(resp.head), "{what}");
        }
    }
    for status in [200, 204, 206, 301, 302, 304, 400, 404, 405, 412, 416] {
        assert!(
            statuses.contains(&status),
            "{status} not exercised: {statuses:?}"
        );
    }
}
