//! `kiln build`: reads a directory or tar archive, decides the routes,
//! compresses and prepares every response's headers, and writes one pack.
//!
//! Pipeline: `source` (read and filter files) → `netlify` (`_headers`,
//! `_redirects`) → `routes` (what answers each path) → `assemble`
//! (compression via `compress`, header blocks via `headers` and `mime`,
//! written with `PackWriter`, which only ever renames a complete pack over
//! the output). The same source always gives a byte-identical pack.
//!
//! A build is incremental: the pack it replaces (or `--base`) records how
//! each of its encoded bodies was made (source hash, encoding, settings),
//! and every body that would be made again the same way is copied instead
//! of compressed. The result is the same pack a clean build would write.
//! A base that cannot be used (another format version, damaged) only
//! means a clean build, with a note.

pub mod assemble;
pub mod compress;
pub mod compressor;
pub mod cost;
pub mod delta_maker;
pub mod dictionaries;
pub mod headers;
pub mod listing;
pub mod live;
pub mod mime;
pub mod netlify;
pub mod progress;
pub mod routes;
pub mod source;
pub mod urlpath;

use std::fmt;
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use self::assemble::{AssembleInput, EncodingTotals, assemble};
use self::compress::{CompressOptions, GzipMode, Level};
use self::dictionaries::{DictionaryOptions, History, MAX_DELTA_VERSIONS};
use self::headers::CachePolicy;
use self::netlify::{HeaderRule, RedirectRule, parse_headers, parse_redirects};
use self::routes::{RouteOptions, STRIP_SUFFIXES, SuffixChoice, plan_routes};
use self::source::SourceFile;
use self::source::ignore::Why;
use crate::pack::format::{DELTA_ENCODINGS, ENCODINGS, Section};
use crate::pack::{Encoding, Pack, PackStats, PackWriter};

/// Root file holding per-path headers (never served).
pub const HEADERS_FILE: &str = "_headers";
/// Root file holding redirect and rewrite rules (never served).
pub const REDIRECTS_FILE: &str = "_redirects";
/// Largest `_headers` or `_redirects` file: they are parsed in memory.
pub const MAX_RULES_FILE_BYTES: u64 = 16 << 20;

/// Default `BuildOptions::buffer_bytes`: 64 MiB.
pub const DEFAULT_BUFFER_BYTES: u64 = 64 << 20;

/// How gzip variants are made (`--gzip`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GzipTool {
    /// flate2 deflate at `--gzip-level`.
    Deflate,
    /// Zopfli: much slower, a few percent smaller.
    Zopfli,
}

