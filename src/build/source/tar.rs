//! Reads a site from a tar archive (plain, gzip or zstd, detected by magic
//! bytes) that may be hostile. Nothing outside the archive is ever read and
//! no input makes it panic. The rules:
//! - absolute names and `..` components are refused (the archive is not
//!   unpacked anywhere, but a name that tries to climb out is a sign of a
//!   broken or malicious archive); `.` and empty components are dropped;
//! - names longer than 4096 bytes or with a component longer than 255
//!   bytes are refused; an entry whose name is not UTF-8 is skipped with a
//!   warning (no route key can name it);
//! - a name the archive holds several times (what `tar -r` appends) is the
//!   last of its entries, as extracting the archive would leave it, with a
//!   warning naming it;
//! - symbolic and hard links are resolved inside the archive only: to a
//!   regular file, or (symbolic links) to a directory, whose files then also
//!   appear under the link's name; a link that points outside the root, at
//!   nothing, into its own target (a loop) or onto a name already taken is
//!   skipped with a warning;
//! - a truncated archive, or an entry whose header claims more bytes than
//!   follow, is an error; the decompressed stream plus the copies that
//!   links make are capped (`--max-source-bytes`), so a small compressed
//!   bomb is refused instead of filling the disk (an entry too large is
//!   refused from its header, before it is read);
//! - an empty file is not an archive (an empty site is an empty directory
//!   or a tar with no entries);
//! - devices, fifos and other special entries are skipped with a warning;
//! - PAX and GNU long names are supported (through the `tar` crate);
//! - an archive whose every entry lies under one top folder, and that has
//!   no entry for its own root, is read without that folder (`tar czf
//!   site.tgz site` makes such an archive, `tar czf site.tgz -C site .`
//!   does not), unless `--strip-components` says how many components to
//!   drop (0: none); the build's summary says when it happened.
//!
//! The archive is read once, as a stream: each entry's bytes are copied to
//! an unnamed staging file (in `ReadOptions::staging_dir`) as they come,
//! so no entry is ever held in memory whatever its size.
//!
//! Every refusal is one line naming the archive and the entry.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use tar::EntryType;

use super::ignore::{Why, ignored_part, is_ignored_path};
use super::{Content, ReadOptions, Source, SourceFile};

/// Longest accepted entry name, in bytes.
const MAX_NAME_BYTES: usize = 4096;
/// Longest accepted name component, in bytes.
const MAX_COMPONENT_BYTES: usize = 255;
/// Links followed in a chain before giving up.
const MAX_LINK_HOPS: usize = 40;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Why a link entry yields no file (a warning names the entry and this).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum LinkError {
    #[error("link without a target")]
    NoTarget,
    #[error("link target is not UTF-8")]
    NotUtf8,
    /// The target's name is refused as an entry's would be (`normalise`).
    #[error("{0}")]
    BadName(String),
    #[error("links to the root directory")]
    Root,
    #[error("absolute target {0:?} points outside the archive")]
    Absolute(String),
    #[error("target {0:?} points outside the archive")]
    Outside(String),
    #[error("target {target:?} is outside {folder}/, the folder left out")]
    OutsideTopFolder { target: String, folder: String },
    #[error("target {0:?} is removed by --strip-components")]
    Stripped(String),
    #[error("target {0:?} is not a regular file")]
    NotRegularFile(String),
    #[error("target {0:?} is not a file in the archive")]
    Missing(String),
    #[error("too many levels of links")]
    TooManyHops,
    #[error("symbolic link loop into {0:?}")]
    Loop(String),
}

impl LinkError {
    /// The link leads out of the site: counted as such in the summary.
    fn leads_out(&self) -> bool {
        matches!(
            self,
            LinkError::Absolute(_) | LinkError::Outside(_) | LinkError::OutsideTopFolder { .. }
        )
    }
}

/// A link entry, resolved once the whole archive has been read.
struct Link {
    /// Where the link sits (normalised).
    path: String,
    /// Normalised archive path of the target; `Err` says why it cannot be.
    target: Result<String, LinkError>,
    /// A symbolic link (may name a directory) rather than a hard link.
    symbolic: bool,
    /// The link entry's own mtime, given to the files it yields.
    mtime: i64,
}

/// The decompressed stream as the tar parser reads it: counts the bytes
/// and fails once more than `max` went through.
struct Capped<R> {
    inner: R,
    /// Shared with `read_entries`, which turns the failure into a clear error.
    read: Rc<Cell<u64>>,
    /// `--max-source-bytes`.
    max: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.read.get().saturating_add(n as u64);
        self.read.set(total);
        if total > self.max {
            return Err(io::Error::other(too_big(self.max)));
        }
        Ok(n)
    }
}

