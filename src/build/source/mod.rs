//! Reads a site's source — a directory or a tar archive — into a list of
//! files sorted by path, with ignored names already left out. Everything is
//! read into memory: simple, and fine for sites that fit in RAM.

pub mod dir;
pub mod ignore;
pub mod tar;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// One file of the site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Relative '/'-separated UTF-8 path without `.`, `..` or empty
    /// components; the route key is `/` + this.
    pub path: String,
    /// The whole content.
    pub bytes: Vec<u8>,
    /// Modification time, unix seconds; becomes `Last-Modified`.
    pub mtime: i64,
}

/// What was read, plus the problems that were skipped rather than fatal.
#[derive(Debug, Default)]
pub struct Source {
    /// Sorted by `path`, no duplicates.
    pub files: Vec<SourceFile>,
    /// One line each, for the user (loops, skipped links, special files).
    pub warnings: Vec<String>,
}

/// Default `--max-source-bytes`: 16 GiB.
pub const DEFAULT_MAX_SOURCE_BYTES: u64 = 16 << 30;

/// Limits and exclusions of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Most bytes a source may hold: the total of file contents for a
    /// directory; for an archive, the decompressed stream plus the copies
    /// its links make. Everything is read into memory, and a tiny
    /// compressed archive may expand to terabytes.
    pub max_bytes: u64,
    /// A file never taken from a directory source: the pack being
    /// written, which would otherwise be packed into its own next build
    /// when it lies inside the source.
    pub exclude: Option<PathBuf>,
    /// Leading name components dropped from archive entries, like tar's
    /// `--strip-components` (`tar czf site.tgz public/` puts every page
    /// under `public/`); entries with no component left are skipped.
    pub strip_components: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_bytes: DEFAULT_MAX_SOURCE_BYTES,
            exclude: None,
            strip_components: 0,
        }
    }
}

/// Reads `path`: a directory is walked, a regular file is read as a tar
/// archive (plain, gzip or zstd, detected by magic bytes).
pub fn read_source(path: &Path, opts: &ReadOptions) -> anyhow::Result<Source> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("{}: cannot read source", path.display()))?;
    let mut source = if meta.is_dir() {
        if opts.strip_components > 0 {
            bail!(
                "{}: --strip-components applies to archives; give the subdirectory as the source",
                path.display()
            );
        }
        dir::read_dir_source(path, opts)?
    } else if meta.is_file() {
        tar::read_tar_source(path, opts.max_bytes, opts.strip_components)?
    } else {
        bail!(
            "{}: source is neither a directory nor a tar file",
            path.display()
        );
    };
    source.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(source)
}