/// `kiln build SOURCE -o SITE.pack`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The site: a directory, or a tar archive (plain, .tar.gz/.tgz, .tar.zst).
    pub source: PathBuf,
    /// The pack to write (replaced atomically, never left half-written);
    /// or `s3://BUCKET/PREFIX/HOST.pack` (`gs://…`, `az://…`): built into a
    /// temporary file, then published as `kiln publish` does (verified,
    /// uploaded atomically; docs/fleet.md).
    #[arg(short, long, value_name = "SITE.pack")]
    pub output: PathBuf,
    #[command(flatten)]
    pub store: crate::store::EndpointArgs,
    /// Encodings to store besides identity, for compressible types only:
    /// a comma-separated subset of br, zstd, gzip, or "none". An encoded
    /// variant is kept only if it saves at least 10 % and 100 bytes. zstd
    /// is not in the default: every browser that accepts it accepts
    /// brotli, whose bodies are smaller (bench/COMPRESSION.md). (How hard
    /// each is compressed is --compression.)
    // `--compress`, its name before, still works for the scripts that
    // use it; the help shows only the name that cannot be confused with
    // --compression.
    #[arg(
        long,
        alias = "compress",
        value_name = "LIST",
        default_value = "br,gzip"
    )]
    pub encodings: String,
    /// How hard to compress: high (brotli 11, zstd 19, gzip 9, but a file
    /// over 32 MiB in brotli pieces, one in three at quality 10 and the
    /// others at 9.5: 200 MiB of text in about a minute on 2 cores, about
    /// 12 % larger than brotli 11), max (brotli 11 everywhere: the
    /// smallest bodies, a large file 3 to 5 times slower) or fast (brotli 3, zstd 3, gzip 1: about a
    /// hundredth of the CPU time; on the Python docs, brotli bodies a
    /// third larger, gzip 40 %). Which encodings is --encodings.
    #[arg(long, value_enum, default_value = "high")]
    pub compression: Level,
    /// gzip encoder.
    #[arg(long, value_enum, default_value = "deflate")]
    pub gzip: GzipTool,
    /// deflate level for gzip variants (0-9; default: by --compression).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=9))]
    pub gzip_level: Option<u32>,
    /// Brotli quality of every file, however large (0-11; default: by
    /// --compression).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=11))]
    pub brotli_quality: Option<u32>,
    /// zstd level (1-22; default: by --compression).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=22))]
    pub zstd_level: Option<i32>,
    /// Reuse the encoded bodies of this pack instead of the one at the
    /// output path (the default): a body is copied instead of compressed
    /// when its source bytes and settings are the same. Repeatable, and a
    /// folder stands for its packs, newest first: every pack given holds
    /// earlier versions that delta variants are made against (the first
    /// one's bodies are also reused).
    #[arg(long, value_name = "OLD.pack|DIR", conflicts_with = "clean")]
    pub base: Vec<PathBuf>,
    /// Offer compressible responses as dictionaries for their later
    /// versions (`Use-As-Dictionary`, RFC 9842) and store delta variants
    /// (dcb, dcz) against the earlier versions the base packs hold: auto
    /// (the default) or off.
    #[arg(long, value_enum, default_value = "auto")]
    pub dictionaries: DictionaryMode,
    /// Delta variants per file: against at most this many earlier
    /// versions, the latest first (1-16).
    #[arg(long, value_name = "N", default_value_t = dictionaries::DEFAULT_DELTA_VERSIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DELTA_VERSIONS as u64))]
    pub delta_versions: u64,
    /// Compress everything again: reuse nothing of an earlier pack.
    #[arg(long)]
    pub clean: bool,
    /// File data held in memory at once (sources and their encoded
    /// variants); a file that needs more is streamed through the pack.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_BUFFER_BYTES, hide = true)]
    pub buffer_bytes: u64,
    /// Cache-Control for everything not content-hashed (default: HTML
    /// "public, max-age=0, must-revalidate", others "public, max-age=3600").
    #[arg(long, value_name = "VALUE")]
    pub cache_control: Option<String>,
    /// Cache-Control for content-hashed asset names (default
    /// "public, max-age=31536000, immutable").
    #[arg(long, value_name = "VALUE")]
    pub immutable_cache_control: Option<String>,
    /// Do not serve `dir/index.*` at `/dir/`.
    #[arg(long)]
    pub no_index: bool,
    /// Do not serve `page.html` at `/page`.
    #[arg(long)]
    pub no_strip: bool,
    /// Ignore `_wildcard.*` fallback files (they stay reachable by name).
    #[arg(long)]
    pub no_wildcard: bool,
    /// Do not use the root `404.html` as the not-found page.
    #[arg(long = "no-404")]
    pub no_404: bool,
    /// Do not redirect `/dir` to `/dir/`.
    #[arg(long)]
    pub no_dir_redirect: bool,
    /// Serve at `/dir/` of every folder without an index file an HTML
    /// listing of its files and subfolders (names, sizes, modification
    /// times), made now like any page.
    #[arg(long)]
    pub index_pages: bool,
    /// Build a pack even when the source has nothing to serve (an empty
    /// folder or archive, or every file left out): without it that is an
    /// error, since a site generator that failed often leaves just that.
    #[arg(long)]
    pub allow_empty: bool,
    /// Follow symbolic links of a directory source that lead out of it
    /// (by default they are skipped with a warning, so that `ln -s
    /// /etc/passwd site/` publishes nothing): for a tree that links
    /// shared files from elsewhere, such as Debian's documentation
    /// packages (`_static/jquery.js`). What they lead to is still screened
    /// for private keys and ignored names. Also KILN_FOLLOW_EXTERNAL_LINKS
    /// (1/0, yes/no, true/false).
    #[arg(long, env = "KILN_FOLLOW_EXTERNAL_LINKS", value_parser = env_bool("KILN_FOLLOW_EXTERNAL_LINKS"),
          num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false",
          hide_default_value = true, value_name = "yes|no", hide_env = true)]
    pub follow_external_links: bool,
    /// Ignore the root `_headers` file (it is still not served).
    #[arg(long)]
    pub no_headers_file: bool,
    /// Ignore the root `_redirects` file (it is still not served).
    #[arg(long)]
    pub no_redirects_file: bool,
    /// Refuse an archive that expands to more than this many bytes (link
    /// copies included), so that a small one cannot fill the disk; a
    /// directory has no limit. The default is 16 GiB.
    #[arg(long, value_name = "BYTES", default_value_t = source::DEFAULT_MAX_SOURCE_BYTES)]
    pub max_source_bytes: u64,
    /// Drop this many leading components from archive entry names, like
    /// tar. Without it, an archive whose every entry lies under one folder
    /// (`tar czf site.tgz public/`) is served from inside that folder (the
    /// summary says so); 0 keeps the folder.
    #[arg(long, value_name = "N")]
    pub strip_components: Option<usize>,
    /// No progress bar and no summary (warnings and errors still go to stderr).
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// After the summary, list every file and folder the ignore rules left
    /// out, and why, and every URL several files could serve (`/f`: f.html,
    /// not f.txt).
    #[arg(short, long)]
    pub verbose: bool,
}

