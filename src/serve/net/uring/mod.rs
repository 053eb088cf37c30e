//! The io_uring back end of the connection layer: the same connections,
//! deadlines and `Stack` as the epoll loop (`worker.rs`), driven by
//! completions instead of readiness.
//!
//! One ring per thread, and one `io_uring_enter` per loop turn that both
//! submits everything the last turn queued and waits for completions (or
//! the sweep interval, passed as the enter's timeout: no timer syscall).
//! Listeners run a multishot accept; every connection runs a multishot
//! receive into a ring of provided buffers, so an idle connection owns no
//! buffer and a request costs no syscall of its own; output goes out as
//! one `writev` operation from the prepared slices (the mapping, the
//! output's own bytes), and large pack bodies are spliced from the pack
//! file through a pipe, io_uring's `sendfile`. The ring is created
//! disabled, restricted to exactly these operations
//! (`IORING_REGISTER_RESTRICTIONS`), then enabled: the sandbox's seccomp
//! filter cannot see what a ring does, so the ring limits itself.
//!
//! A completion-based loop differs from the epoll one in two ways the
//! code below is about: buffers handed to the kernel (the output of a
//! send, the iovecs, a splice's pipe) stay owned by the connection until
//! their completion arrives, even after it closed; and input keeps
//! arriving while a response is being sent, so it is held (copied, the
//! rare case of pipelining past a full batch) until the stack may take it,
//! and reading stops when too much is held.
//!
//! No operation sends more than a share of a turn's budget
//! (`TURN_SHARE`); the next operation of a send goes out at once while
//! the turn's budget lasts, else from the ready queue, served first in the
//! next turn (whose enter then does not wait), so that many large bodies
//! take turns, and a request is answered in the turn it arrives.

mod buf_ring;
mod pipes;
mod setup;

use std::collections::VecDeque;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use rustix::io::{Errno, ReadWriteFlags};
use rustix::net::{Shutdown, SocketFlags};

use self::buf_ring::{BGID, Buffers};
pub use self::pipes::PIPES;
use self::pipes::Pipe;
pub use self::setup::probe;
use self::setup::{CQ_ENTRIES, new_ring};
use super::clock::{monotonic_ms, unix_seconds};
use super::conn::{self, ConnState, Expiry, Phase, Swept, Timers};
use super::io::{advance, gather};
use super::udp::DatagramSockets;
use super::{
    ACCEPT_PAUSE_MS, Backing, Counted, LoopConfig, Output, SHUTDOWN_GRACE_MS, SWEEP_MS, Seg,
    Shared, Stack, Step, TurnBudget, Waker, peer_ip,
};
use crate::serve::metrics::Timeout;
use crate::sys;

/// The poll mask of the waker's `PollAdd`: readable.
const POLL_IN: u32 = rustix::event::PollFlags::IN.bits() as u32;

/// Input held while a response is being sent: beyond this, reading stops
/// until the stack has taken what is held.
const HELD_MAX: usize = 64 * 1024;
/// Bytes read from a lingering connection before it is closed anyway.
const LINGER_MAX: usize = 1 << 20;

/// iovecs per `writev` operation; longer outputs (many HTTP/2 frames) go
/// out in several.
const IOVECS: usize = 256;

/// What a completion is for: the top byte of its `user_data`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Kind {
    /// A listener's multishot accept (the index is the listener's).
    Accept = 1,
    /// A connection's multishot receive.
    Recv,
    /// A connection's `writev`.
    Send,
    /// A splice from the pack file into the connection's pipe.
    SpliceIn,
    /// A splice from the pipe into the socket.
    SpliceOut,
    /// The shutdown waker's poll.
    Wake,
    /// Cancels, closes and shutdowns: nothing waits for their result.
    Ignore,
    /// A UDP socket's readiness poll (the index is the socket's).
    Datagrams,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Accept,
            2 => Kind::Recv,
            3 => Kind::Send,
            4 => Kind::SpliceIn,
            5 => Kind::SpliceOut,
            6 => Kind::Wake,
            7 => Kind::Ignore,
            8 => Kind::Datagrams,
            _ => return None,
        })
    }
}

/// `user_data` of an operation: its kind, the generation of the slot it
/// belongs to (so that a late completion never reaches the slot's next
/// connection) and the slot index.
fn tag(kind: Kind, generation: u32, idx: usize) -> u64 {
    (kind as u64) << 56 | u64::from(generation & 0xff_ffff) << 32 | idx as u64
}

fn untag(data: u64) -> (Option<Kind>, u32, usize) {
    (
        Kind::from_byte((data >> 56) as u8),
        (data >> 32) as u32 & 0xff_ffff,
        (data & 0xffff_ffff) as usize,
    )
}

/// Output the kernel is sending for one connection, owned here until the
/// operation's completion arrives (even if the connection closed).
struct Outgoing {
    /// Keeps the mapping and file the segments point into alive.
    backing: Option<Arc<dyn Backing>>,
    /// The header bytes `Own` segments index.
    bytes: Vec<u8>,
    /// What to send, in order.
    segs: Vec<Seg>,
    /// First segment not fully sent.
    next: usize,
    /// The iovecs of the `writev` in flight, read by the kernel.
    iov: Vec<sys::Iovec>,
    /// The pipe of a splice in progress, and how many bytes it holds.
    pipe: Option<Pipe>,
    /// Bytes spliced into `pipe` and not yet out of it.
    in_pipe: usize,
    /// `user_data` of the operation in flight, to cancel it.
    op: u64,
    /// A best-effort goodbye: one non-blocking attempt, never cancelled.
    nowait: bool,
}

