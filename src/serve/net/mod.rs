//! The connection layer: one event loop per thread, each with its own
//! `SO_REUSEPORT` listeners and non-blocking sockets, on the back end
//! chosen at start (`--io`): io_uring (`uring`) or edge-triggered epoll
//! (`worker`, `poller`).
//!
//! The loop knows sockets, deadlines and bytes, nothing of what they mean:
//! each connection's protocol stack (TLS session, HTTP/1, …) sits behind
//! the [`Stack`] trait, which takes the bytes read and hands back output as
//! segments ([`Output`]) that point into a [`Backing`] (the pack mapping)
//! or into the output's own buffer. This module imports no handler type.

pub mod clock;
pub mod conn;
pub mod io;
pub mod poller;
pub mod udp;
pub mod uring;
pub mod worker;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize};

use socket2::{Domain, Socket, Type};

pub use super::output::{Output, Seg};

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
    // Accepted sockets inherit TCP_NODELAY from their listener on Linux:
    // set once here, it spares every connection a setsockopt (a tenth of
    // the syscalls of a connection that makes one request over TLS).
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// How often deadlines are checked, in milliseconds.
pub const SWEEP_MS: u64 = 250;
/// How long accepting stops after EMFILE/ENFILE or at `--max-connections`.
pub const ACCEPT_PAUSE_MS: u64 = 100;
/// How long a closing connection is drained so that the peer reads our
/// last response instead of a reset.
pub const LINGER_MS: u64 = 2_000;
/// How long a shutdown waits for responses in flight.
pub const SHUTDOWN_GRACE_MS: u64 = 10_000;

/// What one connection may send in a loop turn while the turn's budget
/// lasts: a large body goes out in shares of this, round robin with the
/// other connections that have more to send (each back end's ready
/// queue), so that no download holds the loop while the socket takes
/// more. Without it, 200 clients asking for a 10 MB body at once (and
/// never reading) had one thread copy each body until the socket was
/// full, 4 to 6 MB each, about a second in which nothing else was
/// answered.
pub const TURN_SHARE: usize = 256 * 1024;
/// What a turn sends in all, shares of queued connections and responses
/// to this turn's requests alike, before the loop looks for new events
/// again.
pub const TURN_BUDGET: usize = 1024 * 1024;
/// What a connection may send in a turn whose budget is spent: a response
/// that small still goes whole in the turn its request arrived; a larger
/// one goes on from the ready queue. One TLS record's worth: the stack
/// bounds what it makes of a response by the room it is given
/// (`Output::clear_with_room`), so a burst of large requests in one turn
/// costs each this much encryption, not a whole TLS step (64 KiB; 200 of
/// them were about 12 MB sealed in one turn).
pub const LATE_SHARE: usize = 16 * 1024;

/// What a loop turn may still send: the bookkeeping both back ends share.
/// A connection served while it lasts may send a share (`TURN_SHARE`),
/// after that only a new request's `LATE_SHARE`; what is left waits for
/// the ready queue of a later turn.
pub struct TurnBudget {
    /// Bytes this turn may still send, in all.
    left: usize,
}

impl TurnBudget {
    pub fn new() -> TurnBudget {
        TurnBudget { left: TURN_BUDGET }
    }

    /// A turn begins, with the whole budget.
    pub fn begin(&mut self) {
        self.left = TURN_BUDGET;
    }

    /// What the connection about to be served may send now.
    pub fn share(&self) -> usize {
        if self.spent() { LATE_SHARE } else { TURN_SHARE }
    }

    /// `n` bytes went out (or were handed to the kernel).
    pub fn charge(&mut self, n: usize) {
        self.left = self.left.saturating_sub(n);
    }

    /// Nothing is left: connections with more to send wait for a later
    /// turn.
    pub fn spent(&self) -> bool {
        self.left == 0
    }
}

impl Default for TurnBudget {
    fn default() -> TurnBudget {
        TurnBudget::new()
    }
}

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

/// The connection layer the loops run, chosen once at start: each makes
/// its own system calls (the sandbox allows those of this one), and the
/// metrics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Readiness with epoll, then read, writev, sendfile (`worker`).
    Epoll,
    /// Completions with io_uring: socket I/O goes through the ring, whose
    /// operations seccomp does not see (the ring is restricted instead).
    Uring,
}

impl Backend {
    /// The name `--io` and the metrics give it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Epoll => "epoll",
            Backend::Uring => "uring",
        }
    }
}

/// One thread's event loop, on the back end chosen at start.
pub enum EventLoop<S: Stack> {
    Epoll(Box<worker::Worker<S>>),
    Uring(Box<uring::UringWorker<S>>),
}

impl<S: Stack> EventLoop<S> {
    /// Runs until shutdown has drained.
    pub fn run(self) -> std::io::Result<()> {
        match self {
            EventLoop::Epoll(w) => w.run(),
            EventLoop::Uring(w) => w.run(),
        }
    }
}