/// `--dictionaries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DictionaryMode {
    /// `Use-As-Dictionary` on compressible responses, delta variants
    /// against the earlier versions the base packs hold.
    Auto,
    /// Neither.
    Off,
}

/// How a build shows the progress of its compression on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Nothing (`--quiet`, previews).
    Silent,
    /// A bar redrawn in place: stderr is a terminal.
    Bar,
    /// A line now and then, and a note when the compression looks long:
    /// stderr is a pipe or a file (a CI log, a service's journal), where a
    /// bar would show nothing until the end.
    Lines,
}

/// All the switches of a build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildOptions {
    /// Encodings and levels.
    pub compress: CompressOptions,
    /// `Cache-Control` defaults and overrides.
    pub cache: CachePolicy,
    /// Which routing rules apply.
    pub routes: RouteOptions,
    /// Read the root `_headers`.
    pub headers_file: bool,
    /// Read the root `_redirects`.
    pub redirects_file: bool,
    /// How the compression's progress shows on stderr.
    pub progress: Progress,
    /// The most an archive may expand to (`--max-source-bytes`).
    pub max_source_bytes: u64,
    /// Leading components dropped from archive names (`--strip-components`;
    /// `None`: an archive's one top folder, if it has one).
    pub strip_components: Option<usize>,
    /// File data held in memory at once (a batch of sources and their
    /// encoded variants): bounds the memory a build needs, whatever the
    /// size of the site; a file that alone needs more is streamed.
    pub buffer_bytes: u64,
    /// Which earlier pack's encoded bodies to reuse.
    pub base: Base,
    /// `Use-As-Dictionary` and delta variants.
    pub dictionaries: DictionaryOptions,
    /// Put the live preview's script tag into every HTML page (`live`):
    /// for `kiln serve DIR --watch` only, never for a pack on disk.
    pub live_reload: bool,
    /// Files and folders that cannot be read are left out with a warning
    /// (a preview, built as the user it is served as), not an error.
    pub leave_out_unreadable: bool,
    /// A source with nothing to serve makes an empty pack, not an error
    /// (`--allow-empty`; a preview of an empty folder).
    pub allow_empty: bool,
    /// Symbolic links of a directory source that lead out of it are
    /// followed, not skipped (`--follow-external-links`).
    pub follow_external_links: bool,
}

/// The packs an incremental build reuses encoded bodies from and takes
/// earlier versions from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Base {
    /// The pack at the output path, if there is one (the default).
    Output,
    /// These packs or folders of packs (`--base`): the first pack's bodies
    /// are reused, every pack gives earlier versions.
    Packs(Vec<PathBuf>),
    /// None: compress everything (`--clean`).
    Clean,
}

impl Default for BuildOptions {
    /// Maximum compression, every routing rule on, no progress bar.
    fn default() -> Self {
        BuildOptions {
            compress: CompressOptions::default(),
            cache: CachePolicy::default(),
            routes: RouteOptions::default(),
            headers_file: true,
            redirects_file: true,
            progress: Progress::Silent,
            max_source_bytes: source::DEFAULT_MAX_SOURCE_BYTES,
            strip_components: None,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            base: Base::Output,
            dictionaries: DictionaryOptions::default(),
            live_reload: false,
            leave_out_unreadable: false,
            allow_empty: false,
            follow_external_links: false,
        }
    }
}

/// The `Cache-Control` of a preview's responses (`--preview-cache-control`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum PreviewCacheControl {
    /// `no-cache` on every response, whatever the site or its `_headers`
    /// say: a browser revalidates each use (a 304 when nothing changed),
    /// so an edit shows at the next load.
    #[default]
    NoCache,
    /// What a `kiln build` of the site would send.
    Site,
}

impl BuildOptions {
    /// Settings for a local preview: br and gzip at `level` (fast unless
    /// asked otherwise), `Cache-Control` as `cache_control` says; what the
    /// user building it cannot read is left out.
    pub fn preview(level: Level, cache_control: PreviewCacheControl) -> Self {
        BuildOptions {
            compress: CompressOptions::at(level),
            cache: CachePolicy {
                revalidate_all: cache_control == PreviewCacheControl::NoCache,
                ..CachePolicy::default()
            },
            leave_out_unreadable: true,
            // A folder is previewed while it is being filled.
            allow_empty: true,
            ..BuildOptions::default()
        }
    }
}