// SAFETY: the iovecs point into this value's own buffers and the pack
// mapping it keeps alive; it moves between threads only inside its loop.
unsafe impl std::marker::Send for Outgoing {}

impl Outgoing {
    fn new() -> Box<Outgoing> {
        Box::new(Outgoing {
            backing: None,
            bytes: Vec::new(),
            segs: Vec::new(),
            next: 0,
            iov: vec![sys::iovec(&[]); IOVECS],
            pipe: None,
            in_pipe: 0,
            op: 0,
            nowait: false,
        })
    }
}

/// One connection slot.
struct Slot<S> {
    /// The socket; -1 when the slot is free or its connection closed.
    fd: RawFd,
    /// Bumped whenever the slot is reused: completions carry it.
    generation: u32,
    /// Deadlines, closing intent and the protocol stack.
    state: ConnState<S>,
    /// A multishot receive is armed (its last completion is still to come).
    recv: bool,
    /// The receive ended for lack of buffers: arm it again after this
    /// turn has handed buffers back.
    starved: bool,
    /// Reading stopped on purpose: too much input is held.
    paused: bool,
    /// Output the kernel is sending; `Some` while an operation of it is in
    /// flight, or while it waits in the ready queue for its next one.
    send: Option<Box<Outgoing>>,
    /// In the ready queue: its next operation (or, with no `send`, the
    /// stack's `more`) waits for a turn's budget.
    queued: bool,
    /// Input that arrived while the stack could not take it (a response
    /// being sent, more output to produce); empty, unallocated, otherwise.
    held: Vec<u8>,
    /// The peer shut down its side: close once what it sent is answered.
    peer_done: bool,
    /// Bytes read while lingering.
    discarded: usize,
    /// Closed: the slot is freed, and `closing_fd` closed, once the
    /// receive and the send in flight have completed.
    closing: bool,
    /// The socket of a closing connection. It is closed only when no
    /// operation on it is left: io_uring resolves a descriptor number when
    /// an operation runs, which for one run by a kernel worker can be after
    /// a close, when the number may belong to the next connection.
    closing_fd: RawFd,
}

impl<S> Slot<S> {
    fn free() -> Slot<S> {
        Slot {
            fd: -1,
            generation: 0,
            state: ConnState::closed(),
            recv: false,
            starved: false,
            paused: false,
            send: None,
            queued: false,
            held: Vec::new(),
            peer_done: false,
            discarded: 0,
            closing: false,
            closing_fd: -1,
        }
    }

    /// The stack cannot take input now.
    fn busy(&self) -> bool {
        self.send.is_some() || self.state.more || !self.held.is_empty()
    }
}

/// A listener and whether its multishot accept is armed.
struct Listener {
    /// The socket.
    socket: TcpListener,
    /// The stack tag its connections are opened with.
    tag: u32,
    /// Its multishot accept is in flight.
    armed: bool,
}

/// One thread's io_uring loop and everything it owns.
pub struct UringWorker<S: Stack> {
    /// The ring; declared first so that it is dropped (and the kernel
    /// done with every buffer below) before them.
    ring: IoUring,
    /// The receive buffers.
    buffers: Buffers,
    /// This thread's listeners; dropped at shutdown.
    listeners: Vec<Listener>,
    /// Woken by the control thread at shutdown.
    waker: Arc<Waker>,
    /// This thread's UDP sockets (QUIC): readiness from a multishot poll
    /// on the ring, datagrams by `recvmmsg` and `sendmmsg` (the ring has
    /// no batched datagram operation).
    udp: DatagramSockets,
    /// Sockets a turn left datagrams unread on: read again next turn (the
    /// poll reports new arrivals only).
    udp_unread: Vec<bool>,
    /// Connection slots, indexed by the low bits of `user_data`.
    conns: Vec<Slot<S::Session>>,
    /// Free slot indices.
    free: Vec<usize>,
    /// Open connections of this thread.
    open: usize,
    /// The output being assembled; its vectors are swapped into an `Outgoing`.
    out: Output,
    /// Sends not in use, kept with their capacity; boxed as in the slots,
    /// so that moving one between a slot and here never allocates.
    #[allow(clippy::vec_box)]
    spare_sends: Vec<Box<Outgoing>>,
    /// Pipes not in use (`PIPES` made at start).
    spare_pipes: Vec<Pipe>,
    /// Completions of the current turn, copied out of the ring.
    completions: Vec<(u64, i32, u32)>,
    /// Slots whose receive starved this turn.
    starved: Vec<usize>,
    /// Connections whose next send (or `more`) waits for a turn's budget,
    /// in the order they began to wait (a closed one's entry is skipped:
    /// its `queued` is cleared).
    ready: VecDeque<usize>,
    /// What this turn's operations may still send in all.
    turn: TurnBudget,
    /// The protocols the connections speak.
    stack: S,
    /// Shutdown state from the control thread, and the connection count.
    shared: Arc<Shared>,
    /// Timeouts and limits.
    config: Arc<LoopConfig>,
    /// Where connections and timeouts are counted.
    counted: Counted,
    /// Monotonic milliseconds, read once per turn.
    now: u64,
    /// Sweeps, ticks and the accept pause.
    timers: Timers,
    /// Connections a multishot accept took beyond `--max-connections`
    /// (the kernel accepts every one queued before the pause cancels it),
    /// with their listener's tag: opened, oldest first, as room frees up,
    /// as epoll would accept them from the queue.
    waiting: VecDeque<(RawFd, u32)>,
    /// Set when shutdown began: the time by which to exit anyway.
    drain_deadline: Option<u64>,
    /// The control thread asked for the drain: it begins once this turn's
    /// completions are handled, so that a request reaped with the wake-up
    /// is answered rather than dropped with its connection.
    drain_asked: bool,
    /// An accept failure was logged and no accept succeeded since.
    accept_error_logged: bool,
}

