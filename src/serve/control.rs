//! The control thread: owns a signalfd (SIGTERM/SIGINT: graceful shutdown,
//! a second one forces exit; SIGHUP: reload everything) and an inotify
//! watch on the directories of what is served (a pack replaced by rename
//! or rewritten, a pack added to or removed from a folder of sites, a
//! certificate or key replaced: reload that; under `--acme`, a managed
//! pair, an HTTP-01 token or a TLS-ALPN-01 certificate written by the
//! ACME client: reload and publish that; an overflowed event queue:
//! reload everything, as the lost events could have said anything). A
//! reload opens and verifies a new pack before publishing it; a bad one is
//! logged and the old one keeps serving, site by site.
//!
//! It also watches the ACME client process (`--acme`) and says when it
//! ended: the server goes on serving the certificates it has, and does
//! not start the client again (that takes `wait`, which the sandbox does
//! not allow; the client is a supervisor that restarts its own worker).
//!
//! Without this thread the server would ignore SIGTERM and SIGHUP (they are
//! blocked everywhere) and could only be killed, so whatever ends it — an
//! error it cannot get past, or a panic — shuts the server down, and
//! `serve::run` reports it with a non-zero exit.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{CreateFlags, WatchFlags};
use rustix::process::Signal;

use super::acme::{self, Managed};
use super::handler::{Site, Sites};
use super::in_place;
use super::inotify;
use super::load::{Folder, SiteSource, open_site};
use super::metrics::{Metrics, SiteStats};
use super::net::{Shared, Waker};
use super::poll::Poll;
use super::stack::CurrentSites;
use super::systemd::Notifier;
use super::tls::{self, SniResolver};
use crate::sys;

/// Blocks the signals the control thread handles, in the calling thread and
/// every thread spawned after, and returns a signalfd for them.
/// SIGIO: a writer is opening a pack the server holds a read lease on
/// (`in_place`); blocked like the others, its default action would end
/// the process.
pub fn block_signals() -> io::Result<OwnedFd> {
    sys::block_signals_into_signalfd(&[Signal::TERM, Signal::INT, Signal::HUP, Signal::IO])
}

/// What a watched name is to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The pack: its replacement reloads the site.
    Pack,
    /// A certificate or key: its replacement reloads the certificates.
    Certificate,
    /// A folder of sites: any name in it may be a site's pack,
    /// certificate or key.
    Folder,
    /// `--acme`: the folder of managed pairs (any name in it).
    AcmeCertificates,
    /// `--acme`: the folder of HTTP-01 tokens (any name in it).
    AcmeHttp01,
    /// `--acme`: the folder of TLS-ALPN-01 certificates (any name in it).
    AcmeTlsAlpn01,
}

impl Role {
    /// Whether every name in the watched folder counts, not one file's.
    pub fn is_folder(self) -> bool {
        matches!(
            self,
            Role::Folder | Role::AcmeCertificates | Role::AcmeHttp01 | Role::AcmeTlsAlpn01
        )
    }
}

/// One file (or folder) watched through a directory.
struct Watched {
    /// The watch descriptor of the directory.
    wd: i32,
    /// The directory, for the paths of files modified in it.
    dir: PathBuf,
    /// Events for other names in the directory are ignored (`Folder`:
    /// every name counts).
    name: OsString,
    role: Role,
}

/// An inotify watch on the directories of the pack (or the folder of
/// sites) and the certificates.
pub struct Watch {
    /// The inotify descriptor.
    fd: OwnedFd,
    /// The files that matter.
    files: Vec<Watched>,
}

/// What a batch of inotify events (or a `--poll` scan) changed.
#[derive(Default)]
pub struct Changes {
    /// The kernel's event queue overflowed: anything may have changed.
    pub overflowed: bool,
    pub pack: bool,
    pub certificate: bool,
    /// Names in a folder of sites that changed.
    pub in_folder: Vec<OsString>,
    /// An HTTP-01 token came or went.
    pub http01: bool,
    /// A TLS-ALPN-01 certificate came or went.
    pub tls_alpn01: bool,
    /// Files written (or truncated) in place: a pack among them may be
    /// served from (`in_place`); nothing is reloaded before its close.
    pub modified: Vec<PathBuf>,
}

