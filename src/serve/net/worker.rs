//! One thread's event loop: accepts on its own listeners, reads every
//! readable connection into one per-thread buffer, lets `http1` answer the
//! whole batch, writes it with one `writev`, and sweeps deadlines a few
//! times a second with a clock read once per loop iteration.
//!
//! An idle connection owns no buffer: only a partial request head (or a
//! partially sent response) is kept per connection.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::io::{self, Flush, Io, Pending, Sent};
use super::poller::{Event, Poller};
use super::{Shared, Waker};
use crate::serve::access_log::{AccessLog, Sink};
use crate::serve::date::DateCache;
use crate::serve::handler::{Scratch, Site};
use crate::serve::http1::{self, Context, Discard};
use crate::serve::output::Output;
use crate::serve::server_headers::ServerHeaders;

/// Size of the per-thread read buffer.
const READ_BUF: usize = 64 * 1024;
/// How often deadlines are checked, in milliseconds.
const SWEEP_MS: u64 = 250;
/// How long accepting stops after EMFILE/ENFILE or at `--max-connections`.
const ACCEPT_PAUSE_MS: u64 = 100;
/// How long a closing connection is drained so that the peer reads our
/// last response instead of a reset.
const LINGER_MS: u64 = 2_000;
/// How long a shutdown waits for responses in flight.
pub const SHUTDOWN_GRACE_MS: u64 = 10_000;

const TOKEN_WAKE: u64 = 1 << 63;
const TOKEN_LISTENER: u64 = 1 << 62;

/// Settings every loop shares.
pub struct LoopConfig {
    /// Time allowed for a whole request head (and any body to skip).
    pub header_timeout_ms: u64,
    /// Time an idle keep-alive connection is kept.
    pub keepalive_timeout_ms: u64,
    /// Time a client may take without reading any of its response.
    pub send_timeout_ms: u64,
    /// Accepting pauses at this many open connections (all threads).
    pub max_connections: usize,
    /// Bodies this long or longer are sent with `sendfile`.
    pub sendfile_min: u64,
    /// The server's own header lines (security headers, HSTS).
    pub server_headers: ServerHeaders,
    /// Where access log lines go, if anywhere.
    pub access_log: Option<Arc<Sink>>,
}

/// Where a connection is in its life; decides which deadline applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Between requests: the keep-alive deadline.
    Idle,
    /// Part of a request has arrived: the header deadline, set when the
    /// first byte arrived and not moved by later bytes.
    Head,
    /// A response is waiting for the socket: the send deadline.
    Sending,
    /// Our side is shut down; reading until the peer closes.
    Lingering,
}

/// One connection slot.
struct Conn {
    /// The socket; -1 when the slot is free.
    fd: RawFd,
    /// Which deadline applies and what a timeout does.
    phase: Phase,
    /// Close once `pending` is sent.
    close_after: bool,
    /// Monotonic milliseconds at which `phase` times out.
    deadline: u64,
    /// The request body still arriving, to be dropped.
    discard: Discard,
    /// `partial` may hold complete requests left over from a full batch:
    /// serve them before reading more.
    backlog: bool,
    /// The start of an incomplete request; empty (unallocated) otherwise.
    partial: Vec<u8>,
    /// Output the socket has not taken yet.
    pending: Option<Box<Pending>>,
    /// For the access log.
    peer: Option<IpAddr>,
}

impl Conn {
    fn free() -> Conn {
        Conn {
            fd: -1,
            phase: Phase::Idle,
            close_after: false,
            deadline: u64::MAX,
            discard: Discard::default(),
            backlog: false,
            partial: Vec::new(),
            pending: None,
            peer: None,
        }
    }
}

fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid; the coarse clocks are served by the vDSO, no
    // syscall.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

fn unix_seconds() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts.tv_sec
}

