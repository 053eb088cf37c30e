//! QUIC (RFC 9000) for HTTP/3: `quinn-proto`'s state machines, driven
//! sans-IO by the event loop that owns the UDP socket. One [`Endpoint`]
//! per loop thread and socket: datagrams in (`net::udp::Received`),
//! datagrams out (`net::udp::Transmits`), the timers due run once per
//! loop turn (found in deadline order, `timers.rs`); each connection's
//! streams handed to `http3::Conn`.
//!
//! Connection IDs this server issues start with the thread's index: the
//! socket group's BPF program (`net::udp::bind`) steers every datagram to
//! the thread its destination ID names, so a connection stays on its
//! thread when the client's address changes (ARCHITECTURE.md).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn_proto::crypto::{HandshakeTokenKey, HmacKey};
use quinn_proto::{
    ConnectionHandle, ConnectionId, ConnectionIdGenerator, DatagramEvent, Dir, EndpointConfig,
    EndpointEvent, Event, IdleTimeout, StreamEvent, StreamId, TransportConfig, VarInt,
};

mod timers;

use self::timers::Timers;
use super::http3;
use super::metrics::LoopCounters;
use super::net::udp::{Received, Transmits, gso_segments};
use super::net::{Backing, Shared};
use super::request_context::RequestContext;

/// The ALPN protocol of HTTP/3.
pub const ALPN_H3: &[u8] = b"h3";

/// Connection IDs' length: the thread's byte and 7 random ones.
const CID_LEN: usize = 8;

/// Connection IDs whose first byte is the thread's index.
struct ThreadCids {
    thread: u8,
}

impl ConnectionIdGenerator for ThreadCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        id[0] = self.thread;
        // getrandom cannot fail for 7 bytes once the pool is ready (it
        // was, for the TLS keys); zeros would still be unique per thread
        // enough for quinn, which checks for collisions.
        let _ = rustix::rand::getrandom(&mut id[1..], rustix::rand::GetRandomFlags::empty());
        ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// Handshakes in flight on one endpoint from which `--quic-retry auto`
/// asks new clients to prove their address with a Retry first: far more
/// than a thread sees from real clients at once (a handshake takes a
/// round trip or two), few enough that a flood of Initials from forged
/// addresses meets Retry before it costs much of the thread's crypto.
pub const HANDSHAKES_BEFORE_RETRY: usize = 64;

/// Handshakes in flight on one endpoint beyond which a new client is
/// refused (CONNECTION_REFUSED), Retry or not: a client that answers a
/// Retry proves its address, not that it will finish its handshake, and
/// each half-open one holds its TLS and QUIC state until its deadline
/// (`QuicConfig::handshake_timeout`). 512 per thread is hundreds of times
/// what real clients keep in flight.
pub const MAX_HANDSHAKES: usize = 512;

/// Settings every thread's endpoints share.
pub struct QuicConfig {
    /// The idle timeout both sides agree on (the lower one wins).
    pub idle_timeout: Duration,
    /// How long a handshake may take before the connection is dropped
    /// (`--header-timeout`, which bounds a TLS handshake over TCP too).
    pub handshake_timeout: Duration,
    /// New clients get a Retry first (address validation) while this
    /// many handshakes are in flight on their endpoint: 0 for every
    /// client (`--quic-retry always`).
    pub retry_from: usize,
    /// Retry tokens' and stateless resets' keys (`Keys`).
    pub keys: Keys,
    /// `--max-connections`, shared with TCP: a new connection is refused
    /// while `shared.live` (TCP and QUIC, every thread) is at it.
    pub max_connections: usize,
    pub shared: Arc<Shared>,
}

