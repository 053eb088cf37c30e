//! Produces the encoded variants of a body: brotli, zstd and gzip (deflate
//! or zopfli), at maximum levels but for large brotli bodies by default
//! (`Level::High`), at maximum levels everywhere (`Level::Max`), or at
//! levels a hundred times faster for previews (`Level::Fast`). Every encoder here is
//! deterministic (no timestamps) and streams: it reads its input in pieces
//! and its output does not depend on how the input is cut, so a body held in
//! memory and one too large to hold give the same bytes, and a pack is
//! reproducible; parallelism comes from compressing many bodies at once,
//! and, for a brotli body longer than `BROTLI_PIECE_BYTES`, from its pieces.
//!
//! Brotli pieces: at quality 11 brotli makes about half a megabyte a second
//! on one core, so one large file would keep one core busy for minutes
//! while the others wait. Such a body is cut at fixed offsets (never by
//! thread count or read size: the output is the same on any machine); each
//! piece is compressed on its own, the ones after the first with the
//! `BROTLI_PIECE_HISTORY` bytes before them as brotli's custom dictionary
//! (their matches reach back into the previous piece as one stream's
//! would), and the pieces are joined by `brotli::concat` into one ordinary
//! brotli stream that any decoder reads. A body over `BROTLI_LARGE_BYTES`
//! is made in shorter pieces primed with the whole window, at
//! `Level::High` in groups of a long piece at quality 10 and three at the
//! brotli crate's quality 9.5 (quality 10 with quality 9's faster match
//! finder), so that the 200 MiB text of bench/COMPRESSION.md builds in
//! under a minute on two cores: bench/COMPRESSION.md has the trade-off
//! measured. The pieces of a body too large for a batch are made on every
//! core, the slow ones first, and its other encodings beside them
//! (`encode_br_in_parallel`).
//!
//! The keep rule: an encoded variant is stored only if it saves at least
//! 10 % of the identity size **and** at least 100 bytes. Below that a client
//! pays the decompression for (almost) nothing, and the pack grows for no gain.
//!
//! `settings_id` fingerprints what decides an encoding's output (encoder,
//! settings, keep rule); a pack records it with each encoded body, and the
//! next build reuses the body only when its fingerprint is the same.

use std::io::{self, Read, Write};
use std::num::NonZeroU64;

use clap::ValueEnum;

use crate::pack::Encoding;

/// Smallest saving, in bytes, for an encoded variant to be kept.
pub const MIN_SAVED_BYTES: usize = 100;
/// Smallest saving, in percent of the identity size, to be kept.
pub const MIN_SAVED_PERCENT: usize = 10;

/// Bumped whenever an encoder dependency (brotli, zstd, flate2 and its
/// back end, zopfli) or the way kiln drives it changes its output, so that
/// no build reuses a body the current encoders would not make. The test
/// `encoder_outputs_are_pinned` fails when that happens.
pub const ENCODER_EPOCH: u32 = 1;

/// A brotli body longer than this is made in pieces (see the module
/// documentation); a shorter one is one stream, as before.
pub const BROTLI_PIECE_BYTES: u64 = 4 << 20;
/// Input just before a piece that its matches may refer to. On the first
/// 32 MiB of the 200 MiB text of bench/COMPRESSION.md at quality 11, 4 MiB
/// left the body 2.4 % larger than one stream (5.1 % on the whole file),
/// 8 MiB 1.4 % for the CPU time of one stream, 12 MiB 0.8 % for 18 % more;
/// 8 MiB also lets two pieces work at once in the default buffer.
pub const BROTLI_PIECE_HISTORY: u64 = 8 << 20;
/// A brotli body longer than this is a large one: it is made at
/// `CompressOptions::brotli_large_quality` (10 at the default levels), in
/// pieces of `BROTLI_LARGE_PIECE_BYTES`. Quality 11 makes about 0.7 MB a
/// second on one core, so past this size it would take more than half a
/// minute on two; quality 10 is about twice as fast, and on the 200 MiB
/// text of bench/COMPRESSION.md its one stream is 2.6 % larger than
/// quality 11's.
pub const BROTLI_LARGE_BYTES: u64 = 32 << 20;
/// The pieces of a large brotli body and their history: the history is
/// the whole window (a window of 2^24 bytes reaches back 2^24 − 16), so a
/// piece loses no match that one stream would make. Each thread making a
/// piece holds its history, itself and its output (16 + 2 × 8 MiB) and the
/// encoder's tables.
pub const BROTLI_LARGE_PIECE_BYTES: u64 = 8 << 20;
pub const BROTLI_LARGE_PIECE_HISTORY: u64 = 16 << 20;
/// At `Level::High`, a large brotli body is cut in groups: one slow piece
/// of `BROTLI_HIGH_SLOW_PIECE_BYTES` at the large quality (10), primed
/// with `BROTLI_HIGH_SLOW_HISTORY`, then `BROTLI_HIGH_FAST_PIECES` pieces
/// of `BROTLI_LARGE_PIECE_BYTES` at the brotli crate's quality 9.5 with
/// the whole window as history. Quality 10 puts its history through its
/// binary-tree match finder, as much work per byte as the piece: a longer
/// slow piece and a shorter history spend more of its time on the piece
/// itself. On the 200 MiB text of bench/COMPRESSION.md this is 8.9 %
/// larger than one quality-11 stream for about 81 s of CPU (slow pieces
/// with 16 MiB of history: 8.8 % for 96 s).
pub const BROTLI_HIGH_SLOW_PIECE_BYTES: u64 = 14 << 20;
pub const BROTLI_HIGH_SLOW_HISTORY: u64 = 8 << 20;
pub const BROTLI_HIGH_FAST_PIECES: u64 = 3;

