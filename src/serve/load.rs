//! Opening what is served, at start and at every reload: a pack (mapped,
//! verified, and with `--preload` / `--mlock` brought into memory and kept
//! there), a directory or archive fired into a preview pack, or a folder
//! of sites: `HOST.pack` for each host (with `HOST.crt` and `HOST.key`
//! for TLS), `_default.pack` for other hosts, each site loaded, replaced
//! and removed on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::bail;
use rustix::mm::Advice;

use super::handler::cold::ColdHosts;
use super::handler::{Site, Sites};
use super::metrics::Metrics;
use super::pack_limits;
use super::tls::PairPaths;
use crate::build::compress::Level;
use crate::build::source::ignore::Why;
use crate::build::source::{Kind, kind_of};
use crate::build::{BuildOptions, BuildReport};
use crate::pack::{Pack, verify};

/// How packs are brought into memory when opened.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// `--preload`: every page of the mapping faulted in at load.
    pub preload: bool,
    /// `--mlock`: the mapping locked in memory (implies `preload`).
    pub mlock: bool,
    /// `--preview-cache-control`: a directory or archive's preview.
    pub preview_cache_control: crate::build::PreviewCacheControl,
}

/// The name of the fallback site's pack in a folder of sites.
pub const DEFAULT_SITE: &str = "_default";

/// Whether `path` starts with a pack's magic (else it is a directory or an
/// archive to fire); an error when it cannot be opened.
pub fn is_pack(path: &Path) -> std::io::Result<bool> {
    let mut file = std::fs::File::open(path)?;
    let mut magic = [0u8; 8];
    Ok(std::io::Read::read_exact(&mut file, &mut magic).is_ok()
        && magic == crate::pack::format::MAGIC)
}

/// Maps and verifies the pack at `path`, then preloads or locks it as
/// `opts` say; every error is one line naming the file.
pub fn open_pack(path: &Path, opts: LoadOptions) -> anyhow::Result<Pack> {
    let pack = Pack::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    verify::verify(&pack).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    bring_in(&pack, opts).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(pack)
}

/// `--preload` and `--mlock`. Verifying a pack read every byte of it
/// through the mapping, which left every page mapped into the process:
/// without either flag they are unmapped again (`MADV_DONTNEED`; they stay
/// in the page cache, and a request maps the pages it reads), so that a
/// folder of many sites does not hold a page table entry for every byte
/// of every pack, counted in its RSS. Preloading maps every page into the
/// process, so that no request waits on a page fault, and locking keeps
/// the pages from being evicted under memory pressure.
fn bring_in(pack: &Pack, opts: LoadOptions) -> Result<(), String> {
    let map = pack.bytes();
    if map.is_empty() {
        return Ok(());
    }
    let (addr, len) = (map.as_ptr().cast_mut().cast(), map.len());
    if !(opts.preload || opts.mlock) {
        // SAFETY: advice on our own live, read-only file mapping: its
        // pages read the file again when next touched.
        let _ = unsafe { rustix::mm::madvise(addr, len, Advice::LinuxDontNeed) };
        return Ok(());
    }
    if opts.mlock {
        let limit = memlock_limit();
        // SAFETY: the range is our own live mapping.
        if let Err(e) = unsafe { rustix::mm::mlock(addr, len) } {
            let e = std::io::Error::from(e);
            let limit = limit.map_or("unlimited".to_string(), |l| format!("{l} bytes"));
            return Err(format!(
                "cannot lock the pack in memory (--mlock, {len} bytes): {e}; the locked-memory limit is {limit} \
                 (raise it: `ulimit -l`, LimitMEMLOCK= in a systemd unit)"
            ));
        }
        // Locking faulted every page in already.
        return Ok(());
    }
    // SAFETY: advice on our own live mapping. MADV_POPULATE_READ (Linux
    // 5.14) faults every page in; older kernels get WILLNEED and a read of
    // one byte per page.
    if unsafe { rustix::mm::madvise(addr, len, Advice::LinuxPopulateRead) }.is_ok() {
        return Ok(());
    }
    // SAFETY: as above.
    let _ = unsafe { rustix::mm::madvise(addr, len, Advice::WillNeed) };
    let mut sum = 0u8;
    for page in map.iter().step_by(4096) {
        sum = sum.wrapping_add(*page);
    }
    std::hint::black_box(sum);
    Ok(())
}