/// The key Retry tokens are sealed with and the key stateless-reset
/// tokens are made with: one pair per process, which every thread's
/// endpoints share; random, or derived from `--quic-host-key`'s secret
/// and then the same in the next process.
pub struct Keys {
    /// Seals Retry tokens: a token one thread made is good on every
    /// other, and across certificate reloads (each makes a new QUIC
    /// server configuration).
    pub token: Arc<dyn HandshakeTokenKey>,
    /// Makes the stateless-reset token of a connection ID: the token a
    /// datagram for a forgotten connection gets is the one its issuer
    /// announced, whichever endpoint the datagram reaches.
    pub reset: Arc<dyn HmacKey>,
}

impl Keys {
    /// Both keys from `secret` by HKDF-SHA256, each expanded with a label
    /// of its own, so that neither tells anything about the other (or
    /// about the secret). The same secret gives the same keys in every
    /// process: a restarted server resets its predecessor's connections
    /// and takes the Retry tokens it sent.
    pub fn derive(secret: &[u8]) -> Result<Keys, aws_lc_rs::error::Unspecified> {
        use aws_lc_rs::{hkdf, hmac};
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"kiln quic host key").extract(secret);
        let token: hkdf::Prk = prk.expand(&[b"retry token key"], hkdf::HKDF_SHA256)?.into();
        let reset: hmac::Key = prk
            .expand(&[b"stateless reset key"], hmac::HMAC_SHA256)?
            .into();
        Ok(Keys {
            token: Arc::new(token),
            reset: Arc::new(reset),
        })
    }

    /// Keys from a random secret, made once at start: good for this
    /// process only.
    pub fn random() -> Result<Keys, aws_lc_rs::error::Unspecified> {
        let mut secret = [0u8; super::secret::SECRET_MIN];
        aws_lc_rs::rand::fill(&mut secret)?;
        Keys::derive(&secret)
    }

    /// Keys from the secret in `path` (`--quic-host-key`, read by
    /// `secret::read`: a file, or an object of the store `args` name);
    /// what is wrong with it, in one line naming it.
    pub fn read(path: &Path, args: &super::ServeArgs) -> anyhow::Result<Keys> {
        let secret = super::secret::read("--quic-host-key", path, args)?;
        Keys::derive(&secret).map_err(|_| {
            anyhow::anyhow!("--quic-host-key {}: cannot derive the keys", path.display())
        })
    }
}

/// The QUIC-side TLS configuration made from the TCP one: the same
/// certificates (its resolver: SNI, ACME) and tickets, TLS 1.3 only (QUIC
/// has no other), ALPN `h3`.
pub fn server_config(
    tls: &Arc<rustls::ServerConfig>,
    transport: &Arc<TransportConfig>,
    token_key: &Arc<dyn HandshakeTokenKey>,
) -> Option<Arc<quinn_proto::ServerConfig>> {
    let mut config = (**tls).clone();
    config.alpn_protocols = vec![ALPN_H3.to_vec()];
    config.max_early_data_size = 0;
    let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(config).ok()?;
    let mut server = quinn_proto::ServerConfig::new(Arc::new(crypto), Arc::clone(token_key));
    server.transport_config(Arc::clone(transport));
    // Migration is allowed: the BPF steering keeps a moved client's
    // datagrams on the connection's thread.
    server.migration(true);
    Some(Arc::new(server))
}

/// One connection.
struct Conn {
    quic: quinn_proto::Connection,
    h3: http3::Conn,
    /// The handshake is done and HTTP/3 started.
    started: bool,
    /// When the handshake must be done by.
    deadline: Instant,
}

