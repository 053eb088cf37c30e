//! `kiln serve DIR --watch`: the live preview. Every directory under DIR is
//! watched with inotify (directories reached through symbolic links that
//! stay inside DIR too, as the build follows them; ignored names such as
//! `.git` are not); once
//! changes stop for `QUIET` (or have gone on for `MAX_WAIT`), the preview
//! pack is fired again in memory, reusing every encoded body of the one
//! being served that is still the same, and published: responses in flight
//! keep the old site. What changed is logged, as `kiln diff` sees it. A
//! build that fails (a broken `_headers` or `_redirects`, an unreadable
//! file) is logged and the last good site keeps serving.
//!
//! Live reload: every HTML page of the preview loads the preview's script
//! (`build::live` puts its tag in), whose event stream hears of each new
//! generation (`handler::live`): what changed, as the diff tells it (only
//! stylesheets: swapped in place; else a reload). The event loops are
//! woken once a generation is published, so that held streams hear of it
//! at once.

use std::collections::HashSet;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{CreateFlags, WatchFlags};
use rustix::io::Errno;

use super::handler::live::{Change, Live};
use super::handler::{Site, Sites};
use super::inotify;
use super::load::{log_build_warnings, log_new_build_warnings};
use super::metrics::SiteStats;
use super::net::Waker;
use super::stack::CurrentSites;
use crate::build::compress::Level;
use crate::build::source::dir::{LinkTarget, resolve_link};
use crate::build::source::ignore::is_ignored_entry;
use crate::build::{BuildOptions, BuildReport, PreviewCacheControl, build_preview_with};
use crate::diff::Diff;

/// How long the tree must stay still before a rebuild: an editor's save
/// or a generator's run is a burst of events.
const QUIET: Duration = Duration::from_millis(50);
/// The longest a rebuild waits for the tree to stay still.
const MAX_WAIT: Duration = Duration::from_secs(1);
/// Changed routes named in the log line, at most.
const NAMED: usize = 5;

/// What inotify reports: anything that can change what the build reads.
const EVENTS: WatchFlags = WatchFlags::CLOSE_WRITE
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF);

/// The preview of one directory: its watch, its settings, what it serves.
pub struct Preview {
    /// The site's directory.
    dir: PathBuf,
    /// Build settings: preview levels, `--index-pages`.
    opts: BuildOptions,
    /// The inotify descriptor.
    inotify: OwnedFd,
    /// The site being served; its pack is the base of the next build.
    served: Arc<Site>,
    /// The warnings of the last build that worked, already logged: a
    /// rebuild logs only new ones.
    warnings: Vec<String>,
    /// The last build failed: the next one that works says so, even when
    /// it serves what was served before (a broken file put back), so that
    /// the error is not the log's last word.
    failing: bool,
    /// When this preview started (Unix milliseconds): tells its
    /// generations from another server's (`Live::first`).
    epoch: u64,
}

/// A preview watched and not built yet.
pub struct Watching {
    dir: PathBuf,
    opts: BuildOptions,
    inotify: OwnedFd,
}

/// Watches `dir`, whose preview is fired at `level` (listing folders
/// without an index with `index_pages`): set up before the sandbox and
/// before the first build (`Watching::first_build`), so that no change
/// after start-up is missed.
pub fn start(
    dir: &Path,
    level: Level,
    index_pages: bool,
    cache_control: PreviewCacheControl,
) -> anyhow::Result<Watching> {
    if !dir.is_dir() {
        bail!(
            "{}: --watch needs a directory (a pack or an archive is reloaded when it is replaced)",
            dir.display()
        );
    }
    let inotify = rustix::fs::inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
        .map_err(io::Error::from)
        .context("--watch: cannot start inotify")?;
    watch_tree(&inotify, dir).with_context(|| format!("{}: cannot watch", dir.display()))?;
    let mut opts = BuildOptions::preview(level, cache_control);
    opts.routes.index_pages = index_pages;
    opts.live_reload = true;
    Ok(Watching {
        dir: dir.to_path_buf(),
        opts,
        inotify,
    })
}