/// The soft RLIMIT_MEMLOCK, for the error message (`None`: no limit).
/// Read once, by the first `--mlock` load, at start: the sandbox's filter
/// has no `prlimit64` for a reload whose lock fails to read it then (that
/// ended the server), and nothing in the process changes it.
fn memlock_limit() -> Option<u64> {
    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();
    *LIMIT.get_or_init(|| rustix::process::getrlimit(rustix::process::Resource::Memlock).current)
}

/// What SITE names when it is one site, as start-up and reloads open it.
#[derive(Clone, Debug)]
pub struct SiteSource {
    /// The pack, directory or tar archive.
    pub path: PathBuf,
    /// How a pack is brought into memory.
    pub opts: LoadOptions,
    /// A preview lists folders without an index (`--index-pages`).
    pub index_pages: bool,
}

/// Opens what SITE names: a pack is mapped and verified; a directory or a
/// tar archive is fired into a preview pack in memory first (fast
/// compression settings), so `kiln serve ./public` works without a build
/// step. `--index-pages` is for previews: a pack has its routes already.
pub fn open_site(site: &SiteSource) -> anyhow::Result<Pack> {
    let path = site.path.as_path();
    match kind_of(path)? {
        Kind::Pack if site.index_pages => bail!(
            "{}: --index-pages applies to a preview of a directory or archive; build the pack with kiln build --index-pages",
            path.display()
        ),
        Kind::Pack => open_pack(path, site.opts),
        Kind::Archive | Kind::Folder => {
            let mut opts = BuildOptions::preview(Level::Fast, site.opts.preview_cache_control);
            opts.routes.index_pages = site.index_pages;
            let (pack, report) = crate::build::build_preview_with(path, &opts, None)?;
            log_build_warnings(&report);
            Ok(pack)
        }
    }
}

/// Logs what a preview build skipped (links out of the site, special
/// files), as `kiln build` prints it.
pub fn log_build_warnings(report: &BuildReport) {
    log_new_build_warnings(report, &[]);
}

/// Logs the warnings of `report` that are not among `said` already (a
/// rebuild of a preview repeats those of the builds before it); the first
/// time a preview leaves out what the user kiln switched to cannot read,
/// says how to fix it.
pub fn log_new_build_warnings(report: &BuildReport, said: &[String]) {
    for warning in report.warnings.iter().filter(|w| !said.contains(w)) {
        tracing::warn!("{warning}");
    }
    static HINTED: AtomicBool = AtomicBool::new(false);
    if let Some(user) = PREVIEW_BUILDER.get()
        && report
            .left_out
            .iter()
            .any(|(_, why)| *why == Why::Unreadable)
        && !HINTED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            "a preview is built as the user it is served as, {user}, and leaves out what {user} \
             cannot read (above); to publish it, let {user} read it, or serve as root (--user root)"
        );
    }
}

/// The user kiln switched to from root, who builds and serves previews;
/// named when a preview leaves out what it cannot read.
static PREVIEW_BUILDER: OnceLock<String> = OnceLock::new();

/// Says that previews are built by `user`, a user kiln switched to.
pub fn set_preview_builder(user: &str) {
    let _ = PREVIEW_BUILDER.set(user.to_owned());
}

/// What SITE is taken for (said at start, by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// A pack, served as it is.
    Pack,
    /// A folder of sites holding this many packs.
    Folder { packs: usize },
    /// A directory or a tar archive, fired into a preview.
    Preview(Kind),
}

/// Tells what `path` is taken for, by content, never by name: a file is a
/// pack or a tar archive (`kind_of`); a directory holding a pack
/// (`folder_of_sites`) is a folder of sites unless `preview` (`--preview`)
/// asks for a preview of it; any other directory is a site to preview.
pub fn take(path: &Path, preview: bool) -> anyhow::Result<Taken> {
    Ok(match kind_of(path)? {
        Kind::Pack if preview => bail!(
            "{}: a kiln pack, served as it is: --preview fires a directory or an archive",
            path.display()
        ),
        Kind::Pack => Taken::Pack,
        Kind::Folder if !preview => match folder_of_sites(path) {
            Some(packs) => Taken::Folder { packs },
            None => Taken::Preview(Kind::Folder),
        },
        kind => Taken::Preview(kind),
    })
}