/// One thread's QUIC endpoint on one UDP socket.
pub struct Endpoint {
    endpoint: quinn_proto::Endpoint,
    /// The TCP configuration the current QUIC one was made from.
    tls: Option<Arc<rustls::ServerConfig>>,
    transport: Arc<TransportConfig>,
    config: Arc<QuicConfig>,
    /// Connections by handle.
    conns: Vec<Option<Box<Conn>>>,
    open: usize,
    /// Open connections whose handshake is not done (for Retry under
    /// `auto`): counted, not found by a scan at each new client.
    handshaking: usize,
    /// Handshakes' deadlines, in the order they began (all are as long):
    /// (deadline, slot); an entry whose connection is started or gone is
    /// skipped when it reaches the front.
    deadlines: VecDeque<(Instant, usize)>,
    /// When each connection wants quinn's `handle_timeout`, by handle.
    timers: Timers,
    /// Connections with something to do this turn.
    touched: Vec<usize>,
    /// Stream bytes as read, for HTTP/3.
    read: Vec<u8>,
    /// Endpoint responses (version negotiation, Retry, resets) written here.
    response: Vec<u8>,
    /// Shutdown began: GOAWAY sent, idle connections closed.
    draining: bool,
    /// Connections ended since free memory was last given back, and when
    /// it was (`release_memory`).
    ended_since_release: usize,
    released_at: Instant,
}

impl Endpoint {
    pub fn new(thread: usize, config: Arc<QuicConfig>) -> Endpoint {
        let thread = thread as u8;
        let mut endpoint_config = EndpointConfig::new(Arc::clone(&config.keys.reset));
        endpoint_config.cid_generator(move || Box::new(ThreadCids { thread }));
        let mut transport = TransportConfig::default();
        // Sized for a static-site server: a client sends a few hundred
        // bytes per request (kiln reads and drops any content), so the
        // receive windows are small (quinn's defaults, 1.25 MB a stream
        // and no connection limit, let a client make a connection buffer
        // megabytes); the send side is the congestion window's and the
        // bodies are slices of the mapping, not copies. No QUIC datagrams.
        // quinn-proto fills its stream maps in advance with an entry for
        // every stream a client may open: 100 request streams (quinn's own
        // default, about what a browser opens at once; the credit comes
        // back with MAX_STREAMS as streams end) and 8 unidirectional ones
        // stay under 112 entries, a table of 128 slots where 128 + 8 took
        // 256: 5.4 KB less per connection, idle or not.
        transport
            .stream_receive_window(VarInt::from_u32(64 * 1024))
            .receive_window(VarInt::from_u32(256 * 1024))
            .datagram_receive_buffer_size(None)
            .max_idle_timeout(IdleTimeout::try_from(config.idle_timeout).ok())
            .max_concurrent_bidi_streams(VarInt::from_u32(100))
            .max_concurrent_uni_streams(VarInt::from_u32(8))
            .enable_segmentation_offload(true);
        Endpoint {
            endpoint: quinn_proto::Endpoint::new(Arc::new(endpoint_config), None, true, None),
            tls: None,
            transport: Arc::new(transport),
            config,
            conns: Vec::new(),
            open: 0,
            handshaking: 0,
            deadlines: VecDeque::new(),
            timers: Timers::default(),
            touched: Vec::new(),
            read: Vec::with_capacity(16 * 1024),
            response: Vec::new(),
            draining: false,
            ended_since_release: 0,
            released_at: Instant::now(),
        }
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.open
    }

    /// New connections take `tls` (the certificates of this generation).
    pub fn set_tls(&mut self, tls: Option<&Arc<rustls::ServerConfig>>) {
        let same = match (&self.tls, tls) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        self.tls = tls.cloned();
        let server =
            tls.and_then(|tls| server_config(tls, &self.transport, &self.config.keys.token));
        self.endpoint.set_server_config(server);
    }

    /// Handles a batch of received datagrams.
    pub fn receive(
        &mut self,
        received: &mut Received,
        out: &mut Transmits,
        cx: &mut Context<'_, '_>,
    ) {
        let now = Instant::now();
        let counters = cx.ctx.metrics.of_loop(cx.ctx.thread);
        received.for_each(|peer, local, datagram| {
            self.datagram(now, peer, local, datagram, out, counters)
        });
        self.drive(now, out, cx);
    }