impl Watching {
    /// The directory previewed.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fires the first preview, counted in `stats`, as every rebuild is:
    /// inside the sandbox, as the user it is served as.
    pub fn first_build(self, stats: Arc<SiteStats>) -> anyhow::Result<(Arc<Site>, Preview)> {
        let (pack, report) = build_preview_with(&self.dir, &self.opts, None)?;
        log_build_warnings(&report);
        stats.loads.fetch_add(1, Ordering::Relaxed);
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let served = Site::preview(pack, stats, Live::first(epoch));
        let preview = Preview {
            dir: self.dir,
            opts: self.opts,
            inotify: self.inotify,
            served: Arc::clone(&served),
            warnings: report.warnings,
            failing: false,
            epoch,
        };
        Ok((served, preview))
    }
}

/// Starts the thread that rebuilds and publishes the preview on change,
/// and wakes the event loops (`wakers`) after each.
pub fn spawn(
    preview: Preview,
    current: Arc<CurrentSites>,
    wakers: Vec<Arc<Waker>>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kiln-watch".into())
        .spawn(move || preview.run(&current, &wakers))
}

impl Preview {
    /// Waits for changes and rebuilds, until inotify fails.
    fn run(mut self, current: &CurrentSites, wakers: &[Arc<Waker>]) {
        loop {
            if let Err(e) = self.wait_for_change() {
                tracing::error!(
                    "stopped watching {} ({e}); the preview is no longer rebuilt",
                    self.dir.display()
                );
                return;
            }
            if let Err(e) = watch_tree(&self.inotify, &self.dir) {
                tracing::warn!(
                    "cannot watch every directory of {}: {e}",
                    self.dir.display()
                );
            }
            if self.rebuild(current) {
                // Each loop notices the new generation as it wakes, and
                // tells its held event streams.
                for waker in wakers {
                    waker.wake();
                }
            }
        }
    }

    /// Blocks until something changed, then until the tree is still.
    fn wait_for_change(&self) -> io::Result<()> {
        let mut buf = vec![0u8; 64 << 10];
        while !self.read_events(&mut buf, None)? {}
        let first = Instant::now();
        while first.elapsed() < MAX_WAIT && self.read_events(&mut buf, Some(QUIET))? {}
        Ok(())
    }