impl Changes {
    /// Adds what `other` saw: one reload for a change both saw.
    fn merge(&mut self, other: Changes) {
        self.overflowed |= other.overflowed;
        self.pack |= other.pack;
        self.certificate |= other.certificate;
        self.http01 |= other.http01;
        self.tls_alpn01 |= other.tls_alpn01;
        self.in_folder.extend(other.in_folder);
        self.in_folder.sort();
        self.in_folder.dedup();
        self.modified.extend(other.modified);
    }

    /// Whether anything changed.
    #[cfg(test)]
    pub fn any(&self) -> bool {
        self.overflowed
            || self.pack
            || self.certificate
            || !self.in_folder.is_empty()
            || self.http01
            || self.tls_alpn01
            || !self.modified.is_empty()
    }
}

impl Watch {
    /// What the events in `buf` changed.
    fn changes(&self, buf: &[u8]) -> Changes {
        let mut changes = Changes::default();
        for event in inotify::events(buf) {
            changes.overflowed |= event.overflowed();
            if event.mask & WatchFlags::MODIFY.bits() != 0 {
                // A write, not a replacement: reloads wait for the close.
                // Only a pack's: another file of the folder (a log, a
                // build's temporary file) is no concern of `in_place`.
                if let Some(f) = self.files.iter().find(|f| {
                    f.wd == event.wd
                        && match f.role {
                            Role::Pack => f.name.as_bytes() == event.name,
                            Role::Folder => event.name.ends_with(b".pack"),
                            _ => false,
                        }
                }) {
                    changes
                        .modified
                        .push(f.dir.join(OsStr::from_bytes(event.name)));
                }
                continue;
            }
            for f in self.files.iter().filter(|f| f.wd == event.wd) {
                match f.role {
                    Role::Folder => changes
                        .in_folder
                        .push(OsStr::from_bytes(event.name).to_os_string()),
                    Role::AcmeCertificates => changes.certificate = true,
                    Role::AcmeHttp01 => changes.http01 = true,
                    Role::AcmeTlsAlpn01 => changes.tls_alpn01 = true,
                    _ if f.name.as_bytes() != event.name => {}
                    Role::Pack => changes.pack = true,
                    Role::Certificate => changes.certificate = true,
                }
            }
        }
        changes
    }
}

/// Watches the directories of `files` for those files being replaced
/// (renamed over, rewritten, created), and a folder of sites for any name
/// in it. Set up before the server announces itself, so no replacement
/// after start-up is missed.
pub fn watch(files: &[(&Path, Role)]) -> io::Result<Watch> {
    let fd = rustix::fs::inotify::init(CreateFlags::CLOEXEC)?;
    let mut watched = Vec::new();
    for &(path, role) in files {
        let (dir, name) = match role {
            _ if role.is_folder() => (path.to_path_buf(), OsString::new()),
            _ => (
                match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                },
                path.file_name()
                    .map(|n| n.to_os_string())
                    .unwrap_or_default(),
            ),
        };
        // In a folder a removal matters too (the site goes). A pack
        // written in place is modified before its close.
        let modify = if matches!(role, Role::Pack | Role::Folder) {
            WatchFlags::MODIFY
        } else {
            WatchFlags::empty()
        };
        let mask = modify
            | WatchFlags::MOVED_TO
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM;
        // Watching a directory twice returns the same descriptor (and the
        // union of the masks).
        let wd = rustix::fs::inotify::add_watch(&fd, &dir, mask).map_err(|errno| {
            let e = io::Error::from(errno);
            io::Error::new(e.kind(), format!("{}: {e}", dir.display()))
        })?;
        watched.push(Watched {
            wd,
            dir,
            name,
            role,
        });
    }
    Ok(Watch { fd, files: watched })
}

/// How the control thread learns that served files changed.
pub struct FileWatch {
    /// The inotify watch; `None` when it could not be set up.
    pub inotify: Option<Watch>,
    /// `--poll`'s scans, when asked for.
    pub poll: Option<Poll>,
}

/// What the control thread reloads.
pub enum Served {
    /// The dummy answer, or a live preview (its own thread rebuilds it).
    Nothing,
    /// One pack, directory or archive, reloaded whole, counted in `stats`.
    One {
        source: SiteSource,
        stats: Arc<SiteStats>,
    },
    /// A folder of sites, each reloaded on its own.
    Folder(Folder),
}

