//! One large compressible file: its brotli body is made of pieces
//! compressed apart (on every core when the file is streamed through the
//! pack), joined into one ordinary brotli stream that an independent
//! decoder reads back; the pack is the same byte for byte whatever the
//! thread count and the buffer (the file compressed whole in a batch, or
//! streamed with one or several pieces in flight). A build whose stderr is
//! a pipe writes its progress as lines.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};

use kiln::build::compress::{BROTLI_LARGE_BYTES, BROTLI_PIECE_BYTES};
use kiln::pack::{Encoding, Pack, RouteKind};

/// The large file: four and a half pieces.
const LARGE: u64 = 4 * BROTLI_PIECE_BYTES + BROTLI_PIECE_BYTES / 2;

/// Text of words drawn at random from a small vocabulary: compresses about
/// as well as prose (three to four times), not trivially.
fn large_text() -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "kiln", "fires", "a", "site", "into", "one", "pack", "the", "server", "maps", "it", "and",
        "answers", "every", "request", "with", "slices", "of", "brotli", "gzip", "bodies", "made",
        "at", "build",
    ];
    let mut text = Vec::with_capacity(LARGE as usize + 64);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut line: u64 = 0;
    while (text.len() as u64) < LARGE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.extend_from_slice(WORDS[(x % WORDS.len() as u64) as usize].as_bytes());
        line += 1;
        text.push(if line.is_multiple_of(12) { b'\n' } else { b' ' });
        if x.is_multiple_of(97) {
            write!(text, "{} ", x % 100_000).unwrap();
        }
    }
    text.truncate(LARGE as usize);
    text
}

/// `kiln build` of `src` into `out` on `threads` threads within `buffer`
/// bytes, brotli at a quality that keeps the test short.
fn build(src: &Path, out: &Path, threads: usize, buffer: u64) {
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["build", "--encodings", "br", "--brotli-quality", "5"])
        .arg("--buffer-bytes")
        .arg(buffer.to_string())
        .arg(src)
        .arg("-o")
        .arg(out)
        .env("RAYON_NUM_THREADS", threads.to_string())
        .stderr(Stdio::piped())
        .output()
        .expect("run kiln");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `data` decoded by the brotli command (Google's decoder, not the crate
/// kiln's encoder comes with) when it is installed, else by the
/// brotli-decompressor crate.
fn unbrotli(data: &[u8]) -> Vec<u8> {
    match Command::new("brotli")
        .args(["-d", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(mut child) => {
            let mut stdin = child.stdin.take().unwrap();
            let data = data.to_vec();
            let feeder = std::thread::spawn(move || stdin.write_all(&data));
            let out = child.wait_with_output().unwrap();
            feeder.join().unwrap().unwrap();
            assert!(out.status.success(), "brotli -d failed");
            out.stdout
        }
        Err(_) => {
            let mut out = Vec::new();
            brotli::Decompressor::new(data, 1 << 16)
                .read_to_end(&mut out)
                .unwrap();
            out
        }
    }
}

#[test]
fn a_large_file_is_compressed_in_pieces_the_same_on_any_machine() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let text = large_text();
    std::fs::write(src.join("data.txt"), &text).unwrap();
    std::fs::write(src.join("index.html"), "<p>a page</p>\n".repeat(50)).unwrap();

    // Whole in a batch on one thread; streamed with two pieces in flight
    // on four threads; streamed with one piece at a time on two.
    let cases: [(usize, u64); 3] = [(1, 128 << 20), (4, 54 << 20), (2, 4 << 20)];
    let mut packs = Vec::new();
    for (threads, buffer) in cases {
        let out = dir.path().join(format!("{threads}-{buffer}.pack"));
        build(&src, &out, threads, buffer);
        packs.push((threads, buffer, std::fs::read(&out).unwrap()));
    }
    let (_, _, first) = &packs[0];
    for (threads, buffer, pack) in &packs[1..] {
        assert!(
            pack == first,
            "{threads} threads, {buffer} bytes of buffer: another pack"
        );
    }

    let pack = Pack::open(&dir.path().join(format!("1-{}.pack", 128 << 20))).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    let route = pack.lookup(RouteKind::Exact, b"/data.txt").unwrap();
    let br = route.variant(Encoding::Br).expect("a brotli variant");
    assert!(
        br.body.len() < text.len() / 2,
        "brotli kept {} of {} bytes",
        br.body.len(),
        text.len()
    );
    assert!(
        unbrotli(br.body) == text,
        "the brotli body decodes to another text"
    );
}

/// A build that compresses for more than a second (here 3 MiB at brotli
/// 11: several seconds on any machine) writes progress lines; the one of a
/// small site writes none (`build_cli`'s tests expect its stderr empty).
#[test]
fn a_build_whose_stderr_is_a_pipe_logs_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("data.txt"), &large_text()[..(3 << 20)]).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["build", "--encodings", "br"])
        .arg(&src)
        .arg("-o")
        .arg(dir.path().join("site.pack"))
        .stderr(Stdio::piped())
        .output()
        .expect("run kiln");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("kiln: compressing 1 body (3.0 MiB)")),
        "no first progress line in {stderr:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("kiln: compressing: ")),
        "no progress figure in {stderr:?}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("kiln: compressed 3.0 MiB in ")),
        "no last progress line in {stderr:?}"
    );
}

