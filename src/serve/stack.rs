//! The protocol stack of kiln's connections, as the event loop sees it
//! through [`net::Stack`]: per thread, the site being served, the TLS
//! configuration, the handler's buffers, the `Date` line and the access
//! log; per connection, the TLS session (on TLS listeners) and the
//! protocol's state. The loop knows none of this; the protocols know
//! nothing of sockets, and HTTP/1 nothing of TLS.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;

use super::access_log::{AccessLog, Format, Sink};
use super::date::DateCache;
use super::handler::live::{EventStreams, HEARTBEAT};
use super::handler::{Http01, Scratch, Sites, challenges};
use super::http1;
use super::http2;
use super::http3;
use super::metrics::{Metrics, Scheme};
use super::net::clock::monotonic_us;
use super::net::conn::Expiry;
use super::net::{self, Backing, Output, Step, Wait};
use super::quic;
use super::request_context::RequestContext;
use super::server_headers::ServerHeaders;
use super::tls::{ACME_TLS_ALPN, TlsSession};

/// The tag of cleartext listeners.
pub const CLEARTEXT: u32 = 0;
/// The tag of TLS listeners.
pub const TLS: u32 = 1;

/// What new requests are answered with: the sites, the TLS configuration
/// and the ACME HTTP-01 challenges, each replaced by reloads.
pub struct CurrentSites {
    /// Bumped after any is replaced; threads compare it once per loop
    /// turn and take the lock only when it changed.
    generation: AtomicU64,
    /// The sites, the TLS configuration (`None` without TLS listeners) and
    /// the HTTP-01 challenges (`None` without `--acme`).
    state: Mutex<State>,
}

/// What `CurrentSites` holds, each part replaced on its own.
struct State {
    sites: Arc<Sites>,
    tls: Option<Arc<ServerConfig>>,
    http01: Option<Arc<Http01>>,
}

/// One generation of what `CurrentSites` holds, as a thread takes it.
type Taken = (
    u64,
    Arc<Sites>,
    Option<Arc<ServerConfig>>,
    Option<Arc<Http01>>,
);

impl CurrentSites {
    pub fn new(sites: Arc<Sites>, tls: Option<Arc<ServerConfig>>) -> CurrentSites {
        CurrentSites {
            generation: AtomicU64::new(0),
            state: Mutex::new(State {
                sites,
                tls,
                http01: None,
            }),
        }
    }

    /// Publishes a new generation of the sites; responses in flight keep
    /// their Arc.
    pub fn publish(&self, sites: Arc<Sites>) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).sites = sites;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Counts the generations published.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The sites being served now.
    pub fn sites(&self) -> Arc<Sites> {
        Arc::clone(&self.state.lock().unwrap_or_else(|e| e.into_inner()).sites)
    }

    /// Publishes new certificates; connections already open keep theirs.
    pub fn publish_tls(&self, tls: Arc<ServerConfig>) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).tls = Some(tls);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Publishes the HTTP-01 challenges answered from now on.
    pub fn publish_http01(&self, http01: Arc<Http01>) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).http01 = Some(http01);
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn get(&self) -> Taken {
        let generation = self.generation.load(Ordering::Acquire);
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (
            generation,
            Arc::clone(&state.sites),
            state.tls.clone(),
            state.http01.clone(),
        )
    }
}

/// What output segments point into under `--acme`: the sites' packs, and
/// the HTTP-01 key authorizations at `challenges::SLOT`.
struct WithChallenges {
    sites: Arc<Sites>,
    http01: Arc<Http01>,
}

impl Backing for WithChallenges {
    fn bytes(&self, pack: u32) -> &[u8] {
        match pack {
            challenges::SLOT => self.http01.bytes(),
            _ => self.sites.bytes(pack),
        }
    }

    /// The key authorizations are in memory only; a few dozen bytes, far
    /// under `--sendfile-min`'s default, they go out with `writev`.
    fn file(&self, pack: u32) -> Option<RawFd> {
        match pack {
            challenges::SLOT => None,
            _ => self.sites.file(pack),
        }
    }

    fn unchanged(&self, pack: u32) -> bool {
        pack == challenges::SLOT || self.sites.unchanged(pack)
    }
}

