//! What both back ends keep per connection besides the socket, and how its
//! deadlines follow the stack's steps: the part of a connection's life that
//! does not depend on how bytes move (readiness with epoll, completions
//! with io_uring).

use super::{LoopConfig, Step, Wait};
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
}

/// What a back end does to a connection whose deadline has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The stack's last words (HTTP/1: 408), then close.
    RequestTimeout,
    /// The stack's goodbye (HTTP/2: GOAWAY; TLS: close_notify), written
    /// once, then close.
    CloseIdle,
    /// Close the socket.
    Close,
}

impl Phase {
    /// What the passing of this phase's deadline does, and the timeout it
    /// counts as: the one policy both back ends sweep with (a lingering
    /// close is no timeout: its response was sent).
    pub fn expiry(self) -> (Expiry, Option<Timeout>) {
        match self {
            Phase::Head => (Expiry::RequestTimeout, Some(Timeout::Header)),
            Phase::Idle => (Expiry::CloseIdle, Some(Timeout::Idle)),
            Phase::Sending => (Expiry::Close, Some(Timeout::Send)),
            Phase::Lingering => (Expiry::Close, None),
        }
    }
}

/// A connection's deadlines, closing intent and protocol stack.
pub struct ConnState<S> {
    /// Which deadline applies and what a timeout does.
    pub phase: Phase,
    /// Close once the output is sent.
    pub close_after: bool,
    /// With `close_after`: linger before closing (see `Step::linger`).
    pub linger: bool,
    /// The stack's last step said `Wait::Response`: a response is in
    /// flight though the socket took everything, so shutdown does not
    /// close it.
    pub in_flight: bool,
    /// Monotonic milliseconds at which `phase` times out.
    pub deadline: u64,
    /// The stack has more output to give without input: ask for it before
    /// handing it more input.
    pub more: bool,
    /// The phase to return to once the output waiting on the socket is
    /// sent.
    pub after_send: Phase,
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
        self.more = step.more;
        self.in_flight = matches!(step.wait, Wait::Response { .. });
        if step.close {
            self.close_after = true;
            self.linger = step.linger;
            return;
        }
        match step.wait {
            Wait::Request { fresh } | Wait::Response { fresh } => {
                if self.phase != Phase::Head || fresh {
                    self.phase = Phase::Head;
                    self.deadline = now + config.header_timeout_ms;
                }
            }
            Wait::Idle => {
                self.phase = Phase::Idle;
                self.deadline = now + config.keepalive_timeout_ms;
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
        self.deadline = now
            + match self.after_send {
                Phase::Head => config.header_timeout_ms,
                _ => config.keepalive_timeout_ms,
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
        self.deadline = now + super::LINGER_MS;
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