/// The input a brotli piece is given at a time, so that progress moves
/// within a piece (a piece at quality 10 takes seconds).
pub const BROTLI_PROGRESS_STEP: usize = 256 << 10;

/// Smallest and largest brotli window, log2 of bytes.
const BROTLI_MIN_LGWIN: u32 = 10;
const BROTLI_MAX_LGWIN: u32 = 24;

/// How gzip variants are produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GzipMode {
    /// zlib-compatible deflate at this level (0–9), via flate2.
    Deflate(u32),
    /// Zopfli: slower, a few percent smaller, still plain gzip.
    Zopfli,
}

/// A preset of compression levels (`--compression`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Level {
    /// Fast enough to fire a site in about a second: brotli 3, zstd 3,
    /// gzip 1.
    Fast,
    /// Brotli 11, zstd 19, gzip 9, but a brotli body over 32 MiB in
    /// pieces, a long one at quality 10 then three at 9.5 (about 9 %
    /// larger than 11's, 4 times sooner).
    High,
    /// The smallest bodies: brotli 11 everywhere, zstd 19, gzip 9.
    Max,
}

/// Which encodings to produce and how hard to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressOptions {
    /// Encoded variants to try, in `Encoding` order; never `Identity`.
    pub encodings: Vec<Encoding>,
    /// Brotli quality, 0–11.
    pub brotli_quality: u32,
    /// Brotli quality of a body over `BROTLI_LARGE_BYTES`, 0–11.
    pub brotli_large_quality: u32,
    /// Such a body is cut in groups of one long piece at that quality and
    /// `BROTLI_HIGH_FAST_PIECES` at quality 9.5 (`Level::High`).
    pub brotli_large_mixed: bool,
    /// Largest brotli window, log2 of bytes, 10–24; a body gets the
    /// smallest window that holds it, up to this (as the brotli tool does).
    pub brotli_lgwin: u32,
    /// deflate level or zopfli, for gzip variants.
    pub gzip: GzipMode,
    /// zstd level, 1–22 (above 19 needs more memory on the client).
    pub zstd_level: i32,
}

impl Default for CompressOptions {
    /// The default levels (`Level::High`), the default `br,gzip` set.
    fn default() -> Self {
        CompressOptions::at(Level::High)
    }
}

impl CompressOptions {
    /// The levels of `level`, for the default `br,gzip` set.
    pub fn at(level: Level) -> Self {
        let (brotli_quality, brotli_large_quality, gzip_level, zstd_level) = match level {
            Level::Max => (11, 11, 9, 19),
            Level::High => (11, 10, 9, 19),
            Level::Fast => (3, 3, 1, 3),
        };
        CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Gzip],
            brotli_quality,
            brotli_large_quality,
            brotli_large_mixed: level == Level::High,
            brotli_lgwin: BROTLI_MAX_LGWIN,
            gzip: GzipMode::Deflate(gzip_level),
            zstd_level,
        }
    }
}

/// The keep rule (see the module documentation).
pub fn worth_keeping(identity_len: u64, encoded_len: u64) -> bool {
    let saved = identity_len.saturating_sub(encoded_len);
    saved >= MIN_SAVED_BYTES as u64 && saved * 100 >= identity_len * MIN_SAVED_PERCENT as u64
}

/// True when a body of `len` bytes is worth trying to compress at all: a
/// shorter one cannot save `MIN_SAVED_BYTES`.
pub fn worth_trying(len: u64) -> bool {
    len >= MIN_SAVED_BYTES as u64
}

/// The brotli window for a body of `len` bytes: the smallest that holds
/// it, within 10 and `max`.
fn brotli_window(len: u64, max: u32) -> u32 {
    let max = max.clamp(BROTLI_MIN_LGWIN, BROTLI_MAX_LGWIN);
    (BROTLI_MIN_LGWIN..max)
        // A window of 2^lg bytes reaches back 2^lg − 16 bytes.
        .find(|&lg| (1u64 << lg) - 16 >= len)
        .unwrap_or(max)
}