/// The backing of one generation: the sites alone, or with challenges.
fn backing_of(sites: &Arc<Sites>, http01: Option<&Arc<Http01>>) -> Arc<dyn Backing> {
    match http01 {
        Some(http01) => Arc::new(WithChallenges {
            sites: Arc::clone(sites),
            http01: Arc::clone(http01),
        }),
        None => sites.clone(),
    }
}

/// A site whose pack was written in place without a lease gives nothing:
/// output still to be sent from it fails its connection, rather than send
/// what the file holds now (zero pages, or another pack's bytes).
impl Backing for Sites {
    fn bytes(&self, pack: u32) -> &[u8] {
        self.site(pack)
            .filter(|s| !s.is_stale())
            .and_then(|s| s.pack())
            .map_or(&[], |p| p.bytes())
    }

    fn file(&self, pack: u32) -> Option<RawFd> {
        self.site(pack)
            .filter(|s| !s.is_stale())?
            .pack()?
            .file()
            .map(|f| f.as_raw_fd())
    }

    fn unchanged(&self, pack: u32) -> bool {
        self.site(pack).is_some_and(|s| s.unchanged())
    }
}

/// What every thread's stack shares, set at start.
pub struct StackConfig {
    /// The server's own header lines on cleartext connections.
    pub server_headers: ServerHeaders,
    /// The same on TLS connections: HSTS goes only here when kiln
    /// terminates TLS itself.
    pub server_headers_tls: ServerHeaders,
    /// Where access log lines go, if anywhere.
    pub access_log: Option<Arc<Sink>>,
    /// How they are written.
    pub access_log_format: Format,
    /// What responses and TLS handshakes are counted in.
    pub metrics: Arc<Metrics>,
    /// `--redirect-https`: the HTTPS port cleartext requests are sent to.
    pub https_redirect: Option<u16>,
}

/// One thread's protocol stack.
pub struct Protocols {
    /// Where reloads publish the sites.
    current: Arc<CurrentSites>,
    /// The `CurrentSites` generation `sites` was taken at.
    generation: u64,
    /// The sites this thread answers from.
    sites: Arc<Sites>,
    /// `sites` again, as what output segments point into.
    backing: Arc<dyn Backing>,
    /// What new TLS sessions start from.
    tls: Option<Arc<ServerConfig>>,
    /// The HTTP-01 challenges cleartext connections answer (`--acme`).
    http01: Option<Arc<Http01>>,
    /// Plaintext a TLS session decrypted from the last read.
    plain_in: Vec<u8>,
    /// The protocol's output (HTTP/1 or HTTP/2) on a TLS connection,
    /// before encryption.
    plain_out: Output,
    /// HTTP/2's buffers for decoding requests, shared by the thread's
    /// connections.
    h2: http2::Scratch,
    /// The handler's reusable buffers.
    scratch: Scratch,
    /// The `Date` line, reformatted once a second.
    date: DateCache,
    /// Shutdown began: answer what was asked, then close.
    draining: bool,
    /// Prepared header lines and the log sink.
    config: Arc<StackConfig>,
    /// This thread's access log buffer, when enabled.
    log: Option<AccessLog>,
    /// This thread's index, which picks its metrics blocks.
    thread: usize,
    /// With an access log: when this loop turn began (monotonic
    /// microseconds), which requests read in it are timed from.
    turn_us: u64,
    /// HTTP/3: one QUIC endpoint per UDP socket of the thread.
    quic: Vec<quic::Endpoint>,
    /// HTTP/3's buffers and the packs' bytes as QUIC takes them.
    h3: http3::Scratch,
    bodies: http3::Bodies,
    /// The live preview's event streams this thread holds open.
    events: EventStreams,
    /// This turn, held event streams are owed what changed, and with
    /// `Some(true)` a heartbeat: set by `begin_turn`.
    wake: Option<bool>,
    /// When held event streams next hear a comment (Unix seconds).
    next_heartbeat: i64,
    /// The second of the last turn, which parked requests are woken
    /// once in.
    parked_second: i64,
}

