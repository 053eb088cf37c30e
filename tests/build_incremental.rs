//! Incremental builds: a build reuses the encoded bodies of the pack it
//! replaces (or of `--base`) whose source bytes and compression settings are
//! the same, compresses only the rest, and writes the very pack a clean build
//! writes: after edits, additions, deletions, renames, changed settings, from
//! a directory or a tar archive, for files held whole or streamed. A base
//! that cannot be used only means a clean build, with a one-line note.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, UNIX_EPOCH};

use kiln::build::compress::{CompressOptions, Level};
use kiln::build::dictionaries::DictionaryOptions;
use kiln::build::{Base, BuildOptions, BuildReport, build_pack};
use kiln::pack::format::{HEADER_CHECKSUM_AT, P_BODY_OFF, PROVENANCE_LEN};
use kiln::pack::{Encoding, Pack};

/// Fast levels and every encoding: quick, and each encoder is exercised.
/// Without dictionaries: a clean build has no earlier version to make
/// deltas against (`deltas_are_reused_and_kept_across_rebuilds` covers
/// them).
fn options() -> BuildOptions {
    BuildOptions {
        compress: CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
            ..CompressOptions::at(Level::Fast)
        },
        dictionaries: DictionaryOptions {
            enabled: false,
            ..DictionaryOptions::default()
        },
        ..BuildOptions::default()
    }
}

/// A page of `n` paragraphs: compressible, distinct per `n`.
fn page(n: usize) -> String {
    (0..n)
        .map(|i| format!("<p>paragraph {i} of page {n}, with some words</p>\n"))
        .collect()
}

/// Writes `content` at `rel` under `root` with a fixed mtime, so that two
/// trees written alike are alike.
fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, content).unwrap();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .unwrap();
}

/// A site of 30 pages, styles, a duplicate, a tiny file, an image and
/// the rules files.
fn site(root: &Path) {
    for i in 0..30 {
        write(root, &format!("docs/p{i}.html"), page(20 + i).as_bytes());
    }
    write(root, "index.html", page(50).as_bytes());
    write(root, "copy.html", page(50).as_bytes());
    write(
        root,
        "style.css",
        "body { margin: 0 }\n".repeat(40).as_bytes(),
    );
    write(
        root,
        "app.js",
        "console.log('kiln');\n".repeat(40).as_bytes(),
    );
    write(root, "tiny.txt", b"too short to compress");
    write(root, "noise.svg", &noise(4000));
    write(root, "logo.png", &noise(3000));
    write(root, "_headers", b"/*\n  X-Site: kiln\n");
    write(root, "_redirects", b"/old /index.html 301\n");
}

/// Bytes that do not compress: an SVG of them is tried and not kept.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Builds `src` into `out`, reusing `out` as it stands.
fn build(src: &Path, out: &Path, opts: &BuildOptions) -> BuildReport {
    build_pack(src, out, opts).unwrap()
}

/// A clean build of `src` (into a pack of its own); its bytes.
fn clean_bytes(src: &Path, opts: &BuildOptions) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("clean.pack");
    let clean = BuildOptions {
        base: Base::Clean,
        ..opts.clone()
    };
    let report = build(src, &out, &clean);
    assert_eq!(report.reused, 0);
    std::fs::read(out).unwrap()
}

/// Asserts the pack at `out` is the one a clean build of `src` writes.
fn assert_clean(src: &Path, out: &Path, opts: &BuildOptions, after: &str) {
    let incremental = std::fs::read(out).unwrap();
    assert!(
        incremental == clean_bytes(src, opts),
        "after {after}: the incremental pack differs from a clean build"
    );
    kiln::pack::verify::verify(&Pack::open(out).unwrap()).unwrap();
}

struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        site(&dir.path().join("src"));
        Site { dir }
    }
    fn src(&self) -> PathBuf {
        self.dir.path().join("src")
    }
    fn out(&self) -> PathBuf {
        self.dir.path().join("site.pack")
    }
}

