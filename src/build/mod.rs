//! `kiln build`: reads a directory or tar archive, decides the routes,
//! compresses and prepares every response's headers, and writes one pack.
//!
//! Pipeline: `source` (read and filter files) → `netlify` (`_headers`,
//! `_redirects`) → `routes` (what answers each path) → `assemble`
//! (compression via `compress`, header blocks via `headers` and `mime`,
//! written with `PackWriter`, which only ever renames a complete pack over
//! the output). The same source always gives a byte-identical pack.

pub mod assemble;
pub mod compress;
pub mod headers;
pub mod mime;
pub mod netlify;
pub mod routes;
pub mod source;
pub mod urlpath;

use std::fmt;
use std::io::{IsTerminal, Write as _};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use self::assemble::{AssembleInput, EncodingTotals, assemble};
use self::compress::{CompressOptions, GzipMode};
use self::headers::CachePolicy;
use self::netlify::{HeaderRule, RedirectRule, parse_headers, parse_redirects};
use self::routes::{RouteOptions, plan_routes};
use crate::pack::format::ENCODINGS;
use crate::pack::{Encoding, Pack};

/// Root file holding per-path headers (never served).
pub const HEADERS_FILE: &str = "_headers";
/// Root file holding redirect and rewrite rules (never served).
pub const REDIRECTS_FILE: &str = "_redirects";

/// Default `BuildOptions::batch_bytes`: 256 MiB.
pub const DEFAULT_BATCH_BYTES: u64 = 256 << 20;

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
    /// The pack to write (replaced atomically, never left half-written).
    #[arg(short, long, value_name = "SITE.pack")]
    pub output: PathBuf,
    /// Encodings to store besides identity, for compressible types only:
    /// a comma-separated subset of br, zstd, gzip, or "none". An encoded
    /// variant is kept only if it saves at least 10 % and 100 bytes.
    #[arg(long, value_name = "LIST", default_value = "br,gzip")]
    pub compress: String,
    /// gzip encoder.
    #[arg(long, value_enum, default_value = "deflate")]
    pub gzip: GzipTool,
    /// deflate level for gzip variants (0-9).
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(0..=9))]
    pub gzip_level: u32,
    /// Brotli quality (0-11).
    #[arg(long, default_value_t = 11, value_parser = clap::value_parser!(u32).range(0..=11))]
    pub brotli_quality: u32,
    /// zstd level (1-22).
    #[arg(long, default_value_t = 19, value_parser = clap::value_parser!(i32).range(1..=22))]
    pub zstd_level: i32,
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
    /// Ignore the root `_headers` file (it is still not served).
    #[arg(long)]
    pub no_headers_file: bool,
    /// Ignore the root `_redirects` file (it is still not served).
    #[arg(long)]
    pub no_redirects_file: bool,
    /// Refuse an archive that expands to more than this many bytes (link
    /// copies included): an archive is read into memory. A directory is
    /// read in batches and has no limit. The default is 16 GiB.
    #[arg(long, value_name = "BYTES", default_value_t = source::DEFAULT_MAX_SOURCE_BYTES)]
    pub max_source_bytes: u64,
    /// Drop this many leading components from archive entry names, like
    /// tar: `--strip-components 1` serves `public/index.html` of an archive
    /// made with `tar czf site.tgz public/` at `/`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub strip_components: usize,
    /// No progress bar and no summary (warnings and errors still go to stderr).
    #[arg(short, long)]
    pub quiet: bool,
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
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// The most an archive may expand to (`--max-source-bytes`).
    pub max_source_bytes: u64,
    /// Leading components dropped from archive names (`--strip-components`).
    pub strip_components: usize,
    /// Input bytes read and compressed at once: bounds the memory a build
    /// of a directory needs, whatever the size of the site.
    pub batch_bytes: u64,
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
            progress: false,
            max_source_bytes: source::DEFAULT_MAX_SOURCE_BYTES,
            strip_components: 0,
            batch_bytes: DEFAULT_BATCH_BYTES,
        }
    }
}

