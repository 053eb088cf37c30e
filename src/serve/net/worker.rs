//! One thread's event loop: accepts on its own listeners, reads every
//! readable connection into one per-thread buffer, hands the bytes to the
//! connection's protocol stack, writes what it answers with one `writev`,
//! and sweeps deadlines a few times a second with a clock read once per
//! loop iteration.
//!
//! An idle connection owns no buffer here: only output the socket has not
//! taken yet is kept per connection (and whatever its stack keeps).
//!
//! A connection sends at most a share of a turn's budget per turn
//! (`TURN_SHARE`, `TURN_BUDGET`): one with more to send than that goes to
//! the back of the ready queue, served after the turn's events, and the
//! loop polls without waiting while the queue holds anyone.

use std::collections::VecDeque;
use std::net::{IpAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustix::io::Errno;
use rustix::net::{Shutdown, SocketFlags, acceptfrom_with};

use super::clock::{monotonic_ms, unix_seconds};
use super::conn::{self, ConnState, Expiry, Phase, Swept, Timers};
use super::io::{self, Flush, Outcome, Pending, Sent, SparePending};
use super::poller::{Event, Poller};
use super::udp::DatagramSockets;
use super::{
    ACCEPT_PAUSE_MS, Counted, LATE_SHARE, LoopConfig, Output, SHUTDOWN_GRACE_MS, SWEEP_MS, Shared,
    Stack, Step, TURN_SHARE, TurnBudget, Waker, peer_ip,
};
use crate::serve::metrics::Timeout;

/// Size of the per-thread read buffer.
const READ_BUF: usize = 64 * 1024;

const TOKEN_WAKE: u64 = 1 << 63;
const TOKEN_LISTENER: u64 = 1 << 62;
const TOKEN_UDP: u64 = 1 << 61;

/// One connection slot.
struct Conn<S> {
    /// The socket; -1 when the slot is free.
    fd: RawFd,
    /// Deadlines, closing intent and the protocol stack.
    state: ConnState<S>,
    /// Output the socket has not taken yet.
    pending: Option<Box<Pending>>,
    /// In the ready queue: it spent its share of a turn with more to send.
    queued: bool,
}

impl<S> Conn<S> {
    fn free() -> Conn<S> {
        Conn {
            fd: -1,
            state: ConnState::closed(),
            pending: None,
            queued: false,
        }
    }
}

/// One thread's loop and everything it owns.
pub struct Worker<S: Stack> {
    /// Readiness of every descriptor this thread owns.
    poller: Poller,
    /// This thread's listeners, one per address, each with the tag its
    /// connections are opened with; dropped at shutdown.
    listeners: Vec<(TcpListener, u32)>,
    /// This thread's UDP sockets (QUIC), level-triggered: what a turn
    /// leaves unread reports again.
    udp: DatagramSockets,
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
    /// What the socket does not take of it is kept in one of these.
    spare: SparePending,
    /// Connections that spent their share of a turn with more to send, in
    /// the order they did (a closed one's slot is skipped: its `queued`
    /// is cleared).
    ready: VecDeque<usize>,
    /// What this turn may still send in all.
    turn: TurnBudget,
    /// What the connection being served may still send this turn.
    share: usize,
    /// The protocols the connections speak.
    stack: S,
    /// Shutdown state from the control thread, and the connection count.
    shared: Arc<Shared>,
    /// Timeouts and limits.
    config: Arc<LoopConfig>,
    /// Where connections and timeouts are counted.
    counted: Counted,
    /// Monotonic milliseconds, read once per iteration.
    now: u64,
    /// Sweeps, ticks and the accept pause.
    timers: Timers,
    /// Set when shutdown began: the time by which to exit anyway.
    drain_deadline: Option<u64>,
    /// The control thread asked for the drain: it begins once this turn's
    /// events are handled, so that a request that arrived with the wake-up
    /// is answered rather than dropped with its connection.
    drain_asked: bool,
    /// An accept failure was logged and no accept succeeded since: keeps
    /// a descriptor shortage from filling the log every pause.
    accept_error_logged: bool,
}

impl<S: Stack> Worker<S> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        listeners: Vec<(TcpListener, u32)>,
        udp: Vec<UdpSocket>,
        waker: Arc<Waker>,
        shared: Arc<Shared>,
        config: Arc<LoopConfig>,
        counted: Counted,
        stack: S,
    ) -> std::io::Result<Worker<S>> {
        let poller = Poller::new(1024)?;
        for (i, (l, _)) in listeners.iter().enumerate() {
            poller.add_listener(l.as_raw_fd(), TOKEN_LISTENER | i as u64)?;
        }
        for (i, socket) in udp.iter().enumerate() {
            poller.add_datagrams(socket.as_raw_fd(), TOKEN_UDP | i as u64)?;
        }
        poller.add_readable(waker.raw(), TOKEN_WAKE)?;
        Ok(Worker {
            poller,
            listeners,
            udp: DatagramSockets::new(udp),
            waker,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            read_buf: vec![0u8; READ_BUF].into_boxed_slice(),
            out: Output::new(64 * 1024, config.sendfile_min),
            spare: SparePending::default(),
            ready: VecDeque::new(),
            turn: TurnBudget::new(),
            share: TURN_SHARE,
            stack,
            shared,
            config,
            counted,
            now: monotonic_ms(),
            timers: Timers::default(),
            drain_deadline: None,
            drain_asked: false,
            accept_error_logged: false,
        })
    }

    /// Runs until shutdown has drained (or its grace period ran out).
    pub fn run(mut self) -> std::io::Result<()> {
        let mut events: Vec<Event> = Vec::with_capacity(1024);
        let mut wait_ms = SWEEP_MS as i32;
        loop {
            events.clear();
            if !self.ready.is_empty() {
                wait_ms = 0;
            }
            self.poller.wait(wait_ms, |e| events.push(e))?;
            self.now = monotonic_ms();
            self.turn.begin();
            let wake = self
                .stack
                .begin_turn(unix_seconds(), self.drain_deadline.is_some());
            for ev in &events {
                self.dispatch(*ev);
            }
            if wake {
                self.wake_held();
            }
            self.serve_ready();
            if std::mem::take(&mut self.drain_asked) && self.drain_deadline.is_none() {
                self.begin_drain();
            }
            let now = self.now;
            conn::sweep(&mut self, now);
            wait_ms = self.udp.timers(&mut self.stack, SWEEP_MS) as i32;
            if let Some(deadline) = self.drain_deadline
                && ((self.open == 0 && self.stack.datagram_open() == 0) || self.now >= deadline)
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
            self.drain_asked |= self.shared.shutdown.load(Ordering::Acquire);
            return;
        }
        if ev.token & TOKEN_UDP != 0 {
            self.udp
                .read((ev.token & !TOKEN_UDP) as usize, &mut self.stack);
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
        self.grant();
        if ev.writable && self.conns[idx].pending.is_some() {
            self.on_writable(idx);
        }
        if ev.readable || ev.failed {
            self.on_readable(idx, ev.peer_closed || ev.failed);
        }
    }

    fn accept(&mut self, listener: usize) {
        if self.timers.accepts_paused() || self.drain_deadline.is_some() {
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
            if self.at_cap() {
                self.timers.pause_accepts(self.now);
                return;
            }
            // SAFETY: the listener is open for the loop's life.
            let listener = unsafe { BorrowedFd::borrow_raw(lfd) };
            let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
            let (fd, addr) = match acceptfrom_with(listener, flags) {
                Ok(accepted) => accepted,
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR | Errno::CONNABORTED) => continue,
                Err(errno @ (Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)) => {
                    if !self.accept_error_logged {
                        self.accept_error_logged = true;
                        let err = std::io::Error::from(errno);
                        tracing::warn!(
                            "accept: {err}; pausing accepts for {ACCEPT_PAUSE_MS} ms until descriptors free up"
                        );
                    }
                    self.timers.pause_accepts(self.now);
                    return;
                }
                Err(errno) => {
                    tracing::warn!("accept: {}", std::io::Error::from(errno));
                    return;
                }
            };
            self.accept_error_logged = false;
            self.register(fd.into_raw_fd(), tag, peer_ip(addr));
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
            unsafe { rustix::io::close(fd) };
            self.free.push(idx);
            return;
        }
        let session = self.stack.open(tag, peer);
        self.conns[idx] = Conn {
            fd,
            state: ConnState::open(session, self.now, &self.config),
            pending: None,
            queued: false,
        };
        self.open += 1;
        self.shared.live.fetch_add(1, Ordering::Relaxed);
        self.counted.counters().accepted.add(1);
    }

    fn close(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        if conn.fd < 0 {
            return;
        }
        // SAFETY: we own the descriptor; closing also removes it from epoll.
        unsafe { rustix::io::close(conn.fd) };
        if let Some(pending) = conn.pending.take() {
            self.spare.put(pending);
        }
        *conn = Conn::free();
        self.free.push(idx);
        self.open -= 1;
        self.shared.live.fetch_sub(1, Ordering::Relaxed);
        self.counted.counters().closed.add(1);
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
            if conn.state.phase == Phase::Lingering {
                self.drain_lingering(idx);
                return;
            }
            if conn.state.more {
                // Less than a late share left is less than a TLS step
                // makes: what is left of the share would go out as a
                // write of a few bytes, the rest of the step after it.
                if self.share < LATE_SHARE {
                    self.enqueue(idx);
                    return;
                }
                self.resume(idx);
                continue;
            }
            let n = match io::read(conn.fd, &mut self.read_buf) {
                Outcome::Interrupted => continue,
                Outcome::Done(n) => n,
                Outcome::WouldBlock => return,
                Outcome::Closed => {
                    self.close(idx);
                    return;
                }
            };
            let conn = &mut self.conns[idx];
            let Some(session) = conn.state.session.as_mut() else {
                return;
            };
            self.out.clear_with_room(self.share);
            let step = self
                .stack
                .input(session, &mut self.read_buf[..n], &mut self.out);
            self.after_step(idx, step);
            // A short read emptied the socket; epoll reports new data as a
            // new edge, so no read is wasted on EAGAIN.
            if n < self.read_buf.len() && !to_eof && !self.conns[idx].state.more {
                return;
            }
        }
    }

    /// Asks the stack for the output it has without input.
    fn resume(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        conn.state.more = false;
        let Some(session) = conn.state.session.as_mut() else {
            return;
        };
        self.out.clear_with_room(self.share);
        let step = self.stack.resume(session, &mut self.out);
        self.after_step(idx, step);
    }

    /// Applies what the stack answered: deadlines, then the output.
    fn after_step(&mut self, idx: usize, step: Step) {
        let conn = &mut self.conns[idx];
        conn.state.apply(step, self.now, &self.config);
        if !self.out.is_empty() {
            let share = self.share;
            let sent = io::send_output(
                conn.fd,
                self.stack.backing(),
                &mut self.out,
                &mut self.spare,
                &mut self.share,
            );
            self.turn.charge(share - self.share);
            match sent {
                Sent::Failed => {
                    self.close(idx);
                    return;
                }
                Sent::Partly(pending) => {
                    conn.pending = Some(pending);
                    conn.state.start_sending(self.now, &self.config);
                    if self.share == 0 {
                        self.enqueue(idx);
                    }
                    return;
                }
                Sent::All => {}
            }
        }
        if conn.state.close_after && !conn.state.more {
            self.finish(idx);
        }
    }

    fn on_writable(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        let Some(pending) = conn.pending.as_mut() else {
            return;
        };
        let share = self.share;
        let flushed = io::resume(conn.fd, pending, &mut self.share);
        self.turn.charge(share - self.share);
        match flushed {
            Flush::Failed => self.close(idx),
            Flush::Blocked(_) => {
                conn.state.progressed(self.now, &self.config);
                if self.share == 0 {
                    self.enqueue(idx);
                }
            }
            Flush::Done => {
                if let Some(pending) = conn.pending.take() {
                    self.spare.put(pending);
                }
                if conn.state.done_after_send(self.drain_deadline.is_some()) {
                    self.finish(idx);
                    return;
                }
                conn.state.sent(self.now, &self.config);
                if std::mem::take(&mut conn.state.wake_owed) {
                    self.wake(idx);
                }
                // Data that arrived while we were not reading raised its
                // edge already: read now (after any output the stack
                // still has).
                self.on_readable(idx, true);
            }
        }
    }

    /// Sets what the connection about to be served may send this turn: a
    /// share while the turn's budget lasts, else enough for a small
    /// response.
    fn grant(&mut self) {
        self.share = self.turn.share();
    }

    /// Puts a connection that spent its share with more to send at the
    /// back of the ready queue.
    fn enqueue(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        if !conn.queued {
            conn.queued = true;
            self.ready.push_back(idx);
        }
    }

    /// Serves the ready queue in order, a share each, while the turn's
    /// budget lasts; one that spends its share again goes to the back, for
    /// a later turn.
    fn serve_ready(&mut self) {
        for _ in 0..self.ready.len() {
            if self.turn.spent() {
                return;
            }
            let Some(idx) = self.ready.pop_front() else {
                return;
            };
            let conn = &mut self.conns[idx];
            if conn.fd < 0 || !std::mem::take(&mut conn.queued) {
                continue;
            }
            self.share = TURN_SHARE;
            if conn.pending.is_some() {
                self.on_writable(idx);
            } else {
                self.on_readable(idx, false);
            }
        }
    }

    /// The stack said held responses are owed output: each connection
    /// that can take output now is woken, the others once theirs is sent.
    fn wake_held(&mut self) {
        for idx in 0..self.conns.len() {
            let conn = &mut self.conns[idx];
            if conn.fd < 0 || conn.state.phase == Phase::Lingering {
                continue;
            }
            if conn.pending.is_some() || conn.state.more {
                conn.state.wake_owed = true;
            } else {
                self.grant();
                self.wake(idx);
            }
        }
    }

    /// Hands the stack what a held response is owed now (`Stack::wake`).
    fn wake(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        let Some(session) = conn.state.session.as_mut() else {
            return;
        };
        self.out.clear_with_room(self.share);
        if let Some(step) = self.stack.wake(session, &mut self.out) {
            self.after_step(idx, step);
        }
    }

    /// Closes a connection whose last output was sent: at once when the
    /// stack said the peer sends nothing more, else after lingering.
    fn finish(&mut self, idx: usize) {
        let conn = &self.conns[idx].state;
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
        // SAFETY: the connection's descriptor is open until `close`.
        let socket = unsafe { BorrowedFd::borrow_raw(conn.fd) };
        // Failure means the connection is already gone.
        let _ = rustix::net::shutdown(socket, Shutdown::Write);
        conn.state.start_lingering(self.now);
        self.drain_lingering(idx);
    }

    fn drain_lingering(&mut self, idx: usize) {
        for _ in 0..16 {
            match io::read(self.conns[idx].fd, &mut self.read_buf) {
                Outcome::Done(_) | Outcome::Interrupted => {}
                Outcome::WouldBlock => return,
                Outcome::Closed => break,
            }
        }
        self.close(idx);
    }

    /// Closes listeners and idle connections; the rest finish their
    /// responses and close. An idle connection is read once first: a
    /// request its client sent before it could know is answered (the
    /// stack says `Connection: close` now) instead of being dropped.
    fn begin_drain(&mut self) {
        self.drain_deadline = Some(self.now + SHUTDOWN_GRACE_MS);
        self.listeners.clear();
        self.stack.begin_turn(unix_seconds(), true);
        for idx in 0..self.conns.len() {
            if self.idle(idx) {
                self.grant();
                self.on_readable(idx, false);
            }
            if self.idle(idx) {
                self.expire(idx, Expiry::Idle);
            }
        }
    }

    /// Open, with no output waiting and nothing in flight.
    fn idle(&self, idx: usize) -> bool {
        let c = &self.conns[idx];
        c.fd >= 0 && c.pending.is_none() && c.state.drainable() && !c.state.close_after
    }
}