fn too_big(max: u64) -> String {
    format!("the archive expands to more than the {max}-byte limit (--max-source-bytes)")
}

/// Reads the archive at `archive`, staging its entries in
/// `opts.staging_dir`; `opts.max_bytes` caps what it may expand to,
/// `opts.strip_components` leading components are dropped from every name
/// (`None`: the one top folder of every entry, if there is one).
pub fn read_tar_source(archive: &Path, opts: &ReadOptions) -> anyhow::Result<Source> {
    let file =
        File::open(archive).with_context(|| format!("{}: cannot open", archive.display()))?;
    let mut reader = BufReader::new(file);
    let head = reader
        .fill_buf()
        .with_context(|| format!("{}: cannot read", archive.display()))?;
    if head.is_empty() {
        bail!(
            "{}: empty file, not a tar archive (an empty site is an empty directory)",
            archive.display()
        );
    }
    let input: Box<dyn Read> = if head.starts_with(&GZIP_MAGIC) {
        Box::new(flate2::bufread::MultiGzDecoder::new(reader))
    } else if head.starts_with(&ZSTD_MAGIC) {
        Box::new(
            zstd::stream::read::Decoder::with_buffer(reader)
                .with_context(|| format!("{}: cannot start zstd decoder", archive.display()))?,
        )
    } else {
        Box::new(reader)
    };
    let staging = match &opts.staging_dir {
        Some(dir) => tempfile::tempfile_in(dir).with_context(|| {
            format!(
                "{}: cannot create a staging file for its entries",
                dir.display()
            )
        })?,
        None => crate::pack::writer::memory_file("kiln-staging")
            .context("cannot create an in-memory staging file for the archive's entries")?,
    };
    let read = Rc::new(Cell::new(0));
    let capped = Capped {
        inner: input,
        read: Rc::clone(&read),
        max: opts.max_bytes,
    };
    read_entries(
        capped,
        &read,
        &Arc::new(staging),
        opts.max_bytes,
        opts.strip_components,
    )
    .map_err(|e| anyhow!("{}: {e:#}", archive.display()))
}

/// The first component of the names of an archive's entries, so far.
#[derive(Debug, PartialEq, Eq)]
enum Top {
    /// No entry yet.
    Nothing,
    /// Every entry so far lies under this folder.
    Folder(String),
    /// Entries under several folders, or at the root.
    Several,
}

impl Top {
    /// Takes the entry `path` into account; a file of an ignored name at
    /// the root (the `._site` macOS tar adds) does not count.
    fn see(&mut self, path: &str) {
        let folder = match path.split_once('/') {
            Some((folder, _)) => folder,
            None if is_ignored_path(path) => return,
            None => {
                *self = Top::Several;
                return;
            }
        };
        match self {
            Top::Nothing => *self = Top::Folder(folder.to_owned()),
            Top::Folder(f) if f == folder => {}
            _ => *self = Top::Several,
        }
    }
}

