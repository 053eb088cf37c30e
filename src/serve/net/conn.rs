//! What both back ends keep per connection besides the socket, how its
//! deadlines follow the stack's steps, and the sweep that acts on passed
//! deadlines: the part of a connection's life that does not depend on how
//! bytes move (readiness with epoll, completions with io_uring).
//!
//! A step (`Step`) is either `Open` with what the connection waits for
//! (`Wait`: idle, input begun, output held by the peer) or `Close` with
//! whether to linger; both may say the stack has `more` output. The
//! deadline follows from the wait and from whether output waits on the
//! socket (`Phase`); when it passes, `Phase::expiry` says what the back end
//! does (`Expiry`), which the stack is told through `Stack::expire`.
//!
//! `sweep` walks a loop's connections through its `Swept` impl (generic,
//! no dynamic call) and applies `Phase::expiry` to those due, then ends an
//! accept pause that is over: written once for both back ends.
//!
//! Nothing here reads a clock: every call takes `now` (monotonic
//! milliseconds), so the unit tests below drive connections through steps
//! and deadlines with a fake clock.

use super::{ACCEPT_PAUSE_MS, LINGER_MS, LoopConfig, SWEEP_MS, Step, Wait};
use crate::serve::metrics::Timeout;

/// Where a connection is in its life; decides which deadline applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Between requests: the keep-alive deadline.
    Idle,
    /// Part of a request has arrived: the header deadline, set when the
    /// first byte arrived and not moved by later bytes.
    Head,
    /// A response is waiting for the socket: the send deadline.
    Sending,
    /// Our side is shut down; reading until the peer closes.
    Lingering,
    /// A response is held open (`Wait::Held`): no deadline.
    Held,
}

/// What a back end does to a connection whose deadline has passed (or,
/// `Idle`, that shutdown closes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Input stalled half-way: the stack's last words (HTTP/1: 408), sent,
    /// then lingering.
    Stalled,
    /// Nothing pending: the stack's goodbye (HTTP/2: GOAWAY; TLS:
    /// close_notify), written once on a best-effort basis, then close.
    Idle,
    /// Close the socket, no words.
    Close,
}

impl Phase {
    /// What the passing of this phase's deadline does, and the timeout it
    /// counts as: the one policy both back ends sweep with (a lingering
    /// close is no timeout: its response was sent).
    pub fn expiry(self) -> (Expiry, Option<Timeout>) {
        match self {
            Phase::Head => (Expiry::Stalled, Some(Timeout::Header)),
            Phase::Idle => (Expiry::Idle, Some(Timeout::Idle)),
            Phase::Sending => (Expiry::Close, Some(Timeout::Send)),
            Phase::Lingering => (Expiry::Close, None),
            // Its deadline never passes; shutdown closes it as idle.
            Phase::Held => (Expiry::Idle, None),
        }
    }
}

/// A connection's deadlines, closing intent and protocol stack.
pub struct ConnState<S> {
    /// Which deadline applies and what a timeout does.
    pub phase: Phase,
    /// Close once the output is sent.
    pub close_after: bool,
    /// With `close_after`: linger before closing (see `Step::Close`).
    pub linger: bool,
    /// The stack's last step said `Wait::InFlight`: output is owed though
    /// the socket took everything, so shutdown does not close it.
    pub in_flight: bool,
    /// Monotonic milliseconds at which `phase` times out.
    pub deadline: u64,
    /// The stack has more output to give without input: ask for it before
    /// handing it more input.
    pub more: bool,
    /// The phase to return to once the output waiting on the socket is
    /// sent.
    pub after_send: Phase,
    /// The stack asked for a `wake` while the connection could not take
    /// output: it gets one once its output is sent.
    pub wake_owed: bool,
    /// The connection's protocol stack; `None` once it is closing.
    pub session: Option<S>,
}

impl<S> ConnState<S> {
    /// A free slot's state: no stack, no deadline.
    pub fn closed() -> ConnState<S> {
        ConnState {
            phase: Phase::Idle,
            close_after: false,
            linger: true,
            in_flight: false,
            deadline: u64::MAX,
            more: false,
            after_send: Phase::Idle,
            wake_owed: false,
            session: None,
        }
    }

