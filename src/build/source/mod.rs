//! Reads a site's source — a directory or a tar archive — into a list of
//! files sorted by path, with ignored names already left out. An archive is
//! read into memory (it is one stream); a directory's files are only listed
//! here and read when the build reaches them, so a site larger than RAM can
//! be fired from a directory.

pub mod dir;
pub mod ignore;
pub mod tar;

use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};

/// Where a file's content is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// Read from an archive; link copies share it.
    Memory(Arc<[u8]>),
    /// A file of a directory source, read when the build needs it.
    Disk(PathBuf),
}

/// One file of the site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Relative '/'-separated UTF-8 path without `.`, `..` or empty
    /// components; the route key is `/` + this.
    pub path: String,
    /// The content, or where to read it.
    pub content: Content,
    /// Its length in bytes (for a file on disk, as found by the walk).
    pub len: u64,
    /// Modification time, unix seconds; becomes `Last-Modified`.
    pub mtime: i64,
}

impl SourceFile {
    /// The whole content. A file on disk whose size changed since the walk
    /// is an error: its routes and headers were planned for other bytes.
    pub fn read(&self) -> anyhow::Result<Cow<'_, [u8]>> {
        let path = match &self.content {
            Content::Memory(bytes) => return Ok(Cow::Borrowed(bytes)),
            Content::Disk(path) => path,
        };
        let mut bytes = Vec::with_capacity(self.len as usize);
        std::fs::File::open(path)
            .and_then(|f| f.take(self.len + 1).read_to_end(&mut bytes))
            .with_context(|| format!("{}: cannot read", path.display()))?;
        if bytes.len() as u64 != self.len {
            bail!(
                "{}: changed during the build ({} bytes, now {})",
                path.display(),
                self.len,
                bytes.len()
            );
        }
        Ok(Cow::Owned(bytes))
    }
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
    /// Most bytes an archive may expand to: the decompressed stream plus
    /// the copies its links make. An archive is read into memory, and a
    /// tiny compressed one may expand to terabytes. (A directory is read
    /// in batches and has no such limit.)
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