/// What a build did, for the summary and for tests.
#[derive(Debug, Default)]
pub struct BuildReport {
    /// Files kept from the source (after ignore rules, without `_headers`
    /// and `_redirects`).
    pub files: u64,
    /// Their total size.
    pub bytes_in: u64,
    /// Routes written (exact, wildcard, not-found).
    pub routes: u64,
    /// Pattern rules stored for run-time evaluation.
    pub rules: u64,
    /// `_redirects` lines skipped because a file is served at their `from`.
    pub shadowed_rules: Vec<usize>,
    /// What the source held that is not in the pack, and why (a folder
    /// once, with a trailing '/'), sorted by path.
    pub left_out: Vec<(String, Why)>,
    /// The top folder of an archive its names were read without.
    pub stripped: Option<String>,
    /// Stripped URLs several files could serve, and which one does.
    pub suffix_choices: Vec<SuffixChoice>,
    /// Distinct bodies per encoding, indexed by `Encoding as usize`
    /// (delta encodings included).
    pub per_encoding: [EncodingTotals; 6],
    /// Bytes not stored thanks to de-duplication.
    pub dedup_saved: u64,
    /// Size of the written pack.
    pub pack_bytes: u64,
    /// Encodings compressed by this build.
    pub compressed: u64,
    /// Encodings reused from the base pack instead.
    pub reused: u64,
    /// The base pack used, if any.
    pub base: Option<PathBuf>,
    /// `BuildOptions::buffer_bytes`.
    pub buffer_bytes: u64,
    /// The process's peak resident memory so far, in bytes.
    pub peak_rss: u64,
    /// Wall time of the whole build.
    pub elapsed: Duration,
    /// One line each; printed on stderr by `run`.
    pub warnings: Vec<String>,
    /// One line each, printed on stderr by `run`: why no base was used,
    /// though one was asked for or found.
    pub notes: Vec<String>,
}

impl fmt::Display for BuildReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "files       {:>10}  {:>14} bytes",
            self.files, self.bytes_in
        )?;
        if let Some(folder) = &self.stripped {
            writeln!(
                f,
                "archive     every entry under {folder}/: served from inside it \
                 (--strip-components 0 keeps it)"
            )?;
        }
        if !self.left_out.is_empty() {
            let counts: Vec<String> = Why::ALL
                .iter()
                .filter_map(|why| {
                    let n = self.left_out.iter().filter(|(_, w)| w == why).count();
                    (n > 0).then(|| format!("{n} {why}"))
                })
                .collect();
            writeln!(
                f,
                "left out    {:>10}  {}; -v lists them",
                self.left_out.len(),
                counts.join(", ")
            )?;
        }
        writeln!(
            f,
            "routes      {:>10}  ({} run-time rules)",
            self.routes, self.rules
        )?;
        if let Some(first) = self.suffix_choices.first() {
            writeln!(
                f,
                "suffixes    {:>10}  URLs with several files, the first of {} serves: {} is {}; -v lists them",
                self.suffix_choices.len(),
                STRIP_SUFFIXES.join(" "),
                first.key,
                first.served
            )?;
        }
        for e in ENCODINGS.into_iter().chain(DELTA_ENCODINGS) {
            let t = self.per_encoding[e as usize];
            if e.is_delta() && t.count == 0 {
                continue;
            }
            writeln!(
                f,
                "{:<11} {:>10}  {:>14} bytes",
                e.token(),
                t.count,
                t.bytes
            )?;
        }
        writeln!(f, "dedup saved {:>10}  {:>14} bytes", "", self.dedup_saved)?;
        let from = match &self.base {
            Some(base) => format!("reused from {}", base.display()),
            None => "reused (no base pack)".to_owned(),
        };
        writeln!(
            f,
            "encodings   {:>10}  compressed, {} {from}",
            self.compressed, self.reused
        )?;
        if !self.shadowed_rules.is_empty() {
            let lines: Vec<String> = self.shadowed_rules.iter().map(|l| l.to_string()).collect();
            writeln!(
                f,
                "_redirects lines shadowed by files (use '!' to force): {}",
                lines.join(", ")
            )?;
        }
        writeln!(f, "pack        {:>10}  {:>14} bytes", "", self.pack_bytes)?;
        writeln!(
            f,
            "memory      {:>10}  peak RSS, file data held at once ≤ {} MiB",
            format!("{} MiB", self.peak_rss >> 20),
            self.buffer_bytes >> 20
        )?;
        write!(f, "time        {:>10.2?}", self.elapsed)
    }
}

