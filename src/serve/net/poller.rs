//! Readiness notification: edge-triggered epoll. This is the seam a second
//! back end (io_uring) would replace: the event loop only registers a file
//! descriptor once with a token and waits for `Event`s.

use std::io;
use std::os::fd::RawFd;

/// What became ready on one registered descriptor.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The token the descriptor was registered with.
    pub token: u64,
    /// Data (or end of file) to read.
    pub readable: bool,
    /// Room to write.
    pub writable: bool,
    /// The peer shut down its side: read until end of file.
    pub peer_closed: bool,
    /// Error or hang-up: the descriptor is finished.
    pub failed: bool,
}

/// An epoll instance with its reusable event array.
pub struct Poller {
    /// The epoll descriptor, closed on drop.
    epfd: RawFd,
    /// Filled by `epoll_wait`.
    events: Vec<libc::epoll_event>,
}

impl Poller {
    pub fn new(capacity: usize) -> io::Result<Poller> {
        // SAFETY: plain syscall, the result is checked.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller {
            epfd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` outlives the call; the result is checked.
        if unsafe { libc::epoll_ctl(self.epfd, op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Registers a connection for both directions, edge-triggered, once for
    /// its whole life: no `epoll_ctl` per request.
    pub fn add_connection(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let events = libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET;
        self.ctl(libc::EPOLL_CTL_ADD, fd, events as u32, token)
    }

    /// Registers a listener (readable, edge-triggered). Exclusive: a
    /// socket systemd passed is one socket in every loop's epoll, and a
    /// new connection should wake one loop, not all of them (each of the
    /// others would find nothing to accept).
    pub fn add_listener(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            (libc::EPOLLIN | libc::EPOLLET | libc::EPOLLEXCLUSIVE) as u32,
            token,
        )
    }

    /// Registers a wake-up descriptor (readable, edge-triggered).
    pub fn add_readable(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            (libc::EPOLLIN | libc::EPOLLET) as u32,
            token,
        )
    }

    pub fn remove(&self, fd: RawFd) {
        // Failure only means it was not registered; closing removes it anyway.
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    /// Waits up to `timeout_ms` and calls `f` for every event.
    pub fn wait(&mut self, timeout_ms: i32, mut f: impl FnMut(Event)) -> io::Result<()> {
        // SAFETY: the buffer holds `len` events; the result is checked.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd,
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for ev in &self.events[..n as usize] {
            let bits = ev.events as i32;
            f(Event {
                token: ev.u64,
                readable: bits & (libc::EPOLLIN | libc::EPOLLRDHUP) != 0,
                writable: bits & libc::EPOLLOUT != 0,
                peer_closed: bits & libc::EPOLLRDHUP != 0,
                failed: bits & (libc::EPOLLERR | libc::EPOLLHUP) != 0,
            });
        }
        Ok(())
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.epfd) };
    }
}