#[test]
fn an_unchanged_site_reuses_every_encoding() {
    let site = Site::new();
    let opts = options();
    let first = build(&site.src(), &site.out(), &opts);
    assert_eq!(first.reused, 0);
    assert!(first.compressed > 90, "{}", first.compressed);
    let before = std::fs::read(site.out()).unwrap();
    let again = build(&site.src(), &site.out(), &opts);
    assert_eq!(again.compressed, 0);
    assert_eq!(again.reused, first.compressed);
    assert_eq!(again.base.as_deref(), Some(site.out().as_path()));
    assert!(std::fs::read(site.out()).unwrap() == before);
}

#[test]
fn edits_additions_deletions_and_renames_give_the_clean_pack() {
    let site = Site::new();
    let src = site.src();
    let opts = options();
    build(&src, &site.out(), &opts);

    // One page edited: only its three encodings are made.
    write(&src, "docs/p3.html", page(99).as_bytes());
    let report = build(&src, &site.out(), &opts);
    assert_eq!(report.compressed, 3);
    assert_clean(&src, &site.out(), &opts, "an edit");

    // A page added, another deleted.
    write(&src, "docs/new.html", page(77).as_bytes());
    std::fs::remove_file(src.join("docs/p4.html")).unwrap();
    let report = build(&src, &site.out(), &opts);
    assert_eq!(report.compressed, 3);
    assert_clean(&src, &site.out(), &opts, "an addition and a deletion");

    // A rename: the same bytes under another name compress nothing.
    std::fs::rename(src.join("docs/p5.html"), src.join("docs/renamed.html")).unwrap();
    let report = build(&src, &site.out(), &opts);
    assert_eq!(report.compressed, 0);
    assert_clean(&src, &site.out(), &opts, "a rename");

    // The rules change: headers and redirects, no body.
    write(&src, "_headers", b"/*\n  X-Site: kiln 2\n");
    write(&src, "_redirects", b"/older /index.html 302\n");
    let report = build(&src, &site.out(), &opts);
    assert_eq!(report.compressed, 0);
    assert_clean(&src, &site.out(), &opts, "new rules");

    // A noise file that was not worth compressing is not tried again.
    write(&src, "more-noise.svg", &noise(4000));
    let report = build(&src, &site.out(), &opts);
    assert_eq!(report.compressed, 0, "the same noise is known not to pay");
    write(&src, "more-noise.svg", &noise(4001));
    let report = build(&src, &site.out(), &opts);
    assert_eq!(report.compressed, 3);
    assert_clean(&src, &site.out(), &opts, "new noise");
}

#[test]
fn changed_settings_compress_only_the_encodings_they_change() {
    let site = Site::new();
    let src = site.src();
    let opts = options();
    let first = build(&src, &site.out(), &opts);
    let per_encoding = first.compressed / 3;

    // Another brotli quality: brotli again, zstd and gzip reused.
    let mut other = options();
    other.compress.brotli_quality = 4;
    let report = build(&src, &site.out(), &other);
    assert_eq!(report.compressed, per_encoding);
    assert_eq!(report.reused, 2 * per_encoding);
    assert_clean(&src, &site.out(), &other, "a new brotli quality");

    // Fewer encodings: all reused; back to maximum gzip: gzip again.
    let mut fewer = other.clone();
    fewer.compress.encodings = vec![Encoding::Br, Encoding::Gzip];
    let report = build(&src, &site.out(), &fewer);
    assert_eq!(report.compressed, 0);
    assert_clean(&src, &site.out(), &fewer, "fewer encodings");
    let mut max_gzip = fewer.clone();
    max_gzip.compress.gzip = CompressOptions::at(Level::Max).gzip;
    let report = build(&src, &site.out(), &max_gzip);
    assert_eq!(report.compressed, per_encoding);
    assert_clean(&src, &site.out(), &max_gzip, "gzip at level 9");

    // Zstd was dropped by the last two builds, so it is made again.
    let mut with_zstd = max_gzip.clone();
    with_zstd.compress.encodings = opts.compress.encodings.clone();
    let report = build(&src, &site.out(), &with_zstd);
    assert_eq!(report.compressed, per_encoding);
    assert_clean(&src, &site.out(), &with_zstd, "zstd again");
}