    fn datagram(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        local: Option<IpAddr>,
        data: BytesMut,
        out: &mut Transmits,
        counters: &LoopCounters,
    ) {
        self.response.clear();
        // `local` (on a wildcard socket) comes back as each transmit's
        // `src_ip`: the connection answers from the address its client
        // wrote to.
        // A long-header datagram (a handshake's) is copied out of the
        // receive arena: quinn keeps pieces of a handshake's datagrams
        // (its Initial, while the handshake is pending) and a piece held
        // keeps the whole 1 MiB arena from being reused, so a flood of
        // half-open handshakes held one arena each (0.9 MB per handshake).
        // Short-header datagrams, the established connections' traffic,
        // are handed out in place.
        let data = match data.first() {
            Some(first) if first & 0x80 != 0 => BytesMut::from(&data[..]),
            _ => data,
        };
        let event = self
            .endpoint
            .handle(now, peer, local, None, data, &mut self.response);
        match event {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some(conn) = self.conns.get_mut(handle.0).and_then(Option::as_mut) {
                    conn.quic.handle_event(event);
                    self.touched.push(handle.0);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                let live = self.config.shared.live.load(Ordering::Relaxed);
                if self.draining || live >= self.config.max_connections {
                    counters.quic_refused.add(1);
                    let t = self.endpoint.refuse(incoming, &mut self.response);
                    queue(out, &self.response, t);
                    return;
                }
                if self.handshaking >= MAX_HANDSHAKES {
                    counters.quic_refused.add(1);
                    let t = self.endpoint.refuse(incoming, &mut self.response);
                    queue(out, &self.response, t);
                    return;
                }
                if self.handshaking >= self.config.retry_from
                    && !incoming.remote_address_validated()
                    && incoming.may_retry()
                {
                    match self.endpoint.retry(incoming, &mut self.response) {
                        Ok(t) => {
                            counters.quic_retries.add(1);
                            queue(out, &self.response, t);
                        }
                        Err(e) => self.endpoint.ignore(e.into_incoming()),
                    }
                    return;
                }
                match self
                    .endpoint
                    .accept(incoming, now, &mut self.response, None)
                {
                    Ok((handle, quic)) => {
                        let slot = handle.0;
                        if self.conns.len() <= slot {
                            self.conns.resize_with(slot + 1, || None);
                        }
                        let deadline = now + self.config.handshake_timeout;
                        self.conns[slot] = Some(Box::new(Conn {
                            quic,
                            h3: http3::Conn::default(),
                            started: false,
                            deadline,
                        }));
                        self.deadlines.push_back((deadline, slot));
                        self.open += 1;
                        self.handshaking += 1;
                        self.config.shared.live.fetch_add(1, Ordering::Relaxed);
                        counters.quic_accepted.add(1);
                        self.touched.push(slot);
                    }
                    Err(e) => {
                        if let Some(t) = e.response {
                            queue(out, &self.response, t);
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => queue(out, &self.response, t),
            None => {}
        }
    }

    /// Runs the timers due, and once shutdown began, drains: the time
    /// until the next timer.
    pub fn turn(&mut self, out: &mut Transmits, cx: &mut Context<'_, '_>) -> Option<Duration> {
        let now = Instant::now();
        // While draining, every connection is looked at each turn: the
        // one after its GOAWAY went out may close it.
        self.draining |= cx.draining;
        if self.draining {
            self.touched.extend(0..self.conns.len());
        }
        while let Some(slot) = self.timers.pop_due(now) {
            if let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) {
                conn.quic.handle_timeout(now);
                self.touched.push(slot);
            }
        }
        if let Some(heartbeat) = cx.wake {
            self.wake_held(now, heartbeat, cx);
        }
        self.drive(now, out, cx);
        self.expire_handshakes(now, out, cx);
        self.release_memory(now);
        let handshake = self.deadlines.front().map(|&(at, _)| at);
        // A burst that ended within a second of the last release is
        // released a second after it, not at the next datagram.
        let release =
            (self.ended_since_release > 0).then(|| self.released_at + Duration::from_secs(1));
        [self.timers.next(), handshake, release]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_duration_since(now))
    }

    /// Gives the allocator's free memory back to the system once
    /// connections ended (glibc keeps what a burst of connections freed:
    /// hundreds of MB after 1,000 of them): at most once a second, or as
    /// soon as none is left open. `malloc_trim` costs a walk of the free
    /// lists; once a second is nothing beside a thread's work.
    fn release_memory(&mut self, now: Instant) {
        let due = self.ended_since_release > 0
            && (self.open == 0 || now.duration_since(self.released_at) >= Duration::from_secs(1));
        if due {
            crate::sys::release_free_memory();
            self.ended_since_release = 0;
            self.released_at = now;
        }
    }

    /// Drops the connections whose handshake is past its deadline: the
    /// client is told (CONNECTION_CLOSE, once) and the state is freed at
    /// once, without the closing period a connection that was
    /// established keeps (a half-open one holds its TLS and QUIC state,
    /// and a flood of them would hold it for the idle timeout).
    fn expire_handshakes(&mut self, now: Instant, out: &mut Transmits, cx: &mut Context<'_, '_>) {
        while let Some(&(at, slot)) = self.deadlines.front() {
            let pending = self
                .conns
                .get(slot)
                .and_then(Option::as_ref)
                .is_some_and(|c| !c.started && c.deadline == at);
            if pending && at > now {
                break;
            }
            self.deadlines.pop_front();
            if !pending {
                continue;
            }
            if let Some(conn) = self.conns[slot].as_mut() {
                conn.quic.close(
                    now,
                    VarInt::from_u32(0),
                    Bytes::from_static(b"handshake timeout"),
                );
            }
            self.drive_one(slot, now, out, cx);
            if self.conns.get(slot).is_some_and(Option::is_some) {
                self.forget(slot, cx);
            }
        }
    }

    /// The sites changed, or a second passed while requests are parked
    /// (the stack's `wake`): requests parked for a cold site are answered
    /// again, and held event streams are owed what changed (and with
    /// `heartbeat` a comment). Only the connections that hold either.
    fn wake_held(&mut self, now: Instant, heartbeat: bool, cx: &mut Context<'_, '_>) {
        for (slot, conn) in self.conns.iter_mut().enumerate() {
            let Some(conn) = conn.as_mut().filter(|c| c.started && c.h3.holds_woken()) else {
                continue;
            };
            // For the access log, as `drive_one` says.
            cx.ctx.peer = Some(conn.quic.remote_address().ip());
            let mut streams = QuicStreams {
                quic: &mut conn.quic,
                now,
            };
            conn.h3.wake(&mut streams, &mut cx.answering(), heartbeat);
            if conn.h3.holds_parked() {
                // Nothing else crosses the connection while a request
                // waits (once a second here): a PING, acknowledged, keeps
                // either side's idle timeout from ending it.
                conn.quic.ping();
            }
            self.touched.push(slot);
        }
    }

    /// Gives every touched connection its events, runs HTTP/3 on them,
    /// and queues what they send.
    fn drive(&mut self, now: Instant, out: &mut Transmits, cx: &mut Context<'_, '_>) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for &slot in &touched {
            self.drive_one(slot, now, out, cx);
        }
        touched.clear();
        self.touched = touched;
    }

    fn drive_one(
        &mut self,
        slot: usize,
        now: Instant,
        out: &mut Transmits,
        cx: &mut Context<'_, '_>,
    ) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        // For the access log: the client's address now (it may move).
        cx.ctx.peer = Some(conn.quic.remote_address().ip());
        loop {
            while let Some(event) = conn.quic.poll_endpoint_events() {
                if let Some(event) = self.endpoint.handle_event(ConnectionHandle(slot), event) {
                    conn.quic.handle_event(event);
                }
            }
            let Some(event) = conn.quic.poll() else {
                break;
            };
            let Conn {
                quic, h3, started, ..
            } = &mut **conn;
            let mut streams = QuicStreams { quic, now };
            match event {
                Event::Connected => {
                    // The count follows `started` (quinn reports Connected
                    // once; a second report must not count twice).
                    if !*started {
                        self.handshaking -= 1;
                    }
                    *started = true;
                    cx.ctx.metrics.of_loop(cx.ctx.thread).quic_handshakes.add(1);
                    h3.start(&mut streams);
                    accept_streams(quic, h3, &mut self.read, now, cx);
                }
                Event::Stream(StreamEvent::Opened { .. }) => {
                    accept_streams(quic, h3, &mut self.read, now, cx);
                }
                Event::Stream(StreamEvent::Readable { id }) => {
                    read_stream(quic, h3, id, &mut self.read, now, cx);
                }
                Event::Stream(StreamEvent::Writable { id }) => {
                    h3.on_writable(id.into(), &mut streams);
                }
                Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                    h3.on_stopped(id.into(), error_code.into(), &mut streams);
                }
                Event::ConnectionLost { .. }
                | Event::HandshakeDataReady
                | Event::Stream(_)
                | Event::DatagramReceived
                | Event::DatagramsUnblocked => {}
            }
        }
        if self.draining && conn.started {
            let mut streams = QuicStreams {
                quic: &mut conn.quic,
                now,
            };
            // GOAWAY first; the close comes at a later turn, once the
            // GOAWAY was handed to the socket (a close drops what is
            // still queued on streams).
            let goaway_sent = conn.h3.sent_goaway();
            conn.h3.go_away(&mut streams);
            if goaway_sent && conn.h3.is_idle() && !conn.quic.is_closed() {
                conn.quic.close(
                    now,
                    VarInt::from_u32(http3::frame::H3_NO_ERROR as u32),
                    Bytes::new(),
                );
            }
        } else if self.draining && !conn.quic.is_closed() {
            conn.quic.close(now, VarInt::from_u32(0), Bytes::new());
        }
        loop {
            let mut buf = out.buffer();
            // As long a GSO train as one send takes: a connection's burst
            // of response data then costs a few sends through the kernel's
            // UDP and IP layers, not one per ten datagrams.
            let segments = gso_segments(conn.quic.current_mtu().into());
            match conn.quic.poll_transmit(now, segments, &mut buf) {
                Some(t) => {
                    buf.truncate(t.size);
                    out.queue(Some(t.destination), t.src_ip, buf, t.segment_size);
                }
                None => {
                    out.queue(None, None, buf, None);
                    break;
                }
            }
        }
        self.timers.set(slot, conn.quic.poll_timeout());
        if conn.quic.is_drained() {
            self.forget(slot, cx);
        }
    }

    /// Frees connection `slot`: drained, or dropped before its end (its
    /// IDs are then let go of by a `drained` event of our own).
    fn forget(&mut self, slot: usize, cx: &mut Context<'_, '_>) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let counters = cx.ctx.metrics.of_loop(cx.ctx.thread);
        counters
            .quic_lost_packets
            .add(conn.quic.stats().path.lost_packets);
        counters.quic_closed.add(1);
        let handle = ConnectionHandle(slot);
        while let Some(event) = conn.quic.poll_endpoint_events() {
            let _ = self.endpoint.handle_event(handle, event);
        }
        if !conn.quic.is_drained() {
            let _ = self.endpoint.handle_event(handle, EndpointEvent::drained());
        }
        if !conn.started {
            self.handshaking -= 1;
        }
        self.timers.remove(slot);
        self.open -= 1;
        self.ended_since_release += 1;
        self.config.shared.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Queues an endpoint's own response (written into `bytes`).