/// One connection's protocol state.
pub struct Session {
    /// For the access log.
    peer: Option<IpAddr>,
    /// Cleartext requests are redirected to this HTTPS port.
    https_redirect: Option<u16>,
    /// The TLS session on TLS listeners; boxed, as rustls' state is large.
    tls: Option<Box<TlsSession>>,
    /// A TLS handshake failed to start: close at the first input.
    broken: bool,
    /// No request was answered yet: on TLS the handshake and the first
    /// request share the header deadline.
    answered: bool,
    /// The protocol has output left (HTTP/1 requests from a full batch,
    /// HTTP/2 DATA), to produce once the TLS session's unsent output is
    /// out.
    proto_more: bool,
    /// The step that left TLS output unsent, answered again by `resume`.
    last: Step,
    /// On TLS: the protocol was chosen by ALPN once the handshake ended.
    alpn_done: bool,
    /// The protocol's state between reads.
    proto: Protocol,
}

/// The HTTP version a connection speaks, with its state.
enum Protocol {
    /// HTTP/1.1, the default. `sniffed`: on a new cleartext connection,
    /// how much of the HTTP/2 preface the client sent so far (h2c by prior
    /// knowledge); `None` once it sent anything else, and on TLS, where
    /// ALPN decides.
    Http1 {
        conn: http1::Conn,
        sniffed: Option<u8>,
    },
    /// HTTP/2; boxed, as its state is larger than HTTP/1's.
    Http2(Box<http2::Conn>),
}

/// Hands plaintext to the connection's protocol; output goes to `out`.
fn protocol_input(
    proto: &mut Protocol,
    ctx: &mut RequestContext<'_>,
    h2: &mut http2::Scratch,
    bytes: &[u8],
    out: &mut Output,
) -> Step {
    let preface = http2::frame::PREFACE;
    match proto {
        Protocol::Http1 {
            conn,
            sniffed: Some(seen),
        } => {
            let seen_len = usize::from(*seen);
            let want = &preface[seen_len..];
            let k = bytes.len().min(want.len());
            if bytes[..k] == want[..k] {
                if seen_len + k < preface.len() {
                    *seen = (seen_len + k) as u8;
                    return INPUT_STEP;
                }
                let mut conn = Box::new(http2::Conn::after_preface());
                let step = conn.input(&bytes[k..], ctx, h2, out);
                *proto = Protocol::Http2(conn);
                return step;
            }
            let seen_len = usize::from(*seen);
            let step = if seen_len == 0 {
                conn.input(bytes, ctx, out)
            } else {
                // Rare: a request that began like the preface.
                let mut joined = preface[..seen_len].to_vec();
                joined.extend_from_slice(bytes);
                conn.input(&joined, ctx, out)
            };
            if let Protocol::Http1 { sniffed, .. } = proto {
                *sniffed = None;
            }
            step
        }
        Protocol::Http1 {
            conn,
            sniffed: None,
        } => conn.input(bytes, ctx, out),
        Protocol::Http2(conn) => conn.input(bytes, ctx, h2, out),
    }
}

/// Asks the protocol for the output it has without input.
fn protocol_resume(proto: &mut Protocol, ctx: &mut RequestContext<'_>, out: &mut Output) -> Step {
    match proto {
        Protocol::Http1 { conn, .. } => conn.resume(ctx, out),
        Protocol::Http2(conn) => conn.resume(ctx, out),
    }
}

/// Wakes the protocol's held event streams (`heartbeat`: a comment if
/// nothing else is owed); `None` when it holds none.
fn protocol_wake(
    proto: &mut Protocol,
    ctx: &mut RequestContext<'_>,
    heartbeat: bool,
    out: &mut Output,
) -> Option<Step> {
    match proto {
        Protocol::Http1 { conn, .. } => conn.wake(ctx, heartbeat, out),
        Protocol::Http2(conn) => conn.wake(ctx, heartbeat, out),
    }
}

/// The loop ends the connection: the protocol's last words for `expiry`.
fn protocol_expire(
    proto: &mut Protocol,
    expiry: Expiry,
    ctx: &mut RequestContext<'_>,
    out: &mut Output,
) {
    match proto {
        Protocol::Http1 { conn, .. } => conn.expire(expiry, ctx, out),
        Protocol::Http2(conn) => conn.expire(expiry, out),
    }
}

