//! The connection against a fake QUIC (streams as byte vectors, flow
//! control as a budget): what HTTP/3 writes, and every error it raises.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;

use super::super::frame::{self, write_frame_header, write_varint};
use super::{Answering, Bodies, Conn, Scratch, Streams};
use crate::serve::date::DateCache;
use crate::serve::handler::{Scratch as HandlerScratch, Site, Sites, cold};
use crate::serve::metrics::{Metrics, Scheme, SiteStats};
use crate::serve::net::Backing;
use crate::serve::request_context::RequestContext;
use crate::serve::server_headers::ServerHeaders;

/// QUIC as the tests see it.
#[derive(Default)]
struct FakeQuic {
    next_uni: u64,
    written: HashMap<u64, Vec<u8>>,
    finished: Vec<u64>,
    resets: Vec<(u64, u64)>,
    stops: Vec<(u64, u64)>,
    closed: Option<u64>,
    /// Bytes flow control lets through per write (`None`: all).
    budget: Option<usize>,
}

impl Streams for FakeQuic {
    fn open_uni(&mut self) -> Option<u64> {
        let id = 3 + 4 * self.next_uni;
        self.next_uni += 1;
        Some(id)
    }

    fn write(&mut self, id: u64, chunks: &mut [Bytes]) {
        let out = self.written.entry(id).or_default();
        let mut left = self.budget.unwrap_or(usize::MAX);
        for chunk in chunks {
            let n = chunk.len().min(left);
            out.extend_from_slice(&chunk.split_to(n));
            left -= n;
        }
    }

    fn finish(&mut self, id: u64) {
        self.finished.push(id);
    }

    fn reset(&mut self, id: u64, code: u64) {
        self.resets.push((id, code));
    }

    fn stop(&mut self, id: u64, code: u64) {
        self.stops.push((id, code));
    }

    fn close(&mut self, code: u64, _reason: &'static str) {
        self.closed.get_or_insert(code);
    }
}

/// A connection, its fake QUIC and what answering needs (the dummy site:
/// `Hello World!`).
struct Peer {
    conn: Conn,
    events: crate::serve::handler::live::EventStreams,
    quic: FakeQuic,
    sites: Arc<Sites>,
    metrics: Arc<Metrics>,
    handler: HandlerScratch,
    date: DateCache,
    headers: ServerHeaders,
    scratch: Scratch,
    bodies: Bodies,
}

impl Peer {
    fn new() -> Peer {
        let mut peer = Peer {
            conn: Conn::default(),
            quic: FakeQuic::default(),
            sites: Sites::single(Site::dummy(SiteStats::new("_default", 1))),
            metrics: Metrics::new(1, 0),
            handler: HandlerScratch::default(),
            date: DateCache::new(),
            headers: ServerHeaders::new(false, false),
            scratch: Scratch::default(),
            bodies: Bodies::default(),
            events: Default::default(),
        };
        peer.conn.start(&mut peer.quic);
        peer
    }

    fn send(&mut self, id: u64, bytes: &[u8], fin: bool) {
        self.answering(|conn, quic, answering| conn.on_data(id, bytes, fin, quic, answering));
    }

    /// Wakes the held event streams and parked requests (`Conn::wake`).
    fn wake(&mut self, heartbeat: bool) {
        self.answering(|conn, quic, answering| conn.wake(quic, answering, heartbeat));
    }

    /// Runs `f` with what answering needs.
    fn answering(&mut self, f: impl FnOnce(&mut Conn, &mut FakeQuic, &mut Answering<'_, '_>)) {
        let mut ctx = RequestContext {
            sites: &self.sites,
            scratch: &mut self.handler,
            date: &self.date,
            server_headers: &self.headers,
            log: None,
            peer: None,
            draining: false,
            http01: None,
            https_redirect: None,
            scheme: Scheme::Https,
            metrics: &self.metrics,
            thread: 0,
            started_us: 0,
            events: &self.events,
        };
        let backing: Arc<dyn Backing> = self.sites.clone();
        let mut answering = Answering {
            ctx: &mut ctx,
            scratch: &mut self.scratch,
            bodies: &mut self.bodies,
            backing: &backing,
        };
        f(&mut self.conn, &mut self.quic, &mut answering);
    }

