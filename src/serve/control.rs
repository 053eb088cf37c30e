//! The control thread: owns a signalfd (SIGTERM/SIGINT: graceful shutdown,
//! a second one forces exit; SIGHUP: reload) and an inotify watch on the
//! pack's directory (the pack replaced by rename or rewritten: reload).
//! A reload opens and verifies the new pack before publishing it; a bad
//! one is logged and the old one keeps serving.
//!
//! Without this thread the server would ignore SIGTERM and SIGHUP (they are
//! blocked everywhere) and could only be killed, so whatever ends it — an
//! error it cannot get past, or a panic — shuts the server down, and
//! `serve::run` reports it with a non-zero exit.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use super::SiteSource;
use super::handler::Site;
use super::net::{Shared, Waker};
use super::stack::CurrentSite;

/// Blocks the signals the control thread handles, in the calling thread and
/// every thread spawned after, and returns a signalfd for them.
pub fn block_signals() -> io::Result<OwnedFd> {
    // SAFETY: sigset manipulation on a local set; results checked.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// What a watched file is to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The pack: its replacement reloads the site.
    Pack,
    /// A certificate or key: its replacement reloads the certificates.
    Certificate,
}

/// One file watched through its directory.
struct Watched {
    /// The watch descriptor of the file's directory.
    wd: libc::c_int,
    /// Events for other names in the directory are ignored.
    name: OsString,
    role: Role,
}

/// An inotify watch on the directories of the pack and certificates, for
/// those files' names.
pub struct Watch {
    /// The inotify descriptor.
    fd: OwnedFd,
    /// The files that matter.
    files: Vec<Watched>,
}

impl Watch {
    /// The roles of the watched files named by the events in `buf`.
    fn roles(&self, buf: &[u8]) -> (bool, bool) {
        let (mut pack, mut certificate) = (false, false);
        for (wd, name) in events(buf) {
            for f in self.files.iter().filter(|f| f.wd == wd && f.name == name) {
                match f.role {
                    Role::Pack => pack = true,
                    Role::Certificate => certificate = true,
                }
            }
        }
        (pack, certificate)
    }
}

/// Watches the directories of `files` for those files being replaced
/// (renamed over, rewritten, created). Set up before the server announces
/// itself, so no replacement after start-up is missed.
pub fn watch(files: &[(&Path, Role)]) -> io::Result<Watch> {
    // SAFETY: plain syscalls, results checked.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut watched = Vec::new();
    for &(path, role) in files {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let cdir = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        let mask = libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE | libc::IN_CREATE;
        // SAFETY: valid C string. Watching a directory twice returns the
        // same descriptor.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), cdir.as_ptr(), mask) };
        if wd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
        }
        watched.push(Watched {
            wd,
            name: path
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default(),
            role,
        });
    }
    Ok(Watch { fd, files: watched })
}

/// Re-reads the certificates of `source` and publishes them; bad new ones
/// are logged and the old ones keep serving.
pub fn reload_tls(source: &super::tls::Source, current: &CurrentSite) {
    if matches!(source, super::tls::Source::SelfSigned(_)) {
        return;
    }
    match super::load_tls(source) {
        Ok(config) => {
            current.publish_tls(config);
            tracing::info!("reloaded TLS certificates");
        }
        Err(e) => tracing::error!(
            "reload of TLS certificates failed: {e:#}; still serving the previous ones"
        ),
    }
}

/// Opens the site as at start-up (a pack is verified, a directory or tar is
/// fired into a fresh preview pack) and publishes it.
pub fn reload(site: &SiteSource, current: &CurrentSite) {
    let path = site.path.as_path();
    match super::open_site(site) {
        Ok(pack) => {
            let routes = pack.route_count();
            current.publish(Site::from_pack(pack));
            tracing::info!("reloaded {}: {routes} routes", path.display());
        }
        Err(e) => tracing::error!(
            "reload of {} failed: {e:#}; still serving the previous pack",
            path.display()
        ),
    }
}