impl<S: Stack> UringWorker<S> {
    /// Sets up the ring; fails where io_uring (or one of the operations
    /// used) is missing or forbidden.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        listeners: Vec<(TcpListener, u32)>,
        udp: Vec<UdpSocket>,
        waker: Arc<Waker>,
        shared: Arc<Shared>,
        config: Arc<LoopConfig>,
        counted: Counted,
        stack: S,
    ) -> std::io::Result<UringWorker<S>> {
        let mut buffers = Buffers::new()?;
        let ring = new_ring(&mut buffers)?;
        Ok(UringWorker {
            ring,
            buffers,
            listeners: listeners
                .into_iter()
                .map(|(socket, tag)| Listener {
                    socket,
                    tag,
                    armed: false,
                })
                .collect(),
            waker,
            udp_unread: vec![false; udp.len()],
            udp: DatagramSockets::new(udp),
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            out: Output::new(64 * 1024, config.sendfile_min),
            spare_sends: Vec::new(),
            spare_pipes: (0..PIPES).map_while(|_| Pipe::new().ok()).collect(),
            completions: Vec::with_capacity(CQ_ENTRIES as usize),
            starved: Vec::new(),
            ready: VecDeque::new(),
            turn: TurnBudget::new(),
            stack,
            shared,
            config,
            counted,
            now: monotonic_ms(),
            timers: Timers::default(),
            waiting: VecDeque::new(),
            drain_deadline: None,
            drain_asked: false,
            accept_error_logged: false,
        })
    }

    /// Runs until shutdown has drained (or its grace period ran out).
    pub fn run(mut self) -> std::io::Result<()> {
        self.ring.submitter().register_enable_rings()?;
        self.arm_accepts();
        self.arm_waker();
        for i in 0..self.udp.sockets.len() {
            self.arm_datagrams(i);
        }
        let mut wait_ms = SWEEP_MS;
        loop {
            if !self.ready.is_empty() {
                wait_ms = 0;
            }
            let timeout = types::Timespec::new().nsec((wait_ms * 1_000_000) as u32);
            self.enter(&timeout)?;
            self.now = monotonic_ms();
            self.turn.begin();
            let wake = self
                .stack
                .begin_turn(unix_seconds(), self.drain_deadline.is_some());
            // Those waiting first, then what the completions continue.
            self.serve_ready();
            self.reap();
            if wake {
                self.wake_held();
            }
            self.read_unread_datagrams();
            if std::mem::take(&mut self.drain_asked) && self.drain_deadline.is_none() {
                self.begin_drain();
            }
            self.close_listeners();
            let now = self.now;
            conn::sweep(&mut self, now);
            let cap = if self.udp_unread.contains(&true) {
                0
            } else {
                SWEEP_MS
            };
            wait_ms = self.udp.timers(&mut self.stack, cap);
            if let Some(deadline) = self.drain_deadline
                && ((self.open == 0 && self.stack.datagram_open() == 0) || self.now >= deadline)
            {
                break;
            }
        }
        self.stack.finish();
        for idx in 0..self.conns.len() {
            self.close(idx);
        }
        // Let the kernel finish with every buffer it was given before
        // they are freed (the ring's own teardown cancels asynchronously).
        let deadline = self.now + 1000;
        while (self.conns.iter().any(|s| s.closing) || !self.listeners.is_empty())
            && monotonic_ms() < deadline
        {
            self.enter(&types::Timespec::new().nsec(50_000_000))?;
            self.reap();
            self.close_listeners();
        }
        self.ring.submit()?;
        Ok(())
    }

    /// Once draining, closes the listeners as soon as no accept is in
    /// flight on any of them (their cancellations completed).
    fn close_listeners(&mut self) {
        if self.drain_deadline.is_some() && self.listeners.iter().all(|l| !l.armed) {
            self.listeners.clear();
        }
    }

    /// Publishes recycled buffers, submits what is queued and waits for a
    /// completion or `timeout`: the turn's one syscall.
    fn enter(&mut self, timeout: &types::Timespec) -> std::io::Result<()> {
        self.buffers.publish();
        let args = types::SubmitArgs::new().timespec(timeout);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    Errno::from_io_error(&e),
                    Some(Errno::TIME | Errno::INTR | Errno::BUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Handles every completion the ring holds, then re-arms the receives
    /// that ran out of buffers.
    fn reap(&mut self) {
        let mut completions = std::mem::take(&mut self.completions);
        completions.clear();
        completions.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(data, result, flags) in &completions {
            self.complete(data, result, flags);
        }
        self.completions = completions;
        for idx in std::mem::take(&mut self.starved) {
            self.conns[idx].starved = false;
            self.keep_reading(idx);
        }
    }

    /// Queues an operation; a full submission queue is flushed first.
    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: whatever the entry points to (iovecs and buffers of a
            // `Outgoing`, the buffer ring) stays alive until its completion:
            // slots keep their `Outgoing` until then, and the ring is dropped
            // before the buffers.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            if let Err(e) = self.ring.submit() {
                tracing::warn!("io_uring submit: {e}");
            }
        }
    }

    fn complete(&mut self, data: u64, result: i32, flags: u32) {
        let (kind, generation, idx) = untag(data);
        match kind {
            Some(Kind::Accept) => self.on_accept(idx, result, flags),
            Some(Kind::Wake) => self.on_wake(flags),
            Some(Kind::Datagrams) => {
                if !cqueue::more(flags) {
                    self.arm_datagrams(idx);
                }
                if let Some(unread) = self.udp_unread.get_mut(idx) {
                    *unread = true;
                }
            }
            Some(Kind::Recv) => self.on_recv(idx, generation, result, flags),
            Some(Kind::Send | Kind::SpliceIn | Kind::SpliceOut)
                if self.current(idx, generation) =>
            {
                self.on_sent(idx, kind == Some(Kind::SpliceIn), result)
            }
            _ => {}
        }
    }

    fn current(&self, idx: usize, generation: u32) -> bool {
        self.conns
            .get(idx)
            .is_some_and(|s| s.generation & 0xff_ffff == generation)
    }

    fn arm_waker(&mut self) {
        let entry = opcode::PollAdd::new(types::Fd(self.waker.raw()), POLL_IN)
            .multi(true)
            .build()
            .user_data(tag(Kind::Wake, 0, 0));
        self.push(entry);
    }

    /// Polls UDP socket `i` for datagrams, multishot.
    fn arm_datagrams(&mut self, i: usize) {
        let Some(socket) = self.udp.sockets.get(i) else {
            return;
        };
        let entry = opcode::PollAdd::new(types::Fd(socket.as_raw_fd()), POLL_IN)
            .multi(true)
            .build()
            .user_data(tag(Kind::Datagrams, 0, i));
        self.push(entry);
    }

    /// Reads the sockets whose poll fired (or a turn left unread).
    fn read_unread_datagrams(&mut self) {
        for i in 0..self.udp_unread.len() {
            if std::mem::take(&mut self.udp_unread[i]) {
                self.udp_unread[i] = self.udp.read(i, &mut self.stack);
            }
        }
    }

    fn on_wake(&mut self, flags: u32) {
        if !cqueue::more(flags) {
            self.arm_waker();
        }
        self.waker.reset();
        self.drain_asked |= self.shared.shutdown.load(Ordering::Acquire);
    }

    fn arm_accepts(&mut self) {
        if self.timers.accepts_paused() || self.drain_deadline.is_some() {
            return;
        }
        for i in 0..self.listeners.len() {
            if self.listeners[i].armed {
                continue;
            }
            self.listeners[i].armed = true;
            let fd = self.listeners[i].socket.as_raw_fd();
            // Blocking sockets: io_uring answers EAGAIN on a non-blocking
            // one where it would otherwise wait for room (a `writev`
            // into a full socket), and nothing here makes a blocking call.
            let entry = opcode::AcceptMulti::new(types::Fd(fd))
                .flags(SocketFlags::CLOEXEC.bits() as i32)
                .build()
                .user_data(tag(Kind::Accept, 0, i));
            self.push(entry);
        }
    }

    fn cancel_accepts(&mut self) {
        for i in 0..self.listeners.len() {
            if self.listeners[i].armed {
                self.cancel(tag(Kind::Accept, 0, i));
            }
        }
    }

    fn cancel(&mut self, op: u64) {
        let entry = opcode::AsyncCancel::new(op)
            .build()
            .user_data(tag(Kind::Ignore, 0, 0));
        self.push(entry);
    }

    fn pause_accepts(&mut self) {
        self.timers.pause_accepts(self.now);
        self.cancel_accepts();
    }

    fn on_accept(&mut self, listener: usize, result: i32, flags: u32) {
        if !cqueue::more(flags)
            && let Some(l) = self.listeners.get_mut(listener)
        {
            l.armed = false;
        }
        if result >= 0 {
            let fd = result;
            let Some(tag) = self.listeners.get(listener).map(|l| l.tag) else {
                // Accepted while shutting down: the listener is gone.
                // SAFETY: the descriptor is fresh and ours.
                unsafe { rustix::io::close(fd) };
                return;
            };
            if self.drain_deadline.is_some() {
                // SAFETY: as above.
                unsafe { rustix::io::close(fd) };
                return;
            }
            self.accept_error_logged = false;
            if self.at_cap() {
                self.waiting.push_back((fd, tag));
            } else {
                self.register(fd, tag);
            }
            if self.at_cap() && !self.timers.accepts_paused() {
                self.pause_accepts();
            }
        } else {
            match Errno::from_raw_os_error(-result) {
                Errno::CANCELED | Errno::INTR | Errno::CONNABORTED => {}
                Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM => {
                    if !self.accept_error_logged {
                        self.accept_error_logged = true;
                        tracing::warn!(
                            "accept: {}; pausing accepts for {ACCEPT_PAUSE_MS} ms until descriptors free up",
                            std::io::Error::from_raw_os_error(-result)
                        );
                    }
                    self.pause_accepts();
                }
                errno => tracing::warn!("accept: {}", std::io::Error::from(errno)),
            }
        }
        self.arm_accepts();
    }

    fn register(&mut self, fd: RawFd, tag: u32) {
        let peer = if self.stack.wants_peer() {
            peer_ip(rustix::net::getpeername(borrowed(fd)).ok().flatten())
        } else {
            None
        };
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(Slot::free());
                self.conns.len() - 1
            }
        };
        let session = self.stack.open(tag, peer);
        let slot = &mut self.conns[idx];
        let generation = slot.generation;
        *slot = Slot {
            fd,
            generation,
            state: ConnState::open(session, self.now, &self.config),
            ..Slot::free()
        };
        self.open += 1;
        self.shared.live.fetch_add(1, Ordering::Relaxed);
        self.counted.counters().accepted.add(1);
        self.keep_reading(idx);
    }

    /// Arms the connection's receive unless it is armed, closing, paused
    /// or its peer finished sending.
    fn keep_reading(&mut self, idx: usize) {
        let slot = &mut self.conns[idx];
        if slot.fd < 0 || slot.recv || slot.paused || slot.peer_done || slot.starved {
            return;
        }
        slot.recv = true;
        let entry = opcode::RecvMulti::new(types::Fd(slot.fd), BGID)
            .build()
            .user_data(tag(Kind::Recv, slot.generation, idx));
        self.push(entry);
    }

    /// A receive completed: its bytes (in `buffer`: id, start, length)
    /// go to the stack, or are held, or discarded; the buffer goes back to
    /// the kernel after.
    fn on_recv(&mut self, idx: usize, generation: u32, result: i32, flags: u32) {
        let buffer = cqueue::buffer_select(flags).map(|bid| {
            let (start, len) = self.buffers.locate(bid, result.max(0) as usize);
            (bid, start, len)
        });
        // A completion for a slot since reused cannot happen (slots wait
        // for their last one), but its buffer would still be ours.
        if self.current(idx, generation) {
            self.receive(idx, result, flags, buffer);
        }
        if let Some((bid, ..)) = buffer {
            self.buffers.done(bid, flags);
        }
    }

    fn receive(
        &mut self,
        idx: usize,
        result: i32,
        flags: u32,
        buffer: Option<(u16, usize, usize)>,
    ) {
        let slot = &mut self.conns[idx];
        if !cqueue::more(flags) {
            slot.recv = false;
        }
        if slot.closing {
            self.release_if_done(idx);
            return;
        }
        if result == -Errno::NOBUFS.raw_os_error() {
            slot.starved = true;
            self.starved.push(idx);
            return;
        }
        if result == -Errno::CANCELED.raw_os_error() {
            // Reading was paused on purpose (`held` is full); it resumes
            // here if the stack took the held input meanwhile.
            self.keep_reading(idx);
            return;
        }
        if result < 0 {
            self.close(idx);
            return;
        }
        let Some((bid, start, n)) = buffer.filter(|_| result > 0) else {
            // End of file.
            slot.peer_done = true;
            if slot.state.phase == Phase::Lingering || !slot.busy() {
                self.close(idx);
            }
            return;
        };
        if slot.state.phase == Phase::Lingering {
            slot.discarded += n;
            if slot.discarded > LINGER_MAX {
                self.close(idx);
            } else {
                self.keep_reading(idx);
            }
            return;
        }
        if slot.busy() {
            slot.held
                .extend_from_slice(self.buffers.slice(bid, start, n));
            if slot.held.len() > HELD_MAX && slot.recv {
                slot.paused = true;
                let op = tag(Kind::Recv, slot.generation, idx);
                self.cancel(op);
            }
            return;
        }
        let Some(session) = slot.state.session.as_mut() else {
            return;
        };
        self.out.clear_with_room(self.turn.share());
        let step = self
            .stack
            .input(session, self.buffers.slice(bid, start, n), &mut self.out);
        self.after_step(idx, step);
        self.pump(idx);
    }

    /// Feeds the stack what it can take now: more output it has, input
    /// held while it could not; closes what is finished; reads on.
    fn pump(&mut self, idx: usize) {
        loop {
            let slot = &mut self.conns[idx];
            if slot.fd < 0 || slot.send.is_some() || slot.state.phase == Phase::Lingering {
                return;
            }
            if slot.state.close_after && !slot.state.more {
                self.finish(idx);
                return;
            }
            let Some(session) = slot.state.session.as_mut() else {
                return;
            };
            if slot.state.more && self.turn.spent() {
                self.enqueue(idx);
                break;
            }
            self.out.clear_with_room(self.turn.share());
            let step = if slot.state.more {
                slot.state.more = false;
                self.stack.resume(session, &mut self.out)
            } else if !slot.held.is_empty() {
                let mut held = std::mem::take(&mut slot.held);
                if slot.paused {
                    slot.paused = false;
                }
                self.stack.input(session, &mut held, &mut self.out)
            } else if slot.peer_done {
                self.close(idx);
                return;
            } else if std::mem::take(&mut slot.state.wake_owed) {
                match self.stack.wake(session, &mut self.out) {
                    Some(step) => step,
                    None => break,
                }
            } else {
                break;
            };
            self.after_step(idx, step);
        }
        self.keep_reading(idx);
    }

    /// The stack said held responses are owed output: every open
    /// connection is woken (`Stack::wake`), at once when it can take
    /// output, else once it can (`pump`).
    fn wake_held(&mut self) {
        for idx in 0..self.conns.len() {
            let slot = &mut self.conns[idx];
            if slot.fd < 0 || slot.state.phase == Phase::Lingering {
                continue;
            }
            slot.state.wake_owed = true;
            if !slot.busy() {
                self.pump(idx);
            }
        }
    }

    /// Applies what the stack answered: deadlines, then the output.
    fn after_step(&mut self, idx: usize, step: Step) {
        self.conns[idx].state.apply(step, self.now, &self.config);
        if !self.out.is_empty() {
            self.start_send(idx, false);
        }
    }

    /// Moves the assembled output into an `Outgoing` and starts sending it.
    fn start_send(&mut self, idx: usize, nowait: bool) {
        // What waited in the ready queue (the stack's `more`, or a 408
        // replacing a send) is overtaken by this send: the queue's entry
        // must not submit it a second time.
        if std::mem::take(&mut self.conns[idx].queued)
            && let Some(old) = self.conns[idx].send.take()
        {
            self.recycle_send(old);
        }
        let mut send = self.spare_sends.pop().unwrap_or_else(Outgoing::new);
        std::mem::swap(&mut send.bytes, &mut self.out.bytes);
        std::mem::swap(&mut send.segs, &mut self.out.segs);
        self.out.clear();
        send.backing = Some(Arc::clone(self.stack.backing()));
        send.next = 0;
        send.nowait = nowait;
        let slot = &mut self.conns[idx];
        slot.state.start_sending(self.now, &self.config);
        slot.send = Some(send);
        self.submit_send(idx);
    }

    /// Queues the next operation of the connection's send: a `writev` of
    /// the segments up to the next file range, or a step of splicing it.
    fn submit_send(&mut self, idx: usize) {
        let cap = self.turn.share();
        let mut charged = 0;
        let slot = &mut self.conns[idx];
        let (fd, generation) = (slot.fd, slot.generation);
        let Some(send) = slot.send.as_mut() else {
            return;
        };
        let Some(backing) = send.backing.clone() else {
            return;
        };
        let entry = if let Seg::File { pack, off, len } = send.segs[send.next] {
            let file = match backing.file(pack) {
                Some(file) => file,
                // A pack without its descriptor (`Backing::file`): the
                // body goes out of the mapping, unless part of it is in
                // the pipe already.
                None if send.in_pipe == 0 => {
                    send.segs[send.next] = Seg::Mapped {
                        pack,
                        off: off as usize,
                        len: len as usize,
                    };
                    return self.submit_send(idx);
                }
                None => return self.fail_send(idx),
            };
            if send.pipe.is_none() {
                match self.spare_pipes.pop() {
                    Some(pipe) => send.pipe = Some(pipe),
                    None => {
                        // Every pipe is busy: the body goes out of the
                        // mapping instead, as smaller ones do.
                        send.segs[send.next] = Seg::Mapped {
                            pack,
                            off: off as usize,
                            len: len as usize,
                        };
                        return self.submit_send(idx);
                    }
                }
            }
            let pipe = send.pipe.as_ref().expect("pipe set above");
            if send.in_pipe > 0 {
                charged = send.in_pipe;
                send.op = tag(Kind::SpliceOut, generation, idx);
                opcode::Splice::new(
                    types::Fd(pipe.read.as_raw_fd()),
                    -1,
                    types::Fd(fd),
                    -1,
                    send.in_pipe as u32,
                )
                .build()
            } else {
                send.op = tag(Kind::SpliceIn, generation, idx);
                opcode::Splice::new(
                    types::Fd(file),
                    off as i64,
                    types::Fd(pipe.write.as_raw_fd()),
                    -1,
                    len.min(pipe.size.min(cap) as u64) as u32,
                )
                .build()
            }
        } else {
            let Some((count, total)) = gather(
                &send.bytes,
                &*backing,
                &send.segs[send.next..],
                &mut send.iov,
                cap,
                sys::iovec,
            ) else {
                return self.fail_send(idx);
            };
            charged = total;
            send.op = tag(Kind::Send, generation, idx);
            let rw_flags = if send.nowait {
                ReadWriteFlags::NOWAIT.bits() as i32
            } else {
                0
            };
            opcode::Writev::new(types::Fd(fd), send.iov.as_ptr(), count as u32)
                .rw_flags(rw_flags)
                .build()
        };
        let entry = entry.user_data(send.op);
        self.turn.charge(charged);
        self.push(entry);
    }

    /// The next operation of a send under way: at once while the turn's
    /// budget lasts, else in a later turn, from the ready queue.
    fn continue_send(&mut self, idx: usize) {
        if !self.turn.spent() {
            self.submit_send(idx);
        } else {
            self.enqueue(idx);
        }
    }

    /// Puts a connection at the back of the ready queue.
    fn enqueue(&mut self, idx: usize) {
        let slot = &mut self.conns[idx];
        if !slot.queued {
            slot.queued = true;
            self.ready.push_back(idx);
        }
    }

    /// Serves the ready queue in order while the turn's budget lasts: the
    /// next operation of a send, or the stack's `more`.
    fn serve_ready(&mut self) {
        for _ in 0..self.ready.len() {
            if self.turn.spent() {
                return;
            }
            let Some(idx) = self.ready.pop_front() else {
                return;
            };
            let slot = &mut self.conns[idx];
            if slot.fd < 0 || !std::mem::take(&mut slot.queued) {
                continue;
            }
            if slot.send.is_some() {
                self.submit_send(idx);
            } else {
                self.pump(idx);
            }
        }
    }

    /// A send that cannot go on (a segment outside the pack): the
    /// connection fails.
    fn fail_send(&mut self, idx: usize) {
        if let Some(send) = self.conns[idx].send.take() {
            self.recycle_send(send);
        }
        self.close(idx);
    }

    fn recycle_send(&mut self, mut send: Box<Outgoing>) {
        send.backing = None;
        send.bytes.clear();
        send.segs.clear();
        send.next = 0;
        // The count of bytes in the pipe is not to be trusted after a
        // cancelled splice: the pipe itself says.
        if let Some(pipe) = send.pipe.take()
            && pipe.empty()
        {
            self.spare_pipes.push(pipe);
        }
        send.in_pipe = 0;
        self.spare_sends.push(send);
    }

    /// A send operation completed: `into_pipe` for a splice from the pack
    /// file, else bytes that went out to the socket.
    fn on_sent(&mut self, idx: usize, into_pipe: bool, result: i32) {
        let slot = &mut self.conns[idx];
        let Some(send) = slot.send.as_mut() else {
            return;
        };
        if slot.closing || result <= 0 || send.nowait {
            let send = slot.send.take().expect("checked above");
            self.recycle_send(send);
            if self.conns[idx].closing {
                self.release_if_done(idx);
            } else {
                self.close(idx);
            }
            return;
        }
        let n = result as usize;
        if into_pipe {
            send.in_pipe += n;
            if let Seg::File { pack, off, len } = send.segs[send.next] {
                send.segs[send.next] = Seg::File {
                    pack,
                    off: off + n as u64,
                    len: len - (n as u64).min(len),
                };
            }
            return self.submit_send(idx);
        }
        slot.state.progressed(self.now, &self.config);
        if send.pipe.is_some() && send.in_pipe > 0 {
            send.in_pipe -= n.min(send.in_pipe);
            if send.in_pipe > 0 {
                return self.continue_send(idx);
            }
            if matches!(send.segs[send.next], Seg::File { len: 0, .. }) {
                send.next = advance(&mut send.segs, send.next + 1, 0);
                if let Some(pipe) = send.pipe.take() {
                    self.spare_pipes.push(pipe);
                }
            }
        } else {
            send.next = advance(&mut send.segs, send.next, n);
        }
        if send.next < send.segs.len() {
            return self.continue_send(idx);
        }
        let send = slot.send.take().expect("checked above");
        self.recycle_send(send);
        let draining = self.drain_deadline.is_some();
        let slot = &mut self.conns[idx];
        if slot.state.done_after_send(draining) {
            self.finish(idx);
            return;
        }
        slot.state.sent(self.now, &self.config);
        self.pump(idx);
    }

    /// Closes a connection whose last output was sent: at once when the
    /// stack said the peer sends nothing more, else after lingering.
    fn finish(&mut self, idx: usize) {
        let state = &self.conns[idx].state;
        if state.close_after && !state.linger {
            self.close(idx);
        } else {
            self.start_linger(idx);
        }
    }

    /// Shuts our side down and reads until the peer closes, so that unread
    /// request bytes do not turn our last response into a reset.
    fn start_linger(&mut self, idx: usize) {
        let slot = &mut self.conns[idx];
        if slot.peer_done {
            self.close(idx);
            return;
        }
        slot.state.start_lingering(self.now);
        slot.held = Vec::new();
        slot.paused = false;
        // A syscall, not an operation: a shutdown operation runs on a
        // kernel worker, and would resolve the descriptor there, later.
        // Failure means the connection is already gone.
        let _ = rustix::net::shutdown(borrowed(slot.fd), Shutdown::Write);
        self.keep_reading(idx);
    }

    /// Closes the connection: cancels its receive (and its send, unless a
    /// best-effort goodbye); the socket is closed through the ring, and the
    /// slot freed, once their completions are in.
    fn close(&mut self, idx: usize) {
        let slot = &mut self.conns[idx];
        if slot.fd < 0 {
            return;
        }
        // A send waiting in the ready queue has no operation in flight to
        // cancel: it is let go here.
        if std::mem::take(&mut slot.queued)
            && let Some(send) = slot.send.take()
        {
            self.recycle_send(send);
        }
        let slot = &mut self.conns[idx];
        let fd = slot.fd;
        let recv = slot.recv.then(|| tag(Kind::Recv, slot.generation, idx));
        // A goodbye is never cancelled: its one non-blocking attempt runs
        // when submitted, before the close queued after it.
        let send = slot.send.as_ref().filter(|s| !s.nowait).map(|s| s.op);
        slot.fd = -1;
        slot.closing = true;
        slot.closing_fd = fd;
        slot.state = ConnState::closed();
        slot.held = Vec::new();
        for op in [recv, send].into_iter().flatten() {
            self.cancel(op);
        }
        self.open -= 1;
        self.shared.live.fetch_sub(1, Ordering::Relaxed);
        self.counted.counters().closed.add(1);
        self.release_if_done(idx);
    }

    /// Closes the socket of a closed connection and frees its slot once
    /// no operation of it is in flight.
    fn release_if_done(&mut self, idx: usize) {
        let slot = &mut self.conns[idx];
        if !slot.closing || slot.recv || slot.send.is_some() {
            return;
        }
        let fd = slot.closing_fd;
        slot.closing = false;
        slot.closing_fd = -1;
        slot.starved = false;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(idx);
        let close = opcode::Close::new(types::Fd(fd))
            .build()
            .user_data(tag(Kind::Ignore, 0, 0));
        self.push(close);
    }

    /// Closes listeners and idle connections; the rest finish their
    /// responses and close.
    fn begin_drain(&mut self) {
        self.drain_deadline = Some(self.now + SHUTDOWN_GRACE_MS);
        // The listeners are closed once their accepts are cancelled
        // (`close_listeners`): a multishot accept in flight holds its
        // listening socket, and a socket closed under it would go on
        // listening until the ring's teardown, which the kernel finishes
        // after the process exited, so that a server started at once on
        // the same port would find it taken.
        self.cancel_accepts();
        for idx in 0..self.conns.len() {
            let s = &self.conns[idx];
            // Bytes the socket holds that the armed receive has not
            // delivered yet are a request its client sent before it could
            // know: the connection stays, the request is answered with
            // `Connection: close` from the next turn on.
            if s.fd >= 0 && s.send.is_none() && s.state.drainable() && !unread(s.fd) {
                self.expire(idx, Expiry::Idle);
            }
        }
        // Connections accepted beyond the cap go as the kernel's queue
        // does on epoll when its listener closes.
        for (fd, _) in std::mem::take(&mut self.waiting) {
            let close =
                opcode::Close::new(types::Fd(fd))
                    .build()
                    .user_data(tag(Kind::Ignore, 0, 0));
            self.push(close);
        }
    }
}

