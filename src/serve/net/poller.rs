//! Readiness notification: edge-triggered epoll. This is the seam a second
//! back end (io_uring) would replace: the event loop only registers a file
//! descriptor once with a token and waits for `Event`s.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

use rustix::event::Timespec;
use rustix::event::epoll::{self, EventData, EventFlags};

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
    /// The epoll descriptor.
    epfd: OwnedFd,
    /// Filled by `epoll_pwait`.
    events: Vec<epoll::Event>,
}

/// `fd` borrowed for one call. The loops keep their connections' sockets
/// as raw descriptors (closed by the loop that owns them), open for the
/// whole call.
fn borrowed(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: every caller passes a descriptor its loop holds open until
    // after the call returns; the borrow is not kept.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

// SAFETY: the event array holds tokens (integers), never pointers; the
// poller moves to its loop's thread once, before any use.
unsafe impl Send for Poller {}

impl Poller {
    pub fn new(capacity: usize) -> io::Result<Poller> {
        let epfd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let empty = epoll::Event {
            flags: EventFlags::empty(),
            data: EventData::new_u64(0),
        };
        Ok(Poller {
            epfd,
            events: vec![empty; capacity],
        })
    }

    fn add(&self, fd: RawFd, events: EventFlags, token: u64) -> io::Result<()> {
        epoll::add(&self.epfd, borrowed(fd), EventData::new_u64(token), events)?;
        Ok(())
    }

    /// Registers a connection for both directions, edge-triggered, once for
    /// its whole life: no `epoll_ctl` per request.
    pub fn add_connection(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let events = EventFlags::IN | EventFlags::OUT | EventFlags::RDHUP | EventFlags::ET;
        self.add(fd, events, token)
    }

    /// Registers a listener (readable, edge-triggered). Exclusive: a
    /// socket systemd passed is one socket in every loop's epoll, and a
    /// new connection should wake one loop, not all of them (each of the
    /// others would find nothing to accept).
    pub fn add_listener(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let events = EventFlags::IN | EventFlags::ET | EventFlags::EXCLUSIVE;
        self.add(fd, events, token)
    }

    /// Registers a UDP socket, level-triggered: a loop reads a few batches
    /// per turn, and what is left reports again at the next wait.
    pub fn add_datagrams(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.add(fd, EventFlags::IN, token)
    }

    /// Registers a wake-up descriptor (readable, edge-triggered).
    pub fn add_readable(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.add(fd, EventFlags::IN | EventFlags::ET, token)
    }

    pub fn remove(&self, fd: RawFd) {
        // Failure only means it was not registered; closing removes it anyway.
        let _ = epoll::delete(&self.epfd, borrowed(fd));
    }

    /// Waits up to `timeout_ms` (negative: without limit) and calls `f` for
    /// every event.
    pub fn wait(&mut self, timeout_ms: i32, mut f: impl FnMut(Event)) -> io::Result<()> {
        let timeout = Timespec {
            tv_sec: i64::from(timeout_ms / 1000),
            tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
        };
        let timeout = (timeout_ms >= 0).then_some(&timeout);
        let n = match epoll::wait(&self.epfd, &mut self.events[..], timeout) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for ev in &self.events[..n] {
            let flags = ev.flags;
            f(Event {
                token: ev.data.u64(),
                readable: flags.intersects(EventFlags::IN | EventFlags::RDHUP),
                writable: flags.contains(EventFlags::OUT),
                peer_closed: flags.contains(EventFlags::RDHUP),
                failed: flags.intersects(EventFlags::ERR | EventFlags::HUP),
            });
        }
        Ok(())
    }
}