/// Fingerprint of everything that decides the output of `encoding` for a
/// given input: the encoder and its version (`ENCODER_EPOCH`), its
/// settings, the keep rule. Two builds with the same fingerprint make the
/// same bytes of the same source.
pub fn settings_id(encoding: Encoding, opts: &CompressOptions) -> u64 {
    let settings = match encoding {
        Encoding::Identity => "identity".to_owned(),
        Encoding::Br => format!(
            "br quality={} max-lgwin={} pieces={BROTLI_PIECE_BYTES} history={BROTLI_PIECE_HISTORY} \
             large={BROTLI_LARGE_BYTES} quality={} pieces={BROTLI_LARGE_PIECE_BYTES} \
             history={BROTLI_LARGE_PIECE_HISTORY}{}",
            opts.brotli_quality,
            opts.brotli_lgwin.clamp(BROTLI_MIN_LGWIN, BROTLI_MAX_LGWIN),
            opts.brotli_large_quality,
            match opts.brotli_large_mixed {
                true => format!(
                    " but groups of {BROTLI_HIGH_SLOW_PIECE_BYTES} history={BROTLI_HIGH_SLOW_HISTORY} \
                     then {BROTLI_HIGH_FAST_PIECES} at 9.5"
                ),
                false => String::new(),
            },
        ),
        Encoding::Zstd => format!("zstd level={}", opts.zstd_level),
        // Made against a dictionary (`build::dictionaries`), whose settings
        // name the dictionary too.
        Encoding::Dcb | Encoding::Dcz => format!("{} without a dictionary", encoding.token()),
        Encoding::Gzip => match opts.gzip {
            GzipMode::Deflate(level) => format!("gzip deflate level={}", level.min(9)),
            GzipMode::Zopfli => "gzip zopfli iterations=15".to_owned(),
        },
    };
    let text = format!(
        "kiln encoders {ENCODER_EPOCH}; {settings}; keep if saves {MIN_SAVED_BYTES} bytes and {MIN_SAVED_PERCENT}%"
    );
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// Encodes the `len` bytes `input` yields, read in pieces, into `out`.
pub fn encode_to(
    input: &mut dyn Read,
    len: u64,
    encoding: Encoding,
    opts: &CompressOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    match encoding {
        Encoding::Identity => {
            io::copy(input, out)?;
        }
        Encoding::Br if len > BROTLI_PIECE_BYTES => {
            let mut join = BrotliJoin::new();
            // The history of the next piece, then the piece; `buf` holds
            // the input from `held`.
            let mut buf: Vec<u8> = Vec::new();
            let mut held = 0;
            for range in brotli_layout(len, opts) {
                if range.history < held {
                    return Err(io::Error::other("a brotli piece reaches back too far"));
                }
                buf.drain(..(range.history - held) as usize);
                held = range.history;
                let at = buf.len();
                buf.resize(at + (range.end - range.start) as usize, 0);
                input.read_exact(&mut buf[at..])?;
                join.push(&brotli_piece(&buf, &range, len, opts, &|_, _| ())?, out)?;
            }
            join.finish(out)?;
        }
        Encoding::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: brotli_quality(len, opts) as i32,
                lgwin: brotli_window(len, opts.brotli_lgwin) as i32,
                size_hint: usize::try_from(len).unwrap_or(usize::MAX),
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &mut *input, &mut &mut *out, &params)?;
        }
        Encoding::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(out, opts.zstd_level)?;
            // The size in the frame header, and parameters fitted to it, as
            // a one-shot compression would choose them.
            enc.set_pledged_src_size(Some(len))?;
            enc.include_contentsize(true)?;
            io::copy(input, &mut enc)?;
            enc.finish()?;
        }
        Encoding::Dcb | Encoding::Dcz => {
            return Err(io::Error::other(format!(
                "{} is made against a dictionary",
                encoding.token()
            )));
        }
        Encoding::Gzip => match opts.gzip {
            GzipMode::Deflate(level) => {
                // GzBuilder writes mtime 0 and no name: the output depends on
                // the data alone.
                let mut enc =
                    flate2::GzBuilder::new().write(out, flate2::Compression::new(level.min(9)));
                io::copy(input, &mut enc)?;
                enc.finish()?;
            }
            GzipMode::Zopfli => {
                let options = zopfli::Options {
                    iteration_count: NonZeroU64::new(15).expect("non-zero"),
                    ..Default::default()
                };
                zopfli::compress(options, zopfli::Format::Gzip, input, out)?;
            }
        },
    }
    Ok(())
}

/// The brotli quality of a body of `len` bytes.
pub fn brotli_quality(len: u64, opts: &CompressOptions) -> u32 {
    if len > BROTLI_LARGE_BYTES {
        opts.brotli_large_quality
    } else {
        opts.brotli_quality
    }
}

/// Where one brotli piece lies in its body, in bytes from the start, and
/// how it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrotliPiece {
    /// Where its history (the custom dictionary) begins.
    pub history: u64,
    /// Where the piece begins.
    pub start: u64,
    /// Where it ends.
    pub end: u64,
    /// Made at quality 9.5 rather than the body's quality.
    pub fast: bool,
}

/// The pieces of a brotli body of `len` bytes longer than
/// `BROTLI_PIECE_BYTES`, in order: fixed offsets that depend on the length
/// and the options alone. Each piece's history begins no earlier than the
/// one before's.
pub fn brotli_layout(len: u64, opts: &CompressOptions) -> Vec<BrotliPiece> {
    // (length, history, fast) of the pieces of a group, repeated.
    let group: &[(u64, u64, bool)] = if len <= BROTLI_LARGE_BYTES {
        &[(BROTLI_PIECE_BYTES, BROTLI_PIECE_HISTORY, false)]
    } else if opts.brotli_large_mixed {
        &[
            (
                BROTLI_HIGH_SLOW_PIECE_BYTES,
                BROTLI_HIGH_SLOW_HISTORY,
                false,
            ),
            (BROTLI_LARGE_PIECE_BYTES, BROTLI_LARGE_PIECE_HISTORY, true),
            (BROTLI_LARGE_PIECE_BYTES, BROTLI_LARGE_PIECE_HISTORY, true),
            (BROTLI_LARGE_PIECE_BYTES, BROTLI_LARGE_PIECE_HISTORY, true),
        ][..=BROTLI_HIGH_FAST_PIECES as usize]
    } else {
        &[(BROTLI_LARGE_PIECE_BYTES, BROTLI_LARGE_PIECE_HISTORY, false)]
    };
    let mut pieces = Vec::new();
    let mut start = 0;
    for &(piece, history, fast) in group.iter().cycle() {
        if start >= len {
            break;
        }
        let end = (start + piece).min(len);
        pieces.push(BrotliPiece {
            history: start.saturating_sub(history),
            start,
            end,
            fast,
        });
        start = end;
    }
    pieces
}

/// How many pieces a brotli body of `len` bytes is made of.
pub fn brotli_pieces(len: u64, opts: &CompressOptions) -> usize {
    if len > BROTLI_PIECE_BYTES {
        brotli_layout(len, opts).len()
    } else {
        1
    }
}

