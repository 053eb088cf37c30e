//! Reads a site's source — a directory or a tar archive — into a list of
//! files sorted by path, with ignored names already left out. Nothing is
//! held in memory: a directory's files are only listed here and read when
//! the build reaches them; an archive is one stream, read once, its entries
//! copied as they come to an unnamed staging file beside the pack (their
//! order in the archive is not the order of the pack) and read back from
//! there. So a site larger than RAM can be fired from either.

pub mod dir;
pub mod ignore;
pub mod private_key;
pub mod screen;
pub mod tar;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};

use super::live;
use crate::pack::RangeReader;
use ignore::Why;

/// Where a file's content is.
#[derive(Clone, Debug)]
pub enum Content {
    /// An archive entry, copied to the staging file at this offset; link
    /// copies share it.
    Staged {
        /// The staging file (unnamed: it disappears with its last handle).
        file: Arc<File>,
        /// Where the entry's bytes start in it.
        off: u64,
    },
    /// A file of a directory source, read when the build needs it.
    Disk(PathBuf),
    /// A page the build made (`--index-pages`), small and held whole.
    Generated(Arc<[u8]>),
    /// An HTML page of a directory source with the live preview's script
    /// tag put in (`build::live`), read when the build needs it: the
    /// file's bytes are `len` less the tag's.
    Live(PathBuf),
}

/// One file of the site.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Relative '/'-separated UTF-8 path without `.`, `..` or empty
    /// components; the route key is `/` + this. A folder's generated index
    /// page (`Content::Generated`) has the folder's path with a final `/`
    /// (the root's is empty), so its key is the folder's `/dir/`, which no
    /// file's can be.
    pub path: String,
    /// The content, or where to read it.
    pub content: Content,
    /// Its length in bytes (for a file on disk, as found by the walk).
    pub len: u64,
    /// Modification time, unix seconds; becomes `Last-Modified`.
    pub mtime: i64,
}

impl SourceFile {
    /// The whole content, for a file small enough to hold. A file on disk
    /// whose size changed since the walk is an error: its routes and
    /// headers were planned for other bytes.
    pub fn read(&self) -> anyhow::Result<Vec<u8>> {
        let mut bytes = vec![0; self.len as usize];
        match &self.content {
            Content::Staged { file, off } => {
                file.read_exact_at(&mut bytes, *off).with_context(|| {
                    format!("{}: cannot read back from the staging file", self.path)
                })?;
            }
            Content::Disk(path) => {
                bytes.clear();
                File::open(path)
                    .and_then(|f| f.take(self.len + 1).read_to_end(&mut bytes))
                    .with_context(|| format!("{}: cannot read", path.display()))?;
                self.check_len(path, bytes.len() as u64)?;
            }
            Content::Generated(page) => bytes.copy_from_slice(page),
            Content::Live(path) => {
                let own = self.len.saturating_sub(live::TAG.len() as u64);
                let mut page = Vec::with_capacity(own as usize);
                File::open(path)
                    .and_then(|f| f.take(own + 1).read_to_end(&mut page))
                    .with_context(|| format!("{}: cannot read", path.display()))?;
                bytes = live::inject(&page);
                self.check_len(path, bytes.len() as u64)?;
            }
        }
        Ok(bytes)
    }

    /// The content in pieces, for a file of any size; `finish_read` checks
    /// afterwards that the file still had the size planned for.
    pub fn open(&self) -> anyhow::Result<Box<dyn Read + Send>> {
        Ok(match &self.content {
            Content::Staged { file, off } => {
                Box::new(RangeReader::new(Arc::clone(file), *off, self.len))
            }
            Content::Disk(path) => Box::new(
                File::open(path)
                    .with_context(|| format!("{}: cannot read", path.display()))?
                    .take(self.len + 1),
            ),
            Content::Generated(page) => Box::new(std::io::Cursor::new(Arc::clone(page))),
            Content::Live(path) => {
                let own = self.len.saturating_sub(live::TAG.len() as u64);
                let mut file =
                    File::open(path).with_context(|| format!("{}: cannot read", path.display()))?;
                let mut start = Vec::with_capacity(live::HEAD_WINDOW.min(own as usize));
                (&mut file)
                    .take(live::HEAD_WINDOW.min(own as usize) as u64)
                    .read_to_end(&mut start)
                    .with_context(|| format!("{}: cannot read", path.display()))?;
                let rest = own - start.len() as u64;
                live::injected_reader(start, Box::new(file.take(rest + 1)), own)
            }
        })
    }