    /// Waits for events (for at most `timeout`) and reads them; true when
    /// one of them is about a name the build reads.
    fn read_events(&self, buf: &mut [u8], timeout: Option<Duration>) -> io::Result<bool> {
        let mut pfd = [PollFd::new(&self.inotify, PollFlags::IN)];
        let timeout = timeout.and_then(|t| Timespec::try_from(t).ok());
        match rustix::event::poll(&mut pfd, timeout.as_ref()) {
            Ok(0) | Err(Errno::INTR) => return Ok(false),
            Ok(_) => {}
            Err(errno) => return Err(errno.into()),
        }
        let mut relevant = false;
        loop {
            match rustix::io::read(&self.inotify, &mut buf[..]) {
                Ok(n) => relevant |= relevant_events(&buf[..n]),
                Err(Errno::AGAIN) => return Ok(relevant),
                Err(Errno::INTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
    }

    /// Fires the preview again and publishes it, or logs why not; true
    /// when a new generation was published.
    fn rebuild(&mut self, current: &CurrentSites) -> bool {
        let started = Instant::now();
        let built = build_preview_with(&self.dir, &self.opts, self.served.pack());
        let (pack, mut report) = match built {
            Ok(built) => built,
            Err(e) => {
                self.served
                    .stats()
                    .failed_loads
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!("{e:#}; still serving the previous site");
                self.failing = true;
                return false;
            }
        };
        log_new_build_warnings(&report, &self.warnings);
        self.warnings = std::mem::take(&mut report.warnings);
        let recovered = std::mem::take(&mut self.failing);
        let diff = self.served.pack().map(|old| Diff::new(old, &pack));
        let line = match &diff {
            Some(diff) if diff.is_empty() => {
                if recovered {
                    tracing::info!(
                        "rebuilt {} in {} ms: the build works again; the site served is unchanged",
                        self.dir.display(),
                        started.elapsed().as_millis()
                    );
                }
                return false;
            }
            Some(diff) => changes_line(diff),
            None => "a new site".to_owned(),
        };
        let change = match diff.as_ref().and_then(Diff::stylesheets_only) {
            Some(paths) => Change::Stylesheets(paths),
            None => Change::Reload,
        };
        let again = if recovered {
            ": the build works again"
        } else {
            ""
        };
        tracing::info!(
            "rebuilt {} in {} ms{again}: {line}; {}",
            self.dir.display(),
            started.elapsed().as_millis(),
            encodings_line(&report)
        );
        let stats = Arc::clone(self.served.stats());
        stats.loads.fetch_add(1, Ordering::Relaxed);
        let live = match self.served.live() {
            Some(live) => live.next(self.epoch, &change),
            None => Live::first(self.epoch),
        };
        let site = Site::preview(pack, stats, live);
        current.publish(Sites::single(Arc::clone(&site)));
        self.served = site;
        true
    }
}

/// True when the inotify events in `buf` name something the build reads:
/// not an ignored name (an editor's swap file, a VCS directory).
fn relevant_events(buf: &[u8]) -> bool {
    inotify::events(buf).any(|event| {
        // A name in a subdirectory is ignored wherever the root
        // `.well-known` exception does not apply; checked as if at the
        // root, which only errs towards a rebuild.
        let ignored = std::str::from_utf8(event.name).is_ok_and(|n| is_ignored_entry(true, n));
        event.overflowed() || event.name.is_empty() || !ignored
    })
}

/// Adds a watch for every directory under `root` the build would read
/// (following symbolic links that stay inside it, skipping ignored names
/// and loops); a directory watched already keeps its watch.
fn watch_tree(inotify: &OwnedFd, root: &Path) -> io::Result<()> {
    let root_meta = std::fs::metadata(root)?;
    let root_id = (root_meta.dev(), root_meta.ino());
    let mut seen = HashSet::new();
    let mut stack = vec![(root.to_path_buf(), true)];
    while let Some((dir, at_root)) = stack.pop() {
        let meta = std::fs::metadata(&dir)?;
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        if let Err(errno) = rustix::fs::inotify::add_watch(inotify, &dir, EVENTS) {
            let e = io::Error::from(errno);
            return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
        }
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let ignored = name.to_str().is_none_or(|n| is_ignored_entry(at_root, n));
            let child = entry.path();
            let leads_out = entry.file_type()?.is_symlink()
                && resolve_link(&child, root_id).ok() != Some(LinkTarget::Inside);
            if !ignored && !leads_out && child.is_dir() {
                stack.push((child, false));
            }
        }
    }
    Ok(())
}

/// `2 changed (/a, /b), 1 added (/c), 0 removed`.
fn changes_line(diff: &Diff<'_>) -> String {
    let part = |what: &str, keys: Vec<String>| {
        let mut shown: Vec<&str> = keys.iter().take(NAMED).map(String::as_str).collect();
        if keys.len() > NAMED {
            shown.push("…");
        }
        if keys.is_empty() {
            format!("0 {what}")
        } else {
            format!("{} {what} ({})", keys.len(), shown.join(", "))
        }
    };
    let mut line = [
        part("changed", diff.changed_keys()),
        part("added", diff.added_keys()),
        part("removed", diff.removed_keys()),
    ]
    .join(", ");
    if diff.rules_changed() {
        line.push_str(", rules changed");
    }
    line
}

/// `3 encodings compressed, 2101 reused`.
fn encodings_line(report: &BuildReport) -> String {
    format!(
        "{} encodings compressed, {} reused",
        report.compressed, report.reused
    )
}