/// Builds the pack at `out` from `source`.
pub fn build_pack(source: &Path, out: &Path, opts: &BuildOptions) -> anyhow::Result<BuildReport> {
    let started = Instant::now();
    if out.is_dir() {
        bail!(
            "{}: is a directory, expected a pack file path",
            out.display()
        );
    }
    let out_dir = match out.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) if !parent.is_dir() => bail!(
            "{}: the directory {} does not exist",
            out.display(),
            parent.display()
        ),
        Some(parent) => parent.to_path_buf(),
        None => PathBuf::from("."),
    };
    if let (Ok(a), Ok(b)) = (std::fs::metadata(source), std::fs::metadata(out))
        && (a.dev(), a.ino()) == (b.dev(), b.ino())
    {
        bail!(
            "{}: is the source itself; writing the pack there would replace the site",
            out.display()
        );
    }
    let (packs, mut notes) = open_bases(&opts.base, out);
    // Created first so that an unwritable output fails before the long
    // compression step.
    let mut writer =
        PackWriter::create(out).with_context(|| format!("{}: cannot create", out.display()))?;
    let strays: Vec<String> = writer
        .removed_strays()
        .iter()
        .map(|p| {
            format!(
                "{}: removed, the temporary file of an interrupted build",
                p.display()
            )
        })
        .collect();
    let mut report = fire(
        source,
        &mut writer,
        opts,
        &Workspace {
            base: packs.reuse.as_ref(),
            history: &packs.history(&opts.dictionaries),
            staging_dir: Some(out_dir),
            exclude: Some(out.to_path_buf()),
            out_name: out.display().to_string(),
        },
    )?;
    let stats = writer
        .finish()
        .with_context(|| format!("{}: cannot write", out.display()))?;
    report.notes.append(&mut notes);
    report.notes.extend(strays);
    report.finish(&stats, started);
    Ok(report)
}

/// The earlier packs a build reads.
struct BasePacks {
    /// The pack whose encoded bodies are reused.
    reuse: Option<Pack>,
    /// The other packs holding earlier versions, in the order given.
    others: Vec<Pack>,
}

impl BasePacks {
    /// The earlier versions these packs hold (none when dictionaries are
    /// off).
    fn history(&self, dictionaries: &DictionaryOptions) -> History<'_> {
        if !dictionaries.enabled {
            return History::of(&[]);
        }
        let packs: Vec<&Pack> = self.reuse.iter().chain(&self.others).collect();
        History::of(&packs)
    }
}

/// Opens the base packs `base` names for a build writing `out`, with a
/// one-line note for each that cannot be used: the first one's bodies are
/// reused (its provenance records are checked: they are small; a body is
/// checked against its recorded hash when it is reused), every one gives
/// earlier versions.
fn open_bases(base: &Base, out: &Path) -> (BasePacks, Vec<String>) {
    let paths: Vec<PathBuf> = match base {
        Base::Clean => Vec::new(),
        Base::Output if !out.exists() => Vec::new(),
        Base::Output => vec![out.to_path_buf()],
        Base::Packs(paths) => paths.iter().flat_map(|p| packs_in(p, out)).collect(),
    };
    let mut notes = Vec::new();
    let mut packs = BasePacks {
        reuse: None,
        others: Vec::new(),
    };
    for (i, path) in paths.iter().enumerate() {
        let unused = |why: String| match i {
            0 => format!("{}: {why}; building without reusing it", path.display()),
            _ => format!(
                "{}: {why}; building without its earlier versions",
                path.display()
            ),
        };
        let pack = match Pack::open(path) {
            Ok(pack) => pack,
            Err(e) => {
                notes.push(unused(e.to_string()));
                continue;
            }
        };
        if i > 0 {
            packs.others.push(pack);
            continue;
        }
        let (off, len, sum) = pack.section(Section::Provenance);
        let records = &pack.bytes()[off as usize..(off + len) as usize];
        if xxhash_rust::xxh3::xxh3_64(records) != sum {
            notes.push(unused("provenance section checksum mismatch".into()));
            continue;
        }
        packs.reuse = Some(pack);
    }
    (packs, notes)
}

/// The packs `path` names for `--base`: itself, or, for a folder, the
/// `*.pack` files in it (not `out`), newest first, then by name.
pub fn packs_in(path: &Path, out: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(path) else {
        return vec![path.to_path_buf()];
    };
    let mut packs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack") && p.as_path() != out)
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    packs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    packs.into_iter().map(|(_, p)| p).collect()
}

/// Where a build reads and writes besides its source.
struct Workspace<'a> {
    /// The pack whose encoded bodies are reused.
    base: Option<&'a Pack>,
    /// The earlier versions delta variants are made against.
    history: &'a History<'a>,
    /// Where an archive's entries are staged (`None`: in memory).
    staging_dir: Option<PathBuf>,
    /// The pack being replaced, never read as part of a directory source.
    exclude: Option<PathBuf>,
    /// The pack being written, as messages name it.
    out_name: String,
}

