//! The connection layer: one event loop per thread, each with its own
//! `SO_REUSEPORT` listeners, non-blocking sockets and edge-triggered epoll.
//! Protocol work is delegated to `http1`; TLS would wrap the socket I/O in
//! `io`, HTTP/2 would be another protocol next to `http1`.

pub mod io;
pub mod poller;
pub mod worker;

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use socket2::{Domain, Socket, Type};

use super::handler::Site;

/// Fails if another process listens on `addr` already: with
/// `SO_REUSEPORT`, a second server of the same user would otherwise share
/// the port silently and take half the connections.
pub fn check_free(addr: SocketAddr) -> std::io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    probe.set_reuse_address(true)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

/// Opens a listener on `addr` that other threads can bind too, so that the
/// kernel spreads connections over the threads' own accept queues.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// State every thread reads and the control thread writes.
pub struct Shared {
    /// Bumped after `site` is replaced; loops compare it once per iteration
    /// and take the lock only when it changed.
    pub generation: AtomicU64,
    /// The site new requests are answered from.
    pub site: Mutex<Arc<Site>>,
    /// Set on SIGTERM/SIGINT.
    pub shutdown: AtomicBool,
    /// Open connections over all threads, for `--max-connections`.
    pub live: AtomicUsize,
}

impl Shared {
    pub fn new(site: Arc<Site>) -> Shared {
        Shared {
            generation: AtomicU64::new(0),
            site: Mutex::new(site),
            shutdown: AtomicBool::new(false),
            live: AtomicUsize::new(0),
        }
    }

    /// Publishes a new site; requests already answered keep their Arc.
    pub fn publish(&self, site: Arc<Site>) {
        *self.site.lock().unwrap_or_else(|e| e.into_inner()) = site;
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn current(&self) -> (u64, Arc<Site>) {
        let generation = self.generation.load(Ordering::Acquire);
        let site = Arc::clone(&self.site.lock().unwrap_or_else(|e| e.into_inner()));
        (generation, site)
    }
}

/// An eventfd that wakes one event loop (for shutdown).
pub struct Waker {
    /// The eventfd.
    fd: OwnedFd,
}

impl Waker {
    pub fn new() -> std::io::Result<Waker> {
        // SAFETY: plain syscall, the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        Ok(Waker {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64; an eventfd at its limit
        // is already awake, so the result does not matter.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Consumes the wake-up.
    pub fn reset(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub fn raw(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}