/// The certificates and how to read them again.
pub struct TlsReload {
    /// The pairs given on the command line, or the self-signed names.
    pub given: tls::Source,
    /// What is served now: a pair that fails at a reload keeps its entry.
    pub resolver: Arc<SniResolver>,
}

/// Everything a reload touches.
pub struct Reloader {
    pub served: Served,
    pub tls: Option<TlsReload>,
    /// `--acme`: the managed names and the state folder.
    pub acme: Option<Arc<Managed>>,
    pub current: Arc<CurrentSites>,
    pub metrics: Arc<Metrics>,
    /// systemd's notification socket, when started by it.
    pub notifier: Option<Notifier>,
    /// `kiln serve s3://…`: the store client, told to list on SIGHUP.
    pub store: Option<super::store::StoreChild>,
}

/// Every certificate pair to serve: those given, then those beside the
/// packs of a folder of sites.
pub fn certificate_source(given: &tls::Source, served: &Served) -> tls::Source {
    match (given, served) {
        (tls::Source::Files(pairs), Served::Folder(folder)) => {
            let mut all = pairs.clone();
            for pair in folder.certificate_pairs() {
                if !all.contains(&pair) {
                    all.push(pair);
                }
            }
            tls::Source::Files(all)
        }
        _ => given.clone(),
    }
}

impl Reloader {
    /// SIGHUP: every site and certificate read again.
    fn reload_all(&mut self) {
        if let Some(n) = &self.notifier {
            n.reloading();
        }
        if let Some(store) = &self.store {
            store.list_now();
        }
        self.reload_sites(None);
        self.reload_tls();
        self.reload_http01();
        if let Some(n) = &self.notifier {
            n.ready("serving (reloaded)");
        }
    }

    /// Reloads the single site, or the sites of the folder named by
    /// `names` (all with `None`), and publishes a new generation when
    /// anything changed.
    fn reload_sites(&mut self, names: Option<&[OsString]>) {
        match &mut self.served {
            Served::Nothing => {}
            Served::One { source, stats } => {
                if let Some(site) = reload_one(source, stats) {
                    let routes = site.pack().map_or(0, |p| p.route_count());
                    self.current.publish(Sites::single(site));
                    // Said once published: a client that reads the line
                    // and asks again must get the new pack.
                    tracing::info!("reloaded {}: {routes} routes", source.path.display());
                }
            }
            Served::Folder(folder) => {
                if folder.refresh(names) {
                    self.current.publish(folder.sites());
                } else if names.is_none() {
                    // SIGHUP is answered even when it changes nothing, as a
                    // single pack's is: the operator learns it was heard.
                    tracing::info!(
                        "reloaded: no pack changed; {} sites served as they were",
                        folder.site_count()
                    );
                }
            }
        }
    }

    /// Reads the certificates again and publishes them; a pair that fails
    /// keeps serving what it served, and the rest are replaced.
    fn reload_tls(&mut self) {
        let Some(tls) = self.tls.as_mut() else {
            return;
        };
        if matches!(tls.given, tls::Source::SelfSigned(_)) {
            return;
        }
        let mut source = certificate_source(&tls.given, &self.served);
        if let (Some(managed), tls::Source::Files(pairs)) = (&self.acme, &mut source) {
            // After the user's own: theirs win for a name both cover.
            for pair in managed.pairs() {
                if !pairs.contains(&pair) {
                    pairs.push(pair);
                }
            }
        }
        let (resolver, failures) = tls::certs::reload(&source, &tls.resolver, super::now_unix());
        for failure in &failures {
            tracing::error!("reload of a TLS certificate failed: {failure}");
        }
        let Some(resolver) = resolver else {
            self.metrics
                .tls_reload_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!("no certificate left to serve; still serving the previous ones");
            return;
        };
        let resolver = Arc::new(match &self.acme {
            Some(managed) => resolver.with_acme(managed.resolver_acme()),
            None => resolver,
        });
        match super::tls_config(Arc::clone(&resolver)) {
            Ok(config) => {
                tls.resolver = resolver;
                self.current.publish_tls(config);
                let counter = if failures.is_empty() {
                    &self.metrics.tls_reloads
                } else {
                    &self.metrics.tls_reload_failures
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let pairs = match &source {
                    tls::Source::Files(pairs) => pairs.len(),
                    tls::Source::SelfSigned(_) => 1,
                };
                if failures.is_empty() {
                    tracing::info!("reloaded TLS certificates ({pairs} pairs)");
                } else {
                    // Not a success line after the errors: the failed pairs
                    // still serve what they served, or nothing.
                    tracing::warn!(
                        "reloaded {} of {pairs} TLS certificate pairs; {} failed (above)",
                        pairs - failures.len(),
                        failures.len()
                    );
                }
            }
            Err(e) => {
                self.metrics
                    .tls_reload_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    "reload of TLS certificates failed: {e:#}; still serving the previous ones"
                );
            }
        }
    }

