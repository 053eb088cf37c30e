//! `kiln build` from tar archives, including hostile ones: every bad entry
//! is refused with a one-line error naming it, or skipped with a warning,
//! and nothing outside the archive is ever read.

use std::path::{Path, PathBuf};

use kiln::build::source::ignore::Why;
use kiln::build::{BuildOptions, BuildReport, build_pack};
use kiln::pack::{Encoding, Pack, RouteKind};

/// A ustar header block for `name` (≤ 100 bytes) with a correct checksum.
fn header(name: &[u8], typeflag: u8, size: u64, link: &[u8]) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"14524770400\0");
    h[156] = typeflag;
    h[157..157 + link.len()].copy_from_slice(link);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// A regular-file entry: header, data, padding.
fn file_entry(name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = header(name, b'0', data.len() as u64, b"").to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn link_entry(name: &[u8], typeflag: u8, target: &[u8]) -> Vec<u8> {
    header(name, typeflag, 0, target).to_vec()
}

/// Entries followed by the two zero blocks that end an archive.
fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = entries.concat();
    out.extend_from_slice(&[0u8; 1024]);
    out
}

struct Built {
    _dir: tempfile::TempDir,
    pack: PathBuf,
    report: BuildReport,
}

fn build_bytes(bytes: &[u8], file_name: &str) -> anyhow::Result<Built> {
    build_bytes_with(bytes, file_name, &BuildOptions::default())
}

fn build_bytes_with(bytes: &[u8], file_name: &str, opts: &BuildOptions) -> anyhow::Result<Built> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join(file_name);
    std::fs::write(&src, bytes).unwrap();
    let pack = dir.path().join("site.pack");
    let report = build_pack(&src, &pack, opts)?;
    Ok(Built {
        _dir: dir,
        pack,
        report,
    })
}

