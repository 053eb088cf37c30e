//! One thread's event loop: accepts on its own listeners, reads every
//! readable connection into one per-thread buffer, hands the bytes to the
//! connection's protocol stack, writes what it answers with one `writev`,
//! and sweeps deadlines a few times a second with a clock read once per
//! loop iteration.
//!
//! An idle connection owns no buffer here: only output the socket has not
//! taken yet is kept per connection (and whatever its stack keeps).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::io::{self, Flush, Io, Pending, Sent};
use super::poller::{Event, Poller};
use super::{Output, Shared, Stack, Step, Wait, Waker};

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
struct Conn<S> {
    /// The socket; -1 when the slot is free.
    fd: RawFd,
    /// Which deadline applies and what a timeout does.
    phase: Phase,
    /// Close once `pending` is sent.
    close_after: bool,
    /// With `close_after`: linger before closing (see `Step::linger`).
    linger: bool,
    /// The stack's last step said `Wait::Response`: a response is in
    /// flight though nothing is pending, so shutdown does not close it.
    in_flight: bool,
    /// Monotonic milliseconds at which `phase` times out.
    deadline: u64,
    /// The stack has more output to give without input: ask for it before
    /// reading again.
    more: bool,
    /// Output the socket has not taken yet.
    pending: Option<Box<Pending>>,
    /// The phase to return to once `pending` is sent.
    after_send: Phase,
    /// The connection's protocol stack; `None` when the slot is free.
    session: Option<S>,
}