    /// Reads the HTTP-01 tokens again and publishes them (`--acme`).
    fn reload_http01(&mut self) {
        let Some(managed) = &self.acme else {
            return;
        };
        let http01 = managed.http01();
        let tokens = http01.len();
        self.current.publish_http01(Arc::new(http01));
        // Said once published: the client tells the CA to validate then.
        tracing::info!("ACME HTTP-01: answering {tokens} tokens");
    }

    /// With `--cache-size`, once a `store::TICK`: the store's state and
    /// host list read, the sites used said to the store client; a new
    /// host list publishes a new generation of the sites.
    fn store_tick(&mut self) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let sites = self.current.sites();
        if let Some(hosts) = store.tick(&sites)
            && let Served::Folder(folder) = &mut self.served
        {
            folder.set_cold(Some(hosts));
            self.current.publish(folder.sites());
        }
    }

    /// Whether requests may be parked for cold sites: the loops are then
    /// woken when a new generation is published, so that a parked request
    /// is answered as its site lands.
    fn parks(&self) -> bool {
        self.store.as_ref().is_some_and(|s| s.cold.is_some())
    }

    /// inotify said these changed: sites, HTTP-01 tokens and TLS-ALPN-01
    /// certificates reload at once (each arrives whole, by rename);
    /// returns whether a certificate or key changed, which reloads after
    /// a pause (a pair is renewed by two renames).
    fn files_changed(&mut self, changes: Changes) -> bool {
        for path in &changes.modified {
            in_place::modified(path);
        }
        if changes.http01 {
            self.reload_http01();
        }
        if changes.tls_alpn01 {
            self.reload_tls();
        }
        if changes.pack {
            self.reload_sites(None);
        }
        if !changes.in_folder.is_empty() {
            self.reload_sites(Some(&changes.in_folder));
        }
        let folder_certificate = changes.in_folder.iter().any(|name| {
            let name = name.as_bytes();
            name.ends_with(b".crt") || name.ends_with(b".key")
        });
        // Under --acme, a site that appeared is a managed name: its pair,
        // which the ACME client may have written before the pack came,
        // is loaded.
        let new_site = changes
            .in_folder
            .iter()
            .any(|name| name.as_bytes().ends_with(b".pack"))
            && self.acme.as_ref().is_some_and(|m| m.names_changed());
        changes.certificate || folder_certificate || new_site
    }
}

/// Opens the single site again (a pack is verified, a directory or tar is
/// fired into a fresh preview pack); `None`, logged, when it fails.
fn reload_one(source: &SiteSource, stats: &Arc<SiteStats>) -> Option<Arc<Site>> {
    let path = source.path.as_path();
    match open_site(source) {
        Ok(pack) => {
            stats.loads.fetch_add(1, Ordering::Relaxed);
            Some(Site::new(pack, 0, Arc::clone(stats)))
        }
        Err(e) => {
            stats.failed_loads.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                "reload of {} failed: {e:#}; still serving the previous pack",
                path.display()
            );
            None
        }
    }
}

/// The running control thread.
pub struct Control {
    /// Returns why the loop ended (it never ends otherwise).
    handle: JoinHandle<io::Error>,
    /// Set, before the shutdown starts, when the thread is ending.
    ended: Arc<AtomicBool>,
}