impl Protocols {
    pub fn new(
        current: Arc<CurrentSites>,
        config: Arc<StackConfig>,
        sendfile_min: u64,
        thread: usize,
    ) -> Protocols {
        let (generation, sites, tls, http01) = current.get();
        let backing = backing_of(&sites, http01.as_ref());
        let log = config
            .access_log
            .clone()
            .map(|sink| AccessLog::new(sink, config.access_log_format));
        Protocols {
            current,
            generation,
            sites,
            backing,
            tls,
            http01,
            plain_in: Vec::with_capacity(64 * 1024),
            plain_out: Output::new(64 * 1024, sendfile_min),
            h2: http2::Scratch::default(),
            scratch: Scratch::default(),
            date: DateCache::new(),
            draining: false,
            config,
            log,
            thread,
            turn_us: 0,
            quic: Vec::new(),
            h3: http3::Scratch::default(),
            bodies: http3::Bodies::default(),
            events: EventStreams::default(),
            wake: None,
            next_heartbeat: 0,
            parked_second: 0,
        }
    }

    /// Serves HTTP/3 on `sockets` UDP sockets (the loop's, in its order).
    pub fn with_quic(mut self, sockets: usize, config: &Arc<quic::QuicConfig>) -> Protocols {
        self.quic = (0..sockets)
            .map(|_| {
                let mut endpoint = quic::Endpoint::new(self.thread, Arc::clone(config));
                endpoint.set_tls(self.tls.as_ref());
                endpoint
            })
            .collect();
        self
    }

    /// What a QUIC endpoint borrows for a turn, and the endpoint.
    fn quic_parts(
        &mut self,
        socket: usize,
    ) -> Option<(&mut quic::Endpoint, quic::Context<'_, '_>)> {
        let endpoint = self.quic.get_mut(socket)?;
        endpoint.set_tls(self.tls.as_ref());
        let ctx = RequestContext {
            sites: &self.sites,
            scratch: &mut self.scratch,
            date: &self.date,
            server_headers: &self.config.server_headers_tls,
            log: self.log.as_mut(),
            peer: None,
            draining: self.draining,
            http01: None,
            https_redirect: None,
            scheme: Scheme::Https,
            metrics: &self.config.metrics,
            thread: self.thread,
            started_us: self.turn_us,
            events: &self.events,
        };
        let cx = quic::Context {
            ctx,
            scratch: &mut self.h3,
            bodies: &mut self.bodies,
            backing: &self.backing,
            draining: self.draining,
            wake: self.wake,
        };
        Some((endpoint, cx))
    }
}

/// What the protocols need besides the connection's own state (HTTP/2
/// takes HTTP/1's `Context` too); a macro
/// rather than a method so that it borrows only these fields of the
/// `Protocols` (the plaintext buffers stay free for the same call).
macro_rules! context {
    ($p:expr, $session:expr) => {
        RequestContext {
            sites: &$p.sites,
            scratch: &mut $p.scratch,
            date: &$p.date,
            server_headers: if $session.tls.is_some() {
                &$p.config.server_headers_tls
            } else {
                &$p.config.server_headers
            },
            log: $p.log.as_mut(),
            peer: $session.peer,
            draining: $p.draining,
            http01: if $session.tls.is_some() {
                None
            } else {
                $p.http01.as_deref()
            },
            https_redirect: $session.https_redirect,
            scheme: if $session.tls.is_some() {
                Scheme::Https
            } else {
                Scheme::Http
            },
            metrics: &$p.config.metrics,
            thread: $p.thread,
            started_us: $p.turn_us,
            events: &$p.events,
        }
    };
}

/// The step of a connection whose first bytes (a handshake, the start of
/// the HTTP/2 preface) are not a whole unit yet.
const INPUT_STEP: Step = Step::Open {
    wait: Wait::Input { restart: false },
    more: false,
};

/// Close once the output is sent: a failed TLS session's alert, an
/// expired connection's last words.
const CLOSE_STEP: Step = Step::Close {
    linger: true,
    more: false,
};