/// The window of every piece of a body of `len` bytes: the one the joined
/// stream declares, which holds the longest piece and its history.
fn brotli_piece_window(len: u64, opts: &CompressOptions) -> u32 {
    let span = if len > BROTLI_LARGE_BYTES {
        BROTLI_HIGH_SLOW_PIECE_BYTES.max(BROTLI_LARGE_PIECE_BYTES) + BROTLI_LARGE_PIECE_HISTORY
    } else {
        BROTLI_PIECE_BYTES + BROTLI_PIECE_HISTORY
    };
    brotli_window(span, opts.brotli_lgwin)
}

/// Compresses one piece of a brotli body of `len` bytes made in pieces:
/// `input` holds the piece's history followed by the piece. The piece is a
/// stream of its own, shaped to be joined by `BrotliJoin`: the first one
/// appendable, the others catable, without brotli's static dictionary
/// (whose references would mean other bytes once joined) but with their
/// history as a custom dictionary, and the last bytes of the history as
/// the context of the first literals, as the decoder will see them.
/// `done(piece, n)` is told of the piece's bytes as the encoder takes them, a
/// `BROTLI_PROGRESS_STEP` at a time (the output does not depend on it: the
/// encoder makes its blocks of what it has buffered, however it came).
pub fn brotli_piece(
    input: &[u8],
    piece: &BrotliPiece,
    len: u64,
    opts: &CompressOptions,
    done: &dyn Fn(&BrotliPiece, u64),
) -> io::Result<Vec<u8>> {
    use brotli::enc::backward_references::UnionHasher;
    use brotli::enc::encode::{BrotliEncoderOperation, BrotliEncoderStateStruct};

    let history = (piece.start - piece.history) as usize;
    let size = (piece.end - piece.start) as usize;
    if input.len() != history + size {
        return Err(io::Error::other("a brotli piece read short"));
    }
    // The brotli crate's quality 9.5 is quality 10 with its `q9_5` flag.
    let at_9_5 = piece.fast;
    let mut state = BrotliEncoderStateStruct::new(brotli::enc::StandardAlloc::default());
    state.params = brotli::enc::BrotliEncoderParams {
        quality: if at_9_5 {
            10
        } else {
            brotli_quality(len, opts) as i32
        },
        q9_5: at_9_5,
        lgwin: brotli_piece_window(len, opts) as i32,
        size_hint: size,
        appendable: true,
        catable: piece.start > 0,
        ..Default::default()
    };
    if history > 0 {
        state.set_custom_dictionary_with_optional_precomputed_hasher(
            history,
            &input[..history],
            UnionHasher::Uninit,
            true,
        );
    }
    let data = &input[history..];
    let mut out = vec![0u8; size + size / 8 + 1024];
    let (mut next_in, mut next_out) = (0usize, 0usize);
    let mut available_out = out.len();
    let stuck = || io::Error::other(format!("brotli could not compress a piece of {len} bytes"));
    // Given a step at a time, then finished.
    while next_in < data.len() {
        let step = (data.len() - next_in).min(BROTLI_PROGRESS_STEP);
        let mut available_in = step;
        while available_in > 0 {
            let progressed = state.compress_stream(
                BrotliEncoderOperation::BROTLI_OPERATION_PROCESS,
                &mut available_in,
                data,
                &mut next_in,
                &mut available_out,
                &mut out,
                &mut next_out,
                &mut None,
                &mut |_, _, _, _| (),
            );
            if !progressed || available_out == 0 {
                return Err(stuck());
            }
        }
        done(piece, step as u64);
    }
    let mut available_in = 0;
    while !state.is_finished() {
        let progressed = state.compress_stream(
            BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
            &mut available_in,
            data,
            &mut next_in,
            &mut available_out,
            &mut out,
            &mut next_out,
            &mut None,
            &mut |_, _, _, _| (),
        );
        if !progressed || (available_out == 0 && !state.is_finished()) {
            return Err(stuck());
        }
    }
    out.truncate(next_out);
    Ok(out)
}

/// Joins the pieces of a brotli body, in order, into one stream written to
/// an output.
pub struct BrotliJoin {
    cat: brotli::concat::BroCatli,
    buf: Vec<u8>,
}

impl Default for BrotliJoin {
    fn default() -> Self {
        Self::new()
    }
}

impl BrotliJoin {
    /// A join with no piece yet.
    pub fn new() -> BrotliJoin {
        BrotliJoin {
            cat: brotli::concat::BroCatli::new(),
            buf: vec![0; 64 << 10],
        }
    }

    /// Appends the next piece.
    pub fn push(&mut self, piece: &[u8], out: &mut dyn Write) -> io::Result<()> {
        use brotli::concat::BroCatliResult;
        self.cat.new_brotli_file();
        let mut taken = 0;
        loop {
            let mut made = 0;
            let result = self.cat.stream(piece, &mut taken, &mut self.buf, &mut made);
            out.write_all(&self.buf[..made])?;
            match result {
                BroCatliResult::NeedsMoreOutput => continue,
                BroCatliResult::NeedsMoreInput | BroCatliResult::Success => return Ok(()),
                err => {
                    return Err(io::Error::other(format!(
                        "cannot join brotli pieces: {err:?}"
                    )));
                }
            }
        }
    }

    /// Ends the stream.
    pub fn finish(mut self, out: &mut dyn Write) -> io::Result<()> {
        use brotli::concat::BroCatliResult;
        loop {
            let mut made = 0;
            let result = self.cat.finish(&mut self.buf, &mut made);
            out.write_all(&self.buf[..made])?;
            match result {
                BroCatliResult::NeedsMoreOutput => continue,
                BroCatliResult::Success => return Ok(()),
                err => {
                    return Err(io::Error::other(format!(
                        "cannot join brotli pieces: {err:?}"
                    )));
                }
            }
        }
    }
}