/// The directory watch and name of each inotify event in `buf`.
fn events(buf: &[u8]) -> Vec<(libc::c_int, OsString)> {
    let header = std::mem::size_of::<libc::inotify_event>();
    let mut names = Vec::new();
    let mut at = 0;
    while at + header <= buf.len() {
        // SAFETY: the kernel wrote a whole event header here; read unaligned.
        let ev: libc::inotify_event =
            unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
        let name_end = (at + header + ev.len as usize).min(buf.len());
        let raw = &buf[at + header..name_end];
        let len = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        names.push((ev.wd, OsString::from_vec(raw[..len].to_vec())));
        at = name_end;
    }
    names
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
pub fn spawn(
    signals: OwnedFd,
    site: Option<SiteSource>,
    tls: Option<super::tls::Source>,
    watched: Option<Watch>,
    shared: Arc<Shared>,
    current: Arc<CurrentSite>,
    wakers: Vec<Arc<Waker>>,
) -> io::Result<Control> {
    supervise(shared, wakers, move |shared, wakers| {
        run(signals, site, tls, watched, shared, &current, wakers)
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

/// Runs the control loop; returns only on an error it cannot get past.
/// `site` is `None` in dummy mode, `watched` when the pack's directory
/// could be watched.
fn run(
    signals: OwnedFd,
    site: Option<SiteSource>,
    tls: Option<super::tls::Source>,
    mut watched: Option<Watch>,
    shared: &Shared,
    current: &CurrentSite,
    wakers: &[Arc<Waker>],
) -> io::Error {
    let mut buf = vec![0u8; 4096];
    let siginfo_len = std::mem::size_of::<libc::signalfd_siginfo>();
    loop {
        let mut fds = [
            libc::pollfd {
                fd: signals.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: watched.as_ref().map_or(-1, |w| w.fd.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            let e = io::Error::last_os_error();
            if is_transient(&e) {
                continue;
            }
            return io::Error::new(e.kind(), format!("poll: {e}"));
        }
        if fds[0].revents != 0 {
            // SAFETY: reads at most one signalfd_siginfo into a larger buffer.
            let n =
                unsafe { libc::read(signals.as_raw_fd(), buf.as_mut_ptr().cast(), siginfo_len) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if !is_transient(&e) {
                    return io::Error::new(e.kind(), format!("reading signals: {e}"));
                }
            } else if n as usize != siginfo_len {
                return io::Error::other(format!(
                    "reading signals: {n} bytes instead of {siginfo_len}"
                ));
            } else {
                let signo = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes")) as i32;
                if signo == libc::SIGHUP {
                    if let Some(p) = site.as_ref() {
                        reload(p, current);
                    }
                    if let Some(source) = tls.as_ref() {
                        reload_tls(source, current);
                    }
                } else if shared.shutdown.swap(true, Ordering::AcqRel) {
                    tracing::warn!("second signal: exiting now");
                    std::process::exit(1);
                } else {
                    tracing::info!("shutting down: finishing responses in flight");
                    for w in wakers {
                        w.wake();
                    }
                }
            }
        }
        if fds[1].revents != 0
            && let Some(watch) = watched.as_ref()
        {
            // SAFETY: reads into our buffer.
            let n = unsafe { libc::read(watch.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                // A watch that cannot be read would wake every poll: drop
                // it, signals still work.
                let e = io::Error::last_os_error();
                if !is_transient(&e) {
                    tracing::warn!(
                        "stopped watching files for replacement ({e}); reload with SIGHUP"
                    );
                    watched = None;
                }
            } else {
                let (pack_changed, certificate_changed) = watch.roles(&buf[..n as usize]);
                if pack_changed && let Some(p) = site.as_ref() {
                    reload(p, current);
                }
                if certificate_changed && let Some(source) = tls.as_ref() {
                    reload_tls(source, current);
                }
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
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from a non-blocking eventfd.
        let n = unsafe { libc::read(waker.raw(), (&mut count as *mut u64).cast(), 8) };
        n == 8 && count > 0
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
        let control = spawn(
            not_signals,
            None,
            None,
            None,
            Arc::clone(&shared),
            Arc::new(CurrentSite::new(Site::dummy(), None)),
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