impl<S> Conn<S> {
    fn free() -> Conn<S> {
        Conn {
            fd: -1,
            phase: Phase::Idle,
            close_after: false,
            linger: true,
            in_flight: false,
            deadline: u64::MAX,
            more: false,
            pending: None,
            after_send: Phase::Idle,
            session: None,
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
pub struct Worker<S: Stack> {
    /// Readiness of every descriptor this thread owns.
    poller: Poller,
    /// This thread's listeners, one per address, each with the tag its
    /// connections are opened with; dropped at shutdown.
    listeners: Vec<(TcpListener, u32)>,
    /// Woken by the control thread at shutdown.
    waker: Arc<Waker>,
    /// Connection slots, indexed by token.
    conns: Vec<Conn<S::Session>>,
    /// Free slot indices.
    free: Vec<usize>,
    /// Open connections of this thread.
    open: usize,
    /// Every read lands here first.
    read_buf: Box<[u8]>,
    /// The output being assembled.
    out: Output,
    /// The protocols the connections speak.
    stack: S,
    /// Shutdown state from the control thread, and the connection count.
    shared: Arc<Shared>,
    /// Timeouts and limits.
    config: Arc<LoopConfig>,
    /// Monotonic milliseconds, read once per iteration.
    now: u64,
    /// When deadlines were last checked.
    last_sweep: u64,
    /// When the stack was last ticked (log flushes).
    last_tick: u64,
    /// Accepting is paused until then (0: not paused).
    accept_paused_until: u64,
    /// Set when shutdown began: the time by which to exit anyway.
    drain_deadline: Option<u64>,
    /// An accept failure was logged and no accept succeeded since: keeps
    /// a descriptor shortage from filling the log every pause.
    accept_error_logged: bool,
}

impl<S: Stack> Worker<S> {
    pub fn new(
        listeners: Vec<(TcpListener, u32)>,
        waker: Arc<Waker>,
        shared: Arc<Shared>,
        config: Arc<LoopConfig>,
        stack: S,
    ) -> std::io::Result<Worker<S>> {
        let poller = Poller::new(1024)?;
        for (i, (l, _)) in listeners.iter().enumerate() {
            poller.add_readable(l.as_raw_fd(), TOKEN_LISTENER | i as u64)?;
        }
        poller.add_readable(waker.raw(), TOKEN_WAKE)?;
        Ok(Worker {
            poller,
            listeners,
            waker,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            read_buf: vec![0u8; READ_BUF].into_boxed_slice(),
            out: Output::new(64 * 1024, config.sendfile_min),
            stack,
            shared,
            config,
            now: monotonic_ms(),
            last_sweep: 0,
            last_tick: 0,
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
            self.stack
                .begin_turn(unix_seconds(), self.drain_deadline.is_some());
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
        self.stack.finish();
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
        let Some((lfd, tag)) = self
            .listeners
            .get(listener)
            .map(|(l, t)| (l.as_raw_fd(), *t))
        else {
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
            self.register(fd, tag, peer_ip(&addr));
        }
    }

    fn register(&mut self, fd: RawFd, tag: u32, peer: Option<IpAddr>) {
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
            session: Some(self.stack.open(tag, peer)),
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
            if conn.more {
                self.resume(idx);
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
            let conn = &mut self.conns[idx];
            let Some(session) = conn.session.as_mut() else {
                return;
            };
            self.out.clear();
            let step = self
                .stack
                .input(session, &mut self.read_buf[..n], &mut self.out);
            self.after_step(idx, step);
            // A short read emptied the socket; epoll reports new data as a
            // new edge, so no read is wasted on EAGAIN.
            if n < self.read_buf.len() && !to_eof && !self.conns[idx].more {
                return;
            }
        }
    }

    /// Asks the stack for the output it has without input.
    fn resume(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        conn.more = false;
        let Some(session) = conn.session.as_mut() else {
            return;
        };
        self.out.clear();
        let step = self.stack.resume(session, &mut self.out);
        self.after_step(idx, step);
    }

    /// Applies what the stack answered: deadlines, then the output.
    fn after_step(&mut self, idx: usize, step: Step) {
        let conn = &mut self.conns[idx];
        conn.more = step.more;
        conn.in_flight = matches!(step.wait, Wait::Response { .. });
        if step.close {
            conn.close_after = true;
            conn.linger = step.linger;
        } else {
            match step.wait {
                Wait::Request { fresh } | Wait::Response { fresh } => {
                    if conn.phase != Phase::Head || fresh {
                        conn.phase = Phase::Head;
                        conn.deadline = self.now + self.config.header_timeout_ms;
                    }
                }
                Wait::Idle => {
                    conn.phase = Phase::Idle;
                    conn.deadline = self.now + self.config.keepalive_timeout_ms;
                }
            }
        }
        if !self.out.is_empty() {
            match io::send_output(conn.fd, self.stack.backing(), &mut self.out) {
                Sent::Failed => {
                    self.close(idx);
                    return;
                }
                Sent::Partly(pending) => {
                    conn.pending = Some(pending);
                    conn.after_send = conn.phase;
                    conn.phase = Phase::Sending;
                    conn.deadline = self.now + self.config.send_timeout_ms;
                    return;
                }
                Sent::All => {}
            }
        }
        if conn.close_after && !conn.more {
            self.finish(idx);
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
                let drained = self.drain_deadline.is_some() && !conn.in_flight;
                if !conn.more && (conn.close_after || drained) {
                    self.finish(idx);
                    return;
                }
                // The wait the stack asked for before the write blocked,
                // with its deadline counted from now.
                conn.phase = conn.after_send;
                conn.deadline = self.now
                    + match conn.after_send {
                        Phase::Head => self.config.header_timeout_ms,
                        _ => self.config.keepalive_timeout_ms,
                    };
                // Data that arrived while we were not reading raised its
                // edge already: read now (after any output the stack
                // still has).
                self.on_readable(idx, true);
            }
        }
    }

    /// Closes a connection whose last output was sent: at once when the
    /// stack said the peer sends nothing more, else after lingering.
    fn finish(&mut self, idx: usize) {
        let conn = &self.conns[idx];
        if conn.close_after && !conn.linger {
            self.close(idx);
        } else {
            self.start_linger(idx);
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
        conn.more = false;
        conn.session = None;
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
            if c.fd >= 0
                && c.pending.is_none()
                && !c.more
                && !c.in_flight
                && c.phase != Phase::Lingering
            {
                self.close_idle(idx);
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
                Phase::Idle => self.close_idle(idx),
                Phase::Sending | Phase::Lingering => self.close(idx),
            }
        }
        if self.accept_paused_until != 0 && self.now >= self.accept_paused_until {
            self.accept_paused_until = 0;
            for i in 0..self.listeners.len() {
                self.accept(i);
            }
        }
        if self.now >= self.last_tick + 1000 {
            self.last_tick = self.now;
            self.stack.tick();
        }
    }

    /// The request head did not arrive in time: the stack's last words
    /// (408), then close.
    fn request_timeout(&mut self, idx: usize) {
        self.out.clear();
        let conn = &mut self.conns[idx];
        if let Some(session) = conn.session.as_mut() {
            self.stack.timeout(session, &mut self.out);
        }
        if self.out.is_empty() {
            self.close(idx);
            return;
        }
        match io::send_output(conn.fd, self.stack.backing(), &mut self.out) {
            Sent::All => self.start_linger(idx),
            Sent::Partly(_) | Sent::Failed => self.close(idx),
        }
    }

    /// Closes a connection with no request in progress, after one
    /// best-effort write of the stack's goodbye.
    fn close_idle(&mut self, idx: usize) {
        self.out.clear();
        let conn = &mut self.conns[idx];
        if let Some(session) = conn.session.as_mut() {
            self.stack.goodbye(session, &mut self.out);
        }
        if !self.out.is_empty() {
            let _ = io::send_output(conn.fd, self.stack.backing(), &mut self.out);
        }
        self.close(idx);
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