    /// A new connection. It gets the shorter of the two deadlines for its
    /// first request: a client that connects and says nothing is not owed
    /// a whole keep-alive period.
    pub fn open(session: S, now: u64, config: &LoopConfig) -> ConnState<S> {
        ConnState {
            deadline: now + config.header_timeout_ms.min(config.keepalive_timeout_ms),
            session: Some(session),
            ..ConnState::closed()
        }
    }

    /// Applies what the stack answered to the deadlines, before its output
    /// is sent.
    pub fn apply(&mut self, step: Step, now: u64, config: &LoopConfig) {
        match step {
            Step::Close { linger, more } => {
                self.more = more;
                self.in_flight = false;
                self.close_after = true;
                self.linger = linger;
            }
            Step::Open { wait, more } => {
                self.more = more;
                self.in_flight = matches!(wait, Wait::InFlight { .. });
                match wait {
                    Wait::Input { restart } | Wait::InFlight { restart } => {
                        if self.phase != Phase::Head || restart {
                            self.phase = Phase::Head;
                            self.deadline = now + config.header_timeout_ms;
                        }
                    }
                    Wait::Idle => {
                        self.phase = Phase::Idle;
                        self.deadline = now + config.keepalive_timeout_ms;
                    }
                    Wait::Held => {
                        self.phase = Phase::Held;
                        self.deadline = u64::MAX;
                    }
                }
            }
        }
    }

    /// Output waits on the socket: the send deadline applies until it is
    /// sent.
    pub fn start_sending(&mut self, now: u64, config: &LoopConfig) {
        if self.phase != Phase::Sending {
            self.after_send = self.phase;
            self.phase = Phase::Sending;
        }
        self.deadline = now + config.send_timeout_ms;
    }

    /// The socket took some output but not all: the client reads, so the
    /// send deadline starts again.
    pub fn progressed(&mut self, now: u64, config: &LoopConfig) {
        self.deadline = now + config.send_timeout_ms;
    }

    /// The output waiting on the socket is sent: back to the wait the stack
    /// asked for before, with its deadline counted from now.
    pub fn sent(&mut self, now: u64, config: &LoopConfig) {
        if self.phase != Phase::Sending {
            return;
        }
        self.phase = self.after_send;
        self.deadline = match self.after_send {
            Phase::Head => now + config.header_timeout_ms,
            Phase::Held => u64::MAX,
            _ => now + config.keepalive_timeout_ms,
        };
    }

    /// The connection is done once its output is sent: either it said so
    /// or shutdown drains it and no response is in flight.
    pub fn done_after_send(&self, draining: bool) -> bool {
        !self.more && (self.close_after || (draining && !self.in_flight))
    }

    /// Our side is shut down: read what the peer still sends, for a while.
    pub fn start_lingering(&mut self, now: u64) {
        self.phase = Phase::Lingering;
        self.deadline = now + LINGER_MS;
        self.more = false;
        self.session = None;
    }

    /// Shutdown may close this connection now: nothing of a response is
    /// left to produce or waiting on the peer. The caller checks that no
    /// output waits on the socket.
    pub fn drainable(&self) -> bool {
        !self.more && !self.in_flight && self.phase != Phase::Lingering
    }
}

/// The timers of one loop besides its connections' deadlines: when it last
/// swept and ticked, and until when accepting is paused.
#[derive(Debug, Default)]
pub struct Timers {
    /// When deadlines were last checked.
    last_sweep: u64,
    /// When the stack was last ticked (log flushes).
    last_tick: u64,
    /// Accepting is paused until then (0: not paused).
    accept_paused_until: u64,
}

impl Timers {
    /// Stops accepting for `ACCEPT_PAUSE_MS` (EMFILE, or at the cap).
    pub fn pause_accepts(&mut self, now: u64) {
        self.accept_paused_until = now + ACCEPT_PAUSE_MS;
    }

    /// Whether accepting is paused.
    #[inline]
    pub fn accepts_paused(&self) -> bool {
        self.accept_paused_until != 0
    }
}