/// Work done on the threads of `encode_br_in_parallel` beside the pieces:
/// another encoding of the same body.
pub type Beside<'a> = Box<dyn FnOnce() -> io::Result<()> + Send + 'a>;

/// How `encode_br_in_parallel` runs.
pub struct InParallel<'a> {
    /// Threads making the pieces and the work beside them.
    pub threads: usize,
    /// Bytes of made pieces that may wait for the writer: within it a
    /// piece starts out of order (the slow ones first), past it only the
    /// pieces the writer reaches first start.
    pub waiting: u64,
    /// Work that starts before any piece, each job on a thread of its own.
    pub beside: Vec<Beside<'a>>,
}

/// Encodes a brotli body of `len` bytes in pieces on `run.threads`
/// threads, after starting the jobs `run.beside` on the same threads, so
/// that every thread is busy until the end; `read(at, n)` gives `n` bytes
/// of the input from `at`, `done(piece, n)` is told of the bytes of each piece as
/// they are compressed. The output is `encode_to`'s. The slow pieces (at
/// the body's quality) start before the fast ones, so that the last to
/// run are short and no thread is left waiting for one long piece; the
/// writer joins the pieces in order as they come. Memory: each thread
/// holds a piece's input and output and the encoder's tables; made pieces
/// wait for the writer within `run.waiting` bytes (see `InParallel`).
pub fn encode_br_in_parallel(
    read: &(dyn Fn(u64, usize) -> io::Result<Vec<u8>> + Sync),
    len: u64,
    opts: &CompressOptions,
    run: InParallel<'_>,
    done: &(dyn Fn(&BrotliPiece, u64) + Sync),
    out: &mut dyn Write,
) -> io::Result<()> {
    use std::collections::{BTreeMap, VecDeque};
    use std::sync::{Condvar, Mutex};

    struct Shared<'a> {
        beside: VecDeque<Beside<'a>>,
        /// The pieces in the order they start, and the next of them.
        order: Vec<usize>,
        next: usize,
        started: Vec<bool>,
        /// The first piece not started.
        lowest: usize,
        /// The first piece not written.
        written: usize,
        /// Bytes of `made`.
        held: u64,
        made: BTreeMap<usize, io::Result<Vec<u8>>>,
        /// The first job beside that failed.
        failed: Option<io::Error>,
        stopped: bool,
    }
    enum Task<'a> {
        Beside(Beside<'a>),
        Piece(usize),
    }
    let layout = brotli_layout(len, opts);
    let pieces = layout.len();
    let mut order: Vec<usize> = (0..pieces).filter(|&i| !layout[i].fast).collect();
    order.extend((0..pieces).filter(|&i| layout[i].fast));
    let workers = run.threads.clamp(1, pieces + run.beside.len());
    let shared = Mutex::new(Shared {
        beside: run.beside.into(),
        order,
        next: 0,
        started: vec![false; pieces],
        lowest: 0,
        written: 0,
        held: 0,
        made: BTreeMap::new(),
        failed: None,
        stopped: false,
    });
    let changed = Condvar::new();
    let lock = || shared.lock().unwrap_or_else(|e| e.into_inner());
    let waiting = run.waiting;
    // The next job beside, or piece, for a free thread; `None` when all
    // are taken or the writer stopped.
    let next_task = || {
        let mut state = lock();
        loop {
            if state.stopped {
                return None;
            }
            if let Some(job) = state.beside.pop_front() {
                return Some(Task::Beside(job));
            }
            while state.next < pieces && state.started[state.order[state.next]] {
                state.next += 1;
            }
            if state.lowest >= pieces {
                return None;
            }
            let room = state.held < waiting;
            let index = if room && state.next < pieces {
                state.order[state.next]
            } else if room || state.lowest == state.written {
                state.lowest
            } else {
                state = changed.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            state.started[index] = true;
            while state.lowest < pieces && state.started[state.lowest] {
                state.lowest += 1;
            }
            return Some(Task::Piece(index));
        }
    };
    let work = || {
        while let Some(task) = next_task() {
            match task {
                Task::Beside(job) => {
                    // A panic is an error like any other, so that the
                    // writer does not wait forever.
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                        .unwrap_or_else(|_| Err(io::Error::other("an encoder panicked")));
                    if let Err(e) = result {
                        let mut state = lock();
                        state.failed.get_or_insert(e);
                        state.stopped = true;
                        changed.notify_all();
                    }
                }
                Task::Piece(index) => {
                    let range = layout[index];
                    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        read(range.history, (range.end - range.history) as usize)
                            .and_then(|input| brotli_piece(&input, &range, len, opts, done))
                    }))
                    .unwrap_or_else(|_| Err(io::Error::other("brotli panicked on a piece")))
                    .map_err(|e| io::Error::other(format!("br compression failed: {e}")));
                    let mut state = lock();
                    state.held += made.as_ref().map_or(0, |m| m.len() as u64);
                    state.made.insert(index, made);
                    changed.notify_all();
                }
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(work);
        }
        let mut join = BrotliJoin::new();
        let result = (|| -> io::Result<()> {
            for index in 0..pieces {
                let made = {
                    let mut state = lock();
                    loop {
                        if let Some(e) = state.failed.take() {
                            return Err(e);
                        }
                        if let Some(made) = state.made.remove(&index) {
                            state.written = index + 1;
                            state.held -= made.as_ref().map_or(0, |m| m.len() as u64);
                            break made;
                        }
                        state = changed.wait(state).unwrap_or_else(|e| e.into_inner());
                    }
                };
                changed.notify_all();
                join.push(&made?, out)?;
            }
            join.finish(out)
        })();
        if result.is_err() {
            // No worker starts anything more.
            lock().stopped = true;
            changed.notify_all();
        }
        result
    })?;
    // The jobs beside may have ended after the last piece.
    match shared
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .failed
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Encodes `data` with one encoding.
pub fn encode(data: &[u8], encoding: Encoding, opts: &CompressOptions) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    encode_to(&mut &data[..], data.len() as u64, encoding, opts, &mut out)?;
    Ok(out)
}