impl<S: Stack> Swept for UringWorker<S> {
    type Session = S::Session;

    fn timers(&mut self) -> &mut Timers {
        &mut self.timers
    }

    fn slots(&self) -> usize {
        self.conns.len()
    }

    fn state(&self, idx: usize) -> Option<&ConnState<S::Session>> {
        let slot = &self.conns[idx];
        (slot.fd >= 0).then_some(&slot.state)
    }

    fn count(&mut self, timeout: Timeout) {
        self.counted.counters().timeout(timeout);
    }

    /// `Stalled`: the stack's last words (408) are sent, then lingering.
    /// `Idle`: its goodbye gets one best-effort, non-blocking write before
    /// the close.
    fn expire(&mut self, idx: usize, expiry: Expiry) {
        self.out.clear();
        let slot = &mut self.conns[idx];
        if let Some(session) = slot.state.session.as_mut() {
            self.stack.expire(session, expiry, &mut self.out);
        }
        if self.out.is_empty() {
            self.close(idx);
            return;
        }
        if expiry == Expiry::Stalled {
            let state = &mut self.conns[idx].state;
            state.close_after = true;
            state.linger = true;
            state.more = false;
            self.start_send(idx, false);
            return;
        }
        if self.conns[idx].send.is_none() {
            self.start_send(idx, true);
        }
        self.close(idx);
    }

    fn at_cap(&self) -> bool {
        self.shared.live.load(Ordering::Relaxed) >= self.config.max_connections
    }

    /// Opens the connections accepted beyond the cap while there is room;
    /// accepts again only once none waits.
    fn resume_accepts(&mut self, now: u64) {
        while !self.at_cap()
            && let Some((fd, tag)) = self.waiting.pop_front()
        {
            self.register(fd, tag);
        }
        if self.waiting.is_empty() && !self.at_cap() {
            self.arm_accepts();
        } else {
            self.timers.pause_accepts(now);
        }
    }

    fn tick(&mut self) {
        self.stack.tick();
    }
}

/// Whether the socket holds bytes not read yet (FIONREAD; the filter
/// allows this `ioctl`).
fn unread(fd: RawFd) -> bool {
    rustix::io::ioctl_fionread(borrowed(fd)).is_ok_and(|queued| queued > 0)
}

/// `fd` borrowed for one call.
fn borrowed(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: callers pass a socket the loop holds open (a slot's, until
    // it is released) for the whole call; the borrow is not kept.
    unsafe { BorrowedFd::borrow_raw(fd) }
}