impl Protocols {
    /// Encrypts the protocol's output (`plain_out`) for a TLS session and
    /// turns the protocol's step into the connection's.
    fn seal_tls(&mut self, session: &mut Session, step: Step, out: &mut Output) -> Step {
        let Some(tls) = session.tls.as_mut() else {
            return CLOSE_STEP;
        };
        if !self.plain_out.is_empty() {
            session.answered = true;
        }
        let unsent = match tls.send(&self.plain_out, &self.backing, step.closes(), out) {
            Ok(unsent) => unsent,
            Err(_) => return CLOSE_STEP,
        };
        session.proto_more = step.more();
        let step = match step {
            Step::Open {
                wait: Wait::Idle,
                more,
            } if !session.answered => Step::Open {
                wait: Wait::Input { restart: false },
                more,
            },
            step => step,
        };
        let step = step.with_more(unsent || step.more());
        session.last = step;
        step
    }
}

impl net::Stack for Protocols {
    type Session = Session;

    fn datagrams(
        &mut self,
        socket: usize,
        received: &mut net::udp::Received,
        out: &mut net::udp::Transmits,
    ) {
        if let Some((endpoint, mut cx)) = self.quic_parts(socket) {
            endpoint.receive(received, out, &mut cx);
        }
    }

    fn datagram_turn(
        &mut self,
        socket: usize,
        out: &mut net::udp::Transmits,
    ) -> Option<std::time::Duration> {
        let (endpoint, mut cx) = self.quic_parts(socket)?;
        endpoint.turn(out, &mut cx)
    }

    fn datagram_open(&self) -> usize {
        self.quic.iter().map(quic::Endpoint::open).sum()
    }

    fn begin_turn(&mut self, unix_seconds: i64, draining: bool) -> bool {
        self.date.update(unix_seconds);
        self.draining = draining;
        if self.log.is_some() {
            self.turn_us = monotonic_us();
        }
        let changed = self.current.generation.load(Ordering::Acquire) != self.generation;
        if changed {
            (self.generation, self.sites, self.tls, self.http01) = self.current.get();
            self.backing = backing_of(&self.sites, self.http01.as_ref());
        }
        // Held event streams (a watched preview's) hear of a new
        // generation, and a comment now and then; a thread that holds
        // none does nothing more here.
        // Requests parked for a cold site are answered again when the
        // sites change (theirs may have landed), and once a second (their
        // deadlines).
        self.wake = None;
        let parked = self.events.parked() > 0;
        let tick = parked && unix_seconds != self.parked_second;
        self.parked_second = unix_seconds;
        if self.events.held() == 0 {
            self.next_heartbeat = 0;
            if parked && (changed || tick) {
                self.wake = Some(false);
            }
            return self.wake.is_some();
        }
        let period = HEARTBEAT.as_secs() as i64;
        if self.next_heartbeat == 0 {
            self.next_heartbeat = unix_seconds + period;
        }
        let heartbeat = unix_seconds >= self.next_heartbeat;
        if heartbeat {
            self.next_heartbeat = unix_seconds + period;
        }
        if changed || heartbeat || tick {
            self.wake = Some(heartbeat);
        }
        self.wake.is_some()
    }

    fn wants_peer(&self) -> bool {
        self.log.is_some()
    }

    fn open(&mut self, listener: u32, peer: Option<IpAddr>) -> Session {
        let mut broken = false;
        let tls = match (listener, &self.tls) {
            (TLS, Some(config)) => match TlsSession::new(Arc::clone(config)) {
                Ok(session) => Some(Box::new(session)),
                Err(e) => {
                    tracing::warn!("TLS session: {e}");
                    broken = true;
                    None
                }
            },
            _ => None,
        };
        let https_redirect = match listener {
            CLEARTEXT => self.config.https_redirect,
            _ => None,
        };
        Session {
            peer,
            https_redirect,
            tls,
            broken,
            answered: false,
            proto_more: false,
            last: Step::IDLE,
            alpn_done: false,
            proto: Protocol::Http1 {
                conn: http1::Conn::default(),
                sniffed: (listener == CLEARTEXT).then_some(0),
            },
        }
    }