/// Reads every entry of a decompressed tar stream, copying the bytes of
/// each file to `staging`; `read` counts the bytes taken from the stream,
/// and with link copies they stay within `max_bytes`. `strip` leading
/// components are dropped from every name; `None`: the archive's one top
/// folder, if it has one and no entry for its root.
fn read_entries(
    input: Capped<Box<dyn Read>>,
    read: &Cell<u64>,
    staging: &Arc<File>,
    max_bytes: u64,
    strip_given: Option<usize>,
) -> anyhow::Result<Source> {
    let strip = strip_given.unwrap_or(0);
    let mut top = Top::Nothing;
    let mut names_root = false;
    let mut ignored_early = Vec::new();
    let mut staged = BufWriter::with_capacity(1 << 20, &**staging);
    let mut staged_len = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    let mut source = Source::default();
    let mut archive = tar::Archive::new(input);
    let mut claimed = Claims::default();
    let mut links = Vec::new();
    let entries = archive.entries().context("not a tar archive")?;
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(_) if read.get() > max_bytes => bail!(too_big(max_bytes)),
            Err(e) => bail!(
                "truncated or corrupt tar archive ({})",
                printable(&e.to_string())
            ),
        };
        let raw_name = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw_name).into_owned();
        let fail = |problem: &str| anyhow!("entry {shown:?}: {problem}");
        let kind = entry.header().entry_type();
        let Ok(name) = std::str::from_utf8(&raw_name) else {
            if !kind.is_dir() && !kind.is_pax_global_extensions() {
                source
                    .warnings
                    .push(format!("entry {shown:?}: skipped, its name is not UTF-8"));
                source.left_out.push((shown.clone(), Why::NotUtf8));
            }
            continue;
        };
        if kind.is_pax_global_extensions() {
            continue;
        }
        let Some(full_path) = normalise(name).map_err(|p| fail(&p))? else {
            names_root = true;
            continue;
        };
        let Some(path) = strip_components(&full_path, strip) else {
            continue;
        };
        if kind.is_dir() {
            continue;
        }
        top.see(&path);
        // Left out at once when it is left out whether or not a top
        // folder is stripped later (the rules differ only for a few root
        // names); otherwise once that is decided.
        let ignored = is_ignored_path(&path)
            && (strip_given.is_some()
                || path
                    .split_once('/')
                    .is_none_or(|(_, rest)| is_ignored_path(rest)));
        if ignored {
            ignored_early.push(path);
            continue;
        }
        let mtime = entry.header().mtime().map_or(0, |t| t as i64);
        if kind.is_file() || kind == EntryType::Continuous {
            claimed.claim(&path, Claim::File(source.files.len()));
            let size = entry.size();
            if read.get().saturating_add(size) > max_bytes {
                return Err(fail(&too_big(max_bytes)));
            }
            let copied =
                stage(&mut (&mut entry).take(size), &mut staged, &mut buf).map_err(|e| fail(&e))?;
            if copied < size {
                return Err(fail(&format!(
                    "truncated archive: header says {size} bytes, only {copied} follow"
                )));
            }
            source.files.push(SourceFile {
                path,
                len: size,
                content: Content::Staged {
                    file: Arc::clone(staging),
                    off: staged_len,
                },
                mtime,
            });
            staged_len += size;
        } else if kind.is_symlink() || kind.is_hard_link() {
            claimed.claim(&path, Claim::Link(links.len()));
            let target = match entry.link_name_bytes() {
                None => Err(LinkError::NoTarget),
                Some(t) => match std::str::from_utf8(&t) {
                    Err(_) => Err(LinkError::NotUtf8),
                    Ok(t) if kind.is_hard_link() => match normalise(t) {
                        Ok(Some(p)) => Ok(p),
                        Ok(None) => Err(LinkError::Root),
                        Err(why) => Err(LinkError::BadName(why)),
                    },
                    // Resolved where the link sits in the archive, so that
                    // `../public/x` from `public/a` stays inside.
                    Ok(t) => resolve_symlink(&full_path, t),
                }
                .and_then(|target| {
                    strip_components(&target, strip).ok_or(LinkError::Stripped(target))
                }),
            };
            links.push(Link {
                path,
                target,
                symbolic: kind.is_symlink(),
                mtime,
            });
        } else {
            source.warnings.push(format!(
                "entry {shown:?}: skipped, not a regular file, directory or link ({kind:?})"
            ));
        }
    }
    claimed.keep_the_last(&mut source, &mut links);
    if strip_given.is_none()
        && !names_root
        && let Top::Folder(folder) = top
    {
        strip_top_folder(&mut source, &mut links, &folder);
        let prefix = format!("{folder}/");
        for path in &mut ignored_early {
            if let Some(rest) = path.strip_prefix(&prefix) {
                *path = rest.to_owned();
            }
        }
        source.stripped = Some(folder);
    }
    for path in ignored_early {
        source.left_out.extend(ignored_part(&path));
    }
    // What the ignore rules leave out of the names as they now are.
    let mut left_out = Vec::new();
    source.files.retain(|f| match ignored_part(&f.path) {
        Some(part) => {
            left_out.push(part);
            false
        }
        None => true,
    });
    links.retain(|l| match ignored_part(&l.path) {
        Some(part) => {
            left_out.push(part);
            false
        }
        None => true,
    });
    source.left_out.extend(left_out);
    let mut index: HashMap<String, Option<usize>> = source
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.clone(), Some(i)))
        .collect();
    index.extend(links.iter().map(|l| (l.path.clone(), None)));
    let by_path: HashMap<&str, &Result<String, LinkError>> =
        links.iter().map(|l| (l.path.as_str(), &l.target)).collect();
    let mut taken: HashSet<String> = source.files.iter().map(|f| f.path.clone()).collect();
    let mut resolved = Vec::new();
    // Link copies count too: each is served as a file of its own, and a
    // few links to a large directory would otherwise multiply it past any
    // limit.
    let mut budget = max_bytes.saturating_sub(read.get());
    for link in &links {
        let copies = match follow(&link.target, &index, &by_path) {
            Ok(i) => Ok(vec![(link.path.clone(), i)]),
            Err(why) => match (&link.target, link.symbolic) {
                (Ok(dir), true) => expand_dir_link(&link.path, dir, &source.files).ok_or(why),
                _ => Err(why),
            }
            .and_then(|c| c),
        };
        match copies {
            Ok(copies) => {
                for (path, i) in copies {
                    if !taken.insert(path.clone()) {
                        source.warnings.push(format!(
                            "entry {:?}: link skipped, {path:?} is already in the archive",
                            link.path
                        ));
                        continue;
                    }
                    let len = source.files[i].len;
                    budget = budget
                        .checked_sub(len)
                        .ok_or_else(|| anyhow!("entry {:?}: {}", link.path, too_big(max_bytes)))?;
                    resolved.push(SourceFile {
                        path,
                        content: source.files[i].content.clone(),
                        len,
                        mtime: link.mtime,
                    });
                }
            }
            Err(why) => {
                if why.leads_out() {
                    source.left_out.push((link.path.clone(), Why::OutsideLink));
                }
                source
                    .warnings
                    .push(format!("entry {:?}: link skipped, {why}", link.path));
            }
        }
    }
    source.files.extend(resolved);
    staged
        .flush()
        .context("cannot write the staging file of its entries")?;
    Ok(source)
}