impl BuildOptions {
    /// Fast settings for a local preview: brotli 5, gzip 6, no zstd.
    pub fn preview() -> Self {
        BuildOptions {
            compress: CompressOptions {
                encodings: vec![Encoding::Br, Encoding::Gzip],
                brotli_quality: 5,
                brotli_lgwin: 22,
                gzip: GzipMode::Deflate(6),
                zstd_level: 3,
            },
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
    /// Distinct bodies per encoding, indexed by `Encoding as usize`.
    pub per_encoding: [EncodingTotals; 4],
    /// Bytes not stored thanks to de-duplication.
    pub dedup_saved: u64,
    /// Size of the written pack.
    pub pack_bytes: u64,
    /// Wall time of the whole build.
    pub elapsed: Duration,
    /// One line each; printed on stderr by `run`.
    pub warnings: Vec<String>,
}

impl fmt::Display for BuildReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "files       {:>10}  {:>14} bytes",
            self.files, self.bytes_in
        )?;
        writeln!(
            f,
            "routes      {:>10}  ({} run-time rules)",
            self.routes, self.rules
        )?;
        for e in ENCODINGS {
            let t = self.per_encoding[e as usize];
            writeln!(
                f,
                "{:<11} {:>10}  {:>14} bytes",
                e.token(),
                t.count,
                t.bytes
            )?;
        }
        writeln!(f, "dedup saved {:>10}  {:>14} bytes", "", self.dedup_saved)?;
        if !self.shadowed_rules.is_empty() {
            let lines: Vec<String> = self.shadowed_rules.iter().map(|l| l.to_string()).collect();
            writeln!(
                f,
                "_redirects lines shadowed by files (use '!' to force): {}",
                lines.join(", ")
            )?;
        }
        writeln!(f, "pack        {:>10}  {:>14} bytes", "", self.pack_bytes)?;
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
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        bail!(
            "{}: the directory {} does not exist",
            out.display(),
            parent.display()
        );
    }
    if let (Ok(a), Ok(b)) = (std::fs::metadata(source), std::fs::metadata(out))
        && (a.dev(), a.ino()) == (b.dev(), b.ino())
    {
        bail!(
            "{}: is the source itself; writing the pack there would replace the site",
            out.display()
        );
    }
    let read = source::read_source(
        source,
        &source::ReadOptions {
            max_bytes: opts.max_source_bytes,
            exclude: Some(out.to_path_buf()),
            strip_components: opts.strip_components,
        },
    )?;
    let mut warnings = read.warnings;
    let mut files = read.files;
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
            parse_headers(&utf8(&f.read()?, &headers_name)?, &headers_name)?
        }
        _ => Vec::new(),
    };
    let redirect_rules: Vec<RedirectRule> = match redirects_text {
        Some(f) if opts.redirects_file => {
            let (rules, w) = parse_redirects(&utf8(&f.read()?, &redirects_name)?, &redirects_name)?;
            warnings.extend(w);
            rules
        }
        _ => Vec::new(),
    };
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
            batch_bytes: opts.batch_bytes,
        },
        out,
    )?;
    Ok(BuildReport {
        files: files.len() as u64,
        bytes_in: files.iter().map(|f| f.len).sum(),
        routes: assembled.stats.routes,
        rules: plan.rules.len() as u64,
        shadowed_rules: plan.shadowed,
        per_encoding: assembled.per_encoding,
        dedup_saved: assembled.stats.dedup_saved,
        pack_bytes: assembled.stats.file_len,
        elapsed: started.elapsed(),
        warnings,
    })
}

/// The text of `_headers` or `_redirects`, without the byte order mark
/// that Windows editors put first (it would make line 1 a syntax error).
fn utf8(bytes: &[u8], name: &str) -> anyhow::Result<String> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    String::from_utf8(bytes.to_vec()).with_context(|| format!("{name}: not UTF-8 text"))
}

/// Builds `source` with fast settings into a temporary pack in `scratch`,
/// opens it and deletes the file (the mapping stays valid), for
/// `kiln serve DIR`.
///
/// The build runs on a rayon pool of its own whose threads are joined
/// before this returns: the global pool would keep its threads alive after
/// the first preview, and `kiln serve` then enters a sandbox whose user
/// switch and Landlock domain hold only for the threads created after it.
pub fn build_preview(source: &Path, scratch: &Path) -> anyhow::Result<Pack> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = scratch.join(format!(
        "kiln-preview-{}-{}.pack",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("kiln-preview-{i}"))
        .build_scoped(
            |thread| thread.run(),
            |pool| pool.install(|| build_pack(source, &tmp, &BuildOptions::preview())),
        )
        .context("cannot start the preview build's threads")??;
    let opened = Pack::open(&tmp);
    let removed = std::fs::remove_file(&tmp);
    let pack = opened.map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))?;
    removed.with_context(|| format!("{}: cannot remove", tmp.display()))?;
    Ok(pack)
}

/// Parses `--compress`.
pub fn parse_encodings(list: &str) -> anyhow::Result<Vec<Encoding>> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for token in list.split(',').map(str::trim) {
        match Encoding::from_token(token) {
            Some(Encoding::Identity) | None => {
                bail!("--compress: unknown encoding {token:?} (expected br, zstd, gzip or none)")
            }
            Some(e) if !out.contains(&e) => out.push(e),
            Some(_) => {}
        }
    }
    out.sort();
    Ok(out)
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
        Ok(BuildOptions {
            compress: CompressOptions {
                encodings: parse_encodings(&self.compress)?,
                brotli_quality: self.brotli_quality,
                brotli_lgwin: 24,
                gzip: match self.gzip {
                    GzipTool::Deflate => GzipMode::Deflate(self.gzip_level),
                    GzipTool::Zopfli => GzipMode::Zopfli,
                },
                zstd_level: self.zstd_level,
            },
            cache: CachePolicy {
                override_default: header_value("--cache-control", self.cache_control.clone())?,
                override_immutable: header_value(
                    "--immutable-cache-control",
                    self.immutable_cache_control.clone(),
                )?,
            },
            routes: RouteOptions {
                index: !self.no_index,
                strip: !self.no_strip,
                wildcard: !self.no_wildcard,
                not_found: !self.no_404,
                dir_redirect: !self.no_dir_redirect,
            },
            headers_file: !self.no_headers_file,
            redirects_file: !self.no_redirects_file,
            progress: !self.quiet && std::io::stderr().is_terminal(),
            max_source_bytes: self.max_source_bytes,
            strip_components: self.strip_components,
            batch_bytes: DEFAULT_BATCH_BYTES,
        })
    }
}

/// `kiln build`.
pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    let opts = args.options()?;
    let report = build_pack(&args.source, &args.output, &opts)?;
    // A warning that cannot be written does not fail the build (eprintln!
    // would panic on a closed or full stderr).
    let mut stderr = std::io::stderr();
    for w in &report.warnings {
        let _ = writeln!(stderr, "kiln: warning: {w}");
    }
    if !args.quiet {
        let summary = format!(
            "{}: built from {}\n{report}\n",
            args.output.display(),
            args.source.display()
        );
        crate::report::to_stdout(&summary)?;
    }
    Ok(())
}