impl Control {
    /// Why the control thread ended, once the event loops have stopped;
    /// `None` when it is still running, as after a shutdown by signal.
    pub fn failure(self) -> Option<String> {
        if !self.ended.load(Ordering::Acquire) {
            return None;
        }
        Some(match self.handle.join() {
            Ok(e) => format!("the control thread stopped: {e}"),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("no message");
                format!("the control thread panicked: {message}")
            }
        })
    }
}

/// Starts the control thread (see `run`); its end shuts the server down.
/// `acme_client`: the ACME client process, watched for its end.
pub fn spawn(
    signals: OwnedFd,
    reloader: Reloader,
    files: FileWatch,
    acme_client: Option<acme::Client>,
    shutdown_delay: Duration,
    shared: Arc<Shared>,
    wakers: Vec<Arc<Waker>>,
) -> io::Result<Control> {
    supervise(shared, wakers, move |shared, wakers| {
        run(
            signals,
            reloader,
            files,
            acme_client,
            shutdown_delay,
            shared,
            wakers,
        )
    })
}

/// Starts a shutdown when dropped: on the control thread, dropped however
/// the thread ends, unwinding included.
struct ShutdownOnExit {
    shared: Arc<Shared>,
    wakers: Vec<Arc<Waker>>,
    ended: Arc<AtomicBool>,
}

impl Drop for ShutdownOnExit {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::Release);
        self.shared.shutdown.store(true, Ordering::Release);
        for w in &self.wakers {
            w.wake();
        }
    }
}

/// Runs `body` on the control thread; when it returns or panics, the event
/// loops are told to shut down.
fn supervise<F>(shared: Arc<Shared>, wakers: Vec<Arc<Waker>>, body: F) -> io::Result<Control>
where
    F: FnOnce(&Shared, &[Arc<Waker>]) -> io::Error + Send + 'static,
{
    let ended = Arc::new(AtomicBool::new(false));
    let guard = ShutdownOnExit {
        shared,
        wakers,
        ended: Arc::clone(&ended),
    };
    let handle = std::thread::Builder::new()
        .name("kiln-control".into())
        .spawn(move || {
            // Owned by the thread, so dropped when it ends, however it ends.
            let guard = guard;
            body(&guard.shared, &guard.wakers)
        })?;
    Ok(Control { handle, ended })
}

/// True for the errors a read or poll is simply retried after.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

/// How long the certificates must stay unchanged before they are read
/// again: renewing a pair is two renames (key and certificate), and the
/// moment between them is a mismatch, not a failure.
const CERTIFICATE_QUIET: Duration = Duration::from_millis(300);

/// What the control loop waits for besides signals and inotify.
#[derive(Default)]
struct Timers {
    /// When to read the certificates again.
    certificates: Option<Instant>,
    /// When the loops start draining, once a shutdown was asked for
    /// (`--shutdown-delay` after it).
    drain: Option<Instant>,
    /// When the next `--poll` scan is due.
    poll: Option<Instant>,
    /// With `--cache-size`: when the store's state and host list are
    /// read again, and the sites used said (`store::TICK`).
    store: Option<Instant>,
}

impl Timers {
    /// The poll timeout until the next one (`None`: none), at most a
    /// minute.
    fn timeout(&self) -> Option<Timespec> {
        let next = [self.certificates, self.drain, self.poll, self.store]
            .into_iter()
            .flatten()
            .min()?;
        let left = next.saturating_duration_since(Instant::now());
        Timespec::try_from(left.min(Duration::from_secs(60))).ok()
    }
}

/// Starts the drain: the loops close their listeners and finish what is
/// in flight.
fn drain(shared: &Shared, wakers: &[Arc<Waker>]) {
    shared.shutdown.store(true, Ordering::Release);
    for w in wakers {
        w.wake();
    }
}