/// Drops `folder/` from the names of every file and link, and from link
/// targets (a target outside it is then outside the site).
fn strip_top_folder(source: &mut Source, links: &mut [Link], folder: &str) {
    let prefix = format!("{folder}/");
    let strip = |path: &str| path.strip_prefix(&prefix).map(str::to_owned);
    for file in &mut source.files {
        file.path = strip(&file.path).unwrap_or_default();
    }
    for link in links {
        link.path = strip(&link.path).unwrap_or_default();
        if let Ok(target) = &link.target {
            link.target = strip(target).ok_or_else(|| LinkError::OutsideTopFolder {
                target: target.clone(),
                folder: folder.to_owned(),
            });
        }
    }
    source.files.retain(|f| !f.path.is_empty());
}

/// Copies what `entry` yields to the staging file; the number of bytes, or
/// what went wrong, reading or writing.
fn stage(entry: &mut dyn Read, staged: &mut dyn Write, buf: &mut [u8]) -> Result<u64, String> {
    let mut copied = 0u64;
    loop {
        let n = match entry.read(buf) {
            Ok(0) => return Ok(copied),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot read data: {e}")),
        };
        staged
            .write_all(&buf[..n])
            .map_err(|e| format!("cannot write the staging file: {e}"))?;
        copied += n as u64;
    }
}

/// A symbolic link to a directory of the archive: the files under `dir`
/// again under `link` (one level: links inside `dir` are not re-expanded).
/// `None` if `dir` holds no file; an error for a link into its own target
/// (a loop, skipped as the directory walk does).
fn expand_dir_link(
    link: &str,
    dir: &str,
    files: &[SourceFile],
) -> Option<Result<Vec<(String, usize)>, LinkError>> {
    let prefix = format!("{dir}/");
    let copies: Vec<(String, usize)> = files
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let rest = f.path.strip_prefix(&prefix)?;
            Some((format!("{link}/{rest}"), i))
        })
        .collect();
    if copies.is_empty() {
        return None;
    }
    if format!("{link}/").starts_with(&prefix) {
        return Some(Err(LinkError::Loop(dir.to_owned())));
    }
    Some(Ok(copies))
}

/// Where an entry of a name went: `source.files` or the links, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Claim {
    File(usize),
    Link(usize),
}

/// The entry each name has so far, and the ones later entries of the same
/// name replaced.
#[derive(Default)]
struct Claims {
    by_name: HashMap<String, Claim>,
    /// Replaced entries, and each repeated name with how often it came.
    replaced: HashSet<Claim>,
    repeated: Vec<(String, usize)>,
}

impl Claims {
    /// `path` is now `claim`'s: an earlier entry of that name is replaced.
    fn claim(&mut self, path: &str, claim: Claim) {
        let Some(earlier) = self.by_name.insert(path.to_owned(), claim) else {
            return;
        };
        self.replaced.insert(earlier);
        match self.repeated.iter_mut().find(|(name, _)| name == path) {
            Some((_, times)) => *times += 1,
            None => self.repeated.push((path.to_owned(), 2)),
        }
    }