/// The rule that tells a folder of sites from a site to preview: a folder
/// of sites holds a `NAME.pack` (not hidden) that is a pack, by its magic,
/// or is empty (a copy just begun). Nothing else in it changes that: a
/// stray file (`example.com.pack.bak`, `notes.txt`) is warned about and
/// never served (`Folder::warn_strays`), where it once made the folder a
/// preview that published its keys. A folder whose `.pack` files are not
/// packs (a game's assets) is a site. Returns the number of packs.
pub fn folder_of_sites(dir: &Path) -> Option<usize> {
    let packs = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.as_encoded_bytes();
            !name.starts_with(b".") && name.ends_with(b".pack") && {
                let path = entry.path();
                path.is_file()
                    && (is_pack(&path).unwrap_or(true)
                        || std::fs::metadata(&path).is_ok_and(|m| m.len() == 0))
            }
        })
        .count();
    (packs > 0).then_some(packs)
}

/// Whether `name`, in a folder of sites, is one of its files: a site's
/// pack, certificate or key, or a hidden file (a build's temporary one);
/// anything else is a stray, never served.
fn belongs_in_folder(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
        || ["pack", "crt", "key"]
            .iter()
            .any(|extension| site_name(name, extension).is_some())
}

/// The site a file of a folder of sites belongs to, if its name is
/// `NAME.EXTENSION` with NAME a host name (lower-cased: hosts match
/// without case) or `_default`; hidden files (a build's temporary file)
/// belong to none.
pub fn site_name(file_name: &OsStr, extension: &str) -> Option<String> {
    let name = file_name.to_str()?;
    let stem = name.strip_suffix(extension)?.strip_suffix('.')?;
    if stem == DEFAULT_SITE {
        return Some(stem.to_string());
    }
    let valid = !stem.is_empty()
        && !stem.starts_with('.')
        && stem.len() <= super::handler::sites::MAX_HOST
        && stem
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'));
    valid.then(|| stem.trim_end_matches('.').to_ascii_lowercase())
}