/// What a sweep needs of a back end: its connections, and the actions
/// that depend on how it moves bytes. Implemented by each back end's loop
/// (statically dispatched: the sweep is generic over it).
pub trait Swept {
    type Session;
    /// The loop's timers.
    fn timers(&mut self) -> &mut Timers;
    /// How many connection slots there are (open or not).
    fn slots(&self) -> usize;
    /// The state of the open connection in slot `idx`; `None` for a free
    /// (or closing) slot.
    fn state(&self, idx: usize) -> Option<&ConnState<Self::Session>>;
    /// A deadline of this kind passed: count it.
    fn count(&mut self, timeout: Timeout);
    /// The deadline of the connection in slot `idx` passed: do `expiry`.
    fn expire(&mut self, idx: usize, expiry: Expiry);
    /// Open connections are at `--max-connections` (all threads).
    fn at_cap(&self) -> bool;
    /// An accept pause ended below the cap: accept what waits, and accept
    /// again; the back end pauses again if that reaches the cap.
    fn resume_accepts(&mut self, now: u64);
    /// About once a second: the stack's tick (log flushes).
    fn tick(&mut self);
}

/// Times connections out, ends an accept pause that is over, ticks the
/// stack: what each loop does every `SWEEP_MS`, the same on both back
/// ends. Returns at once when the last sweep is more recent.
pub fn sweep<L: Swept>(l: &mut L, now: u64) {
    if now < l.timers().last_sweep + SWEEP_MS {
        return;
    }
    l.timers().last_sweep = now;
    for idx in 0..l.slots() {
        let Some(state) = l.state(idx) else {
            continue;
        };
        if state.deadline > now {
            continue;
        }
        let (expiry, timeout) = state.phase.expiry();
        if let Some(kind) = timeout {
            l.count(kind);
        }
        l.expire(idx, expiry);
    }
    let timers = l.timers();
    if timers.accepts_paused() && now >= timers.accept_paused_until {
        timers.accept_paused_until = 0;
        if l.at_cap() {
            l.timers().pause_accepts(now);
        } else {
            l.resume_accepts(now);
        }
    }
    let timers = l.timers();
    if now >= timers.last_tick + 1000 {
        timers.last_tick = now;
        l.tick();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: u64 = 1_000;
    const KEEPALIVE: u64 = 5_000;
    const SEND: u64 = 3_000;
    /// Where the fake clock starts: past the first sweep.
    const T0: u64 = 100_000;

    fn config() -> LoopConfig {
        LoopConfig {
            header_timeout_ms: HEADER,
            keepalive_timeout_ms: KEEPALIVE,
            send_timeout_ms: SEND,
            max_connections: 10,
            sendfile_min: u64::MAX,
        }
    }

    fn open(wait: Wait) -> Step {
        Step::Open { wait, more: false }
    }

    const INPUT: Wait = Wait::Input { restart: false };

    /// A back end without sockets: a sweep's actions are recorded, and an
    /// expired connection's slot is freed as a close would.
    #[derive(Default)]
    struct Fake {
        timers: Timers,
        conns: Vec<Option<ConnState<()>>>,
        expired: Vec<(usize, Expiry)>,
        counted: Vec<Timeout>,
        at_cap: bool,
        resumed: Vec<u64>,
        ticks: usize,
    }

    impl Swept for Fake {
        type Session = ();
        fn timers(&mut self) -> &mut Timers {
            &mut self.timers
        }
        fn slots(&self) -> usize {
            self.conns.len()
        }
        fn state(&self, idx: usize) -> Option<&ConnState<()>> {
            self.conns[idx].as_ref()
        }
        fn count(&mut self, timeout: Timeout) {
            self.counted.push(timeout);
        }
        fn expire(&mut self, idx: usize, expiry: Expiry) {
            self.expired.push((idx, expiry));
            self.conns[idx] = None;
        }
        fn at_cap(&self) -> bool {
            self.at_cap
        }
        fn resume_accepts(&mut self, now: u64) {
            self.resumed.push(now);
        }
        fn tick(&mut self) {
            self.ticks += 1;
        }
    }

    impl Fake {
        fn with(state: ConnState<()>) -> Fake {
            Fake {
                conns: vec![Some(state)],
                ..Fake::default()
            }
        }

        /// Sweeps at `now`, and says what expired then.
        fn sweep_at(&mut self, now: u64) -> Vec<(usize, Expiry)> {
            self.timers.last_sweep = 0;
            sweep(self, now);
            std::mem::take(&mut self.expired)
        }
    }

    #[test]
    fn a_silent_new_connection_gets_the_shorter_deadline() {
        let state = ConnState::open((), T0, &config());
        assert_eq!((state.phase, state.deadline), (Phase::Idle, T0 + HEADER));
        let mut fake = Fake::with(state);
        assert_eq!(fake.sweep_at(T0 + HEADER - 1), []);
        assert_eq!(fake.sweep_at(T0 + HEADER), [(0, Expiry::Idle)]);
        assert_eq!(fake.counted, [Timeout::Idle]);
    }

    #[test]
    fn later_bytes_do_not_move_the_header_deadline() {
        let config = config();
        let mut state = ConnState::open((), T0, &config);
        state.apply(open(INPUT), T0 + 100, &config);
        assert_eq!(
            (state.phase, state.deadline),
            (Phase::Head, T0 + 100 + HEADER)
        );
        state.apply(open(INPUT), T0 + 900, &config);
        state.apply(open(Wait::InFlight { restart: false }), T0 + 950, &config);
        assert_eq!(state.deadline, T0 + 100 + HEADER);
        let mut fake = Fake::with(state);
        assert_eq!(fake.sweep_at(T0 + 100 + HEADER), [(0, Expiry::Stalled)]);
        assert_eq!(fake.counted, [Timeout::Header]);
    }

    #[test]
    fn a_new_request_restarts_the_header_deadline() {
        let config = config();
        for wait in [
            Wait::Input { restart: true },
            Wait::InFlight { restart: true },
        ] {
            let mut state = ConnState::open((), T0, &config);
            state.apply(open(INPUT), T0, &config);
            state.apply(open(wait), T0 + 900, &config);
            assert_eq!(
                (state.phase, state.deadline),
                (Phase::Head, T0 + 900 + HEADER)
            );
        }
    }

    #[test]
    fn keep_alive_runs_from_the_last_answer() {
        let config = config();
        let mut state = ConnState::open((), T0, &config);
        state.apply(open(INPUT), T0 + 10, &config);
        state.apply(open(Wait::Idle), T0 + 500, &config);
        assert_eq!(
            (state.phase, state.deadline),
            (Phase::Idle, T0 + 500 + KEEPALIVE)
        );
        assert!(state.drainable());
        let mut fake = Fake::with(state);
        assert_eq!(fake.sweep_at(T0 + 500 + KEEPALIVE - 1), []);
        assert_eq!(fake.sweep_at(T0 + 500 + KEEPALIVE), [(0, Expiry::Idle)]);
        assert_eq!(fake.counted, [Timeout::Idle]);
    }

    #[test]
    fn output_the_socket_does_not_take_has_the_send_deadline() {
        let config = config();
        for (wait, phase, after) in [
            (Wait::Idle, Phase::Idle, KEEPALIVE),
            (INPUT, Phase::Head, HEADER),
        ] {
            let mut state = ConnState::open((), T0, &config);
            state.apply(open(wait), T0, &config);
            state.start_sending(T0 + 100, &config);
            assert_eq!(
                (state.phase, state.deadline),
                (Phase::Sending, T0 + 100 + SEND)
            );
            // More output queued behind it keeps the phase to return to.
            state.start_sending(T0 + 200, &config);
            state.progressed(T0 + 2_000, &config);
            assert_eq!(state.deadline, T0 + 2_000 + SEND);
            state.sent(T0 + 4_000, &config);
            assert_eq!((state.phase, state.deadline), (phase, T0 + 4_000 + after));
        }
        let mut state = ConnState::open((), T0, &config);
        state.start_sending(T0, &config);
        let mut fake = Fake::with(state);
        assert_eq!(fake.sweep_at(T0 + SEND), [(0, Expiry::Close)]);
        assert_eq!(fake.counted, [Timeout::Send]);
    }

    #[test]
    fn a_closing_step_lingers_unless_the_peer_is_done() {
        let config = config();
        for linger in [true, false] {
            let mut state = ConnState::open((), T0, &config);
            state.apply(Step::Close { linger, more: true }, T0, &config);
            assert!(state.close_after && state.more);
            assert_eq!(state.linger, linger);
            // Output left to produce comes first.
            assert!(!state.done_after_send(false));
            state.apply(
                Step::Close {
                    linger,
                    more: false,
                },
                T0,
                &config,
            );
            assert!(state.done_after_send(false));
        }
        let mut state = ConnState::open((), T0, &config);
        state.start_lingering(T0 + 10);
        assert_eq!(
            (state.phase, state.deadline),
            (Phase::Lingering, T0 + 10 + LINGER_MS)
        );
        assert!(state.session.is_none() && !state.drainable());
        let mut fake = Fake::with(state);
        assert_eq!(fake.sweep_at(T0 + 10 + LINGER_MS), [(0, Expiry::Close)]);
        assert_eq!(fake.counted, [], "a lingering close is no timeout");
    }

    #[test]
    fn a_held_response_has_no_deadline_and_drains_as_idle() {
        let config = config();
        let mut state = ConnState::open((), T0, &config);
        state.apply(open(INPUT), T0, &config);
        state.apply(open(Wait::Held), T0 + 10, &config);
        assert_eq!((state.phase, state.deadline), (Phase::Held, u64::MAX));
        assert!(state.drainable() && state.done_after_send(true));
        // An event the socket did not take: the send deadline, then back.
        state.start_sending(T0 + 20, &config);
        assert_eq!(state.deadline, T0 + 20 + SEND);
        state.sent(T0 + 30, &config);
        assert_eq!((state.phase, state.deadline), (Phase::Held, u64::MAX));
        let mut fake = Fake::with(state);
        assert_eq!(fake.sweep_at(T0 + 1_000 * HEADER), []);
        assert_eq!(fake.counted, [], "never a timeout");
    }

    #[test]
    fn shutdown_lets_output_in_flight_finish() {
        let config = config();
        let mut state = ConnState::open((), T0, &config);
        state.apply(open(Wait::InFlight { restart: true }), T0, &config);
        assert!(!state.drainable() && !state.done_after_send(true));
        state.apply(open(INPUT), T0, &config);
        assert!(state.drainable() && state.done_after_send(true));
        assert!(!state.done_after_send(false));
        state.apply(
            Step::Open {
                wait: Wait::Idle,
                more: true,
            },
            T0,
            &config,
        );
        assert!(!state.drainable() && !state.done_after_send(true));
    }

    #[test]
    fn the_sweep_expires_only_what_is_due_and_runs_a_few_times_a_second() {
        let config = config();
        let mut fake = Fake::default();
        fake.conns.push(Some(ConnState::open((), T0, &config)));
        fake.conns.push(None);
        let mut late = ConnState::open((), T0, &config);
        late.apply(open(INPUT), T0 + 100, &config);
        fake.conns.push(Some(late));
        sweep(&mut fake, T0 + HEADER);
        assert_eq!(fake.expired, [(0, Expiry::Idle)]);
        // Not again before `SWEEP_MS`, though the other one is due.
        sweep(&mut fake, T0 + HEADER + SWEEP_MS - 1);
        assert_eq!(fake.expired.len(), 1);
        sweep(&mut fake, T0 + HEADER + SWEEP_MS);
        assert_eq!(fake.expired, [(0, Expiry::Idle), (2, Expiry::Stalled)]);
        assert_eq!(fake.counted, [Timeout::Idle, Timeout::Header]);
    }

    #[test]
    fn an_accept_pause_ends_only_below_the_cap() {
        let mut fake = Fake::default();
        fake.timers.pause_accepts(T0);
        assert_eq!(fake.sweep_at(T0 + ACCEPT_PAUSE_MS - 1), []);
        assert!(fake.timers.accepts_paused() && fake.resumed.is_empty());
        // Still at the cap when the pause ends: another pause, no accept.
        fake.at_cap = true;
        fake.sweep_at(T0 + ACCEPT_PAUSE_MS);
        assert!(fake.timers.accepts_paused() && fake.resumed.is_empty());
        fake.at_cap = false;
        fake.sweep_at(T0 + 2 * ACCEPT_PAUSE_MS - 1);
        assert!(fake.resumed.is_empty());
        fake.sweep_at(T0 + 2 * ACCEPT_PAUSE_MS);
        assert_eq!(fake.resumed, [T0 + 2 * ACCEPT_PAUSE_MS]);
        assert!(!fake.timers.accepts_paused());
        fake.sweep_at(T0 + 3 * ACCEPT_PAUSE_MS);
        assert_eq!(fake.resumed.len(), 1, "resumed once per pause");
    }

    #[test]
    fn the_stack_ticks_about_once_a_second() {
        let mut fake = Fake::default();
        for now in (T0..T0 + 3_000).step_by(SWEEP_MS as usize) {
            sweep(&mut fake, now);
        }
        assert_eq!(fake.ticks, 3);
    }
}