/// One thread's loop and everything it owns.
pub struct Worker {
    /// Readiness of every descriptor this thread owns.
    poller: Poller,
    /// This thread's listeners, one per address; dropped at shutdown.
    listeners: Vec<TcpListener>,
    /// Woken by the control thread at shutdown.
    waker: Arc<Waker>,
    /// Connection slots, indexed by token.
    conns: Vec<Conn>,
    /// Free slot indices.
    free: Vec<usize>,
    /// Open connections of this thread.
    open: usize,
    /// Every read lands here first.
    read_buf: Box<[u8]>,
    /// The batch being assembled.
    out: Output,
    /// The handler's reusable buffers.
    scratch: Scratch,
    /// The `Date` line, reformatted once a second.
    date: DateCache,
    /// The site this thread answers from.
    site: Arc<Site>,
    /// The `Shared::generation` `site` was taken at.
    generation: u64,
    /// Reload and shutdown state from the control thread.
    shared: Arc<Shared>,
    /// Timeouts, limits and prepared header lines.
    config: Arc<LoopConfig>,
    /// This thread's access log buffer, when enabled.
    log: Option<AccessLog>,
    /// Monotonic milliseconds, read once per iteration.
    now: u64,
    /// When deadlines were last checked.
    last_sweep: u64,
    /// When the access log was last flushed.
    last_log_flush: u64,
    /// Accepting is paused until then (0: not paused).
    accept_paused_until: u64,
    /// Set when shutdown began: the time by which to exit anyway.
    drain_deadline: Option<u64>,
    /// An accept failure was logged and no accept succeeded since: keeps
    /// a descriptor shortage from filling the log every pause.
    accept_error_logged: bool,
}

impl Worker {
    pub fn new(
        listeners: Vec<TcpListener>,
        waker: Arc<Waker>,
        shared: Arc<Shared>,
        config: Arc<LoopConfig>,
    ) -> std::io::Result<Worker> {
        let poller = Poller::new(1024)?;
        for (i, l) in listeners.iter().enumerate() {
            poller.add_readable(l.as_raw_fd(), TOKEN_LISTENER | i as u64)?;
        }
        poller.add_readable(waker.raw(), TOKEN_WAKE)?;
        let (generation, site) = shared.current();
        let log = config.access_log.clone().map(AccessLog::new);
        Ok(Worker {
            poller,
            listeners,
            waker,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            read_buf: vec![0u8; READ_BUF].into_boxed_slice(),
            out: Output::new(64 * 1024, config.sendfile_min),
            scratch: Scratch::default(),
            date: DateCache::new(),
            site,
            generation,
            shared,
            config,
            log,
            now: monotonic_ms(),
            last_sweep: 0,
            last_log_flush: 0,
            accept_paused_until: 0,
            drain_deadline: None,
            accept_error_logged: false,
        })
    }

    /// Runs until shutdown has drained (or its grace period ran out).
    pub fn run(mut self) -> std::io::Result<()> {
        let mut events: Vec<Event> = Vec::with_capacity(1024);
        loop {
            events.clear();
            self.poller.wait(SWEEP_MS as i32, |e| events.push(e))?;
            self.now = monotonic_ms();
            self.date.update(unix_seconds());
            let generation = self.shared.generation.load(Ordering::Acquire);
            if generation != self.generation {
                (self.generation, self.site) = self.shared.current();
            }
            for ev in &events {
                self.dispatch(*ev);
            }
            if self.now >= self.last_sweep + SWEEP_MS {
                self.sweep();
            }
            if let Some(deadline) = self.drain_deadline
                && (self.open == 0 || self.now >= deadline)
            {
                break;
            }
        }
        if let Some(log) = self.log.as_mut() {
            log.flush();
        }
        let open: Vec<usize> = (0..self.conns.len())
            .filter(|&i| self.conns[i].fd >= 0)
            .collect();
        for idx in open {
            self.close(idx);
        }
        Ok(())
    }

    fn dispatch(&mut self, ev: Event) {
        if ev.token == TOKEN_WAKE {
            self.waker.reset();
            if self.shared.shutdown.load(Ordering::Acquire) && self.drain_deadline.is_none() {
                self.begin_drain();
            }
            return;
        }
        if ev.token & TOKEN_LISTENER != 0 {
            self.accept((ev.token & !TOKEN_LISTENER) as usize);
            return;
        }
        let idx = ev.token as usize;
        if self.conns.get(idx).is_none_or(|c| c.fd < 0) {
            return;
        }
        if ev.writable && self.conns[idx].pending.is_some() {
            self.on_writable(idx);
        }
        if ev.readable || ev.failed {
            self.on_readable(idx, ev.peer_closed || ev.failed);
        }
    }