    /// Drops the replaced entries from `source` and `links`, with a
    /// warning for each name repeated.
    fn keep_the_last(self, source: &mut Source, links: &mut Vec<Link>) {
        let mut index = 0;
        source.files.retain(|_| {
            index += 1;
            !self.replaced.contains(&Claim::File(index - 1))
        });
        let mut index = 0;
        links.retain(|_| {
            index += 1;
            !self.replaced.contains(&Claim::Link(index - 1))
        });
        for (name, times) in self.repeated {
            source.warnings.push(format!(
                "entry {name:?}: in the archive {times} times (as `tar -r` appends); \
                 the last one is used, as extracting the archive would"
            ));
        }
    }
}

/// Follows a chain of links to a regular file; the index of that file.
fn follow(
    start: &Result<String, LinkError>,
    index: &HashMap<String, Option<usize>>,
    links: &HashMap<&str, &Result<String, LinkError>>,
) -> Result<usize, LinkError> {
    let mut target = start.clone()?;
    for _ in 0..MAX_LINK_HOPS {
        match index.get(&target) {
            Some(Some(i)) => return Ok(*i),
            Some(None) => match links.get(target.as_str()) {
                Some(next) => target = (*next).clone()?,
                None => return Err(LinkError::NotRegularFile(target)),
            },
            None => return Err(LinkError::Missing(target)),
        }
    }
    Err(LinkError::TooManyHops)
}

/// Normalises an entry name: `.` and empty components are dropped; `None`
/// for the root itself.
fn normalise(name: &str) -> Result<Option<String>, String> {
    if name.starts_with('/') {
        return Err("absolute path refused".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!("name longer than {MAX_NAME_BYTES} bytes"));
    }
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("'..' component refused".into()),
            p if p.len() > MAX_COMPONENT_BYTES => {
                return Err(format!(
                    "name component longer than {MAX_COMPONENT_BYTES} bytes"
                ));
            }
            p if p.contains('\0') => return Err("NUL byte in name".into()),
            p => parts.push(p),
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

/// `path` without its first `n` components; `None` if nothing is left.
fn strip_components(path: &str, n: usize) -> Option<String> {
    let mut rest = path;
    for _ in 0..n {
        rest = rest.split_once('/')?.1;
    }
    Some(rest.to_owned())
}

/// The archive path a symbolic link at `link` with target `target` names,
/// or why it points outside the archive.
fn resolve_symlink(link: &str, target: &str) -> Result<String, LinkError> {
    if target.starts_with('/') {
        return Err(LinkError::Absolute(target.to_owned()));
    }
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(LinkError::Outside(target.to_owned()));
                }
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(LinkError::Root);
    }
    Ok(parts.join("/"))
}

/// `message` fit for one line of a terminal: the tar reader quotes the
/// bytes of a field it could not read, which in a file that is not an
/// archive are anything.
fn printable(message: &str) -> String {
    const MAX_CHARS: usize = 160;
    let mut line: String = message
        .chars()
        .take(MAX_CHARS)
        .map(|c| {
            if c.is_control() || c == char::REPLACEMENT_CHARACTER {
                '?'
            } else {
                c
            }
        })
        .collect();
    if message.chars().nth(MAX_CHARS).is_some() {
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_or_refused() {
        assert_eq!(normalise("./a//b/./c.html"), Ok(Some("a/b/c.html".into())));
        assert_eq!(normalise("./"), Ok(None));
        assert!(normalise("/etc/passwd").is_err());
        assert!(normalise("a/../../b").is_err());
        assert!(normalise(&"x".repeat(300)).is_err());
    }

    #[test]
    fn components_are_stripped() {
        assert_eq!(
            strip_components("public/a/b.html", 0).as_deref(),
            Some("public/a/b.html")
        );
        assert_eq!(
            strip_components("public/a/b.html", 1).as_deref(),
            Some("a/b.html")
        );
        assert_eq!(
            strip_components("public/a/b.html", 2).as_deref(),
            Some("b.html")
        );
        assert_eq!(strip_components("public/a/b.html", 3), None);
        assert_eq!(strip_components("public", 1), None);
    }

    #[test]
    fn symlink_targets_stay_inside() {
        assert_eq!(
            resolve_symlink("a/b/link", "../c.txt"),
            Ok("a/c.txt".into())
        );
        assert_eq!(resolve_symlink("link", "./x/y"), Ok("x/y".into()));
        assert_eq!(
            resolve_symlink("a/link", "../../etc/passwd"),
            Err(LinkError::Outside("../../etc/passwd".into()))
        );
        assert_eq!(
            resolve_symlink("link", "/etc/passwd"),
            Err(LinkError::Absolute("/etc/passwd".into()))
        );
        assert_eq!(resolve_symlink("a/link", ".."), Err(LinkError::Root));
    }
}