    fn input(&mut self, session: &mut Session, bytes: &mut [u8], out: &mut Output) -> Step {
        if session.broken {
            return CLOSE_STEP;
        }
        let Some(tls) = session.tls.as_mut() else {
            let mut ctx = context!(self, session);
            return protocol_input(&mut session.proto, &mut ctx, &mut self.h2, bytes, out);
        };
        self.plain_in.clear();
        let handshaking = tls.is_handshaking();
        if tls.receive(bytes, &mut self.plain_in, out).is_err() {
            if handshaking {
                let counters = self.config.metrics.of_loop(self.thread);
                counters.tls_handshake_failures.add(1);
            }
            return CLOSE_STEP;
        }
        if tls.is_handshaking() || tls.has_unsent() {
            // Handshake flights (or nothing) go out; plaintext cannot have
            // arrived before the handshake is done.
            return INPUT_STEP.with_more(tls.has_unsent());
        }
        if !session.alpn_done {
            session.alpn_done = true;
            self.config
                .metrics
                .of_loop(self.thread)
                .tls_handshakes
                .add(1);
            match tls.alpn_protocol() {
                Some(b"h2") => session.proto = Protocol::Http2(Box::default()),
                // RFC 8737 §3: a TLS-ALPN-01 validation ends with the
                // handshake; nothing is served on such a connection.
                Some(ACME_TLS_ALPN) => {
                    tls.close_notify(out);
                    return CLOSE_STEP;
                }
                _ => {}
            }
        }
        let plain_in = std::mem::take(&mut self.plain_in);
        self.plain_out.clear();
        let mut ctx = context!(self, session);
        let step = protocol_input(
            &mut session.proto,
            &mut ctx,
            &mut self.h2,
            &plain_in,
            &mut self.plain_out,
        );
        self.plain_in = plain_in;
        self.seal_tls(session, step, out)
    }

    fn resume(&mut self, session: &mut Session, out: &mut Output) -> Step {
        let Some(tls) = session.tls.as_mut() else {
            let mut ctx = context!(self, session);
            return protocol_resume(&mut session.proto, &mut ctx, out);
        };
        if tls.has_unsent() {
            let unsent = match tls.resume(out) {
                Ok(unsent) => unsent,
                Err(_) => return CLOSE_STEP,
            };
            return session.last.with_more(unsent || session.proto_more);
        }
        if !session.proto_more {
            return session.last;
        }
        self.plain_out.clear();
        let mut ctx = context!(self, session);
        let step = protocol_resume(&mut session.proto, &mut ctx, &mut self.plain_out);
        self.seal_tls(session, step, out)
    }

    fn wake(&mut self, session: &mut Session, out: &mut Output) -> Option<Step> {
        // Woken after the turn that asked (its output was waiting): what
        // changed, without a heartbeat.
        let heartbeat = self.wake.unwrap_or(false);
        let Some(tls) = session.tls.as_mut() else {
            let mut ctx = context!(self, session);
            return protocol_wake(&mut session.proto, &mut ctx, heartbeat, out);
        };
        if tls.is_handshaking() || tls.has_unsent() {
            return None;
        }
        self.plain_out.clear();
        let mut ctx = context!(self, session);
        let step = protocol_wake(&mut session.proto, &mut ctx, heartbeat, &mut self.plain_out)?;
        Some(self.seal_tls(session, step, out))
    }

    fn expire(&mut self, session: &mut Session, expiry: Expiry, out: &mut Output) {
        match (expiry, session.tls.as_mut()) {
            (Expiry::Close, _) => {}
            (_, None) => {
                let mut ctx = context!(self, session);
                ctx.draining = true;
                protocol_expire(&mut session.proto, expiry, &mut ctx, out);
            }
            // A client that stalls mid-handshake gets no answer, and an
            // idle one mid-handshake no close_notify.
            (_, Some(tls)) if tls.is_handshaking() => {}
            // The protocol's last words first (HTTP/2's GOAWAY, its 408
            // too; HTTP/1's 408, or the last chunk of a held event
            // stream; nothing from an idle HTTP/1 connection), then
            // close_notify.
            (_, Some(_)) => {
                self.plain_out.clear();
                let mut ctx = context!(self, session);
                ctx.draining = true;
                protocol_expire(&mut session.proto, expiry, &mut ctx, &mut self.plain_out);
                self.seal_tls(session, CLOSE_STEP, out);
            }
        }
    }

    fn backing(&self) -> &Arc<dyn Backing> {
        &self.backing
    }

    fn tick(&mut self) {
        if let Some(log) = self.log.as_mut() {
            log.flush();
        }
    }

    fn finish(&mut self) {
        self.tick();
    }
}