/// Where one event loop counts connections and timeouts: its own block of
/// the server's metrics.
pub struct Counted {
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
    /// The loop's index, which picks its block.
    pub thread: usize,
}

impl Counted {
    #[inline]
    pub fn counters(&self) -> &super::metrics::LoopCounters {
        self.metrics.of_loop(self.thread)
    }
}

/// State every thread reads and the control thread writes.
#[derive(Default)]
pub struct Shared {
    /// Set on SIGTERM/SIGINT.
    pub shutdown: AtomicBool,
    /// Open connections over all threads, for `--max-connections`.
    pub live: AtomicUsize,
}

/// What the `Mapped` and `File` segments of an [`Output`] point into: the
/// packs being served (one per site), each a mapping and its file, named
/// by the number a segment carries. A connection whose output the socket
/// has not taken yet keeps an `Arc` of it, so a reload cannot unmap bytes
/// still to be sent.
pub trait Backing: Send + Sync {
    /// The mapping of pack `pack`, which `Seg::Mapped` offsets index
    /// (empty for a number that names no pack: such segments then fail the
    /// connection).
    fn bytes(&self, pack: u32) -> &[u8];
    /// The file of pack `pack`, whose `Seg::File` ranges are sent with
    /// `sendfile` (`None` when the pack has no descriptor, kept within a
    /// budget (`serve::pack_limits`), or is not to be sent from: such
    /// segments then go out of `bytes`, which fails the connection when it
    /// does not hold them).
    fn file(&self, pack: u32) -> Option<RawFd>;
    /// Whether pack `pack` is as it was opened (`Seg::Checked`): called
    /// after everything before such a segment was read, so that a
    /// response the pack changed under never completes. Only packs
    /// without a read lease make such segments; one `fstat` each.
    fn unchanged(&self, pack: u32) -> bool;
}

/// What a connection waits for while it stays open; decides the deadline
/// that applies and whether shutdown may close it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing is owed either way: the keep-alive deadline. Shutdown
    /// closes such a connection (with the stack's goodbye).
    Idle,
    /// The peer began sending something not complete yet (a request, a
    /// handshake): the header deadline. `restart` when what arrived starts
    /// anew (the previous unit was answered), which restarts the deadline;
    /// otherwise the deadline set by the first byte keeps running.
    Input { restart: bool },
    /// Output is owed but held back by the peer, not by the socket (a
    /// flow-control window it keeps closed): the header deadline, as
    /// `Input`. Shutdown lets it finish, as it does output the socket has
    /// not taken yet.
    InFlight { restart: bool },
    /// A response is held open, written to as the stack is woken
    /// (`Stack::wake`: the live preview's event stream): no deadline (a
    /// client that stops reading meets the send deadline), nothing
    /// counted as a timeout. Shutdown closes it as an idle connection,
    /// with the stack's goodbye.
    Held,
}

/// The stack's answer to input (or to a `resume`): only the combinations
/// the loop can act on. `more` in both variants: the stack can produce
/// more output without more input (requests left over from a full batch,
/// a large body still to encrypt): the loop calls `resume` once this
/// output is sent, before reading again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The connection stays open; `wait` picks the deadline.
    Open { wait: Wait, more: bool },
    /// Close once the output (and, with `more`, the rest `resume` gives)
    /// is sent. `linger`: half-close and read what the peer still sends
    /// before closing, so that bytes of its arriving after the close
    /// cannot turn the last response into a reset (RFC 9112 §9.6). Only a
    /// peer that said it sends nothing more, with nothing of it left
    /// unread, is closed at once: that spares a connection-per-request
    /// client (one TLS handshake each) a shutdown, two reads and a wake-up.
    Close { linger: bool, more: bool },
}

impl Step {
    /// Open, waiting for the next request under the keep-alive deadline.
    pub const IDLE: Step = Step::Open {
        wait: Wait::Idle,
        more: false,
    };

    /// Whether the stack has output left to give through `resume`.
    #[inline]
    pub fn more(self) -> bool {
        match self {
            Step::Open { more, .. } | Step::Close { more, .. } => more,
        }
    }

    /// Whether the connection closes after this output.
    #[inline]
    pub fn closes(self) -> bool {
        matches!(self, Step::Close { .. })
    }

    /// What an open connection waits for (`None` once it closes).
    #[inline]
    pub fn wait(self) -> Option<Wait> {
        match self {
            Step::Open { wait, .. } => Some(wait),
            Step::Close { .. } => None,
        }
    }

    /// The same step with `more` set as given.
    #[inline]
    pub fn with_more(self, more: bool) -> Step {
        match self {
            Step::Open { wait, .. } => Step::Open { wait, more },
            Step::Close { linger, .. } => Step::Close { linger, more },
        }
    }
}