fn queue(out: &mut Transmits, bytes: &[u8], t: quinn_proto::Transmit) {
    let mut buf = out.buffer();
    buf.extend_from_slice(&bytes[..t.size]);
    out.queue(Some(t.destination), t.src_ip, buf, t.segment_size);
}

/// Takes the streams the peer opened, and reads what they hold.
fn accept_streams(
    quic: &mut quinn_proto::Connection,
    h3: &mut http3::Conn,
    read: &mut Vec<u8>,
    now: Instant,
    cx: &mut Context<'_, '_>,
) {
    for dir in [Dir::Uni, Dir::Bi] {
        while let Some(id) = quic.streams().accept(dir) {
            read_stream(quic, h3, id, read, now, cx);
        }
    }
}

/// Reads what stream `id` holds and hands it to HTTP/3.
fn read_stream(
    quic: &mut quinn_proto::Connection,
    h3: &mut http3::Conn,
    id: StreamId,
    read: &mut Vec<u8>,
    now: Instant,
    cx: &mut Context<'_, '_>,
) {
    read.clear();
    let mut fin = false;
    let mut reset = false;
    {
        let mut stream = quic.recv_stream(id);
        let Ok(mut chunks) = stream.read(true) else {
            return;
        };
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => read.extend_from_slice(&chunk.bytes),
                Ok(None) => {
                    fin = true;
                    break;
                }
                Err(quinn_proto::ReadError::Blocked) => break,
                Err(quinn_proto::ReadError::Reset(_)) => {
                    reset = true;
                    break;
                }
            }
        }
        let _ = chunks.finalize();
    }
    let mut streams = QuicStreams { quic, now };
    if !read.is_empty() || fin {
        let mut answering = cx.answering();
        h3.on_data(id.into(), read, fin, &mut streams, &mut answering);
    }
    if reset {
        h3.on_reset(id.into(), &mut streams);
    }
}