#[test]
fn streamed_files_and_archives_are_reused_too() {
    let site = Site::new();
    let src = site.src();
    // Every compressible file alone needs more than the buffer: each goes
    // through the pack in pieces, its bodies reused in pieces.
    let streamed = BuildOptions {
        buffer_bytes: 256,
        ..options()
    };
    let first = build(&src, &site.out(), &streamed);
    let whole = std::fs::read(site.out()).unwrap();
    assert!(
        whole == clean_bytes(&src, &options()),
        "streaming changes the pack"
    );
    write(&src, "docs/p7.html", page(123).as_bytes());
    let report = build(&src, &site.out(), &streamed);
    assert_eq!(report.compressed, 3);
    assert_eq!(report.reused, first.compressed - 3);
    assert_clean(&src, &site.out(), &options(), "a streamed edit");

    // A tar of the tree, rebuilt after an edit.
    let tar_path = site.dir.path().join("site.tar");
    let tar_of = |tar_path: &Path| {
        let mut builder = tar::Builder::new(File::create(tar_path).unwrap());
        builder.append_dir_all(".", &src).unwrap();
        builder.into_inner().unwrap();
    };
    tar_of(&tar_path);
    let tar_pack = site.dir.path().join("tar.pack");
    build(&tar_path, &tar_pack, &options());
    write(&src, "docs/p8.html", page(124).as_bytes());
    tar_of(&tar_path);
    let report = build(&tar_path, &tar_pack, &options());
    assert_eq!(report.compressed, 3);
    assert_clean(&tar_path, &tar_pack, &options(), "an edit in the archive");
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("run kiln")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_summary_counts_what_was_reused_and_compressed() {
    let site = Site::new();
    let (src, out) = (site.src(), site.out());
    let fast = ["--compression", "fast"];
    let o = kiln(&[&["build", s(&src), "-o", s(&out)][..], &fast].concat());
    assert!(o.status.success());
    let summary = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        summary.contains("68  compressed, 0 reused (no base pack)"),
        "{summary}"
    );
    assert!(summary.contains("peak RSS"), "{summary}");
    let o = kiln(&[&["build", s(&src), "-o", s(&out)][..], &fast].concat());
    let summary = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        summary.contains(&format!("0  compressed, 68 reused from {}", s(&out))),
        "{summary}"
    );
    // --base names another pack; --clean reuses nothing.
    let other = site.dir.path().join("other.pack");
    let o = kiln(
        &[
            &["build", s(&src), "-o", s(&other), "--base", s(&out)][..],
            &fast,
        ]
        .concat(),
    );
    let summary = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        summary.contains(&format!("68 reused from {}", s(&out))),
        "{summary}"
    );
    let o = kiln(&[&["build", s(&src), "-o", s(&other), "--clean"][..], &fast].concat());
    let summary = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(summary.contains("68  compressed, 0 reused"), "{summary}");
    assert!(std::fs::read(&other).unwrap() == std::fs::read(&out).unwrap());
}

/// Rewrites the header checksum after a header change.
fn reseal_header(bytes: &mut [u8]) {
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..HEADER_CHECKSUM_AT]);
    bytes[HEADER_CHECKSUM_AT..HEADER_CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
}

#[test]
fn an_unusable_base_means_a_clean_build_with_a_note() {
    let site = Site::new();
    let (src, out) = (site.src(), site.out());
    let fast = ["--compression", "fast"];
    assert!(
        kiln(&[&["build", "-q", s(&src), "-o", s(&out)][..], &fast].concat())
            .status
            .success()
    );
    let good = std::fs::read(&out).unwrap();
    let mut older = good.clone();
    older[8..12].copy_from_slice(&2u32.to_le_bytes());
    reseal_header(&mut older);
    let mut truncated = good.clone();
    truncated.truncate(good.len() / 2);
    let mut provenance_flipped = good.clone();
    let pack = Pack::open(&out).unwrap();
    let (off, _, _) = pack.section(kiln::pack::format::Section::Provenance);
    provenance_flipped[off as usize + 3] ^= 1;
    for (bad, why) in [
        (&older[..], "pack format 2"),
        (&truncated[..], "truncated"),
        (b"<html>not a pack</html>", "not a kiln pack"),
        (
            &provenance_flipped[..],
            "provenance section checksum mismatch",
        ),
    ] {
        std::fs::write(&out, bad).unwrap();
        let o = kiln(&[&["build", "-q", s(&src), "-o", s(&out)][..], &fast].concat());
        assert!(o.status.success());
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("kiln: note: {}: ", s(&out)))
                && err.contains(why)
                && err.trim_end().ends_with("; building without reusing it"),
            "{err}"
        );
        assert!(
            std::fs::read(&out).unwrap() == good,
            "after a base with {why}"
        );
    }
    // A missing --base is a note too.
    let missing = site.dir.path().join("missing.pack");
    let o = kiln(
        &[
            &["build", "-q", s(&src), "-o", s(&out), "--base", s(&missing)][..],
            &fast,
        ]
        .concat(),
    );
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.starts_with(&format!("kiln: note: {}: cannot open", s(&missing))),
        "{err}"
    );
}