/// A connection's protocol stack, as the event loop drives it. One value
/// per thread holds everything the thread's connections share (buffers,
/// the site, the log); `Session` is one connection's state.
///
/// Per thread, the loop calls `begin_turn` once per turn before any
/// per-connection call of that turn, `tick` about once a second and
/// `finish` once at the end; `wants_peer` and `backing` may be asked at
/// any time. When `begin_turn` says held responses are owed something,
/// the loop calls `wake` on each open connection that can take output
/// now, and on the others once their output is sent.
///
/// Per connection: `open` once, then any number of `input` and `resume`,
/// where `resume` is called only after a step with `more` (once its output
/// is sent) and `input` only while no step with `more` is pending. Every
/// output is taken through `backing` before the next call. The loop stops
/// calling after a `Step::Close` without `more`, or after `expire`, which
/// comes at most once and ends the connection; a session may also just be
/// dropped (the peer closed, a write failed, the loop ended).
pub trait Stack {
    /// One connection's state; it should own no buffer while idle, except
    /// the ones it reuses for its life so that a request allocates nothing
    /// (a TLS session's output left for `resume`).
    type Session;
    /// Once per loop turn, before events: `unix_seconds` is the wall clock
    /// (for `Date`), `draining` is set once shutdown began. True when
    /// responses held open (`Wait::Held`) may be owed output this turn:
    /// the loop then wakes its connections (`wake`).
    fn begin_turn(&mut self, unix_seconds: i64, draining: bool) -> bool;
    /// Whether `open` uses the peer's address (for the access log): a
    /// back end that must ask the kernel for it separately (io_uring's
    /// multishot accept reports none) skips that syscall otherwise.
    fn wants_peer(&self) -> bool;
    /// A connection was accepted on the listener tagged `listener`.
    fn open(&mut self, listener: u32, peer: Option<IpAddr>) -> Self::Session;
    /// Bytes arrived; output to send goes to `out` (cleared by the loop).
    /// The stack may change `bytes` (TLS decrypts records in place).
    fn input(&mut self, session: &mut Self::Session, bytes: &mut [u8], out: &mut Output) -> Step;
    /// The last output was sent and the step had `more`: produce more.
    fn resume(&mut self, session: &mut Self::Session, out: &mut Output) -> Step;
    /// After a `begin_turn` that said so, with no output of the
    /// connection waiting and no `more` pending: what its held responses
    /// are owed goes to `out`. `None` when it holds none (nothing
    /// changes).
    fn wake(&mut self, session: &mut Self::Session, out: &mut Output) -> Option<Step>;
    /// The loop ends the connection (a deadline passed, or shutdown closes
    /// it idle): its last words for `expiry`, if any, go to `out`.
    /// `Expiry::Stalled`: a 408 (HTTP/1), sent, then lingering;
    /// `Expiry::Idle`: a goodbye (HTTP/2 GOAWAY, TLS close_notify) written
    /// once on a best-effort basis; `Expiry::Close`: nothing.
    fn expire(&mut self, session: &mut Self::Session, expiry: conn::Expiry, out: &mut Output);
    /// What the output of the last call points into.
    fn backing(&self) -> &std::sync::Arc<dyn Backing>;
    /// About once a second: flush buffered logs.
    fn tick(&mut self);
    /// The loop ends: flush what is buffered.
    fn finish(&mut self);

    /// Datagrams arrived on the thread's UDP socket `socket` (QUIC): what
    /// to send goes to `out`. Stacks without a datagram protocol have no
    /// UDP sockets, and are never called.
    fn datagrams(&mut self, socket: usize, received: &mut udp::Received, out: &mut udp::Transmits) {
        let _ = (socket, received, out);
    }

    /// Once per loop turn, after the events: the datagram protocol's
    /// timers due on `socket` (and, while draining, its goodbyes); the
    /// time until its next timer.
    fn datagram_turn(
        &mut self,
        socket: usize,
        out: &mut udp::Transmits,
    ) -> Option<std::time::Duration> {
        let _ = (socket, out);
        None
    }

    /// Connections of the datagram protocol still open: a drain waits for
    /// them as for TCP connections.
    fn datagram_open(&self) -> usize {
        0
    }
}

/// An eventfd that wakes one event loop (for shutdown).
pub struct Waker {
    /// The eventfd.
    fd: OwnedFd,
}

impl Waker {
    pub fn new() -> std::io::Result<Waker> {
        let flags = rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC;
        Ok(Waker {
            fd: rustix::event::eventfd(0, flags)?,
        })
    }

    pub fn wake(&self) {
        // An eventfd at its limit is already awake, so the result does not
        // matter.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Consumes the wake-up.
    pub fn reset(&self) {
        // EAGAIN (nothing to consume) is fine.
        let _ = rustix::io::read(&self.fd, &mut [0u8; 8]);
    }

    pub fn raw(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// The peer address an `accept` or `getpeername` filled in.
pub fn peer_ip(addr: Option<rustix::net::SocketAddrAny>) -> Option<IpAddr> {
    std::net::SocketAddr::try_from(addr?).ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop never sets TCP_NODELAY itself: it relies on accepted
    /// sockets inheriting it from the listener.
    #[test]
    fn accepted_sockets_inherit_nodelay() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        listener.set_nonblocking(false).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(accepted.nodelay().unwrap());
    }
}