/// Reads `source`, plans its routes and writes everything into `writer`,
/// which the caller finishes.
fn fire(
    source: &Path,
    writer: &mut PackWriter,
    opts: &BuildOptions,
    workspace: &Workspace<'_>,
) -> anyhow::Result<BuildReport> {
    let read = source::read_source(
        source,
        &source::ReadOptions {
            max_bytes: opts.max_source_bytes,
            exclude: workspace.exclude.clone(),
            strip_components: opts.strip_components,
            staging_dir: workspace.staging_dir.clone(),
            leave_out_unreadable: opts.leave_out_unreadable,
            follow_external_links: opts.follow_external_links,
        },
    )?;
    let mut warnings = read.warnings;
    let mut files = read.files;
    let (left_out, stripped) = (read.left_out, read.stripped);
    let mut take = |name: &str| {
        let i = files.iter().position(|f| f.path == name)?;
        Some(files.remove(i))
    };
    let headers_text = take(HEADERS_FILE);
    let redirects_text = take(REDIRECTS_FILE);
    let headers_name = source.join(HEADERS_FILE).display().to_string();
    let redirects_name = source.join(REDIRECTS_FILE).display().to_string();

    let header_rules: Vec<HeaderRule> = match headers_text {
        Some(f) if opts.headers_file => {
            parse_headers(&rules_text(&f, &headers_name)?, &headers_name)?
        }
        _ => Vec::new(),
    };
    let redirect_rules: Vec<RedirectRule> = match redirects_text {
        Some(f) if opts.redirects_file => {
            let (rules, w) = parse_redirects(&rules_text(&f, &redirects_name)?, &redirects_name)?;
            warnings.extend(w);
            rules
        }
        _ => Vec::new(),
    };
    if files.is_empty() && redirect_rules.is_empty() && !opts.allow_empty {
        bail!("{}", nothing_to_serve(source, &left_out));
    }
    let (source_files, source_bytes) = (files.len(), files.iter().map(|f| f.len).sum());
    if opts.routes.index_pages {
        files.extend(listing::index_pages(&files, &opts.routes));
        files.sort_by(|a, b| a.path.cmp(&b.path));
    }
    if opts.live_reload {
        with_live_script(&mut files);
    }
    let plan = plan_routes(&files, &redirect_rules, &redirects_name, &opts.routes)?;
    warnings.extend(plan.warnings.iter().cloned());

    let assembled = assemble(
        &files,
        &plan,
        &AssembleInput {
            compress: &opts.compress,
            cache: &opts.cache,
            header_rules: &header_rules,
            progress: opts.progress,
            buffer_bytes: opts.buffer_bytes,
            base: workspace.base,
            out_name: &workspace.out_name,
            dictionaries: &opts.dictionaries,
            history: workspace.history,
        },
        writer,
    )?;
    warnings.extend(assembled.base_damage);
    Ok(BuildReport {
        files: source_files as u64,
        bytes_in: source_bytes,
        rules: plan.rules.len() as u64,
        shadowed_rules: plan.shadowed,
        left_out,
        stripped,
        suffix_choices: plan.suffix_choices,
        per_encoding: assembled.per_encoding,
        dedup_saved: assembled.dedup_saved,
        compressed: assembled.compressed,
        reused: assembled.reused,
        base: workspace.base.map(|b| b.path().to_path_buf()),
        buffer_bytes: opts.buffer_bytes,
        warnings,
        ..BuildReport::default()
    })
}

/// The one-line refusal of a source with nothing to serve: what it held
/// instead, the first names left out.
fn nothing_to_serve(source: &Path, left_out: &[(String, Why)]) -> String {
    const SHOWN: usize = 3;
    let held = match left_out.len() {
        0 => "it holds no file".to_owned(),
        n => {
            let names: Vec<String> = left_out
                .iter()
                .take(SHOWN)
                .map(|(path, why)| format!("{} ({why})", source::printable_name(path)))
                .collect();
            let more = if n > SHOWN { ", …" } else { "" };
            format!(
                "every name in it is left out ({n}: {}{more})",
                names.join(", ")
            )
        }
    };
    format!(
        "{}: nothing to serve: {held}; --allow-empty builds an empty pack anyway",
        source.display()
    )
}

/// The live preview's script tag put into every HTML page of `files`
/// (`live`): a file on disk is read with it when the build reads it, a
/// page the build made gets it now. (An archive's pages keep theirs: a
/// live preview is of a directory.)
fn with_live_script(files: &mut [SourceFile]) {
    for f in files {
        let html = mime::content_type(&f.path).starts_with("text/html");
        if !html {
            continue;
        }
        match &f.content {
            source::Content::Disk(path) => f.content = source::Content::Live(path.clone()),
            source::Content::Generated(page) => {
                f.content = source::Content::Generated(live::inject(page).into())
            }
            source::Content::Staged { .. } | source::Content::Live(_) => continue,
        }
        f.len += live::TAG.len() as u64;
    }
}