    fn accept(&mut self, listener: usize) {
        if self.accept_paused_until != 0 || self.drain_deadline.is_some() {
            return;
        }
        let Some(lfd) = self.listeners.get(listener).map(|l| l.as_raw_fd()) else {
            return;
        };
        loop {
            if self.shared.live.load(Ordering::Relaxed) >= self.config.max_connections {
                self.accept_paused_until = self.now + ACCEPT_PAUSE_MS;
                return;
            }
            // SAFETY: zeroed sockaddr_storage is a valid out-parameter.
            let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: `addr`/`len` describe a valid buffer.
            let fd = unsafe {
                libc::accept4(
                    lfd,
                    (&mut addr as *mut libc::sockaddr_storage).cast(),
                    &mut len,
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                let err = std::io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::EINTR | libc::ECONNABORTED) => continue,
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        if !self.accept_error_logged {
                            self.accept_error_logged = true;
                            tracing::warn!(
                                "accept: {err}; pausing accepts for {ACCEPT_PAUSE_MS} ms until descriptors free up"
                            );
                        }
                        self.accept_paused_until = self.now + ACCEPT_PAUSE_MS;
                        return;
                    }
                    _ => {
                        tracing::warn!("accept: {err}");
                        return;
                    }
                }
            }
            self.accept_error_logged = false;
            self.register(fd, peer_ip(&addr));
        }
    }

    fn register(&mut self, fd: RawFd, peer: Option<IpAddr>) {
        let one: libc::c_int = 1;
        // SAFETY: valid option pointer and length; failure is harmless.
        unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(Conn::free());
                self.conns.len() - 1
            }
        };
        if let Err(e) = self.poller.add_connection(fd, idx as u64) {
            tracing::warn!("epoll_ctl: {e}");
            // SAFETY: we own the fresh descriptor.
            unsafe { libc::close(fd) };
            self.free.push(idx);
            return;
        }
        // A new connection gets the shorter of the two deadlines for its
        // first request: a client that connects and says nothing is not
        // owed a whole keep-alive period.
        let first_deadline = self
            .config
            .header_timeout_ms
            .min(self.config.keepalive_timeout_ms);
        self.conns[idx] = Conn {
            fd,
            deadline: self.now + first_deadline,
            peer,
            ..Conn::free()
        };
        self.open += 1;
        self.shared.live.fetch_add(1, Ordering::Relaxed);
    }

    fn close(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        if conn.fd < 0 {
            return;
        }
        // SAFETY: we own the descriptor; closing also removes it from epoll.
        unsafe { libc::close(conn.fd) };
        *conn = Conn::free();
        self.free.push(idx);
        self.open -= 1;
        self.shared.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// Reads and answers until the socket is empty. `to_eof`: the peer
    /// closed its side, so read on to the end of file even after a short
    /// read.
    fn on_readable(&mut self, idx: usize, to_eof: bool) {
        loop {
            let conn = &self.conns[idx];
            if conn.fd < 0 || conn.pending.is_some() {
                return;
            }
            if conn.phase == Phase::Lingering {
                self.drain_lingering(idx);
                return;
            }
            if conn.backlog {
                self.conns[idx].backlog = false;
                self.process(idx, 0);
                continue;
            }
            let n = match io::read(conn.fd, &mut self.read_buf) {
                Io::Interrupted => continue,
                Io::Done(n) => n,
                Io::WouldBlock => return,
                Io::Closed => {
                    self.close(idx);
                    return;
                }
            };
            self.process(idx, n);
            // A short read emptied the socket; epoll reports new data as a
            // new edge, so no read is wasted on EAGAIN.
            if n < self.read_buf.len() && !to_eof && !self.conns[idx].backlog {
                return;
            }
        }
    }

    /// Answers what the last read (of `n` bytes, 0 to serve a backlog)
    /// completed.
    fn process(&mut self, idx: usize, n: usize) {
        let conn = &mut self.conns[idx];
        let mut partial = std::mem::take(&mut conn.partial);
        let from_partial = !partial.is_empty();
        if from_partial {
            partial.extend_from_slice(&self.read_buf[..n]);
        }
        let buf: &[u8] = if from_partial {
            &partial
        } else {
            &self.read_buf[..n]
        };
        self.out.clear();
        let mut ctx = Context {
            site: &self.site,
            scratch: &mut self.scratch,
            date: &self.date,
            server_headers: &self.config.server_headers,
            log: self.log.as_mut(),
            peer: conn.peer,
            draining: self.drain_deadline.is_some(),
        };
        let batch = http1::serve_batch(buf, &mut conn.discard, &mut ctx, &mut self.out);
        conn.backlog = batch.more;
        let rest_len = buf.len() - batch.consumed;
        if batch.close {
            conn.close_after = true;
        } else if rest_len > 0 || !conn.discard.is_done() {
            if from_partial {
                partial.drain(..batch.consumed);
                conn.partial = partial;
            } else {
                conn.partial = buf[batch.consumed..].to_vec();
            }
            if conn.phase != Phase::Head || batch.responses > 0 {
                conn.phase = Phase::Head;
                conn.deadline = self.now + self.config.header_timeout_ms;
            }
        } else {
            conn.phase = Phase::Idle;
            conn.deadline = self.now + self.config.keepalive_timeout_ms;
        }
        if !self.out.is_empty() {
            match io::send_output(conn.fd, &self.site, &mut self.out) {
                Sent::Failed => {
                    self.close(idx);
                    return;
                }
                Sent::Partly(pending) => {
                    conn.pending = Some(pending);
                    conn.phase = Phase::Sending;
                    conn.deadline = self.now + self.config.send_timeout_ms;
                    return;
                }
                Sent::All => {}
            }
        }
        if self.conns[idx].close_after {
            self.start_linger(idx);
        }
    }

    fn on_writable(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        let Some(pending) = conn.pending.as_mut() else {
            return;
        };
        match io::resume(conn.fd, pending) {
            Flush::Failed => self.close(idx),
            Flush::Blocked(_) => conn.deadline = self.now + self.config.send_timeout_ms,
            Flush::Done => {
                conn.pending = None;
                if conn.close_after || self.drain_deadline.is_some() {
                    self.start_linger(idx);
                    return;
                }
                if conn.partial.is_empty() && conn.discard.is_done() {
                    conn.phase = Phase::Idle;
                    conn.deadline = self.now + self.config.keepalive_timeout_ms;
                } else {
                    conn.phase = Phase::Head;
                    conn.deadline = self.now + self.config.header_timeout_ms;
                }
                // Data that arrived while we were not reading raised its
                // edge already: read now.
                self.on_readable(idx, true);
            }
        }
    }

    /// Shuts our side down and reads until the peer closes, so that unread
    /// request bytes do not turn our last response into a reset.
    fn start_linger(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        // SAFETY: valid descriptor; failure means it is already gone.
        unsafe { libc::shutdown(conn.fd, libc::SHUT_WR) };
        conn.phase = Phase::Lingering;
        conn.deadline = self.now + LINGER_MS;
        conn.partial = Vec::new();
        conn.discard = Discard::default();
        self.drain_lingering(idx);
    }

    fn drain_lingering(&mut self, idx: usize) {
        for _ in 0..16 {
            match io::read(self.conns[idx].fd, &mut self.read_buf) {
                Io::Done(_) | Io::Interrupted => {}
                Io::WouldBlock => return,
                Io::Closed => break,
            }
        }
        self.close(idx);
    }

    /// Closes listeners and idle connections; the rest finish their
    /// responses and close.
    fn begin_drain(&mut self) {
        self.drain_deadline = Some(self.now + SHUTDOWN_GRACE_MS);
        self.listeners.clear();
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.fd >= 0 && c.pending.is_none() && c.phase != Phase::Lingering {
                self.close(idx);
            }
        }
    }

    /// Times connections out, resumes paused accepts, flushes the log.
    fn sweep(&mut self) {
        self.last_sweep = self.now;
        for idx in 0..self.conns.len() {
            let c = &self.conns[idx];
            if c.fd < 0 || c.deadline > self.now {
                continue;
            }
            match c.phase {
                Phase::Head => self.request_timeout(idx),
                Phase::Idle | Phase::Sending | Phase::Lingering => self.close(idx),
            }
        }
        if self.accept_paused_until != 0 && self.now >= self.accept_paused_until {
            self.accept_paused_until = 0;
            for i in 0..self.listeners.len() {
                self.accept(i);
            }
        }
        if self.now >= self.last_log_flush + 1000 {
            self.last_log_flush = self.now;
            if let Some(log) = self.log.as_mut() {
                log.flush();
            }
        }
    }

    /// The request head did not arrive in time: 408, then close.
    fn request_timeout(&mut self, idx: usize) {
        self.out.clear();
        let conn = &self.conns[idx];
        let mut ctx = Context {
            site: &self.site,
            scratch: &mut self.scratch,
            date: &self.date,
            server_headers: &self.config.server_headers,
            log: self.log.as_mut(),
            peer: conn.peer,
            draining: true,
        };
        http1::write_error(&mut self.out, &mut ctx, 408);
        self.out.seal();
        match io::send_output(conn.fd, &self.site, &mut self.out) {
            Sent::All => self.start_linger(idx),
            Sent::Partly(_) | Sent::Failed => self.close(idx),
        }
    }
}

fn peer_ip(addr: &libc::sockaddr_storage) -> Option<IpAddr> {
    match addr.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(addr as *const _ as *const libc::sockaddr_in) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let a: &libc::sockaddr_in6 =
                unsafe { &*(addr as *const _ as *const libc::sockaddr_in6) };
            Some(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}