    /// After `read` bytes came from `open`: an error if the file changed
    /// size during the build.
    pub fn finish_read(&self, read: u64) -> anyhow::Result<()> {
        match &self.content {
            Content::Disk(path) | Content::Live(path) => self.check_len(path, read),
            Content::Staged { .. } if read != self.len => {
                bail!("{}: the staging file ends early", self.path)
            }
            Content::Staged { .. } | Content::Generated(_) => Ok(()),
        }
    }

    /// The name of the file in messages: its path on disk, or in the
    /// archive, or the folder a generated page lists.
    pub fn shown(&self) -> String {
        match &self.content {
            Content::Disk(path) | Content::Live(path) => path.display().to_string(),
            Content::Staged { .. } => self.path.clone(),
            Content::Generated(_) => format!("the index page of /{}", self.path),
        }
    }

    fn check_len(&self, path: &Path, read: u64) -> anyhow::Result<()> {
        if read != self.len {
            bail!(
                "{}: changed during the build ({} bytes, now {read})",
                path.display(),
                self.len,
            );
        }
        Ok(())
    }
}

/// What was read, plus the problems that were skipped rather than fatal.
#[derive(Debug, Default)]
pub struct Source {
    /// Sorted by `path`, no duplicates.
    pub files: Vec<SourceFile>,
    /// One line each, for the user (loops, skipped links, special files).
    pub warnings: Vec<String>,
    /// What the ignore rules left out (a directory once, with a trailing
    /// '/'; not what lies below it), and symbolic links out of a directory
    /// source; sorted by path.
    pub left_out: Vec<(String, Why)>,
    /// The one top folder every entry of an archive was under, stripped
    /// from their names (see `ReadOptions::strip_components`).
    pub stripped: Option<String>,
}

/// Default `--max-source-bytes`: 16 GiB.
pub const DEFAULT_MAX_SOURCE_BYTES: u64 = 16 << 30;

/// Limits and exclusions of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Most bytes an archive may expand to: the decompressed stream plus
    /// the copies its links make. An archive is staged on disk and served
    /// as that many bytes, and a tiny compressed one may expand to
    /// terabytes. (A directory has no such limit.)
    pub max_bytes: u64,
    /// A file never taken from a directory source: the pack being
    /// written, which would otherwise be packed into its own next build
    /// when it lies inside the source.
    pub exclude: Option<PathBuf>,
    /// Leading name components dropped from archive entries, like tar's
    /// `--strip-components` (`tar czf site.tgz public/` puts every page
    /// under `public/`); entries with no component left are skipped.
    /// `None`: the archive's one top folder, if it has one (see `tar`).
    pub strip_components: Option<usize>,
    /// Where an archive's entries are staged: beside the pack, on the disk
    /// that is to hold it anyway (a temporary directory may be in memory);
    /// `None`: in an anonymous in-memory file, as for a preview, whose pack
    /// is in memory too and whose server may write nowhere (the sandbox).
    pub staging_dir: Option<PathBuf>,
    /// A file or folder of a directory that cannot be read (EACCES) is
    /// left out with a warning, not an error: a preview is built as the
    /// user it is served as, and publishes nothing that user could not
    /// read. `kiln build` stops on it instead: a pack missing pages would
    /// be deployed.
    pub leave_out_unreadable: bool,
    /// A symbolic link of a directory source that leads out of it is
    /// followed (`--follow-external-links`) instead of skipped: a tree
    /// that links a shared file from elsewhere (Debian's documentation
    /// packages link `_static/jquery.js` to `/usr/share/javascript`).
    pub follow_external_links: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_bytes: DEFAULT_MAX_SOURCE_BYTES,
            exclude: None,
            strip_components: None,
            staging_dir: Some(std::env::temp_dir()),
            leave_out_unreadable: false,
            follow_external_links: false,
        }
    }
}

/// What a path given as a site (to `kiln build` or `kiln serve`) holds, told by its content, never by its
/// name: `x.pack` may be an archive and `site.tgz` a pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A file that starts with a pack's magic.
    Pack,
    /// A tar archive: plain (`ustar` at offset 257), gzip or zstd.
    Archive,
    /// A directory.
    Folder,
}