#[test]
fn a_damaged_body_in_the_base_is_compressed_again() {
    let site = Site::new();
    let (src, out) = (site.src(), site.out());
    let opts = options();
    build(&src, &out, &opts);
    let good = std::fs::read(&out).unwrap();
    // The body of the first provenance record that kept one: one byte
    // flipped. Only the bodies section checksum sees it, which a build
    // does not read; the body's recorded hash does.
    let pack = Pack::open(&out).unwrap();
    let (off, len, _) = pack.section(kiln::pack::format::Section::Provenance);
    let body_off = good[off as usize..(off + len) as usize]
        .chunks_exact(PROVENANCE_LEN)
        .map(|r| u64::from_le_bytes(r[P_BODY_OFF..P_BODY_OFF + 8].try_into().unwrap()))
        .find(|&o| o != 0)
        .unwrap();
    drop(pack);
    let mut damaged = good.clone();
    damaged[body_off as usize] ^= 0x40;
    std::fs::write(&out, &damaged).unwrap();
    let report = build(&src, &out, &opts);
    assert_eq!(report.compressed, 1);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("does not match its recorded hash")),
        "{:?}",
        report.warnings
    );
    assert!(std::fs::read(&out).unwrap() == good);
}

/// A script of `n` lines, version `v`.
fn script(v: u32, n: u32) -> String {
    (0..n)
        .map(|i| {
            format!(
                "export const c{i} = {};\n",
                if i % 50 == 0 { v * 1000 + i } else { i }
            )
        })
        .collect()
}

#[test]
fn deltas_are_reused_and_kept_across_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BuildOptions {
        dictionaries: DictionaryOptions::default(),
        ..options()
    };
    for v in 1..=2 {
        let src = dir.path().join(format!("v{v}"));
        write(
            &src,
            &format!("js/app.{v}0a1b2c3d.js"),
            script(v, 2000).as_bytes(),
        );
        write(
            &src,
            "index.html",
            format!("{}<p>v{v}</p>", page(40)).as_bytes(),
        );
    }
    let v1 = dir.path().join("v1.pack");
    build(&dir.path().join("v1"), &v1, &opts);
    let with_base = |bases: Vec<PathBuf>| BuildOptions {
        base: Base::Packs(bases),
        ..opts.clone()
    };
    let v2 = dir.path().join("v2.pack");
    let first = build(&dir.path().join("v2"), &v2, &with_base(vec![v1.clone()]));
    // dcb and dcz of the script and of the page.
    assert_eq!(first.per_encoding[Encoding::Dcb as usize].count, 2);
    assert_eq!(first.per_encoding[Encoding::Dcz as usize].count, 2);
    let bytes = std::fs::read(&v2).unwrap();
    // The same build again: every delta reused, the same pack.
    let again = dir.path().join("again.pack");
    let report = build(
        &dir.path().join("v2"),
        &again,
        &with_base(vec![v2.clone(), v1.clone()]),
    );
    assert_eq!(report.compressed, 0);
    assert!(
        std::fs::read(&again).unwrap() == bytes,
        "the same bases, another pack"
    );
    // Rebuilt in place, without the old pack at hand: the deltas of the
    // base are carried over.
    let report = build(&dir.path().join("v2"), &v2, &opts);
    assert_eq!(report.compressed, 0);
    assert!(
        std::fs::read(&v2).unwrap() == bytes,
        "a rebuild in place lost the deltas"
    );
}