/// Runs the control loop; returns only on an error it cannot get past.
/// `files.inotify` is `None` when the directories could not be watched;
/// `files.poll` (`--poll`) scans the same files on a timer. Before inotify's or
/// SIGHUP's reload the scan's view is brought up to date, so that the
/// next scan sees only what changed after: a change is never missed, and
/// one already reloaded is not reloaded again.
/// `shutdown_delay`: how long after the first SIGTERM the loops go on
/// accepting while `/ready` says 503, so that a balancer stops sending
/// new connections before the listeners close.
fn run(
    signals: OwnedFd,
    mut reloader: Reloader,
    files: FileWatch,
    mut acme_client: Option<acme::Client>,
    shutdown_delay: Duration,
    shared: &Shared,
    wakers: &[Arc<Waker>],
) -> io::Error {
    let FileWatch {
        inotify: mut watched,
        mut poll,
    } = files;
    let mut buf = vec![0u8; 64 * 1024];
    let siginfo_len = sys::SIGNALFD_SIGINFO_BYTES;
    let mut timers = Timers::default();
    let mut stopping = false;
    if let Some(client) = acme_client.take_if(|c| c.pidfd.is_none()) {
        acme::log_client_end(client.pid);
    }
    loop {
        // Without a watch or an ACME client, their entries wait on the
        // signals again.
        let watch_fd = watched.as_ref().map_or(signals.as_fd(), |w| w.fd.as_fd());
        let client_fd = acme_client
            .as_ref()
            .and_then(|c| c.pidfd.as_ref())
            .map_or(signals.as_fd(), |fd| fd.as_fd());
        let mut fds = [
            PollFd::from_borrowed_fd(signals.as_fd(), PollFlags::IN),
            PollFd::from_borrowed_fd(watch_fd, PollFlags::IN),
            PollFd::from_borrowed_fd(client_fd, PollFlags::IN),
        ];
        timers.poll = poll.as_ref().map(|p| p.next);
        if reloader.parks() && timers.store.is_none() {
            timers.store = Some(Instant::now() + super::store::TICK);
        }
        let generation = reloader.current.generation();
        if let Err(errno) = rustix::event::poll(&mut fds, timers.timeout().as_ref()) {
            let e = io::Error::from(errno);
            if is_transient(&e) {
                continue;
            }
            return io::Error::new(e.kind(), format!("poll: {e}"));
        }
        let (signalled, watch_ready, client_ready) = (
            !fds[0].revents().is_empty(),
            !fds[1].revents().is_empty(),
            !fds[2].revents().is_empty(),
        );
        let now = Instant::now();
        if timers.drain.is_some_and(|at| at <= now) {
            timers.drain = None;
            drain(shared, wakers);
        }
        if timers.certificates.is_some_and(|at| at <= now) {
            timers.certificates = None;
            reloader.reload_tls();
        }
        if timers.store.is_some_and(|at| at <= now) {
            timers.store = None;
            reloader.store_tick();
        }
        if let Some(poll) = poll.as_mut().filter(|p| p.next <= now) {
            let changes = poll.scan(now);
            if reloader.files_changed(changes) {
                timers.certificates = Some(now + CERTIFICATE_QUIET);
            }
        }
        if signalled {
            match rustix::io::read(&signals, &mut buf[..siginfo_len]) {
                Err(errno) => {
                    let e = io::Error::from(errno);
                    if !is_transient(&e) {
                        return io::Error::new(e.kind(), format!("reading signals: {e}"));
                    }
                }
                Ok(n) if n != siginfo_len => {
                    return io::Error::other(format!(
                        "reading signals: {n} bytes instead of {siginfo_len}"
                    ));
                }
                Ok(_) => {
                    let signo = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes")) as i32;
                    if signo == Signal::IO.as_raw() {
                        in_place::lease_broken();
                    } else if signo == Signal::HUP.as_raw() {
                        if let Some(poll) = poll.as_mut() {
                            poll.scan(now);
                        }
                        timers.certificates = None;
                        reloader.reload_all();
                    } else if std::mem::replace(&mut stopping, true) {
                        tracing::warn!("second signal: exiting now");
                        std::process::exit(1);
                    } else {
                        reloader.metrics.draining.store(true, Ordering::Relaxed);
                        if let Some(n) = &reloader.notifier {
                            n.stopping();
                        }
                        if shutdown_delay.is_zero() {
                            tracing::info!("shutting down: finishing responses in flight");
                            drain(shared, wakers);
                        } else {
                            tracing::info!(
                                "shutting down in {:.1} s (/ready says 503 meanwhile), then finishing responses in flight",
                                shutdown_delay.as_secs_f64()
                            );
                            timers.drain = Some(now + shutdown_delay);
                        }
                    }
                }
            }
        }
        if client_ready && let Some(client) = acme_client.take() {
            acme::log_client_end(client.pid);
        }
        if watch_ready && let Some(watch) = watched.as_ref() {
            match rustix::io::read(&watch.fd, &mut buf[..]) {
                Err(errno) => {
                    // A watch that cannot be read would wake every poll: drop
                    // it, signals still work.
                    let e = io::Error::from(errno);
                    if !is_transient(&e) {
                        tracing::warn!(
                            "stopped watching files for replacement ({e}); reload with SIGHUP"
                        );
                        watched = None;
                    }
                }
                Ok(n) => {
                    let mut changes = watch.changes(&buf[..n]);
                    if let Some(poll) = poll.as_mut() {
                        changes.merge(poll.scan(now));
                    }
                    if changes.overflowed {
                        // The events dropped may have replaced any pack or
                        // certificate: read everything again, as SIGHUP does.
                        tracing::warn!(
                            "the inotify event queue overflowed (changes were lost): reloading every site and certificate"
                        );
                        timers.certificates = None;
                        reloader.reload_all();
                    } else if reloader.files_changed(changes) {
                        timers.certificates = Some(now + CERTIFICATE_QUIET);
                    }
                }
            }
        }
        if reloader.parks() && reloader.current.generation() != generation {
            for w in wakers {
                w.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::time::{Duration, Instant};

    use super::*;

    /// A shared state, one waker, and a way to see the waker was woken.
    fn server_state() -> (Arc<Shared>, Arc<Waker>) {
        (Arc::new(Shared::default()), Arc::new(Waker::new().unwrap()))
    }

    fn woken(waker: &Waker) -> bool {
        let mut count = [0u8; 8];
        // SAFETY: the waker's eventfd is open while `waker` lives.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(waker.raw()) };
        let n = rustix::io::read(fd, &mut count);
        n == Ok(8) && u64::from_ne_bytes(count) > 0
    }

    fn wait_ended(control: &Control) {
        let start = Instant::now();
        while !control.ended.load(Ordering::Acquire) {
            assert!(start.elapsed() < Duration::from_secs(10), "still running");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The control thread ended, shut the server down, woke the loops and
    /// kept a failure that says `why`.
    fn assert_shut_down(control: Control, shared: &Shared, waker: &Waker, why: &str) {
        wait_ended(&control);
        assert!(shared.shutdown.load(Ordering::Acquire));
        assert!(woken(waker));
        let failure = control.failure().expect("a failure");
        assert!(failure.contains(why), "{failure}");
    }

    #[test]
    fn a_control_loop_that_cannot_read_signals_shuts_the_server_down() {
        let (shared, waker) = server_state();
        // /dev/null is always readable and yields no signal: the loop can
        // never receive SIGTERM again and must not run on deaf.
        let not_signals = OwnedFd::from(File::open("/dev/null").unwrap());
        let reloader = Reloader {
            served: Served::Nothing,
            tls: None,
            acme: None,
            current: Arc::new(CurrentSites::new(
                Sites::single(Site::dummy(SiteStats::new("_default", 1))),
                None,
            )),
            metrics: Metrics::new(1, 0),
            notifier: None,
            store: None,
        };
        let control = spawn(
            not_signals,
            reloader,
            FileWatch {
                inotify: None,
                poll: None,
            },
            None,
            Duration::ZERO,
            Arc::clone(&shared),
            vec![Arc::clone(&waker)],
        )
        .unwrap();
        assert_shut_down(control, &shared, &waker, "reading signals: 0 bytes");
    }

    #[test]
    fn a_panicking_control_thread_shuts_the_server_down() {
        let (shared, waker) = server_state();
        let control = supervise(Arc::clone(&shared), vec![Arc::clone(&waker)], |_, _| {
            panic!("log write failed")
        })
        .unwrap();
        assert_shut_down(control, &shared, &waker, "panicked: log write failed");
    }

    #[test]
    fn a_running_control_thread_is_no_failure() {
        let (shared, waker) = server_state();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let control = supervise(
            Arc::clone(&shared),
            vec![Arc::clone(&waker)],
            move |_, _| {
                let _ = stopped.recv();
                io::Error::other("stopped by the test")
            },
        )
        .unwrap();
        assert!(control.failure().is_none());
        assert!(!shared.shutdown.load(Ordering::Acquire));
        assert!(!woken(&waker));
        drop(stop);
    }
}
