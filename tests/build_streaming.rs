//! Bounded memory: a file larger than the build's buffer (`--buffer-bytes`,
//! set to a few MiB here) is compressed and written in pieces, and an
//! archive is read as a stream, its entries staged on disk; the build's
//! peak RSS, which its summary reports, stays far below the size of the
//! file, and the pack is the one a build holding everything in memory
//! writes.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

/// The buffer the streamed builds run with.
const BUFFER: u64 = 4 << 20;
/// The large file: ten times the buffer.
const LARGE: usize = 40 << 20;
/// What a streamed build may use at its peak: the process itself (about
/// 10 MiB in a debug build), the buffer and the encoders' state, and
/// still far less than the large file.
const PEAK_LIMIT_MIB: u64 = 32;

/// Text that compresses, like a large log or data file.
fn large_text() -> Vec<u8> {
    let mut text = Vec::with_capacity(LARGE + 100);
    let mut i: u64 = 0;
    while text.len() < LARGE {
        i += 1;
        writeln!(
            text,
            "{i:>9} kiln fires a site into one pack {}",
            i * 7919 % 1013
        )
        .unwrap();
    }
    text
}

/// `kiln build` with fast gzip and zstd (brotli is as streamed, and tested
/// on smaller files: here it would only cost time); the summary.
fn build(src: &Path, out: &Path, buffer: u64) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["build", "--compression", "fast", "--encodings", "gzip,zstd"])
        .arg("--buffer-bytes")
        .arg(buffer.to_string())
        .arg(src)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run kiln");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The peak RSS the summary reports, in MiB.
fn peak_mib(summary: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.contains("peak RSS"))
        .unwrap_or_else(|| panic!("no peak RSS in {summary}"));
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {line}"))
}

/// A site: the large file, and a hundred small pages.
fn site(root: &Path) {
    std::fs::create_dir_all(root.join("pages")).unwrap();
    std::fs::write(root.join("data.txt"), large_text()).unwrap();
    for i in 0..100 {
        let page = format!("<p>page {i}</p>\n").repeat(20 + i);
        std::fs::write(root.join(format!("pages/{i}.html")), page).unwrap();
    }
}

#[test]
fn a_file_larger_than_the_buffer_is_compressed_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    site(&src);
    let streamed = dir.path().join("streamed.pack");
    let summary = build(&src, &streamed, BUFFER);
    assert!(summary.contains("held at once ≤ 4 MiB"), "{summary}");
    let peak = peak_mib(&summary);
    assert!(
        peak < PEAK_LIMIT_MIB,
        "peak RSS {peak} MiB for a {} MiB file",
        LARGE >> 20
    );
    // Everything in memory at once: the same pack.
    let whole = dir.path().join("whole.pack");
    let summary = build(&src, &whole, 1 << 30);
    assert!(peak_mib(&summary) > (LARGE >> 20) as u64, "{summary}");
    assert!(std::fs::read(&streamed).unwrap() == std::fs::read(&whole).unwrap());

    let pack = kiln::pack::Pack::open(&streamed).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    let route = pack
        .lookup(kiln::pack::RouteKind::Exact, b"/data.txt")
        .unwrap();
    let identity = route.variant(kiln::pack::Encoding::Identity).unwrap();
    assert!(identity.body == large_text());
    let zstd = route.variant(kiln::pack::Encoding::Zstd).unwrap();
    assert!(zstd::decode_all(zstd.body).unwrap() == identity.body);
    let gzip = route.variant(kiln::pack::Encoding::Gzip).unwrap();
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gzip.body), &mut unzipped)
        .unwrap();
    assert!(unzipped == identity.body);
}

#[test]
fn an_archive_larger_than_the_buffer_is_read_as_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    site(&src);
    let archive = dir.path().join("site.tar.gz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&archive).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    tar.append_dir_all(".", &src).unwrap();
    tar.into_inner().unwrap().finish().unwrap();

    let from_archive = dir.path().join("archive.pack");
    let summary = build(&archive, &from_archive, BUFFER);
    let peak = peak_mib(&summary);
    assert!(
        peak < PEAK_LIMIT_MIB,
        "peak RSS {peak} MiB for an archive of {} MiB",
        LARGE >> 20
    );
    // The staging file is gone, and the pack is the directory's.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    let from_dir = dir.path().join("dir.pack");
    build(&src, &from_dir, BUFFER);
    assert!(std::fs::read(&from_archive).unwrap() == std::fs::read(&from_dir).unwrap());
}