fn refused(bytes: &[u8]) -> String {
    let err = match build_bytes(bytes, "site.tar") {
        Ok(_) => panic!("the archive was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(err.contains("site.tar"), "names the archive: {err}");
    err
}

fn open(path: &Path) -> Pack {
    let pack = Pack::open(path).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    pack
}

fn body(pack: &Pack, key: &str) -> Option<Vec<u8>> {
    let route = pack.lookup(RouteKind::Exact, key.as_bytes())?;
    Some(route.variant(Encoding::Identity)?.body.to_vec())
}

#[test]
fn plain_archive_with_links_builds() {
    let bytes = archive(&[
        header(b"./", b'5', 0, b"").to_vec(),
        file_entry(b"./index.html", b"<h1>home</h1>"),
        header(b"./sub/", b'5', 0, b"").to_vec(),
        file_entry(b"./sub//a.css", b"body{}"),
        link_entry(b"./alias.html", b'2', b"index.html"),
        link_entry(b"./sub/up.html", b'2', b"../index.html"),
        link_entry(b"./chain.html", b'2', b"alias.html"),
        link_entry(b"./hard.css", b'1', b"./sub/a.css"),
        link_entry(b"./mirror", b'2', b"sub"),
        link_entry(b"./sub/loop", b'2', b"."),
        file_entry(b"./.hidden", b"secret"),
    ]);
    let built = build_bytes(&bytes, "site.tar").unwrap();
    let pack = open(&built.pack);
    assert_eq!(body(&pack, "/").unwrap(), b"<h1>home</h1>");
    assert_eq!(body(&pack, "/sub/a.css").unwrap(), b"body{}");
    assert_eq!(body(&pack, "/alias.html").unwrap(), b"<h1>home</h1>");
    assert_eq!(body(&pack, "/sub/up.html").unwrap(), b"<h1>home</h1>");
    assert_eq!(body(&pack, "/chain.html").unwrap(), b"<h1>home</h1>");
    assert_eq!(body(&pack, "/hard.css").unwrap(), b"body{}");
    assert_eq!(
        body(&pack, "/.hidden"),
        None,
        "ignore rules apply to archives"
    );
    assert_eq!(
        body(&pack, "/mirror/a.css").unwrap(),
        b"body{}",
        "directory link"
    );
    assert_eq!(built.report.files, 7);
    let warnings = built.report.warnings.join("\n");
    assert!(
        warnings.contains("\"sub/loop\"") && warnings.contains("loop"),
        "{warnings}"
    );
    let route = pack.lookup(RouteKind::Exact, b"/index.html").unwrap();
    assert_eq!(route.last_modified(), 0o14524770400);
}

#[test]
fn ignore_rules_apply_under_well_known() {
    let kept = [
        ".well-known/security.txt",
        ".well-known/acme-challenge/token",
    ];
    let ignored = [
        ".well-known/.DS_Store",
        ".well-known/.git/config",
        ".well-known/security.txt~",
        ".well-known/acme-challenge/.hidden",
        "sub/.well-known/security.txt",
    ];
    let entries: Vec<Vec<u8>> = kept
        .iter()
        .chain(&ignored)
        .map(|name| file_entry(format!("./{name}").as_bytes(), b"x"))
        .collect();
    let built = build_bytes(&archive(&entries), "site.tar").unwrap();
    let pack = open(&built.pack);
    for name in kept {
        assert!(body(&pack, &format!("/{name}")).is_some(), "{name} kept");
    }
    for name in ignored {
        assert_eq!(body(&pack, &format!("/{name}")), None, "{name} ignored");
    }
    assert_eq!(built.report.files, kept.len() as u64);
}

#[test]
fn absolute_names_are_refused() {
    let err = refused(&archive(&[file_entry(b"/etc/passwd", b"x")]));
    assert!(
        err.contains("\"/etc/passwd\"") && err.contains("absolute"),
        "{err}"
    );
}

#[test]
fn dot_dot_components_are_refused() {
    let err = refused(&archive(&[file_entry(b"a/../../evil.html", b"x")]));
    assert!(
        err.contains("a/../../evil.html") && err.contains("'..'"),
        "{err}"
    );
}

#[test]
fn links_pointing_outside_are_skipped_with_a_warning() {
    let bytes = archive(&[
        file_entry(b"index.html", b"home"),
        link_entry(b"up.html", b'2', b"../outside.html"),
        link_entry(b"abs.html", b'2', b"/etc/passwd"),
        link_entry(b"hard.html", b'1', b"../outside.html"),
        link_entry(b"dangling.html", b'2', b"missing.html"),
        // Missing, not outside, whatever its name says.
        link_entry(b"renamed.html", b'2', b"outside-docs.html"),
        link_entry(b"loop-a", b'2', b"loop-b"),
        link_entry(b"loop-b", b'2', b"loop-a"),
    ]);
    let built = build_bytes(&bytes, "site.tar").unwrap();
    let pack = open(&built.pack);
    for key in [
        "/up.html",
        "/abs.html",
        "/hard.html",
        "/dangling.html",
        "/renamed.html",
        "/loop-a",
    ] {
        assert_eq!(body(&pack, key), None, "{key}");
    }
    let warnings = built.report.warnings.join("\n");
    assert!(
        warnings.contains("\"up.html\"") && warnings.contains("outside"),
        "{warnings}"
    );
    assert!(warnings.contains("\"abs.html\""), "{warnings}");
    assert!(warnings.contains("\"hard.html\""), "{warnings}");
    assert!(warnings.contains("\"dangling.html\""), "{warnings}");
    assert!(
        warnings.contains(
            "\"renamed.html\": link skipped, target \"outside-docs.html\" is not a file in the archive"
        ),
        "{warnings}"
    );
    assert!(warnings.contains("too many levels of links"), "{warnings}");
    // Only the symbolic links that lead out of the archive are counted as
    // such in the summary.
    let mut out_of_source: Vec<&str> = built
        .report
        .left_out
        .iter()
        .filter(|(_, why)| why.to_string() == "symbolic link out of the source")
        .map(|(path, _)| path.as_str())
        .collect();
    out_of_source.sort();
    assert_eq!(out_of_source, ["abs.html", "up.html"]);
}

/// A name the archive holds several times (`tar -r` appends a new
/// version) is its last entry, as extracting the archive would leave it,
/// with one warning naming it; a link replaced by a file and a file by a
/// link too.
#[test]
fn a_repeated_name_is_its_last_entry_with_a_warning() {
    let built = build_bytes(
        &archive(&[
            file_entry(b"./a.html", b"one"),
            file_entry(b"b.html", b"bee"),
            file_entry(b"a.html", b"two"),
            link_entry(b"l.html", b'2', b"b.html"),
            file_entry(b"c.html", b"sea"),
            file_entry(b"l.html", b"file now"),
            file_entry(b"m.html", b"file first"),
            link_entry(b"m.html", b'2', b"c.html"),
            file_entry(b"a.html", b"three"),
        ]),
        "site.tar",
    )
    .unwrap();
    let pack = open(&built.pack);
    assert_eq!(body(&pack, "/a.html").unwrap(), b"three");
    assert_eq!(body(&pack, "/l.html").unwrap(), b"file now");
    assert_eq!(body(&pack, "/m.html").unwrap(), b"sea");
    assert_eq!(built.report.files, 5);
    let mut warnings = built.report.warnings.clone();
    warnings.sort();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    for (w, name, times) in warnings
        .iter()
        .zip([("\"a.html\"", 3), ("\"l.html\"", 2), ("\"m.html\"", 2)])
        .map(|(w, (n, t))| (w, n, t))
    {
        assert!(
            w.contains(name) && w.contains(&format!("{times} times")) && w.contains("last"),
            "{w}"
        );
    }
}

/// An entry whose name is not UTF-8 is skipped with a warning naming it;
/// the rest of the archive builds.
#[test]
fn non_utf8_names_are_left_out_with_a_warning() {
    let built = build_bytes(
        &archive(&[
            file_entry(b"caf\xe9.html", b"x"),
            file_entry(b"index.html", b"home"),
        ]),
        "site.tar",
    )
    .unwrap();
    assert_eq!(body(&open(&built.pack), "/index.html").unwrap(), b"home");
    assert_eq!(built.report.files, 1);
    assert_eq!(built.report.left_out.len(), 1);
    assert_eq!(built.report.left_out[0].1, Why::NotUtf8);
    let w = &built.report.warnings;
    assert!(
        w.len() == 1 && w[0].contains("caf") && w[0].contains("not UTF-8"),
        "{w:?}"
    );
}

#[test]
fn truncated_archives_are_errors() {
    let full = archive(&[file_entry(b"a.html", &[b'a'; 3000])]);
    let err = refused(&full[..512 + 1000]);
    assert!(err.contains("truncated"), "{err}");
    let err = refused(&full[..300]);
    assert!(err.contains("truncated or corrupt"), "{err}");
}

#[test]
fn sizes_that_lie_are_errors() {
    let mut bytes = header(b"big.html", b'0', 100_000, b"").to_vec();
    bytes.extend_from_slice(&[b'x'; 10]);
    let err = refused(&bytes);
    assert!(
        err.contains("big.html") && err.contains("truncated"),
        "{err}"
    );

    // An entry of 8 GiB is streamed like any other (nothing is allocated
    // for its size) and found missing.
    let huge = header(b"huge.bin", b'0', 0o77777777777, b"").to_vec();
    let err = refused(&huge);
    assert!(
        err.contains("huge.bin") && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn special_entries_are_skipped_with_a_warning() {
    let bytes = archive(&[
        file_entry(b"index.html", b"home"),
        header(b"fifo", b'6', 0, b"").to_vec(),
        header(b"dev", b'3', 0, b"").to_vec(),
    ]);
    let built = build_bytes(&bytes, "site.tar").unwrap();
    assert_eq!(built.report.files, 1);
    let warnings = built.report.warnings.join("\n");
    assert!(
        warnings.contains("\"fifo\"") && warnings.contains("\"dev\""),
        "{warnings}"
    );
}

#[test]
fn not_a_tar_is_an_error() {
    let err = refused(&[b'z'; 2000]);
    assert!(
        err.contains("not a kiln pack, a tar archive or a site folder"),
        "{err}"
    );
}

fn long_name() -> String {
    format!("{}/page.html", "deep".repeat(40))
}

/// Builds an archive as it is, its one top folder kept.
fn build_unstripped(bytes: &[u8]) -> Built {
    let opts = BuildOptions {
        strip_components: Some(0),
        ..BuildOptions::default()
    };
    build_bytes_with(bytes, "site.tar", &opts).unwrap()
}

#[test]
fn gnu_long_names_are_supported() {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    b.append_data(&mut h, long_name(), &b"hello"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    let built = build_unstripped(&bytes);
    assert_eq!(
        body(&open(&built.pack), &format!("/{}", long_name())).unwrap(),
        b"hello"
    );
}

#[test]
fn pax_long_names_are_supported() {
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("path", long_name().as_bytes())])
        .unwrap();
    let mut h = tar::Header::new_ustar();
    h.set_size(5);
    h.set_mode(0o644);
    h.as_old_mut().name[..5].copy_from_slice(b"short");
    h.set_cksum();
    b.append(&h, &b"hello"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    let built = build_unstripped(&bytes);
    let pack = open(&built.pack);
    assert_eq!(body(&pack, &format!("/{}", long_name())).unwrap(), b"hello");
    assert_eq!(body(&pack, "/short"), None);
}

#[test]
fn overlong_names_are_refused() {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    b.append_data(&mut h, "x/".repeat(2100), &b"x"[..]).unwrap();
    let err = refused(&b.into_inner().unwrap());
    assert!(err.contains("longer than 4096"), "{err}");
}

fn sample_tar() -> Vec<u8> {
    archive(&[
        file_entry(
            b"index.html",
            "<p>compressed archive</p>\n".repeat(50).as_bytes(),
        ),
        file_entry(b"a.txt", b"text"),
    ])
}

#[test]
fn gzip_and_zstd_archives_are_detected_by_magic() {
    use std::io::Write;
    let tar = sample_tar();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(&tar[..], 3).unwrap();
    // Misleading or missing extensions: detection is by content.
    for (bytes, name) in [
        (gz, "site.bin"),
        (zst, "site.tar.gz"),
        (tar.clone(), "site.tar.zst"),
    ] {
        let built = build_bytes(&bytes, name).unwrap();
        let pack = open(&built.pack);
        assert_eq!(body(&pack, "/a.txt").unwrap(), b"text", "{name}");
        assert_eq!(built.report.files, 2);
    }
}

#[test]
fn truncated_compressed_archives_are_errors() {
    use std::io::Write;
    let tar = sample_tar();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(&tar[..], 3).unwrap();
    for cut in [&gz[..gz.len() / 2], &zst[..zst.len() / 2]] {
        let err = refused(cut);
        assert!(
            err.contains("truncated") || err.contains("corrupt"),
            "{err}"
        );
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// A build whose `--max-source-bytes` is `max`; the one-line error.
fn refused_over(bytes: &[u8], max: u64) -> String {
    let opts = BuildOptions {
        max_source_bytes: max,
        ..BuildOptions::default()
    };
    let err = match build_bytes_with(bytes, "site.tar.gz", &opts) {
        Ok(_) => panic!("the archive was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(err.contains("site.tar.gz"), "names the archive: {err}");
    assert!(err.contains("--max-source-bytes"), "names the flag: {err}");
    err
}

#[test]
fn gzip_bombs_are_refused_at_the_source_limit() {
    const LIMIT: u64 = 1 << 20;
    // One entry that expands far past the limit: refused from its header,
    // before anything is read or allocated.
    let big = archive(&[file_entry(b"zeros.bin", &vec![0u8; 4 << 20])]);
    let bomb = gzip(&big);
    assert!(bomb.len() < 16 << 10, "the bomb is small: {}", bomb.len());
    let err = refused_over(&bomb, LIMIT);
    assert!(err.contains("zeros.bin"), "{err}");
    // Many empty entries: no file is large, the stream is.
    let many: Vec<Vec<u8>> = (0..4000)
        .map(|i| file_entry(format!("e{i}.txt").as_bytes(), b""))
        .collect();
    refused_over(&gzip(&archive(&many)), LIMIT);
    // Links copy their target: a few links to a big file pass the limit
    // even though the stream stays under it.
    let mut linked = vec![file_entry(b"big.txt", &vec![b'a'; 400 << 10])];
    for i in 0..4 {
        linked.push(link_entry(format!("l{i}.txt").as_bytes(), b'2', b"big.txt"));
    }
    let err = refused_over(&gzip(&archive(&linked)), LIMIT);
    assert!(err.contains("\"l1.txt\""), "names the link: {err}");
    // Under the limit, the same archive builds.
    let opts = BuildOptions {
        max_source_bytes: 4 << 20,
        ..BuildOptions::default()
    };
    let built = build_bytes_with(&gzip(&archive(&linked)), "site.tar.gz", &opts).unwrap();
    assert_eq!(built.report.files, 5);
}

#[test]
fn an_empty_file_is_not_an_archive() {
    let err = refused(b"");
    assert!(err.contains("empty file"), "{err}");
}

/// A PAX extended header carrying `records` ("key=value" each) for the next entry.
fn pax_entry(records: &[&[u8]]) -> Vec<u8> {
    let mut data = Vec::new();
    for r in records {
        // The length prefix counts itself, the space, the record and '\n'.
        let mut len = r.len() + 3;
        while format!("{len} ").len() + r.len() + 1 != len {
            len = format!("{len} ").len() + r.len() + 1;
        }
        data.extend_from_slice(format!("{len} ").as_bytes());
        data.extend_from_slice(r);
        data.push(b'\n');
    }
    let mut out = header(b"PaxHeaders/x", b'x', data.len() as u64, b"").to_vec();
    out.extend_from_slice(&data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

#[test]
fn pax_overrides_are_checked_like_plain_names() {
    for (record, needle) in [
        (&b"path=a/../../etc/passwd"[..], "'..' component refused"),
        (b"path=/etc/passwd", "absolute path refused"),
        (b"path=a\0b.html", "NUL byte"),
    ] {
        let mut entries = vec![pax_entry(&[record])];
        entries.push(file_entry(b"innocent.html", b"x"));
        let err = refused(&archive(&entries));
        assert!(err.contains(needle), "{err}");
    }
    // A PAX link target that climbs out is skipped like a plain one.
    let bytes = archive(&[
        file_entry(b"index.html", b"home"),
        pax_entry(&[b"linkpath=../../etc/passwd"]),
        link_entry(b"evil.html", b'2', b"index.html"),
    ]);
    let built = build_bytes(&bytes, "site.tar").unwrap();
    assert!(body(&open(&built.pack), "/evil.html").is_none());
    assert!(built.report.warnings.join("\n").contains("outside"));
}

#[test]
fn link_chains_loops_and_forward_links() {
    let bytes = archive(&[
        link_entry(b"early.html", b'1', b"late.html"),
        link_entry(b"a.html", b'2', b"b.html"),
        link_entry(b"b.html", b'2', b"a.html"),
        link_entry(b"self.html", b'2', b"self.html"),
        link_entry(b"d1", b'2', b"d2"),
        link_entry(b"d2", b'2', b"d1"),
        file_entry(b"late.html", b"later"),
    ]);
    let built = build_bytes(&bytes, "site.tar").unwrap();
    let pack = open(&built.pack);
    assert_eq!(
        body(&pack, "/early.html").unwrap(),
        b"later",
        "hard link to a later entry"
    );
    for key in ["/a.html", "/b.html", "/self.html"] {
        assert!(body(&pack, key).is_none(), "{key}");
    }
    assert_eq!(built.report.files, 2);
    let warnings = built.report.warnings.join("\n");
    assert!(warnings.contains("too many levels of links"), "{warnings}");
    assert_eq!(built.report.warnings.len(), 5, "{warnings}");
}

#[test]
fn truncated_gnu_long_name_is_an_error() {
    let mut bytes = header(b"././@LongLink", b'L', 300, b"").to_vec();
    bytes.extend_from_slice(&[b'n'; 100]);
    let err = refused(&bytes);
    assert!(err.contains("truncated or corrupt"), "{err}");
}

#[test]
fn odd_mtimes_and_empty_files_build() {
    let mut future = file_entry(b"future.txt", b"");
    // 2200-01-01, in octal.
    future[136..148].copy_from_slice(format!("{:011o}\0", 7_258_118_400u64).as_bytes());
    let mut negative = file_entry(b"past.txt", b"p");
    // GNU base-256: -1.
    negative[136..148].copy_from_slice(&[0xff; 12]);
    for e in [&mut future, &mut negative] {
        e[148..156].copy_from_slice(b"        ");
        let sum: u32 = e[..512].iter().map(|&b| b as u32).sum();
        e[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }
    let built = build_bytes(&archive(&[future, negative]), "site.tar").unwrap();
    let pack = open(&built.pack);
    let empty = pack.lookup(RouteKind::Exact, b"/future.txt").unwrap();
    assert_eq!(empty.last_modified(), 7_258_118_400);
    assert_eq!(
        empty.encodings(),
        Encoding::Identity.bit(),
        "an empty file has no encoded variant"
    );
    let v = empty.variant(Encoding::Identity).unwrap();
    assert!(v.body.is_empty());
    let head = String::from_utf8_lossy(v.head).into_owned();
    assert!(head.contains(" 01 Jan 2200 00:00:00 GMT\r\n"), "{head}");
    assert!(head.ends_with("\r\nContent-Length: 0\r\n"), "{head}");
    let past = pack.lookup(RouteKind::Exact, b"/past.txt").unwrap();
    let head = String::from_utf8_lossy(past.variant(Encoding::Identity).unwrap().head).into_owned();
    assert!(
        head.contains("Last-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\n"),
        "clamped: {head}"
    );
}

#[test]
fn strip_components_unwraps_a_top_level_folder() {
    let bytes = archive(&[
        header(b"public/", b'5', 0, b"").to_vec(),
        file_entry(b"public/index.html", b"home"),
        file_entry(b"public/sub/a.css", b"body{}"),
        file_entry(b"top.txt", b"dropped: nothing left once stripped"),
        link_entry(b"public/up.html", b'2', b"../public/index.html"),
        link_entry(b"public/hard.css", b'1', b"public/sub/a.css"),
        link_entry(b"public/gone.txt", b'1', b"top.txt"),
    ]);
    let plain = build_bytes(&bytes, "site.tar").unwrap();
    assert_eq!(
        body(&open(&plain.pack), "/public/index.html").unwrap(),
        b"home"
    );
    let opts = BuildOptions {
        strip_components: Some(1),
        ..BuildOptions::default()
    };
    let built = build_bytes_with(&bytes, "site.tar", &opts).unwrap();
    let pack = open(&built.pack);
    assert_eq!(body(&pack, "/").unwrap(), b"home");
    assert_eq!(body(&pack, "/sub/a.css").unwrap(), b"body{}");
    assert_eq!(body(&pack, "/up.html").unwrap(), b"home");
    assert_eq!(body(&pack, "/hard.css").unwrap(), b"body{}");
    assert!(body(&pack, "/public/index.html").is_none());
    assert!(body(&pack, "/gone.txt").is_none());
    assert!(
        built
            .report
            .warnings
            .join("\n")
            .contains("removed by --strip-components"),
        "{:?}",
        built.report.warnings
    );
    // A directory source has nothing to strip: say what to do instead.
    let dir = tempfile::tempdir().unwrap();
    let err = build_pack(dir.path(), &dir.path().join("x.pack"), &opts).unwrap_err();
    assert!(
        format!("{err:#}").contains("give the subdirectory as the source"),
        "{err:#}"
    );
}

fn headers_of(pack: &Pack, key: &str) -> String {
    let route = pack.lookup(RouteKind::Exact, key.as_bytes()).unwrap();
    String::from_utf8_lossy(route.variant(Encoding::Identity).unwrap().head).into_owned()
}

/// What `tar czf site.tgz site` makes: every entry under `site/`, no entry
/// for the archive's root; and a file macOS tar adds beside it.
fn archive_of_a_folder() -> Vec<u8> {
    archive(&[
        header(b"site/", b'5', 0, b"").to_vec(),
        file_entry(b"._site", b"AppleDouble"),
        file_entry(b"site/index.html", b"home"),
        file_entry(b"site/about.html", b"about"),
        file_entry(b"site/_headers", b"/*\n  X-Site: yes\n"),
        file_entry(b"site/_redirects", b"/old /about 301\n"),
        file_entry(b"site/docs/_headers", b"/*\n  X-Docs: yes\n"),
        file_entry(b"site/docs/_redirects", b"/a /b 301\n"),
        file_entry(b"site/docs/page.html", b"docs"),
        file_entry(b"site/.well-known/security.txt", b"contact"),
        file_entry(b"site/.git/config", b"git"),
        link_entry(b"site/home.html", b'2', b"index.html"),
        link_entry(b"site/up.html", b'2', b"../other.html"),
    ])
}

#[test]
fn one_top_folder_is_left_out_and_the_summary_says_so() {
    let built = build_bytes(&archive_of_a_folder(), "site.tar").unwrap();
    let pack = open(&built.pack);
    assert_eq!(body(&pack, "/").unwrap(), b"home");
    assert_eq!(body(&pack, "/home.html").unwrap(), b"home");
    assert_eq!(body(&pack, "/docs/page").unwrap(), b"docs");
    assert_eq!(
        body(&pack, "/.well-known/security.txt").unwrap(),
        b"contact"
    );
    assert!(headers_of(&pack, "/").contains("X-Site: yes\r\n"));
    assert!(!headers_of(&pack, "/docs/page.html").contains("X-Docs"));
    assert_eq!(
        pack.lookup(RouteKind::Exact, b"/old").unwrap().status(),
        301
    );
    for key in [
        "/_headers",
        "/_redirects",
        "/docs/_headers",
        "/docs/_redirects",
        "/site/index.html",
        "/up.html",
        "/._site",
        "/.git/config",
    ] {
        assert!(
            pack.lookup(RouteKind::Exact, key.as_bytes()).is_none(),
            "{key}"
        );
    }
    assert_eq!(built.report.stripped.as_deref(), Some("site"));
    let summary = built.report.to_string();
    assert!(
        summary.contains(
            "archive     every entry under site/: served from inside it \
             (--strip-components 0 keeps it)"
        ),
        "{summary}"
    );
    let warnings = built.report.warnings.join("\n");
    assert!(
        warnings.contains("\"up.html\": link skipped, target \"other.html\" is outside site/"),
        "{warnings}"
    );

    // Kept when asked: 0 components stripped. Rules files below the root
    // are still never published.
    let kept = build_unstripped(&archive_of_a_folder());
    let pack = open(&kept.pack);
    assert_eq!(body(&pack, "/site/index.html").unwrap(), b"home");
    assert!(pack.lookup(RouteKind::Exact, b"/").is_none());
    for key in ["/site/_headers", "/site/_redirects", "/site/docs/_headers"] {
        assert!(
            pack.lookup(RouteKind::Exact, key.as_bytes()).is_none(),
            "{key}"
        );
    }
    assert_eq!(kept.report.stripped, None);
    assert!(!kept.report.to_string().contains("every entry under"));
}

#[test]
fn an_archive_that_names_its_root_or_holds_several_folders_is_read_as_it_is() {
    // `tar cf site.tar -C site .` of a site whose pages are all in docs/:
    // the same pack as the directory, as the `./` entry says.
    let named_root = archive(&[
        header(b"./", b'5', 0, b"").to_vec(),
        file_entry(b"./docs/index.html", b"docs"),
    ]);
    let several = archive(&[
        file_entry(b"a/index.html", b"a"),
        file_entry(b"b/index.html", b"b"),
    ]);
    let at_root = archive(&[
        file_entry(b"site/index.html", b"home"),
        file_entry(b"robots.txt", b"robots"),
    ]);
    for (bytes, key) in [
        (named_root, "/docs/"),
        (several, "/b/"),
        (at_root, "/site/"),
    ] {
        let built = build_bytes(&bytes, "site.tar").unwrap();
        assert!(body(&open(&built.pack), key).is_some(), "{key}");
        assert_eq!(built.report.stripped, None, "{key}");
    }
}

#[test]
fn what_is_left_out_is_the_same_from_a_directory_and_its_tar() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    for path in [
        "index.html",
        ".env",
        ".git/config",
        ".git/HEAD",
        "#draft.html#",
        ".#draft.html",
        "notes#1.txt",
        "page.html~",
        "debug.log",
        "logs/app.log",
        "yarn.lock",
        "x.tmp",
        "x.temp",
        "Thumbs.db",
        "docs/_headers",
        "docs/_redirects",
        ".well-known/security.txt",
        ".well-known/.DS_Store",
    ] {
        let p = site.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }
    std::os::unix::fs::symlink("/etc/passwd", site.join("passwd.txt")).unwrap();
    // Private keys, by name and by content (PEM, DER).
    let key = rcgen::KeyPair::generate().unwrap();
    std::fs::write(site.join("server.key"), "x").unwrap();
    std::fs::write(
        site.join("docs/bundle.pem"),
        format!("certificates first\n{}", key.serialize_pem()),
    )
    .unwrap();
    std::fs::write(site.join("key.der"), key.serialize_der()).unwrap();
    let from_dir = build_pack(&site, &dir.path().join("d.pack"), &BuildOptions::default()).unwrap();
    let tar_path = dir.path().join("site.tar");
    let mut builder = tar::Builder::new(std::fs::File::create(&tar_path).unwrap());
    builder.follow_symlinks(false);
    builder.append_dir_all("site", &site).unwrap();
    builder.into_inner().unwrap();
    let from_tar = build_pack(
        &tar_path,
        &dir.path().join("t.pack"),
        &BuildOptions::default(),
    )
    .unwrap();
    let listed = |r: &BuildReport| -> Vec<(String, String)> {
        r.left_out
            .iter()
            .map(|(p, w)| (p.clone(), w.to_string()))
            .collect()
    };
    let expected: Vec<(String, String)> = [
        ("#draft.html#", "editor's autosave or lock (#name# .#name)"),
        (".#draft.html", "editor's autosave or lock (#name# .#name)"),
        (".env", "hidden (.name)"),
        (".git/", "hidden (.name)"),
        (".well-known/.DS_Store", "hidden (.name)"),
        ("Thumbs.db", "Thumbs.db"),
        (
            "debug.log",
            "log, lock or temporary (*.log *.lock *.tmp *.temp)",
        ),
        ("docs/_headers", "_headers or _redirects below the root"),
        ("docs/_redirects", "_headers or _redirects below the root"),
        (
            "docs/bundle.pem",
            "private key (*.key, PEM or DER key content)",
        ),
        ("key.der", "private key (*.key, PEM or DER key content)"),
        (
            "logs/app.log",
            "log, lock or temporary (*.log *.lock *.tmp *.temp)",
        ),
        ("page.html~", "backup (name~)"),
        ("passwd.txt", "symbolic link out of the source"),
        ("server.key", "private key (*.key, PEM or DER key content)"),
        (
            "x.temp",
            "log, lock or temporary (*.log *.lock *.tmp *.temp)",
        ),
        (
            "x.tmp",
            "log, lock or temporary (*.log *.lock *.tmp *.temp)",
        ),
        (
            "yarn.lock",
            "log, lock or temporary (*.log *.lock *.tmp *.temp)",
        ),
    ]
    .iter()
    .map(|(p, w)| (p.to_string(), w.to_string()))
    .collect();
    assert_eq!(listed(&from_dir), expected);
    assert_eq!(listed(&from_tar), expected);
    assert_eq!((from_dir.files, from_tar.files), (3, 3));
    // Each key named in a warning: by its name in the archive.
    for (file, why) in [
        ("server.key", "its name ends in .key"),
        ("docs/bundle.pem", "it holds a PEM private key block"),
        ("key.der", "a DER PKCS#8 private key"),
    ] {
        let warning = format!("{file}: left out: a private key ({why}), never published");
        assert!(
            from_tar.warnings.contains(&warning),
            "{warning}: {:?}",
            from_tar.warnings
        );
    }
}