/// A connection's streams as HTTP/3 reaches them.
struct QuicStreams<'a> {
    quic: &'a mut quinn_proto::Connection,
    now: Instant,
}

fn stream_id(id: u64) -> StreamId {
    StreamId::from(VarInt::from_u64(id).unwrap_or(VarInt::MAX))
}

fn code(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::MAX)
}

impl http3::Streams for QuicStreams<'_> {
    fn open_uni(&mut self) -> Option<u64> {
        self.quic.streams().open(Dir::Uni).map(u64::from)
    }

    fn write(&mut self, id: u64, chunks: &mut [Bytes]) {
        // Until done or refused: quinn asks for `Writable` only for a
        // stream whose write was refused (Blocked), so a write that took
        // only part is tried again, which then is. An error on a stream
        // the peer stopped or reset: the `Stopped` event follows.
        let mut stream = self.quic.send_stream(stream_id(id));
        while chunks.iter().any(|c| !c.is_empty()) {
            match stream.write_chunks(chunks) {
                Ok(written) if written.bytes > 0 => {}
                Ok(_) | Err(_) => break,
            }
        }
    }

    fn finish(&mut self, id: u64) {
        let _ = self.quic.send_stream(stream_id(id)).finish();
    }

    fn reset(&mut self, id: u64, error: u64) {
        let _ = self.quic.send_stream(stream_id(id)).reset(code(error));
    }

    fn stop(&mut self, id: u64, error: u64) {
        let _ = self.quic.recv_stream(stream_id(id)).stop(code(error));
    }

    fn close(&mut self, error: u64, reason: &'static str) {
        self.quic
            .close(self.now, code(error), Bytes::from_static(reason.as_bytes()));
    }
}

/// What the endpoint borrows from the thread's stack for a turn.
pub struct Context<'a, 'w> {
    pub ctx: RequestContext<'w>,
    pub scratch: &'a mut http3::Scratch,
    pub bodies: &'a mut http3::Bodies,
    pub backing: &'a Arc<dyn Backing>,
    pub draining: bool,
    /// Held event streams are owed what changed this turn (`Some`), and
    /// with `Some(true)` a heartbeat; parked requests are answered again.
    pub wake: Option<bool>,
}

impl<'w> Context<'_, 'w> {
    fn answering(&mut self) -> http3::Answering<'_, 'w> {
        http3::Answering {
            ctx: &mut self.ctx,
            scratch: self.scratch,
            bodies: self.bodies,
            backing: self.backing,
        }
    }
}