    /// The client's control stream (ID 2) with SETTINGS and `more`.
    fn control(&mut self, more: &[u8]) {
        let mut bytes = vec![0x00];
        write_frame_header(frame::SETTINGS, 0, &mut bytes);
        bytes.extend_from_slice(more);
        self.send(2, &bytes, false);
    }
}

fn frame_bytes(frame_type: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_frame_header(frame_type, payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

/// A GET of `/` as a field section (static-table references only).
fn get_section() -> Vec<u8> {
    get_section_of(b"/")
}

/// A GET of `path` as a field section.
fn get_section_of(path: &[u8]) -> Vec<u8> {
    let mut section = crate::qpack::FIELD_SECTION_PREFIX.to_vec();
    crate::qpack::encode_field(b":method", b"GET", &mut section);
    crate::qpack::encode_field(b":scheme", b"https", &mut section);
    crate::qpack::encode_field(b":authority", b"localhost", &mut section);
    crate::qpack::encode_field(b":path", path, &mut section);
    section
}

/// The DATA payloads of `bytes` (whole frames), in order.
fn data_payloads(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (frame_type, n) = frame::read_varint(bytes).unwrap();
        let (len, m) = frame::read_varint(&bytes[n..]).unwrap();
        let payload = &bytes[n + m..n + m + len as usize];
        if frame_type == frame::DATA {
            out.push(payload.to_vec());
        }
        bytes = &bytes[n + m + len as usize..];
    }
    out
}

/// The frames of `bytes`: (type, payload).
fn frames(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut reader = frame::FrameReader::default();
    let mut data = Vec::new();
    let _ = reader.read::<()>(bytes, |f| {
        match f {
            frame::Frame::Whole {
                frame_type,
                payload,
            } => out.push((frame_type, payload.to_vec())),
            frame::Frame::Skipped { frame_type, len } => data.push((frame_type, len)),
        }
        Ok(())
    });
    for (frame_type, len) in data {
        out.push((frame_type, vec![0; len as usize]));
    }
    out
}

#[test]
fn the_control_stream_opens_with_settings_of_a_table_of_capacity_0() {
    let peer = Peer::new();
    let control = &peer.quic.written[&3];
    assert_eq!(u64::from(control[0]), frame::CONTROL_STREAM);
    let sent = frames(&control[1..]);
    assert_eq!(sent[0].0, frame::SETTINGS);
    let mut settings = HashMap::new();
    let mut payload = &sent[0].1[..];
    while !payload.is_empty() {
        let (id, n) = frame::read_varint(payload).unwrap();
        let (value, m) = frame::read_varint(&payload[n..]).unwrap();
        settings.insert(id, value);
        payload = &payload[n + m..];
    }
    assert_eq!(settings[&frame::SETTINGS_QPACK_MAX_TABLE_CAPACITY], 0);
    assert_eq!(settings[&frame::SETTINGS_QPACK_BLOCKED_STREAMS], 0);
}

#[test]
fn control_stream_errors_close_with_their_codes() {
    let mut setting = Vec::new();
    write_varint(0x04, &mut setting);
    write_varint(1, &mut setting);
    type Case = (&'static str, Box<dyn Fn(&mut Peer)>, u64);
    let cases: Vec<Case> = vec![
        (
            "no SETTINGS first",
            Box::new(|p| {
                p.send(
                    2,
                    &[&[0u8][..], &frame_bytes(frame::GOAWAY, &[0])].concat(),
                    false,
                )
            }),
            frame::H3_MISSING_SETTINGS,
        ),
        (
            "an HTTP/2 setting",
            Box::new(move |p| {
                p.send(
                    2,
                    &[&[0u8][..], &frame_bytes(frame::SETTINGS, &setting)].concat(),
                    false,
                )
            }),
            frame::H3_SETTINGS_ERROR,
        ),
        (
            "a second control stream",
            Box::new(|p| {
                p.control(&[]);
                p.send(6, &[0], false);
            }),
            frame::H3_STREAM_CREATION_ERROR,
        ),
        (
            "the control stream closed",
            Box::new(|p| {
                p.control(&[]);
                p.send(2, &[], true);
            }),
            frame::H3_CLOSED_CRITICAL_STREAM,
        ),
        (
            "the control stream reset",
            Box::new(|p| {
                p.control(&[]);
                p.conn.on_reset(2, &mut p.quic);
            }),
            frame::H3_CLOSED_CRITICAL_STREAM,
        ),
        (
            "DATA on the control stream",
            Box::new(|p| p.control(&frame_bytes(frame::DATA, b"x"))),
            frame::H3_FRAME_UNEXPECTED,
        ),
        (
            "a push stream",
            Box::new(|p| p.send(6, &[1, 0], false)),
            frame::H3_STREAM_CREATION_ERROR,
        ),
        (
            "an insert on the QPACK encoder stream",
            Box::new(|p| p.send(6, &[2, 0x3f, 0xe1, 0x1f], false)),
            frame::QPACK_ENCODER_STREAM_ERROR,
        ),
        (
            "DATA before HEADERS",
            Box::new(|p| p.send(0, &frame_bytes(frame::DATA, b"x"), false)),
            frame::H3_FRAME_UNEXPECTED,
        ),
        (
            "HTTP/2's PING on a request stream",
            Box::new(|p| p.send(0, &frame_bytes(0x06, &[0; 8]), false)),
            frame::H3_FRAME_UNEXPECTED,
        ),
    ];
    for (name, case, code) in cases {
        let mut peer = Peer::new();
        case(&mut peer);
        assert_eq!(peer.quic.closed, Some(code), "{name}");
    }
}

#[test]
fn unknown_stream_types_are_stopped_and_unknown_frames_skipped() {
    let mut peer = Peer::new();
    peer.control(&frame_bytes(0x21, b"reserved"));
    peer.send(6, &[0x21, 1, 2, 3], false);
    assert_eq!(peer.quic.stops, [(6, frame::H3_STREAM_CREATION_ERROR)]);
    assert_eq!(peer.quic.closed, None);
    // Stopped streams leave nothing behind, however many are opened (and
    // one that ends before its type neither).
    for n in 0..1_000u64 {
        peer.send(10 + 4 * n, &[0x21, 1, 2, 3], false);
    }
    peer.send(10 + 4 * 1_000, &[0x40], true);
    assert_eq!(peer.conn.unis.len(), 1, "the control stream alone");
    assert_eq!(peer.quic.closed, None);
}

#[test]
fn a_request_is_answered_with_headers_and_data_as_flow_control_allows() {
    let mut peer = Peer::new();
    peer.quic.budget = Some(5);
    peer.control(&[]);
    let mut request = frame_bytes(0x21, b"");
    request.extend(frame_bytes(frame::HEADERS, &get_section()));
    peer.send(0, &request, true);
    assert!(peer.quic.finished.is_empty(), "all written through 5 bytes");
    peer.quic.budget = None;
    peer.conn.on_writable(0, &mut peer.quic);
    assert_eq!(peer.quic.finished, [0]);
    let sent = frames(&peer.quic.written[&0]);
    assert_eq!(sent[0].0, frame::HEADERS);
    let mut fields = Vec::new();
    crate::qpack::decode_field_section::<()>(&sent[0].1, &mut Vec::new(), 1 << 16, |n, v| {
        fields.push((n.to_vec(), v.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(fields[0], (b":status".to_vec(), b"200".to_vec()));
    assert!(fields.contains(&(b"server".to_vec(), b"kiln".to_vec())));
    assert_eq!(sent[1].0, frame::DATA);
    assert!(peer.conn.is_idle());
}

#[test]
fn malformed_requests_are_stream_errors() {
    let mut peer = Peer::new();
    peer.control(&[]);
    let mut section = crate::qpack::FIELD_SECTION_PREFIX.to_vec();
    crate::qpack::encode_field(b":method", b"GET", &mut section);
    crate::qpack::encode_field(b":path", b"/", &mut section);
    peer.send(0, &frame_bytes(frame::HEADERS, &section), true);
    assert_eq!(peer.quic.resets, [(0, frame::H3_MESSAGE_ERROR)]);
    assert_eq!(peer.quic.closed, None);
    peer.send(4, &[], true);
    assert_eq!(peer.quic.resets[1], (4, frame::H3_REQUEST_INCOMPLETE));
}

#[test]
fn goaway_names_the_first_request_not_taken_and_later_ones_are_rejected() {
    let mut peer = Peer::new();
    peer.control(&[]);
    peer.send(0, &frame_bytes(frame::HEADERS, &get_section()), true);
    peer.conn.go_away(&mut peer.quic);
    let sent = frames(&peer.quic.written[&3][1..]);
    assert_eq!(sent.last().unwrap(), &(frame::GOAWAY, vec![4]));
    peer.send(4, &frame_bytes(frame::HEADERS, &get_section()), true);
    assert!(peer.quic.resets.contains(&(4, frame::H3_REQUEST_REJECTED)));
}

#[test]
fn an_event_stream_is_held_open_and_woken_until_goaway() {
    let mut peer = Peer::new();
    peer.sites = crate::serve::handler::live::testing::preview(0);
    peer.control(&[]);
    let section = get_section_of(b"/_kiln/events");
    peer.send(0, &frame_bytes(frame::HEADERS, &section), true);
    assert!(peer.quic.finished.is_empty(), "held open");
    assert!(peer.conn.holds_woken() && !peer.conn.is_idle());
    let data = data_payloads(&peer.quic.written[&0]);
    assert!(data[0].starts_with(b"retry: 1000\ndata: {\"hello\":true"));

    // Nothing new: nothing, or a comment; the next generation: its change.
    peer.wake(false);
    peer.wake(true);
    peer.sites = crate::serve::handler::live::testing::preview(1);
    peer.wake(false);
    let data = data_payloads(&peer.quic.written[&0]);
    assert_eq!(data[1], b":\n\n");
    assert!(data[2].starts_with(b"data: {\"css\":[\"/style.css\"]"));
    assert_eq!(data.len(), 3);

    // Flow control holds an event back: it follows once there is room.
    peer.quic.budget = Some(0);
    peer.sites = crate::serve::handler::live::testing::preview(2);
    peer.wake(false);
    peer.quic.budget = None;
    peer.conn.on_writable(0, &mut peer.quic);
    let data = data_payloads(&peer.quic.written[&0]);
    assert!(data[3].starts_with(b"data: {\"css\""), "{data:?}");

    // GOAWAY (shutdown) finishes it; the connection is then idle.
    peer.conn.go_away(&mut peer.quic);
    assert_eq!(peer.quic.finished, [0]);
    assert!(peer.conn.is_idle());
    assert_eq!(peer.events.held(), 0);
}

#[test]
fn a_request_stream_reset_before_its_first_byte_is_reset_back() {
    let mut peer = Peer::new();
    peer.control(&[]);
    // Nothing of stream 0 was read: our side is closed all the same, so
    // that QUIC frees the stream and gives its credit back.
    peer.conn.on_reset(0, &mut peer.quic);
    assert_eq!(peer.quic.resets, [(0, frame::H3_REQUEST_CANCELLED)]);
    // A unidirectional stream of the client's has no side of ours.
    peer.conn.on_reset(6, &mut peer.quic);
    assert_eq!(peer.quic.resets.len(), 1);
    assert_eq!(peer.quic.closed, None);
    peer.send(4, &frame_bytes(frame::HEADERS, &get_section()), true);
    assert_eq!(peer.quic.finished, [4]);
}

#[test]
fn rapid_resets_end_the_connection_with_excessive_load() {
    // Requests cancelled while being answered (flow control holds their
    // responses back).
    let mut peer = Peer::new();
    peer.control(&[]);
    peer.quic.budget = Some(0);
    let allowed = u64::from(super::FREE_UNITS / super::RESET_COST);
    for n in 0..=allowed {
        assert_eq!(peer.quic.closed, None, "after {n}");
        peer.send(4 * n, &frame_bytes(frame::HEADERS, &get_section()), true);
        peer.conn.on_reset(4 * n, &mut peer.quic);
    }
    assert_eq!(peer.quic.closed, Some(frame::H3_EXCESSIVE_LOAD));

    // Streams reset before their first byte cost less: 1,000 of them are
    // allowed, not one more.
    let mut peer = Peer::new();
    peer.control(&[]);
    let allowed = u64::from(super::FREE_UNITS / super::UNREAD_RESET_COST);
    for n in 0..allowed {
        peer.conn.on_reset(4 * n, &mut peer.quic);
    }
    assert_eq!(peer.quic.closed, None);
    peer.conn.on_reset(4 * allowed, &mut peer.quic);
    assert_eq!(peer.quic.closed, Some(frame::H3_EXCESSIVE_LOAD));
}

#[test]
fn cancelling_one_request_in_three_is_never_cut_off() {
    let mut peer = Peer::new();
    peer.control(&[]);
    for n in 0..1000 {
        let id = 4 * n;
        if n % 3 == 2 {
            peer.conn.on_reset(id, &mut peer.quic);
        } else {
            peer.send(id, &frame_bytes(frame::HEADERS, &get_section()), true);
        }
    }
    assert_eq!(peer.quic.closed, None);
}

#[test]
fn a_request_whose_first_bytes_come_after_a_later_ones_is_answered() {
    let mut peer = Peer::new();
    peer.control(&[]);
    // Stream 0's first packet was lost or overtaken: stream 4's arrives
    // first, and is answered and forgotten before stream 0's comes.
    peer.send(4, &frame_bytes(frame::HEADERS, &get_section()), true);
    peer.send(0, &frame_bytes(frame::HEADERS, &get_section()), true);
    assert_eq!(peer.quic.finished, [4, 0]);
    for id in [4, 0] {
        assert_eq!(data_payloads(&peer.quic.written[&id]), [b"Hello World!"]);
    }
    assert!(peer.quic.resets.is_empty() && peer.quic.stops.is_empty());
    assert!(peer.conn.is_idle());
    // The late bytes of a stream answered are ignored, not a new request.
    peer.send(0, &[], true);
    assert_eq!(peer.quic.finished, [4, 0]);
    // After GOAWAY (naming 16), a stream below it that comes late is
    // still taken; one at or above it is refused.
    peer.send(12, &frame_bytes(frame::HEADERS, &get_section()), true);
    peer.conn.go_away(&mut peer.quic);
    peer.send(8, &frame_bytes(frame::HEADERS, &get_section()), true);
    peer.send(16, &frame_bytes(frame::HEADERS, &get_section()), true);
    assert_eq!(peer.quic.finished, [4, 0, 12, 8]);
    assert_eq!(peer.quic.resets, [(16, frame::H3_REQUEST_REJECTED)]);
}

/// `peer`'s sites with `localhost` cold: the bucket holds it, no site is
/// loaded; the store waits `timeout` (its pipe: /dev/null).
fn cold_localhost(peer: &mut Peer, timeout: Duration) -> Arc<cold::Store> {
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let store = cold::Store::new(Arc::new(OwnedFd::from(null)), timeout);
    let hosts = cold::ColdHosts::new(Arc::clone(&store), ["localhost".to_owned()], None);
    peer.sites = Sites::by_host_cold([], None, Some(hosts));
    store
}

/// The `:status` and body of the response on stream `id`.
fn status_and_body(peer: &Peer, id: u64) -> (Vec<u8>, Vec<u8>) {
    let sent = &peer.quic.written[&id];
    let head = &frames(sent)[0];
    assert_eq!(head.0, frame::HEADERS);
    let mut status = Vec::new();
    crate::qpack::decode_field_section::<()>(&head.1, &mut Vec::new(), 1 << 16, |n, v| {
        if n == b":status" {
            status = v.to_vec();
        }
        Ok(())
    })
    .unwrap();
    (status, data_payloads(sent).concat())
}

#[test]
fn a_request_for_a_cold_site_is_parked_until_its_site_lands() {
    let mut peer = Peer::new();
    let store = cold_localhost(&mut peer, Duration::from_secs(600));
    peer.control(&[]);
    peer.send(0, &frame_bytes(frame::HEADERS, &get_section()), true);
    peer.send(4, &frame_bytes(frame::HEADERS, &get_section()), true);
    assert!(!peer.quic.written.contains_key(&0), "parked");
    assert!(peer.conn.holds_woken() && !peer.conn.is_idle());
    assert_eq!(peer.events.parked(), 2);
    assert_eq!(store.asks.load(Ordering::Relaxed), 1, "one fetch asked");

    // Still cold: parked on.
    peer.wake(false);
    assert!(!peer.quic.written.contains_key(&0) && peer.quic.finished.is_empty());
    assert_eq!(peer.events.parked(), 2);

    // The site landed: both answered, and forgotten.
    peer.sites = Sites::single(Site::dummy(SiteStats::new("_default", 1)));
    peer.wake(false);
    let mut finished = peer.quic.finished.clone();
    finished.sort_unstable();
    assert_eq!(finished, [0, 4]);
    for id in [0, 4] {
        assert_eq!(
            status_and_body(&peer, id),
            (b"200".to_vec(), b"Hello World!".to_vec())
        );
    }
    assert_eq!(peer.events.parked(), 0);
    assert!(peer.conn.is_idle() && !peer.conn.holds_woken());
}

#[test]
fn a_parked_request_gets_503_when_the_store_goes_down_or_its_wait_runs_out() {
    let mut peer = Peer::new();
    let store = cold_localhost(&mut peer, Duration::from_secs(600));
    peer.control(&[]);
    peer.send(0, &frame_bytes(frame::HEADERS, &get_section()), true);
    store.up.store(false, Ordering::Relaxed);
    peer.wake(false);
    assert_eq!(peer.quic.finished, [0]);
    let (status, body) = status_and_body(&peer, 0);
    assert_eq!(status, b"503");
    assert!(body.ends_with(b"the store is down\n"), "{body:?}");
    assert_eq!(peer.events.parked(), 0);

    // A wait of a millisecond: 503 once it ran out.
    let mut peer = Peer::new();
    let store = cold_localhost(&mut peer, Duration::from_millis(1));
    peer.control(&[]);
    peer.send(0, &frame_bytes(frame::HEADERS, &get_section()), true);
    let started = std::time::Instant::now();
    while peer.quic.finished.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never answered"
        );
        std::thread::sleep(Duration::from_millis(5));
        peer.wake(false);
    }
    let (status, body) = status_and_body(&peer, 0);
    assert_eq!(status, b"503");
    assert!(body.ends_with(b"fetched from the store\n"), "{body:?}");
    assert_eq!(store.timed_out.load(Ordering::Relaxed), 1);
    assert_eq!(peer.events.parked(), 0);
    assert!(peer.conn.is_idle());
}