impl<S: Stack> Swept for Worker<S> {
    type Session = S::Session;

    fn timers(&mut self) -> &mut Timers {
        &mut self.timers
    }

    fn slots(&self) -> usize {
        self.conns.len()
    }

    fn state(&self, idx: usize) -> Option<&ConnState<S::Session>> {
        let conn = &self.conns[idx];
        (conn.fd >= 0).then_some(&conn.state)
    }

    fn count(&mut self, timeout: Timeout) {
        self.counted.counters().timeout(timeout);
    }

    /// Sends the stack's last words with one write: a 408 sent whole is
    /// followed by lingering, anything else by the close.
    fn expire(&mut self, idx: usize, expiry: Expiry) {
        self.out.clear();
        let conn = &mut self.conns[idx];
        if let Some(session) = conn.state.session.as_mut() {
            self.stack.expire(session, expiry, &mut self.out);
        }
        if self.out.is_empty() {
            self.close(idx);
            return;
        }
        // Last words go out with one write, whatever the turn has spent.
        let mut unbounded = usize::MAX;
        let sent = io::send_output(
            conn.fd,
            self.stack.backing(),
            &mut self.out,
            &mut self.spare,
            &mut unbounded,
        );
        match sent {
            Sent::All if expiry == Expiry::Stalled => self.start_linger(idx),
            Sent::Partly(pending) => {
                self.spare.put(pending);
                self.close(idx);
            }
            Sent::All | Sent::Failed => self.close(idx),
        }
    }

    fn at_cap(&self) -> bool {
        self.shared.live.load(Ordering::Relaxed) >= self.config.max_connections
    }

    /// Listeners are edge-triggered: connections that arrived during the
    /// pause raised no new edge, so they are accepted here.
    fn resume_accepts(&mut self, _now: u64) {
        for i in 0..self.listeners.len() {
            self.accept(i);
        }
    }

    fn tick(&mut self) {
        self.stack.tick();
    }
}
