//! The control thread: owns a signalfd (SIGTERM/SIGINT: graceful shutdown,
//! a second one forces exit; SIGHUP: reload) and an inotify watch on the
//! pack's directory (the pack replaced by rename or rewritten: reload).
//! A reload opens and verifies the new pack before publishing it; a bad
//! one is logged and the old one keeps serving.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

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

/// An inotify watch on the pack's directory and the pack's file name.
pub struct Watch {
    /// The inotify descriptor.
    fd: OwnedFd,
    /// Events for other names in the directory are ignored.
    name: OsString,
}

/// Watches `pack`'s directory for the pack being replaced. Set up before
/// the server announces itself, so no replacement after start-up is missed.
pub fn watch(pack: &Path) -> io::Result<Watch> {
    let dir = match pack.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = pack
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    // SAFETY: plain syscalls, results checked.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let cdir = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let mask = libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE | libc::IN_CREATE;
    // SAFETY: valid C string.
    if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), cdir.as_ptr(), mask) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Watch { fd, name })
}

/// Opens the site at `path` as at start-up (a pack is verified, a directory
/// or tar is fired into a fresh preview pack) and publishes it.
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

pub fn reload(path: &Path, current: &CurrentSite) {
    match super::open_site(path) {
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

/// Names of the inotify events in `buf`.
fn event_names(buf: &[u8]) -> Vec<OsString> {
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
        names.push(OsString::from_vec(raw[..len].to_vec()));
        at = name_end;
    }
    names
}

/// Runs the control loop until the process exits; `pack` is `None` in
/// dummy mode, `watched` when the pack's directory could be watched.
pub fn run(
    signals: OwnedFd,
    pack: Option<PathBuf>,
    tls: Option<super::tls::Source>,
    watched: Option<Watch>,
    shared: Arc<Shared>,
    current: Arc<CurrentSite>,
    wakers: Vec<Arc<Waker>>,
) {
    let mut buf = vec![0u8; 4096];
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
            continue;
        }
        if fds[0].revents != 0 {
            // SAFETY: reads one signalfd_siginfo into a buffer large enough.
            let n = unsafe { libc::read(signals.as_raw_fd(), buf.as_mut_ptr().cast(), 128) };
            if n == 128 {
                let signo = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes")) as i32;
                if signo == libc::SIGHUP {
                    if let Some(p) = pack.as_deref() {
                        reload(p, &current);
                    }
                    if let Some(source) = tls.as_ref() {
                        reload_tls(source, &current);
                    }
                } else if shared.shutdown.swap(true, Ordering::AcqRel) {
                    tracing::warn!("second signal: exiting now");
                    std::process::exit(1);
                } else {
                    tracing::info!("shutting down: finishing responses in flight");
                    for w in &wakers {
                        w.wake();
                    }
                }
            }
        }
        if fds[1].revents != 0
            && let Some(Watch { fd, name }) = watched.as_ref()
        {
            // SAFETY: reads into our buffer.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0
                && event_names(&buf[..n as usize]).iter().any(|n| n == name)
                && let Some(p) = pack.as_deref()
            {
                reload(p, &current);
            }
        }
    }
}