/// Tells what `path` is; an error, one line naming it, for anything
/// else (a missing path, an unreadable file, a file of another kind).
pub fn kind_of(path: &Path) -> anyhow::Result<Kind> {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{shown}: no such file or directory")
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("{shown}: cannot open"))),
    };
    if meta.is_dir() {
        return Ok(Kind::Folder);
    }
    let mut head = Vec::with_capacity(512);
    std::fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 512), &mut head))
        .with_context(|| format!("{shown}: cannot open"))?;
    const GZIP: &[u8] = &[0x1f, 0x8b];
    const ZSTD: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
    if head.is_empty() {
        bail!(
            "{shown}: empty file, not a kiln pack or a tar archive (an empty site is an empty directory)"
        )
    } else if head.starts_with(&crate::pack::format::MAGIC) {
        Ok(Kind::Pack)
    } else if head.starts_with(GZIP)
        || head.starts_with(ZSTD)
        // The magic alone too: an archive cut inside its first header is
        // then called truncated by the reader, not "not an archive".
        || head.get(257..262) == Some(b"ustar")
        || is_tar_header(&head)
    {
        Ok(Kind::Archive)
    } else {
        bail!("{shown}: not a kiln pack, a tar archive or a site folder")
    }
}

/// Whether `block` starts with a tar header block, told by its checksum as
/// `file(1)` does (so a pre-POSIX archive without the `ustar` magic counts),
/// or is the zero block that ends an archive (an empty one starts so).
fn is_tar_header(block: &[u8]) -> bool {
    let Some(block) = block.get(..512) else {
        return false;
    };
    if block.iter().all(|&b| b == 0) {
        return true;
    }
    let field = &block[148..156];
    let digits = field
        .iter()
        .skip_while(|&&b| b == b' ')
        .take_while(|&&b| (b'0'..=b'7').contains(&b));
    let Some(stored) = digits
        .clone()
        .next()
        .map(|_| digits.fold(0u32, |n, &d| n * 8 + u32::from(d - b'0')))
    else {
        return false;
    };
    // The sum of the header's bytes, its checksum field counted as spaces.
    let sum: u32 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u32::from(b' ')
            } else {
                u32::from(b)
            }
        })
        .sum();
    stored == sum
}

/// Reads `path`: a directory is walked, a regular file is read as a tar
/// archive (plain, gzip or zstd, detected by magic bytes); a pack or any
/// other file is refused in one line that says what it is. Every file
/// listed is then looked at (`screen`): private keys are left out.
pub fn read_source(path: &Path, opts: &ReadOptions) -> anyhow::Result<Source> {
    let kind = kind_of(path)?;
    let mut source = if kind == Kind::Folder {
        if opts.strip_components.is_some_and(|n| n > 0) {
            bail!(
                "{}: --strip-components applies to archives; give the subdirectory as the source",
                path.display()
            );
        }
        dir::read_dir_source(path, opts)?
    } else if kind == Kind::Archive {
        tar::read_tar_source(path, opts)?
    } else {
        bail!(
            "{}: a kiln pack, not a site: serve it as it is, or build from the folder or archive it was built from",
            path.display()
        );
    };
    source.files.sort_by(|a, b| a.path.cmp(&b.path));
    leave_out_unservable(&mut source);
    screen::screen(&mut source, opts.leave_out_unreadable)?;
    source.left_out.sort();
    source.left_out.dedup();
    Ok(source)
}

/// Leaves out of `source` the files no request can name (a backslash or a
/// control character in a name: `ignore::servable_name`), with a warning
/// for each (a folder once, with a trailing '/').
fn leave_out_unservable(source: &mut Source) {
    let mut parts: Vec<String> = Vec::new();
    source.files.retain(|f| {
        let mut end = 0;
        for name in f.path.split('/') {
            end += name.len();
            if !ignore::servable_name(name) {
                let dir = if end < f.path.len() { "/" } else { "" };
                parts.push(format!("{}{dir}", &f.path[..end]));
                return false;
            }
            end += 1;
        }
        true
    });
    parts.sort();
    parts.dedup();
    for part in parts {
        source.warnings.push(format!(
            "{}: left out: no URL can name it (a request path holding a backslash or a \
             control character is refused)",
            printable_name(&part)
        ));
        source.left_out.push((part, Why::Unservable));
    }
}

/// `name` on one line: control characters written as escapes (`\n`), the
/// rest as it is.
pub fn printable_name(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}