/// A pack file as last seen: a reload that finds the same one skips it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl FileId {
    fn of(path: &Path) -> std::io::Result<FileId> {
        let m = std::fs::metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// A pack file opened and verified, not yet a site.
struct Opened {
    /// The file it was.
    id: FileId,
    /// Its place among the mapped packs.
    mapped: pack_limits::Mapped,
    pack: Pack,
    /// Its descriptor's place in the budget; `None`: closed.
    descriptor: Option<pack_limits::Held>,
}

/// Opens and verifies the pack at `path` for a site of a folder, and
/// keeps its descriptor or closes it (`pack_limits`) at once: packs
/// opened together must not hold more than the budget meanwhile.
fn open_file(path: &Path, opts: LoadOptions) -> anyhow::Result<Opened> {
    let id = FileId::of(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mapped = pack_limits::Mapped::take()
        .map_err(|e| anyhow::anyhow!("{}: not mapped: {e}", path.display()))?;
    let mut pack = open_pack(path, opts)?;
    let descriptor = pack_limits::keep_or_close(&mut pack);
    Ok(Opened {
        id,
        mapped,
        pack,
        descriptor,
    })
}

/// `open_file` for every path, on as many threads as there are cores
/// (verifying reads every byte of every pack: at start, for a folder of
/// many sites, most of the time), in order. The threads are joined before
/// this returns: start-up enters the sandbox with one thread.
fn open_files(paths: &[PathBuf], opts: LoadOptions) -> Vec<anyhow::Result<Opened>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = paths.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = paths
            .chunks(per_thread)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|path| open_file(path, opts))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// One site of the folder, as loaded.
struct Loaded {
    site: Arc<Site>,
    /// The pack file it was loaded from.
    id: FileId,
    /// Its pack's place among the mapped ones (a pack replaced stays
    /// mapped a moment longer, while responses from it finish: the
    /// reserve of `pack_limits` covers that).
    _mapped: pack_limits::Mapped,
}

/// A folder of sites and what was loaded from it.
pub struct Folder {
    dir: PathBuf,
    opts: LoadOptions,
    /// By site name (host, or `_default`).
    loaded: BTreeMap<String, Loaded>,
    /// Where each site's counts go, kept across its reloads.
    metrics: Arc<Metrics>,
    /// The stray files (neither a site's pack, certificate nor key)
    /// warned about already: each is named once.
    strays_said: BTreeSet<OsString>,
    /// Slots below `next_slot` no loaded site holds (a removed site's).
    free_slots: BTreeSet<u32>,
    /// `kiln serve s3://… --cache-size`: the hosts the bucket holds.
    cold: Option<Arc<ColdHosts>>,
    /// The lowest slot above every one held.
    next_slot: u32,
}

impl Folder {
    /// Loads every pack of `dir`. A pack that cannot be loaded is logged
    /// (one line naming the file) and its site left out, so that one bad
    /// deploy does not keep every other site from starting with the
    /// machine; when no pack loads, that is the error.
    pub fn open(dir: &Path, opts: LoadOptions, metrics: Arc<Metrics>) -> anyhow::Result<Folder> {
        let mut folder = Folder {
            dir: dir.to_path_buf(),
            opts,
            loaded: BTreeMap::new(),
            metrics,
            strays_said: BTreeSet::new(),
            free_slots: BTreeSet::new(),
            cold: None,
            next_slot: 0,
        };
        folder.warn_strays(None);
        let mut first_error = None;
        let (names, paths): (Vec<String>, Vec<PathBuf>) = folder
            .site_packs()?
            .into_iter()
            .map(|(name, file_name)| (name, dir.join(file_name)))
            .unzip();
        let opened = open_files(&paths, opts);
        for ((name, path), opened) in names.into_iter().zip(paths).zip(opened) {
            let loaded = if folder.loaded.contains_key(&name) {
                Err(anyhow::anyhow!(
                    "{}: a second pack for the site {name} (host names match without case)",
                    path.display()
                ))
            } else {
                folder.load_opened(&name, opened)
            };
            match loaded {
                Ok(site) => folder.insert(name, site),
                Err(e) => {
                    tracing::error!("site {name}: not served: {e:#}");
                    first_error.get_or_insert(e);
                }
            }
        }
        let held = pack_limits::held();
        if held < folder.loaded.len() {
            tracing::info!(
                "{} sites: {held} packs keep their descriptor (sendfile, a read lease), within a quarter of \
                 the open-file limit; the others are served from their mapping alone",
                folder.loaded.len()
            );
        }
        match first_error {
            Some(e) if folder.loaded.is_empty() => Err(e.context("no site could be loaded")),
            _ => Ok(folder),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Warns, in one line, about the stray files among `changed` (file
    /// names in the folder; every file when `None`) not named before:
    /// they are never served, whatever they hold.
    fn warn_strays(&mut self, changed: Option<&[OsString]>) {
        let names: Vec<OsString> = match changed {
            Some(names) => names
                .iter()
                .filter(|name| self.dir.join(name).symlink_metadata().is_ok())
                .cloned()
                .collect(),
            None => match std::fs::read_dir(&self.dir) {
                Ok(entries) => entries.flatten().map(|e| e.file_name()).collect(),
                Err(_) => return,
            },
        };
        let mut strays: Vec<OsString> = names
            .into_iter()
            .filter(|name| !belongs_in_folder(name) && !self.strays_said.contains(name))
            .collect();
        if strays.is_empty() {
            return;
        }
        strays.sort();
        strays.dedup();
        let shown: Vec<String> = strays
            .iter()
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        tracing::warn!(
            "{}: not served: {} (a folder of sites serves HOST.pack files, with HOST.crt and HOST.key \
             for TLS, and nothing else; kiln serve DIR --preview fires the folder into a site instead)",
            self.dir.display(),
            shown.join(", ")
        );
        self.strays_said.extend(strays);
    }

    /// Every site name with a pack in the folder now, with the pack's
    /// file name, by site name.
    fn site_packs(&self) -> anyhow::Result<Vec<(String, OsString)>> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| anyhow::anyhow!("{}: cannot list: {e}", self.dir.display()))?;
        let mut names: Vec<(String, OsString)> = entries
            .flatten()
            .filter_map(|e| {
                let file_name = e.file_name();
                Some((site_name(&file_name, "pack")?, file_name))
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Every site name with a pack in the folder now.
    fn site_names(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .site_packs()?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    /// The pack of site `name`. A name read from a file is lower-cased, so
    /// the file itself is found by a case-insensitive match when the exact
    /// name is not there.
    fn pack_path(&self, name: &str) -> PathBuf {
        self.file_of(name, "pack")
    }

    fn file_of(&self, name: &str, extension: &str) -> PathBuf {
        let exact = self.dir.join(format!("{name}.{extension}"));
        if exact.exists() {
            return exact;
        }
        std::fs::read_dir(&self.dir)
            .ok()
            .and_then(|entries| {
                entries
                    .flatten()
                    .find(|e| site_name(&e.file_name(), extension).as_deref() == Some(name))
            })
            .map_or(exact, |e| e.path())
    }

    /// Opens the pack of site `name` at `path`, at the slot the site holds
    /// (or a free one).
    fn load(&self, name: &str, path: &Path) -> anyhow::Result<Loaded> {
        self.load_opened(name, open_file(path, self.opts))
    }

    /// `load`, once `open_file` opened the pack (or failed to).
    fn load_opened(&self, name: &str, opened: anyhow::Result<Opened>) -> anyhow::Result<Loaded> {
        let stats = self.metrics.site(name);
        let Opened {
            id,
            mapped,
            pack,
            descriptor,
        } = match opened {
            Ok(opened) => opened,
            Err(e) => {
                stats.failed_loads.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        stats.loads.fetch_add(1, Ordering::Relaxed);
        let slot = match self.loaded.get(name) {
            Some(old) => old.site.slot(),
            None => self.free_slot(),
        };
        Ok(Loaded {
            site: Site::with_descriptor(pack, descriptor, slot, stats),
            id,
            _mapped: mapped,
        })
    }

    /// The lowest slot no loaded site holds.
    fn free_slot(&self) -> u32 {
        self.free_slots.first().copied().unwrap_or(self.next_slot)
    }

    /// Keeps `loaded` as site `name`'s, at the slot `load` gave it.
    fn insert(&mut self, name: String, loaded: Loaded) {
        let slot = loaded.site.slot();
        self.free_slots.remove(&slot);
        self.next_slot = self.next_slot.max(slot + 1);
        self.loaded.insert(name, loaded);
    }

    /// Drops site `name`; its slot is free again. Whether it was loaded.
    fn remove(&mut self, name: &str) -> bool {
        let Some(removed) = self.loaded.remove(name) else {
            return false;
        };
        self.free_slots.insert(removed.site.slot());
        // Cold again (evicted): its next request asks for it again.
        if let Some(cold) = &self.cold {
            cold.unloaded(name.as_bytes());
        }
        true
    }

    /// The sites as a generation to serve.
    pub fn sites(&self) -> Arc<Sites> {
        let fallback = self.loaded.get(DEFAULT_SITE).map(|l| Arc::clone(&l.site));
        Sites::by_host_cold(
            self.loaded
                .iter()
                .filter(|(name, _)| *name != DEFAULT_SITE)
                .map(|(name, l)| (name.as_bytes().to_vec(), Arc::clone(&l.site))),
            fallback,
            self.cold.clone(),
        )
    }

    /// The hosts the bucket holds (`--cache-size`), for the next `sites`.
    pub fn set_cold(&mut self, cold: Option<Arc<ColdHosts>>) {
        self.cold = cold;
    }

    /// How many sites are loaded (the fallback included).
    pub fn site_count(&self) -> usize {
        self.loaded.len()
    }

    /// Brings the sites named by `changed` (file names in the folder; every
    /// site when `None`, as after SIGHUP) up to date with their packs: a
    /// new or replaced pack is loaded, a removed one dropped, an unchanged
    /// one kept. A pack that fails to load is logged and the site keeps
    /// its previous pack (or stays absent). Returns whether any site
    /// changed.
    pub fn refresh(&mut self, changed: Option<&[OsString]>) -> bool {
        self.warn_strays(changed);
        let names: Vec<String> = match changed {
            Some(files) => {
                let mut names: Vec<String> =
                    files.iter().filter_map(|f| site_name(f, "pack")).collect();
                names.sort();
                names.dedup();
                names
            }
            None => match self.site_names() {
                Ok(mut names) => {
                    names.extend(self.loaded.keys().cloned());
                    names.sort();
                    names.dedup();
                    names
                }
                Err(e) => {
                    tracing::error!("reload: {e:#}; the sites stay as they are");
                    return false;
                }
            },
        };
        let mut any = false;
        for name in names {
            any |= self.refresh_site(&name);
        }
        any
    }

    /// Brings one site up to date; true when it changed.
    fn refresh_site(&mut self, name: &str) -> bool {
        let path = self.pack_path(name);
        let id = match FileId::of(&path) {
            Ok(id) => id,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.remove(name) {
                    tracing::info!("site {name}: {} removed; no longer served", path.display());
                    return true;
                }
                return false;
            }
            Err(e) => {
                tracing::error!("site {name}: {}: {e}; kept as it was", path.display());
                return false;
            }
        };
        // Unchanged; or just created and still empty (a copy being made:
        // its close reloads it).
        if self.loaded.get(name).is_some_and(|l| l.id == id) || id.size == 0 {
            return false;
        }
        match self.load(name, &path) {
            Ok(loaded) => {
                let routes = loaded.site.pack().map_or(0, |p| p.route_count());
                let verb = if self.loaded.contains_key(name) {
                    "reloaded"
                } else {
                    "added"
                };
                tracing::info!("site {name}: {verb} {} ({routes} routes)", path.display());
                self.insert(name.to_string(), loaded);
                true
            }
            Err(e) => {
                let still = if self.loaded.contains_key(name) {
                    "still serving its previous pack"
                } else {
                    "not served"
                };
                tracing::error!("site {name}: reload failed: {e:#}; {still}");
                false
            }
        }
    }

    /// The certificate pairs beside the packs: `HOST.crt` with `HOST.key`,
    /// in name order (a `.crt` without its `.key` is reported and left
    /// out).
    pub fn certificate_pairs(&self) -> Vec<PairPaths> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| site_name(&e.file_name(), "crt"))
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|name| {
                let (cert, key) = (self.file_of(&name, "crt"), self.file_of(&name, "key"));
                if !key.exists() {
                    tracing::warn!(
                        "{}: no {} beside it; the certificate is not used",
                        cert.display(),
                        key.display()
                    );
                    return None;
                }
                Some(PairPaths { cert, key })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_holding_a_pack_is_a_folder_of_sites() {
        let dir = tempfile::tempdir().unwrap();
        let write =
            |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
        write("index.html", b"<p>a site</p>");
        write("assets.pack", b"not a kiln pack");
        write(".example.com.pack", &crate::pack::format::MAGIC);
        assert_eq!(folder_of_sites(dir.path()), None, "no pack, by content");
        // A copy just begun is a pack: a deploy in progress at boot must
        // not turn the folder into a preview.
        write("new.example.pack", b"");
        assert_eq!(folder_of_sites(dir.path()), Some(1));
        write("example.com.pack", &crate::pack::format::MAGIC);
        assert_eq!(folder_of_sites(dir.path()), Some(2));
        for (name, belongs) in [
            ("example.com.pack", true),
            ("_default.pack", true),
            ("example.com.crt", true),
            ("example.com.key", true),
            (".example.com.pack.x1.tmp", true),
            ("example.com.pack.bak", false),
            ("notes.txt", false),
            ("my site.pack", false),
            ("docs", false),
        ] {
            assert_eq!(belongs_in_folder(OsStr::new(name)), belongs, "{name}");
        }
    }

    #[test]
    fn file_names_name_sites() {
        for (file, ext, site) in [
            ("example.com.pack", "pack", Some("example.com")),
            ("WWW.Example.COM.pack", "pack", Some("www.example.com")),
            ("_default.pack", "pack", Some("_default")),
            ("127.0.0.1.pack", "pack", Some("127.0.0.1")),
            ("example.com.crt", "crt", Some("example.com")),
            ("example.com.crt", "pack", None),
            (".example.com.pack.x1.tmp", "pack", None),
            (".hidden.pack", "pack", None),
            ("my site.pack", "pack", None),
            (".pack", "pack", None),
            ("pack", "pack", None),
        ] {
            assert_eq!(
                site_name(OsStr::new(file), ext).as_deref(),
                site,
                "{file} as .{ext}"
            );
        }
    }
}