impl BuildReport {
    /// `-v`'s list: one line for each name left out and each URL several
    /// files could serve.
    pub fn details(&self) -> String {
        let mut out = String::new();
        for (path, why) in &self.left_out {
            let path = source::printable_name(path);
            out.push_str(&format!("left out    {path}  ({why})\n"));
        }
        for choice in &self.suffix_choices {
            out.push_str(&format!(
                "suffix      {} is {}, not {}\n",
                choice.key,
                choice.served,
                choice.others.join(", ")
            ));
        }
        out
    }

    /// Completes the report with what the finished pack holds.
    fn finish(&mut self, stats: &PackStats, started: Instant) {
        self.routes = stats.routes;
        self.dedup_saved += stats.dedup_saved;
        self.pack_bytes = stats.file_len;
        self.peak_rss = peak_rss();
        self.elapsed = started.elapsed();
    }
}

/// The process's peak resident set size, in bytes (0 if unknown): `VmHWM`
/// of /proc/self/status, the high-water mark of this process image
/// (getrusage's `ru_maxrss` would include the parent's before `exec`).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
}

/// The text of `_headers` or `_redirects`, without the byte order mark
/// that Windows editors put first (it would make line 1 a syntax error).
fn rules_text(file: &SourceFile, name: &str) -> anyhow::Result<String> {
    if file.len > MAX_RULES_FILE_BYTES {
        bail!(
            "{name}: {} bytes, more than the {MAX_RULES_FILE_BYTES} a rules file may have",
            file.len
        );
    }
    let bytes = file.read()?;
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    String::from_utf8(bytes.to_vec()).with_context(|| format!("{name}: not UTF-8 text"))
}

/// Builds `source` with preview settings (fast compression) into a pack in
/// memory, for `kiln serve DIR`.
pub fn build_preview(source: &Path, cache_control: PreviewCacheControl) -> anyhow::Result<Pack> {
    let opts = BuildOptions::preview(Level::Fast, cache_control);
    build_preview_with(source, &opts, None).map(|(pack, _)| pack)
}

/// Builds `source` with `opts` into a pack in memory (an anonymous file,
/// never on disk), reusing the encoded bodies of `base`: the preview of
/// `kiln serve DIR`, rebuilt by `--watch`.
///
/// The build runs on a rayon pool of its own whose threads are joined
/// before this returns: the global pool would keep its threads alive after
/// the first preview, and `kiln serve` then enters a sandbox whose user
/// switch and Landlock domain hold only for the threads created after it.
pub fn build_preview_with(
    source: &Path,
    opts: &BuildOptions,
    base: Option<&Pack>,
) -> anyhow::Result<(Pack, BuildReport)> {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("kiln-preview-{i}"))
        .build_scoped(
            |thread| thread.run(),
            |pool| pool.install(|| fire_preview(source, opts, base)),
        )
        .context("cannot start the preview build's threads")?
}

fn fire_preview(
    source: &Path,
    opts: &BuildOptions,
    base: Option<&Pack>,
) -> anyhow::Result<(Pack, BuildReport)> {
    let started = Instant::now();
    let mut writer = PackWriter::in_memory().context("cannot create an in-memory pack")?;
    let name = format!("the preview of {}", source.display());
    // The preview before this one holds the previous version of each
    // changed file: a developer's browser gets deltas against it.
    let bases: Vec<&Pack> = base.into_iter().collect();
    let history = if opts.dictionaries.enabled {
        History::of(&bases)
    } else {
        History::of(&[])
    };
    let mut report = fire(
        source,
        &mut writer,
        opts,
        &Workspace {
            base,
            history: &history,
            staging_dir: None,
            exclude: None,
            out_name: name.clone(),
        },
    )?;
    let (file, stats) = writer
        .finish_in_memory()
        .with_context(|| format!("{name}: cannot write"))?;
    report.finish(&stats, started);
    let pack = Pack::from_file(file, source).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    Ok((pack, report))
}

/// Parses `--encodings`.
pub fn parse_encodings(list: &str) -> anyhow::Result<Vec<Encoding>> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for token in list.split(',').map(str::trim) {
        match Encoding::from_token(token.as_bytes()) {
            Some(Encoding::Identity) | None => {
                bail!("--encodings: unknown encoding {token:?} (expected br, zstd, gzip or none)")
            }
            Some(e) if !out.contains(&e) => out.push(e),
            Some(_) => {}
        }
    }
    out.sort();
    Ok(out)
}