/// `data` in `encoding` if that passes the keep rule, else `None`. Data too
/// short to save `MIN_SAVED_BYTES` is not even tried.
pub fn encode_if_worth(
    data: &[u8],
    encoding: Encoding,
    opts: &CompressOptions,
) -> io::Result<Option<Vec<u8>>> {
    if !worth_trying(data.len() as u64) || encoding == Encoding::Identity {
        return Ok(None);
    }
    let encoded = encode(data, encoding, opts)?;
    Ok(worth_keeping(data.len() as u64, encoded.len() as u64).then_some(encoded))
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
            Encoding::Dcb | Encoding::Dcz => panic!("a delta needs its dictionary"),
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

    /// Yields its data in pieces of varying, odd sizes.
    struct Pieces<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.step = self.step * 7 % 4093 + 1;
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// Text that compresses, long enough for several blocks of each encoder.
    fn sample_text() -> Vec<u8> {
        (0..10_000)
            .map(|i| {
                format!(
                    "<li id=\"n{i}\">item {} of the list</li>\n",
                    i * 7919 % 1000
                )
            })
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn output_does_not_depend_on_how_the_input_is_cut() {
        let text = sample_text();
        for gzip in [GzipMode::Deflate(9), GzipMode::Deflate(1), GzipMode::Zopfli] {
            let opts = CompressOptions {
                gzip,
                brotli_quality: 5,
                ..CompressOptions::default()
            };
            let input = if gzip == GzipMode::Zopfli {
                &text[..50_000]
            } else {
                &text[..]
            };
            for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
                let whole = encode(input, encoding, &opts).unwrap();
                let mut pieces = Vec::new();
                let mut reader = Pieces {
                    data: input,
                    step: 1,
                };
                encode_to(
                    &mut reader,
                    input.len() as u64,
                    encoding,
                    &opts,
                    &mut pieces,
                )
                .unwrap();
                assert!(
                    whole == pieces,
                    "{encoding:?} {gzip:?} depends on the pieces"
                );
                assert_eq!(decode(encoding, &whole), input);
            }
        }
    }

    /// Varied text of `len` bytes (words at random): compresses, not
    /// trivially.
    fn varied_text(len: usize) -> Vec<u8> {
        let words = [
            "pack", "site", "kiln", "brotli", "piece", "of", "the", "a", "body",
        ];
        let mut text = Vec::with_capacity(len + 16);
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        while text.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
            text.push(if x.is_multiple_of(11) { b'\n' } else { b' ' });
        }
        text.truncate(len);
        text
    }

    /// A brotli body in pieces, made one piece after the other, and on
    /// 1 to 3 threads with 1 to 4 pieces in flight: the same bytes, one
    /// stream that decodes to the input.
    #[test]
    fn brotli_pieces_give_one_stream_whatever_the_threads() {
        let len = 2 * BROTLI_PIECE_BYTES + 12_345;
        let text = varied_text(len as usize);
        let opts = CompressOptions {
            brotli_quality: 5,
            ..CompressOptions::default()
        };
        assert_eq!(brotli_pieces(len, &opts), 3);
        let whole = encode(&text, Encoding::Br, &opts).unwrap();
        assert!(decode(Encoding::Br, &whole) == text);
        let mut cut = Vec::new();
        let mut reader = Pieces {
            data: &text,
            step: 1,
        };
        encode_to(&mut reader, len, Encoding::Br, &opts, &mut cut).unwrap();
        assert!(cut == whole, "depends on how the input is cut");
        let read = |at: u64, n: usize| Ok(text[at as usize..at as usize + n].to_vec());
        let gzip_opts = CompressOptions {
            gzip: GzipMode::Deflate(1),
            ..opts.clone()
        };
        for threads in 1..=3 {
            // Made pieces wait within nothing (one piece at a time), part
            // of a piece, or plenty.
            for waiting in [0, 1 << 10, 64 << 20] {
                let done = std::sync::atomic::AtomicU64::new(0);
                let gzip = std::sync::Mutex::new(Vec::new());
                let mut parallel = Vec::new();
                let beside: Beside<'_> = Box::new(|| {
                    let mut gzip = gzip.lock().unwrap();
                    encode_to(&mut &text[..], len, Encoding::Gzip, &gzip_opts, &mut *gzip)
                });
                encode_br_in_parallel(
                    &read,
                    len,
                    &opts,
                    InParallel {
                        threads,
                        waiting,
                        beside: vec![beside],
                    },
                    &|_, n| {
                        done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    },
                    &mut parallel,
                )
                .unwrap();
                assert!(
                    parallel == whole,
                    "{threads} threads, {waiting} bytes waiting: other bytes"
                );
                assert_eq!(done.into_inner(), len);
                assert!(decode(Encoding::Gzip, &gzip.into_inner().unwrap()) == text);
            }
        }
    }

    /// Quality 10 and 11 hash a piece's history with another hasher (a
    /// binary tree) and prime it differently: a body of two pieces at
    /// quality 10 decodes.
    #[test]
    fn brotli_pieces_at_high_quality_decode() {
        let len = BROTLI_PIECE_BYTES + 100_000;
        let text = varied_text(len as usize);
        let opts = CompressOptions {
            brotli_quality: 10,
            ..CompressOptions::default()
        };
        let pieces = encode(&text, Encoding::Br, &opts).unwrap();
        assert!(decode(Encoding::Br, &pieces) == text);
    }

    /// A body over `BROTLI_LARGE_BYTES` is made at the large quality, in
    /// the longer pieces; one just under it at the quality asked for, in
    /// the short ones. Both decode to their input.
    #[test]
    fn a_large_brotli_body_has_its_own_quality_and_pieces() {
        let opts = CompressOptions {
            brotli_quality: 2,
            brotli_large_quality: 1,
            ..CompressOptions::default()
        };
        assert_eq!(brotli_quality(BROTLI_LARGE_BYTES, &opts), 2);
        assert_eq!(brotli_quality(BROTLI_LARGE_BYTES + 1, &opts), 1);
        let plain = CompressOptions {
            brotli_large_mixed: false,
            ..opts.clone()
        };
        assert_eq!(brotli_pieces(BROTLI_LARGE_BYTES, &opts), 8);
        assert_eq!(brotli_pieces(BROTLI_LARGE_BYTES + 1, &plain), 5);
        let len = BROTLI_LARGE_BYTES + 12_345;
        assert_eq!(
            brotli_layout(len, &plain)[1],
            BrotliPiece {
                history: 0,
                start: BROTLI_LARGE_PIECE_BYTES,
                end: 2 * BROTLI_LARGE_PIECE_BYTES,
                fast: false,
            }
        );
        // `Level::High`: a long slow piece, then fast ones with the whole
        // window, again and again; every history within the one before.
        let long = 100 * BROTLI_LARGE_BYTES + 7;
        let mixed = brotli_layout(long, &opts);
        let group =
            BROTLI_HIGH_SLOW_PIECE_BYTES + BROTLI_HIGH_FAST_PIECES * BROTLI_LARGE_PIECE_BYTES;
        assert_eq!(
            mixed[..2],
            [
                BrotliPiece {
                    history: 0,
                    start: 0,
                    end: BROTLI_HIGH_SLOW_PIECE_BYTES,
                    fast: false,
                },
                BrotliPiece {
                    history: 0,
                    start: BROTLI_HIGH_SLOW_PIECE_BYTES,
                    end: BROTLI_HIGH_SLOW_PIECE_BYTES + BROTLI_LARGE_PIECE_BYTES,
                    fast: true,
                },
            ]
        );
        let slow = mixed[BROTLI_HIGH_FAST_PIECES as usize + 1];
        assert_eq!(
            (slow.history, slow.start, slow.fast),
            (group - BROTLI_HIGH_SLOW_HISTORY, group, false)
        );
        assert_eq!((mixed[0].start, mixed.last().unwrap().end), (0, long));
        for pair in mixed.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
            assert!(pair[0].history <= pair[1].history);
            assert_eq!(
                pair[1].start - pair[1].history,
                match pair[1].fast {
                    true => BROTLI_LARGE_PIECE_HISTORY,
                    false => BROTLI_HIGH_SLOW_HISTORY,
                }
                .min(pair[1].start)
            );
        }
        let text = varied_text(len as usize);
        let large = encode(&text, Encoding::Br, &opts).unwrap();
        assert!(decode(Encoding::Br, &large) == text);
        let asked = CompressOptions {
            brotli_large_quality: 2,
            ..opts.clone()
        };
        let at_two = encode(&text, Encoding::Br, &asked).unwrap();
        assert!(decode(Encoding::Br, &at_two) == text);
        assert!(large != at_two, "the large quality was not used");
        assert_ne!(
            settings_id(Encoding::Br, &opts),
            settings_id(Encoding::Br, &asked)
        );
    }

    /// `Level::High` is `Level::Max` but for bodies over
    /// `BROTLI_LARGE_BYTES`, whose pieces are made at quality 10 and 9.5
    /// (`BROTLI_HIGH_Q10_EVERY`): the joined stream decodes to the input.
    #[test]
    fn high_mixes_qualities_in_large_bodies_only() {
        let (high, max) = (
            CompressOptions::at(Level::High),
            CompressOptions::at(Level::Max),
        );
        let small = &sample_text()[..60_000];
        assert!(
            encode(small, Encoding::Br, &high).unwrap()
                == encode(small, Encoding::Br, &max).unwrap()
        );
        assert_ne!(
            settings_id(Encoding::Br, &high),
            settings_id(Encoding::Br, &max)
        );
        // The quality-10 pieces at quality 1 here, to keep the test short;
        // the others are at 9.5 whatever the large quality.
        let mixed = CompressOptions {
            brotli_large_quality: 1,
            ..high
        };
        let plain = CompressOptions {
            brotli_large_mixed: false,
            ..mixed.clone()
        };
        let len = BROTLI_LARGE_BYTES + 12_345;
        let text = varied_text(len as usize);
        let made = encode(&text, Encoding::Br, &mixed).unwrap();
        assert!(decode(Encoding::Br, &made) == text);
        // On two threads the slow pieces start first: the same bytes.
        let read = |at: u64, n: usize| Ok(text[at as usize..at as usize + n].to_vec());
        let run = InParallel {
            threads: 2,
            waiting: 64 << 20,
            beside: Vec::new(),
        };
        let mut parallel = Vec::new();
        encode_br_in_parallel(&read, len, &mixed, run, &|_, _| (), &mut parallel).unwrap();
        assert!(parallel == made, "other bytes on two threads");
        // `Level::Max` keeps the large quality (11) in every piece.
        assert!(brotli_layout(len, &max).iter().all(|p| !p.fast));
        assert_eq!(brotli_quality(len, &max), 11);
        let at_one = encode(&text, Encoding::Br, &plain).unwrap();
        assert!(made.len() < at_one.len(), "{} {}", made.len(), at_one.len());
    }

    /// A piece tells its progress a `BROTLI_PROGRESS_STEP` at a time, and
    /// makes the same bytes as given whole to the encoder.
    #[test]
    fn a_piece_tells_its_progress_in_steps() {
        let len = 2 * BROTLI_PIECE_BYTES + 1000;
        let text = varied_text(len as usize);
        let opts = CompressOptions {
            brotli_quality: 1,
            ..CompressOptions::default()
        };
        let range = brotli_layout(len, &opts)[1];
        let input = &text[range.history as usize..range.end as usize];
        let steps = std::sync::Mutex::new(Vec::new());
        let piece = brotli_piece(input, &range, len, &opts, &|_, n| {
            steps.lock().unwrap().push(n)
        })
        .unwrap();
        let steps = steps.into_inner().unwrap();
        assert_eq!(
            steps.len(),
            (BROTLI_PIECE_BYTES as usize).div_ceil(BROTLI_PROGRESS_STEP)
        );
        assert!(steps.iter().all(|&n| n <= BROTLI_PROGRESS_STEP as u64));
        assert_eq!(steps.iter().sum::<u64>(), range.end - range.start);
        let whole = encode(&text, Encoding::Br, &opts).unwrap();
        assert!(decode(Encoding::Br, &whole) == text);
        assert!(!piece.is_empty());
    }

    /// A failed read of a piece fails the body; no thread is left waiting.
    #[test]
    fn a_failed_piece_fails_the_body() {
        let len = 3 * BROTLI_PIECE_BYTES;
        // Every read that reaches past the first piece fails (a later
        // piece's read starts in its history, which may begin at 0).
        let read = |at: u64, n: usize| {
            if at + n as u64 > BROTLI_PIECE_BYTES {
                Err(io::Error::other("gone"))
            } else {
                Ok(vec![b'a'; n])
            }
        };
        let opts = CompressOptions {
            brotli_quality: 1,
            ..CompressOptions::default()
        };
        let run = |read: &(dyn Fn(u64, usize) -> io::Result<Vec<u8>> + Sync),
                   beside: Vec<Beside<'static>>| {
            let run = InParallel {
                threads: 2,
                waiting: 64 << 20,
                beside,
            };
            encode_br_in_parallel(read, len, &opts, run, &|_, _| (), &mut Vec::new())
        };
        let err = run(&read, Vec::new()).unwrap_err();
        assert_eq!(err.to_string(), "br compression failed: gone");
        // A failed job beside fails it too, the pieces all made.
        let whole = |_: u64, n: usize| Ok(vec![b'a'; n]);
        assert!(run(&whole, Vec::new()).is_ok());
        let failing: Beside<'static> = Box::new(|| Err(io::Error::other("gzip failed")));
        let err = run(&whole, vec![failing]).unwrap_err();
        assert_eq!(err.to_string(), "gzip failed");
    }

    /// The fingerprints below pin what this version of the encoders makes
    /// of a sample: when one fails, an encoder's output changed (a
    /// dependency update): bump `ENCODER_EPOCH` so that no build reuses
    /// bodies the new encoders would not make, then update the fingerprint.
    #[test]
    fn encoder_outputs_are_pinned() {
        let text = sample_text();
        let mut found = Vec::new();
        for level in [Level::Max, Level::Fast] {
            let opts = CompressOptions::at(level);
            for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
                let input = &text[..60_000];
                found.push(xxhash_rust::xxh3::xxh3_64(
                    &encode(input, encoding, &opts).unwrap(),
                ));
            }
        }
        let zopfli = CompressOptions {
            gzip: GzipMode::Zopfli,
            ..CompressOptions::default()
        };
        found.push(xxhash_rust::xxh3::xxh3_64(
            &encode(&text[..20_000], Encoding::Gzip, &zopfli).unwrap(),
        ));
        let pinned: [u64; 7] = [
            3433015516318168187,
            16829636905182446001,
            8762734602420972752,
            2333225495293503579,
            4919763787906748158,
            11728379866317396790,
            6095646125570836955,
        ];
        assert_eq!(found, pinned, "encoder output changed: bump ENCODER_EPOCH");
    }

    #[test]
    fn settings_ids_differ_by_encoder_and_level() {
        let max = CompressOptions::at(Level::Max);
        let fast = CompressOptions::at(Level::Fast);
        let mut ids = Vec::new();
        for opts in [&max, &fast] {
            for encoding in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
                ids.push(settings_id(encoding, opts));
            }
        }
        ids.push(settings_id(
            Encoding::Gzip,
            &CompressOptions {
                gzip: GzipMode::Zopfli,
                ..max.clone()
            },
        ));
        let mut distinct = ids.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), ids.len());
        assert_eq!(
            settings_id(Encoding::Br, &max),
            settings_id(Encoding::Br, &max.clone())
        );
    }

    #[test]
    fn a_body_gets_the_smallest_brotli_window_that_holds_it() {
        assert_eq!(brotli_window(0, 24), 10);
        assert_eq!(brotli_window(1008, 24), 10);
        assert_eq!(brotli_window(1009, 24), 11);
        assert_eq!(brotli_window(1 << 20, 24), 21);
        assert_eq!(brotli_window(1 << 30, 24), 24);
        assert_eq!(brotli_window(1 << 30, 22), 22);
    }
}