/// A rebuild says what it reuses and what it compresses, and its
/// progress counts only what it compresses.
#[test]
fn a_rebuild_says_what_it_reuses_and_what_it_compresses() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let text = large_text();
    std::fs::write(src.join("kept.txt"), &text[..(2 << 20)]).unwrap();
    std::fs::write(src.join("changed.txt"), &text[(2 << 20)..(5 << 20)]).unwrap();
    let pack = dir.path().join("site.pack");
    let build = || {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["build", "--encodings", "br"])
            .arg(&src)
            .arg("-o")
            .arg(&pack)
            .stderr(Stdio::piped())
            .output()
            .expect("run kiln")
    };
    let o = build();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(src.join("changed.txt"), &text[(5 << 20)..(8 << 20)]).unwrap();
    let o = build();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.first().is_some_and(|l| l.starts_with(
            "kiln: reusing 1 body (2.0 MiB), compressing 1 (3.0 MiB) (each encoding counted)"
        )),
        "no first progress line in {stderr:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("kiln: compressing: ") && l.contains(" of 3.0 MiB)")),
        "{stderr:?}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("kiln: compressed 3.0 MiB in ")),
        "{stderr:?}"
    );
}

/// A body over `BROTLI_LARGE_BYTES` streamed through the pack: its
/// brotli pieces, gzip and zstd bodies are made at once on two threads
/// (the others into scratch files, stored after); the pack is the one a
/// build holding the file whole makes, it verifies, and every body decodes
/// to the file; so does a rebuild that makes gzip alone. Low levels keep
/// it short in a debug build.
#[test]
fn a_large_body_is_made_with_its_other_encodings_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let len = BROTLI_LARGE_BYTES + (3 << 20) + 777;
    let mut text = large_text();
    while (text.len() as u64) < len {
        let more: Vec<u8> = text.iter().rev().take(LARGE as usize).copied().collect();
        text.extend_from_slice(&more);
    }
    text.truncate(len as usize);
    std::fs::write(src.join("data.txt"), &text).unwrap();
    let build_at = |gzip_level: &str, buffer: u64, out: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["build", "--encodings", "br,zstd,gzip", "--brotli-quality"])
            .args(["1", "--gzip-level", gzip_level, "--zstd-level", "1"])
            .arg("--buffer-bytes")
            .arg(buffer.to_string())
            .arg(&src)
            .arg("-o")
            .arg(out)
            .env("RAYON_NUM_THREADS", "2")
            .stderr(Stdio::piped())
            .output()
            .expect("run kiln");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read(out).unwrap()
    };
    let build = |buffer: u64, out: &Path| build_at("1", buffer, out);
    let streamed = dir.path().join("streamed.pack");
    let whole = build(1 << 30, &dir.path().join("whole.pack"));
    assert!(
        build(16 << 20, &streamed) == whole,
        "streamed: another pack"
    );

    let pack = Pack::open(&streamed).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    let route = pack.lookup(RouteKind::Exact, b"/data.txt").unwrap();
    let body = |encoding| route.variant(encoding).expect("a variant").body;
    let mut br = Vec::new();
    brotli::Decompressor::new(body(Encoding::Br), 1 << 16)
        .read_to_end(&mut br)
        .unwrap();
    assert!(br == text, "the brotli body decodes to another text");
    let mut gzip = Vec::new();
    flate2::read::GzDecoder::new(body(Encoding::Gzip))
        .read_to_end(&mut gzip)
        .unwrap();
    assert!(gzip == text, "the gzip body decodes to another text");
    let zstd = zstd::decode_all(body(Encoding::Zstd)).unwrap();
    assert!(zstd == text, "the zstd body decodes to another text");

    // A rebuild at another gzip level copies the brotli and zstd bodies
    // and makes only gzip: the pack a build holding the file whole makes.
    let again = build_at("2", 16 << 20, &streamed);
    assert!(
        again == build_at("2", 1 << 30, &dir.path().join("whole2.pack")),
        "rebuilt: another pack"
    );
    let pack = Pack::open(&streamed).unwrap();
    kiln::pack::verify::verify(&pack).unwrap();
    let route = pack.lookup(RouteKind::Exact, b"/data.txt").unwrap();
    let mut gzip = Vec::new();
    flate2::read::GzDecoder::new(route.variant(Encoding::Gzip).unwrap().body)
        .read_to_end(&mut gzip)
        .unwrap();
    assert!(
        gzip == text,
        "the rebuilt gzip body decodes to another text"
    );
}