/// The parser of a switch that is also an environment variable: 1/0,
/// yes/no, true/false (any case), its error naming the variable too.
pub fn env_bool(variable: &'static str) -> impl Fn(&str) -> Result<bool, String> + Clone {
    move |value: &str| match value.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" => Ok(true),
        "0" | "no" | "false" => Ok(false),
        _ => Err(format!(
            "expected 1, 0, yes, no, true or false (on the command line or in {variable})"
        )),
    }
}

fn header_value(flag: &str, value: Option<String>) -> anyhow::Result<Option<String>> {
    if let Some(v) = &value
        && (v.is_empty() || v.chars().any(char::is_control))
    {
        bail!("{flag}: the value must be non-empty and without control characters");
    }
    Ok(value)
}

impl BuildArgs {
    /// The options these flags select.
    pub fn options(&self) -> anyhow::Result<BuildOptions> {
        let preset = CompressOptions::at(self.compression);
        let preset_gzip_level = match preset.gzip {
            GzipMode::Deflate(level) => level,
            GzipMode::Zopfli => 9,
        };
        Ok(BuildOptions {
            compress: CompressOptions {
                encodings: parse_encodings(&self.encodings)?,
                brotli_quality: self.brotli_quality.unwrap_or(preset.brotli_quality),
                // A quality asked for is the quality of every body.
                brotli_large_quality: self.brotli_quality.unwrap_or(preset.brotli_large_quality),
                brotli_large_mixed: preset.brotli_large_mixed && self.brotli_quality.is_none(),
                gzip: match self.gzip {
                    GzipTool::Deflate => {
                        GzipMode::Deflate(self.gzip_level.unwrap_or(preset_gzip_level))
                    }
                    GzipTool::Zopfli => GzipMode::Zopfli,
                },
                zstd_level: self.zstd_level.unwrap_or(preset.zstd_level),
                ..preset
            },
            cache: CachePolicy {
                override_default: header_value("--cache-control", self.cache_control.clone())?,
                override_immutable: header_value(
                    "--immutable-cache-control",
                    self.immutable_cache_control.clone(),
                )?,
                revalidate_all: false,
            },
            routes: RouteOptions {
                index: !self.no_index,
                strip: !self.no_strip,
                wildcard: !self.no_wildcard,
                not_found: !self.no_404,
                dir_redirect: !self.no_dir_redirect,
                index_pages: self.index_pages,
            },
            headers_file: !self.no_headers_file,
            redirects_file: !self.no_redirects_file,
            progress: match (self.quiet, std::io::stderr().is_terminal()) {
                (true, _) => Progress::Silent,
                (false, true) => Progress::Bar,
                (false, false) => Progress::Lines,
            },
            max_source_bytes: self.max_source_bytes,
            strip_components: self.strip_components,
            buffer_bytes: self.buffer_bytes.max(1),
            base: match (self.base.is_empty(), self.clean) {
                (false, _) => Base::Packs(self.base.clone()),
                (true, true) => Base::Clean,
                (true, false) => Base::Output,
            },
            dictionaries: DictionaryOptions {
                enabled: self.dictionaries == DictionaryMode::Auto,
                versions: self.delta_versions as usize,
            },
            live_reload: false,
            leave_out_unreadable: false,
            allow_empty: self.allow_empty,
            follow_external_links: self.follow_external_links,
        })
    }
}

/// `kiln build`.
pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    let opts = args.options()?;
    let destination = args
        .output
        .to_str()
        .filter(|o| crate::store::StoreUrl::is_store(o));
    // Built beside nothing: a store's pack is built whole in a temporary
    // folder, then published.
    let temp = match destination {
        Some(_) => Some(tempfile::tempdir().context("cannot make a temporary folder")?),
        None => None,
    };
    let output = match (&temp, destination) {
        (Some(temp), Some(destination)) => {
            let (_, name) =
                crate::store::StoreUrl::parse_object(destination).map_err(anyhow::Error::msg)?;
            temp.path().join(name)
        }
        _ => args.output.clone(),
    };
    let report = build_pack(&args.source, &output, &opts)?;
    for note in &report.notes {
        crate::report::to_stderr(&format!("kiln: note: {note}"));
    }
    for w in &report.warnings {
        crate::report::to_stderr(&format!("kiln: warning: {w}"));
    }
    if !args.quiet {
        let details = if args.verbose {
            report.details()
        } else {
            String::new()
        };
        let summary = format!(
            "{}: built from {}\n{report}\n{details}",
            args.output.display(),
            args.source.display()
        );
        crate::report::to_stdout(&summary)?;
    }
    if let Some(destination) = destination {
        let line = crate::store::publish::publish(&output, destination, &args.store)?;
        crate::report::to_stdout(&line)?;
    }
    Ok(())
}
