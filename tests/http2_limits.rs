//! HTTP/2 limits and lifecycle over real sockets, each test over h2c by
//! prior knowledge and over h2 on TLS (ALPN `h2`): every limit conn.rs
//! documents (streams in flight, header list and field block sizes, frames
//! that serve nothing, resets of streams being answered, request content
//! on GET, a flow-control window held closed) ends the way it says, and
//! every way a connection ends (idle timeout, graceful shutdown, a
//! connection error) sends the GOAWAY RFC 9113 asks for and closes; a hot
//! reload mid-body and the access log are seen from an HTTP/2 client.
//!
//! The client is written here, frame by frame: what it sends is built with
//! kiln's own frame writers and HPACK encoder (by hand where it must be
//! what no writer makes: an HPACK bomb, a bad index, an oversized frame),
//! and the response header blocks are read with kiln's HPACK decoder. Every read is bounded by `READ_TIMEOUT`, so a server that
//! hangs fails the test instead of stalling it; no sleep stands in for an
//! assertion. Not a `serve_*` file: it starts its own cleartext and TLS
//! listeners, so `./test` runs it once.

mod common;

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use kiln::hpack::{self, Decoder};
use kiln::pack::{PackWriter, RouteKind};
use kiln::serve::http2::conn::{MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST};
use kiln::serve::http2::frame::{
    self, DEFAULT_INITIAL_WINDOW_SIZE, DEFAULT_MAX_FRAME_SIZE, ErrorCode, FRAME_HEADER_LEN,
    FrameHeader, PREFACE, flag, frame_type as ty, setting,
};

use common::{Client, HELLO, Server, add_plain, big_body, insecure_client_config, sample_pack};

/// The most any one read waits: generous on a loaded machine, and a bound.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

// Limits private to conn.rs, mirrored here under the same names: a change
// there is to be made here too.

/// Frames that serve nothing (empty DATA, PING, SETTINGS, PRIORITY) a
/// connection is allowed before ENHANCE_YOUR_CALM.
const FREE_UNITS: u32 = 1000;
/// What resetting a stream still being answered costs of that allowance.
const RESET_COST: u32 = 10;
/// CONTINUATION frames one field block may take.
const MAX_CONTINUATIONS: u32 = 32;
/// Octets one field block may take over HEADERS and CONTINUATION.
const MAX_BLOCK: usize = 64 * 1024;
/// Request content read and dropped per stream; more gets 413.
const MAX_DISCARDED_BODY: usize = 64 * 1024;

/// How the client reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// Cleartext, HTTP/2 by prior knowledge (RFC 9113 §3.3).
    H2c,
    /// TLS with ALPN `h2` (§3.2).
    Tls,
}

/// Every test runs over both.
const TRANSPORTS: [Transport; 2] = [Transport::H2c, Transport::Tls];

impl Transport {
    fn scheme(self) -> &'static str {
        match self {
            Transport::H2c => "http",
            Transport::Tls => "https",
        }
    }
}

/// `kiln serve PACK` on one event loop (every connection of a test is on
/// the same thread, so one client's flood is next to the others'), with a
/// cleartext and a TLS listener, `extra` flags after.
fn start_on(pack: &Path, extra: &[&str]) -> Server {
    let mut args = vec![
        pack.to_str().unwrap(),
        "--threads",
        "1",
        "--listen-tls",
        "127.0.0.1:0",
        "--tls-self-signed",
    ];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    assert!(server.tls_port.is_some(), "{}", server.startup);
    server
}

/// `start_on` with the sample site (`/hello.txt`, the 1 MiB `/big.bin`).
fn start(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let pack = sample_pack(dir.path());
    let server = start_on(&pack, extra);
    (dir, server)
}

/// One frame from the server.
#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
    /// On the frame that ends a field block (HEADERS or CONTINUATION with
    /// END_HEADERS): the block, decoded.
    fields: Option<Vec<(String, String)>>,
}

impl Frame {
    /// The 32-bit word at `at` in the payload.
    fn word(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }

    fn ends_stream(&self) -> bool {
        matches!(self.kind, ty::DATA | ty::HEADERS) && self.flags & flag::END_STREAM != 0
    }

    /// The code of a RST_STREAM.
    fn reset_code(&self) -> Option<ErrorCode> {
        (self.kind == ty::RST_STREAM).then(|| ErrorCode(self.word(0)))
    }
}

/// A GOAWAY's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GoAway {
    last_stream: u32,
    code: ErrorCode,
}

/// A response as far as it arrived.
#[derive(Debug, Default)]
struct H2Response {
    /// 0 until the HEADERS arrived.
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
    /// END_STREAM arrived.
    ended: bool,
}

/// An HTTP/2 client connection speaking frames as the tests write them.
struct H2Client {
    io: Client,
    transport: Transport,
    /// Read but not yet made into frames.
    buf: Vec<u8>,
    /// Frames read and put back (see `unread`).
    backlog: VecDeque<Frame>,
    /// The HPACK context of the server's blocks.
    decoder: Decoder,
    /// A field block still waiting for its CONTINUATION frames.
    block: Vec<u8>,
    /// The server's first SETTINGS, as (identifier, value).
    settings: Vec<(u16, u32)>,
    /// What the client may send on the connection (the server's window).
    send_window: i64,
    /// What the client may send on each stream it sent content on.
    stream_windows: HashMap<u32, i64>,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE.
    initial_window: i64,
    /// The GOAWAY the server sent, once it did.
    goaway: Option<GoAway>,
    /// Credit the DATA read back at once (stream and connection), as a
    /// client that reads as fast as it receives.
    auto_window: bool,
    /// PINGs sent by `barrier`, for a payload of their own.
    pings: u64,
}

impl H2Client {
    /// Connects, sends the preface with an empty SETTINGS, and reads the
    /// server's SETTINGS, which must come first (§3.4).
    fn connect(server: &Server, transport: Transport) -> H2Client {
        H2Client::connect_with(server, transport, &[])
    }

    /// `connect` with the client's SETTINGS parameters.
    fn connect_with(server: &Server, transport: Transport, settings: &[(u16, u32)]) -> H2Client {
        let io = match transport {
            Transport::H2c => Client::Plain(server.connect_plain()),
            Transport::Tls => {
                let port = server.tls_port.expect("a TLS listener");
                let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                tcp.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
                let client = common::tls_client(tcp, "localhost", insecure_client_config(&[b"h2"]));
                let Client::Tls(tls) = &client else {
                    unreachable!()
                };
                assert_eq!(
                    tls.conn.alpn_protocol(),
                    Some(&b"h2"[..]),
                    "ALPN did not choose h2"
                );
                client
            }
        };
        io.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        let mut client = H2Client {
            io,
            transport,
            buf: Vec::new(),
            backlog: VecDeque::new(),
            decoder: Decoder::new(frame::DEFAULT_HEADER_TABLE_SIZE as usize),
            block: Vec::new(),
            settings: Vec::new(),
            send_window: i64::from(DEFAULT_INITIAL_WINDOW_SIZE),
            stream_windows: HashMap::new(),
            initial_window: i64::from(DEFAULT_INITIAL_WINDOW_SIZE),
            goaway: None,
            auto_window: true,
            pings: 0,
        };
        let mut hello = PREFACE.to_vec();
        frame::write_settings(&mut hello, settings);
        client.send(&hello);
        let first = client.frame().expect("the server's SETTINGS");
        assert!(
            first.kind == ty::SETTINGS && first.flags & flag::ACK == 0,
            "{transport:?}: the server's first frame is not SETTINGS: {first:?}"
        );
        client.settings = first
            .payload
            .chunks(6)
            .map(|p| {
                (
                    u16::from_be_bytes([p[0], p[1]]),
                    u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
                )
            })
            .collect();
        client.send(&frame::settings_ack());
        client
    }

    /// The server's SETTINGS value for `id`, if it sent one.
    fn setting(&self, id: u16) -> Option<u32> {
        self.settings
            .iter()
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| *v)
    }

    fn send(&mut self, bytes: &[u8]) {
        let transport = self.transport;
        self.io
            .write_all(bytes)
            .and_then(|()| self.io.flush())
            .unwrap_or_else(|e| panic!("{transport:?}: write: {e}"));
    }

    /// Sends what a flood sends: the server may close before it is all
    /// written. Whether it all went.
    fn send_lossy(&mut self, bytes: &[u8]) -> bool {
        self.io
            .write_all(bytes)
            .and_then(|()| self.io.flush())
            .is_ok()
    }

    /// The next frame, `None` once the server closed the connection.
    /// Panics when nothing arrives within `READ_TIMEOUT`.
    fn frame(&mut self) -> Option<Frame> {
        if let Some(f) = self.backlog.pop_front() {
            return Some(f);
        }
        loop {
            if self.buf.len() >= FRAME_HEADER_LEN {
                let header = FrameHeader::decode(self.buf[..FRAME_HEADER_LEN].try_into().unwrap());
                let end = FRAME_HEADER_LEN + header.len as usize;
                if self.buf.len() >= end {
                    let payload = self.buf[FRAME_HEADER_LEN..end].to_vec();
                    self.buf.drain(..end);
                    return Some(self.received(header, payload));
                }
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.io.read(&mut chunk) {
                Ok(0) => {
                    assert!(
                        self.buf.is_empty(),
                        "{:?}: closed inside a frame",
                        self.transport
                    );
                    return None;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                // A server that closed with our bytes unread resets the
                // connection: closed all the same.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!(
                        "{:?}: nothing from the server within {READ_TIMEOUT:?}",
                        self.transport
                    )
                }
                Err(e) => panic!("{:?}: read: {e}", self.transport),
            }
        }
    }

    /// Keeps the client's view of the connection: windows, the server's
    /// GOAWAY, and the HPACK context (every block is decoded, in order).
    fn received(&mut self, header: FrameHeader, payload: Vec<u8>) -> Frame {
        let mut frame = Frame {
            kind: header.frame_type,
            flags: header.flags,
            stream: header.stream,
            payload,
            fields: None,
        };
        match frame.kind {
            ty::WINDOW_UPDATE => {
                let increment = i64::from(frame.word(0) & 0x7fff_ffff);
                match frame.stream {
                    0 => self.send_window += increment,
                    s => *self.stream_windows.entry(s).or_insert(self.initial_window) += increment,
                }
            }
            ty::SETTINGS if frame.flags & flag::ACK == 0 => {
                for p in frame.payload.chunks(6) {
                    if u16::from_be_bytes([p[0], p[1]]) == setting::INITIAL_WINDOW_SIZE {
                        let value = i64::from(u32::from_be_bytes([p[2], p[3], p[4], p[5]]));
                        let delta = value - self.initial_window;
                        self.initial_window = value;
                        for w in self.stream_windows.values_mut() {
                            *w += delta;
                        }
                    }
                }
            }
            ty::GOAWAY => {
                self.goaway = Some(GoAway {
                    last_stream: frame.word(0) & 0x7fff_ffff,
                    code: ErrorCode(frame.word(4)),
                });
            }
            ty::HEADERS | ty::CONTINUATION => {
                let mut fragment = &frame.payload[..];
                if frame.kind == ty::HEADERS {
                    if frame.flags & flag::PADDED != 0 {
                        let pad = usize::from(fragment[0]);
                        fragment = &fragment[1..fragment.len() - pad];
                    }
                    if frame.flags & flag::PRIORITY != 0 {
                        fragment = &fragment[5..];
                    }
                }
                self.block.extend_from_slice(fragment);
                if frame.flags & flag::END_HEADERS != 0 {
                    let block = std::mem::take(&mut self.block);
                    let mut fields = Vec::new();
                    self.decoder
                        .decode(&block, &mut Vec::new(), 1 << 20, |n, v| {
                            fields.push((
                                String::from_utf8_lossy(n).into_owned(),
                                String::from_utf8_lossy(v).into_owned(),
                            ));
                            Ok::<(), ()>(())
                        })
                        .unwrap_or_else(|e| panic!("the server's field block: {e:?}"));
                    frame.fields = Some(fields);
                }
            }
            _ => {}
        }
        frame
    }

    /// Puts a frame back, to be read again first.
    fn unread(&mut self, frame: Frame) {
        self.backlog.push_front(frame);
    }

    /// The field block of a request, as a browser sends it (`extra` after
    /// the pseudo-header fields).
    fn request_block(&self, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in [
            (":method", "GET"),
            (":scheme", self.transport.scheme()),
            (":authority", "localhost"),
            (":path", path),
        ]
        .iter()
        .chain(extra)
        {
            hpack::encode_field(name.as_bytes(), value.as_bytes(), &mut block);
        }
        block
    }

    /// A GET of `path` on `stream`, with END_STREAM or with content to
    /// follow.
    fn request(&self, stream: u32, path: &str, end_stream: bool) -> Vec<u8> {
        headers_frame(stream, &self.request_block(path, &[]), end_stream)
    }

    /// Sends a GET and reads its whole response.
    fn get(&mut self, stream: u32, path: &str) -> H2Response {
        let request = self.request(stream, path, true);
        self.send(&request);
        self.response(stream)
    }

    /// Credits `stream` and the connection with `n` octets.
    fn grant(&mut self, stream: u32, n: u32) {
        let mut bytes = frame::window_update(stream, n).to_vec();
        bytes.extend(frame::window_update(0, n));
        self.send(&bytes);
    }

    /// Reads the response on `stream` to its end.
    fn response(&mut self, stream: u32) -> H2Response {
        let mut response = H2Response::default();
        self.read_response(stream, &mut response, usize::MAX);
        response
    }

    /// Reads the response on `stream` into `response` until it ends or
    /// its body has `until` octets. Frames of other streams and of the
    /// connection are passed over (a GOAWAY is kept in `self.goaway`).
    fn read_response(&mut self, stream: u32, response: &mut H2Response, until: usize) {
        while !response.ended && response.body.len() < until {
            let Some(f) = self.frame() else {
                panic!(
                    "{:?}: closed before the response on stream {stream} ended \
                     ({} octets of body; GOAWAY: {:?})",
                    self.transport,
                    response.body.len(),
                    self.goaway
                );
            };
            if f.stream != stream {
                continue;
            }
            if let Some(code) = f.reset_code() {
                panic!("{:?}: stream {stream} reset with {code:?}", self.transport);
            }
            if let Some(fields) = &f.fields {
                response.status = fields
                    .iter()
                    .find(|(n, _)| n == ":status")
                    .and_then(|(_, v)| v.parse().ok())
                    .expect(":status");
                response.fields = fields.clone();
            }
            if f.kind == ty::DATA {
                response.body.extend_from_slice(&f.payload);
                if self.auto_window && !f.payload.is_empty() {
                    let n = f.payload.len() as u32;
                    let mut bytes = frame::window_update(0, n).to_vec();
                    if !f.ends_stream() {
                        bytes.extend(frame::window_update(stream, n));
                    }
                    // The server may close once the response is sent.
                    self.send_lossy(&bytes);
                }
            }
            response.ended |= f.ends_stream();
        }
    }

    /// Sends a PING and returns every frame the server sent before its
    /// acknowledgement: the server handles frames in order, so these are
    /// all its answers to what was sent before the PING.
    fn barrier(&mut self) -> Vec<Frame> {
        self.pings += 1;
        let payload = self.pings.to_be_bytes();
        self.send(&raw_frame(ty::PING, 0, 0, &payload));
        let mut before = Vec::new();
        loop {
            let f = self.frame().unwrap_or_else(|| {
                panic!(
                    "{:?}: closed before the PING was answered: {before:?}",
                    self.transport
                )
            });
            if f.kind == ty::PING && f.flags & flag::ACK != 0 && f.payload == payload {
                return before;
            }
            before.push(f);
        }
    }

    /// Reads until the server's GOAWAY.
    fn goaway(&mut self) -> GoAway {
        while self.goaway.is_none() {
            if self.frame().is_none() {
                panic!("{:?}: closed without a GOAWAY", self.transport);
            }
        }
        self.goaway.unwrap()
    }

    /// Reads until the server closes; returns the frames it sent before.
    fn closed(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(f) = self.frame() {
            frames.push(f);
        }
        frames
    }

    /// Ends the connection as a client does, with a GOAWAY, and reads
    /// until the server closes: with no stream in flight it must, at once,
    /// and without an error of its own.
    fn finish(mut self) {
        let mut bytes = Vec::new();
        frame::write_goaway(&mut bytes, 0, ErrorCode::NO_ERROR, b"");
        self.send(&bytes);
        self.closed();
        if let Some(goaway) = self.goaway {
            assert_eq!(goaway.code, ErrorCode::NO_ERROR, "{:?}", self.transport);
        }
    }

    /// Sends `total` octets of content on `stream` in DATA frames as flow
    /// control allows (END_STREAM on the last if `end_stream`), reading
    /// WINDOW_UPDATEs when a window is closed. Stops early, with `false`,
    /// when the server answers or resets the stream first (the frame is
    /// left to read); panics when it does neither and keeps the window
    /// closed.
    fn send_content(&mut self, stream: u32, total: usize, end_stream: bool) -> bool {
        let mut sent = 0;
        while sent < total {
            let window = *self
                .stream_windows
                .entry(stream)
                .or_insert(self.initial_window);
            let room = window
                .min(self.send_window)
                .min(i64::from(DEFAULT_MAX_FRAME_SIZE))
                .min((total - sent) as i64);
            if room > 0 {
                let n = room as usize;
                let last = sent + n == total;
                let mut bytes =
                    frame::data_frame_header(stream, n as u32, last && end_stream).to_vec();
                bytes.resize(FRAME_HEADER_LEN + n, b'c');
                self.send(&bytes);
                sent += n;
                self.send_window -= room;
                *self.stream_windows.get_mut(&stream).unwrap() -= room;
                continue;
            }
            let f = self.frame().unwrap_or_else(|| {
                panic!(
                    "{:?}: closed after {sent} octets of content on stream {stream} \
                     (GOAWAY: {:?})",
                    self.transport, self.goaway
                )
            });
            assert!(
                f.kind != ty::GOAWAY,
                "{:?}: stream {stream}'s window closed after {sent} octets of content, \
                 and the server sent GOAWAY {:?} instead of a WINDOW_UPDATE or a response",
                self.transport,
                self.goaway
            );
            if f.stream == stream && (f.fields.is_some() || f.kind == ty::RST_STREAM) {
                self.unread(f);
                return false;
            }
        }
        true
    }
}

/// A frame with any header and payload.
fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let header = FrameHeader {
        len: payload.len() as u32,
        frame_type: kind,
        flags,
        stream,
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

/// A HEADERS frame with a whole field block.
fn headers_frame(stream: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let mut bytes =
        frame::headers_frame_header(stream, block.len() as u32, end_stream, true).to_vec();
    bytes.extend_from_slice(block);
    bytes
}

/// An HPACK integer (RFC 7541 §5.1) with `prefix` bits, `first` holding
/// the representation's leading bits.
fn hpack_integer(value: usize, prefix: u32, first: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// An HPACK string literal, not Huffman-coded (§5.2).
fn hpack_string(bytes: &[u8], out: &mut Vec<u8>) {
    hpack_integer(bytes.len(), 7, 0, out);
    out.extend_from_slice(bytes);
}

/// The RST_STREAM frames among `frames`, as (stream, code).
fn resets(frames: &[Frame]) -> Vec<(u32, ErrorCode)> {
    frames
        .iter()
        .filter_map(|f| Some((f.stream, f.reset_code()?)))
        .collect()
}

/// Streams beyond SETTINGS_MAX_CONCURRENT_STREAMS are refused one by one
/// (REFUSED_STREAM, safe to retry: §8.7), not the connection; once streams
/// end, new ones are served again.
#[test]
fn streams_beyond_the_concurrency_limit_are_refused_and_the_connection_goes_on() {
    let (_dir, server) = start(&[]);
    for t in TRANSPORTS {
        let mut c = H2Client::connect(&server, t);
        // As many as browsers open.
        assert_eq!(
            c.setting(setting::MAX_CONCURRENT_STREAMS),
            Some(100),
            "{t:?}"
        );
        // The limit's worth of requests whose content never ends: each
        // holds its stream open. Then one more.
        let mut bytes = Vec::new();
        for i in 0..MAX_CONCURRENT_STREAMS {
            bytes.extend(c.request(2 * i + 1, "/hello.txt", false));
        }
        let extra = 2 * MAX_CONCURRENT_STREAMS + 1;
        bytes.extend(c.request(extra, "/hello.txt", true));
        c.send(&bytes);
        let answers = c.barrier();
        assert_eq!(
            resets(&answers),
            [(extra, ErrorCode::REFUSED_STREAM)],
            "{t:?}"
        );
        assert!(
            answers
                .iter()
                .all(|f| f.kind != ty::HEADERS && f.kind != ty::GOAWAY),
            "{t:?}: {answers:?}"
        );
        // Streams end: the client cancels ten, and ends the content of
        // the eleventh, which is answered.
        let mut bytes = Vec::new();
        for stream in (1..=19).step_by(2) {
            bytes.extend(frame::rst_stream(stream, ErrorCode::CANCEL));
        }
        bytes.extend(frame::data_frame_header(21, 0, true));
        c.send(&bytes);
        let r = c.response(21);
        assert_eq!((r.status, &r.body[..]), (200, HELLO), "{t:?}");
        // There is room again: a new stream is served.
        let r = c.get(extra + 2, "/hello.txt");
        assert_eq!((r.status, &r.body[..]), (200, HELLO), "{t:?}");
        // The streams still open are cancelled, so the connection can end.
        let mut bytes = Vec::new();
        for stream in (23..2 * MAX_CONCURRENT_STREAMS).step_by(2) {
            bytes.extend(frame::rst_stream(stream, ErrorCode::CANCEL));
        }
        c.send(&bytes);
        assert_eq!(c.goaway, None, "{t:?}");
        c.finish();
    }
}

/// The rapid-reset attack (CVE-2023-44487): requests cancelled as soon as
/// they are made cost the server a response each and the client nothing.
/// Kiln ends the connection with ENHANCE_YOUR_CALM after about
/// FREE_UNITS / RESET_COST such resets, well before the flood's end, and
/// keeps serving other connections.
#[test]
fn rapid_resets_end_with_enhance_your_calm() {
    let (_dir, server) = start(&[]);
    for t in TRANSPORTS {
        let mut c = H2Client::connect(&server, t);
        // 1 MiB bodies: each stream is still being answered when its
        // reset arrives, however the frames are split across reads (the
        // connection window holds the first 64 KiB at most).
        let pairs = 2000u32;
        let mut last_sent = 0;
        for batch in (0..pairs).collect::<Vec<_>>().chunks(100) {
            let mut bytes = Vec::new();
            for i in batch {
                let stream = 2 * i + 1;
                bytes.extend(c.request(stream, "/big.bin", true));
                bytes.extend(frame::rst_stream(stream, ErrorCode::CANCEL));
                last_sent = stream;
            }
            if !c.send_lossy(&bytes) {
                break;
            }
        }
        let goaway = c.goaway();
        assert_eq!(goaway.code, ErrorCode::ENHANCE_YOUR_CALM, "{t:?}");
        let allowed = FREE_UNITS / RESET_COST;
        assert!(
            goaway.last_stream <= 2 * (2 * allowed) + 1 && goaway.last_stream < last_sent,
            "{t:?}: cut off only at stream {} of {last_sent}",
            goaway.last_stream
        );
        c.closed();
        let mut fresh = H2Client::connect(&server, t);
        let r = fresh.get(1, "/hello.txt");
        assert_eq!((r.status, &r.body[..]), (200, HELLO), "{t:?}");
        fresh.finish();
    }
}

/// A field block that never ends (CVE-2024-27316 class): CONTINUATION
/// frames without END_HEADERS. The server gives up once the block passes
/// MAX_CONTINUATIONS frames or MAX_BLOCK octets, with ENHANCE_YOUR_CALM,
/// and closes; the client sends no more than that and never ends the
/// block, so the server cannot have waited for its end, buffering it.
#[test]
fn a_continuation_flood_ends_with_enhance_your_calm() {
    let (_dir, server) = start(&[]);
    // Many small frames (the count), then few full ones (the size).
    let floods = [
        (0usize, MAX_CONTINUATIONS as usize + 1),
        (
            DEFAULT_MAX_FRAME_SIZE as usize,
            MAX_BLOCK / DEFAULT_MAX_FRAME_SIZE as usize + 1,
        ),
    ];
    for t in TRANSPORTS {
        for (size, count) in floods {
            let mut c = H2Client::connect(&server, t);
            let block = c.request_block("/hello.txt", &[]);
            let mut bytes =
                frame::headers_frame_header(1, block.len() as u32, true, false).to_vec();
            bytes.extend_from_slice(&block);
            for _ in 0..count {
                bytes.extend(frame::continuation_frame_header(1, size as u32, false));
                bytes.resize(bytes.len() + size, 0x80);
            }
            c.send_lossy(&bytes);
            let goaway = c.goaway();
            assert_eq!(
                goaway,
                GoAway {
                    // The stream never opened: its block was not decoded.
                    last_stream: 0,
                    code: ErrorCode::ENHANCE_YOUR_CALM,
                },
                "{t:?}: {count} CONTINUATION frames of {size} octets"
            );
            let after = c.closed();
            assert!(
                after.iter().all(|f| f.kind != ty::HEADERS),
                "{t:?}: {after:?}"
            );
        }
    }
}

/// An HPACK bomb: one large entry put in the dynamic table, then
/// referenced over and over, a few octets each, for a header list far
/// beyond SETTINGS_MAX_HEADER_LIST_SIZE. The request gets 431, and the
/// connection goes on with its HPACK context in step: a later request
/// referencing the same entry once is served.
#[test]
fn an_hpack_bomb_gets_431_and_the_connection_goes_on() {
    let (_dir, server) = start(&[]);
    for t in TRANSPORTS {
        let mut c = H2Client::connect(&server, t);
        assert_eq!(
            c.setting(setting::MAX_HEADER_LIST_SIZE),
            Some(MAX_HEADER_LIST)
        );
        let value = vec![b'x'; 4000];
        // RFC 7541 §4.1: name + value + 32.
        let entry_size = b"bomb".len() + value.len() + 32;
        let references = 4 * MAX_HEADER_LIST as usize / entry_size;
        let mut block = c.request_block("/hello.txt", &[]);
        // Literal with incremental indexing, new name (§6.2.1): becomes
        // dynamic index 62, the first after the static table.
        block.push(0x40);
        hpack_string(b"bomb", &mut block);
        hpack_string(&value, &mut block);
        block.extend(std::iter::repeat_n(0x80 | 62, references));
        assert!(block.len() < DEFAULT_MAX_FRAME_SIZE as usize);
        c.send(&headers_frame(1, &block, true));
        let r = c.response(1);
        assert_eq!(r.status, 431, "{t:?}: {r:?}");
        let mut block = c.request_block("/hello.txt", &[]);
        block.push(0x80 | 62);
        c.send(&headers_frame(3, &block, true));
        let r = c.response(3);
        assert_eq!((r.status, &r.body[..]), (200, HELLO), "{t:?}");
        assert_eq!(c.goaway, None, "{t:?}");
        c.finish();
    }
}

/// Frames that make the server work without serving anything: SETTINGS,
/// PING, PRIORITY and empty DATA, each sent past the allowance, end the
/// connection with ENHANCE_YOUR_CALM.
#[test]
fn settings_ping_priority_and_empty_data_floods_end_with_enhance_your_calm() {
    let (_dir, server) = start(&[]);
    // Each flood's name, and its i-th frame.
    type Flood = (&'static str, fn(u32) -> Vec<u8>);
    let floods: [Flood; 4] = [
        ("SETTINGS", |_| raw_frame(ty::SETTINGS, 0, 0, &[])),
        ("PING", |i| {
            raw_frame(ty::PING, 0, 0, &u64::from(i).to_be_bytes())
        }),
        // On idle streams, each on its own, depending on none.
        ("PRIORITY", |i| {
            raw_frame(ty::PRIORITY, 0, 2 * i + 3, &[0, 0, 0, 0, 15])
        }),
        // On stream 1, whose content never ends.
        ("empty DATA", |_| {
            frame::data_frame_header(1, 0, false).to_vec()
        }),
    ];
    for t in TRANSPORTS {
        for (name, flood) in floods {
            let mut c = H2Client::connect(&server, t);
            let mut bytes = c.request(1, "/hello.txt", false);
            for i in 0..2 * FREE_UNITS {
                bytes.extend(flood(i));
            }
            c.send_lossy(&bytes);
            let goaway = c.goaway();
            assert_eq!(
                goaway.code,
                ErrorCode::ENHANCE_YOUR_CALM,
                "{t:?}: {name} flood"
            );
            c.closed();
        }
    }
}

/// A client that sets every window to 0 and never opens one holds a
/// response forever: the header deadline (`--header-timeout`) covers the
/// wait, and the server says GOAWAY and closes within it.
#[test]
fn a_window_held_closed_ends_with_goaway_at_the_header_deadline() {
    let (_dir, server) = start(&["--header-timeout", "1"]);
    for t in TRANSPORTS {
        let mut c = H2Client::connect_with(&server, t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
        c.auto_window = false;
        let asked = Instant::now();
        let request = c.request(1, "/hello.txt", true);
        c.send(&request);
        let goaway = c.goaway();
        let frames = c.closed();
        let elapsed = asked.elapsed();
        assert_eq!(
            goaway,
            GoAway {
                last_stream: 1,
                code: ErrorCode::NO_ERROR
            },
            "{t:?}"
        );
        assert!(
            frames.iter().all(|f| f.kind != ty::DATA),
            "{t:?}: DATA without a window"
        );
        assert!(
            elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(5),
            "{t:?}: closed after {elapsed:?}, the deadline is 1 s"
        );
    }
}

/// Content on a GET is read and dropped up to MAX_DISCARDED_BODY (the
/// response comes at END_STREAM); past it the stream gets 413 at once and
/// the client is asked to stop sending (RST_STREAM NO_ERROR, §8.1), while
/// the connection goes on. The client keeps to flow control, as any does:
/// the server's windows must let it get past the limit.
#[test]
fn content_on_get_is_dropped_up_to_the_limit_and_refused_past_it() {
    let (_dir, server) = start(&[]);
    for t in TRANSPORTS {
        let mut c = H2Client::connect(&server, t);
        // Exactly the limit: read, dropped, answered.
        let request = c.request(1, "/hello.txt", false);
        c.send(&request);
        assert!(
            c.send_content(1, MAX_DISCARDED_BODY, true),
            "{t:?}: answered early"
        );
        let r = c.response(1);
        assert_eq!((r.status, &r.body[..]), (200, HELLO), "{t:?}");
        // Past it: 413 before the content ends.
        let request = c.request(3, "/hello.txt", false);
        c.send(&request);
        c.send_content(3, 2 * MAX_DISCARDED_BODY, false);
        let r = c.response(3);
        assert_eq!(r.status, 413, "{t:?}: {r:?}");
        let answers = c.barrier();
        assert_eq!(resets(&answers), [(3, ErrorCode::NO_ERROR)], "{t:?}");
        // The connection goes on.
        let r = c.get(5, "/hello.txt");
        assert_eq!((r.status, &r.body[..]), (200, HELLO), "{t:?}");
        assert_eq!(c.goaway, None, "{t:?}");
        c.finish();
    }
}

/// An idle connection is closed at the keep-alive deadline with GOAWAY
/// NO_ERROR naming the last stream the client opened (all were served).
#[test]
fn an_idle_connection_gets_goaway_at_the_keepalive_deadline() {
    let (_dir, server) = start(&["--keepalive-timeout", "1"]);
    for t in TRANSPORTS {
        let mut c = H2Client::connect(&server, t);
        for stream in [1, 3, 5] {
            let r = c.get(stream, "/hello.txt");
            assert_eq!((r.status, &r.body[..]), (200, HELLO), "{t:?}");
        }
        let idle = Instant::now();
        let goaway = c.goaway();
        c.closed();
        let elapsed = idle.elapsed();
        assert_eq!(
            goaway,
            GoAway {
                last_stream: 5,
                code: ErrorCode::NO_ERROR
            },
            "{t:?}"
        );
        assert!(
            elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(5),
            "{t:?}: closed after {elapsed:?} idle, the deadline is 1 s"
        );
    }
}

/// SIGTERM: idle connections get GOAWAY NO_ERROR and close; a response in
/// flight, waiting on the client's flow-control window, still completes
/// byte for byte (its GOAWAY names its stream), and the server exits.
#[test]
fn sigterm_sends_goaway_and_finishes_responses_in_flight() {
    for t in TRANSPORTS {
        let (_dir, mut server) = start(&[]);
        let mut idle = H2Client::connect(&server, t);
        let r = idle.get(1, "/hello.txt");
        assert_eq!(r.body, HELLO, "{t:?}");
        let mut busy = H2Client::connect(&server, t);
        busy.auto_window = false;
        let request = busy.request(1, "/big.bin", true);
        busy.send(&request);
        let mut download = H2Response::default();
        let first_window = DEFAULT_INITIAL_WINDOW_SIZE as usize;
        busy.read_response(1, &mut download, first_window);
        assert_eq!(download.status, 200, "{t:?}");

        server.signal(libc::SIGTERM);
        // The idle connection is told, and closed: the drain has begun.
        assert_eq!(
            idle.goaway(),
            GoAway {
                last_stream: 1,
                code: ErrorCode::NO_ERROR
            },
            "{t:?}"
        );
        idle.closed();
        // The download goes on as the client opens its windows.
        busy.auto_window = true;
        busy.grant(1, 1 << 24);
        busy.read_response(1, &mut download, usize::MAX);
        assert!(download.body == big_body(), "{t:?}: the body differs");
        assert_eq!(
            busy.goaway(),
            GoAway {
                last_stream: 1,
                code: ErrorCode::NO_ERROR
            },
            "{t:?}"
        );
        busy.closed();
        let status = server
            .wait_exit(Duration::from_secs(15))
            .expect("the server exits");
        assert!(status.success(), "{t:?}: {status:?}");
    }
}

/// `/big.bin` of the reload test's packs: 4 MiB, different in each
/// version, the same length, so both packs have the same layout and an
/// offset read from the wrong one gives wrong bytes, not an error.
fn reload_body(version: u8) -> Vec<u8> {
    (0..4 << 20u32)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ version.wrapping_mul(0x5b))
        .collect()
}

/// Writes the reload test's pack (renamed into place when whole).
fn reload_pack(path: &Path, version: u8) {
    let mut w = PackWriter::create(path).unwrap();
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/big.bin")],
        &format!("\"big-{version}\""),
        "application/octet-stream",
        &reload_body(version),
        200,
    );
    add_plain(
        &mut w,
        &[(RouteKind::Exact, "/version.txt")],
        &format!("\"v{version}\""),
        "text/plain",
        format!("v{version}").as_bytes(),
        200,
    );
    w.finish().unwrap();
}

/// A hot reload in the middle of a body: the stream finishes with the old
/// pack's bytes, sent over many loop turns before and after the reload (a
/// small window), while a new stream on the same connection, and on a new
/// one, gets the new pack.
#[test]
fn a_body_started_before_a_reload_finishes_from_the_old_pack() {
    let (old, new) = (reload_body(1), reload_body(2));
    let chunk = 16 * 1024;
    for t in TRANSPORTS {
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("site.pack");
        reload_pack(&pack, 1);
        let server = start_on(&pack, &[]);
        let mut c = H2Client::connect_with(&server, t, &[(setting::INITIAL_WINDOW_SIZE, chunk)]);
        c.auto_window = false;
        let request = c.request(1, "/big.bin", true);
        c.send(&request);
        // Four turns of the old pack, one window each.
        let mut download = H2Response::default();
        for turn in 1..=4 {
            c.read_response(1, &mut download, turn * chunk as usize);
            c.grant(1, chunk);
        }
        c.read_response(1, &mut download, 5 * chunk as usize);
        assert_eq!(download.status, 200, "{t:?}");

        let reloads = |s: &Server| s.stderr_text().matches("reloaded").count();
        let before = reloads(&server);
        reload_pack(&pack, 2);
        let waiting = Instant::now();
        while reloads(&server) == before {
            assert!(
                waiting.elapsed() < Duration::from_secs(20),
                "{t:?}: no reload: {}",
                server.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Stream 1's window is closed: a new stream goes, on the new pack.
        let r = c.get(3, "/version.txt");
        assert_eq!(r.body, b"v2", "{t:?}");
        // The rest of stream 1, over many more turns.
        while !download.ended {
            c.grant(1, 4 * chunk);
            let until = download.body.len() + 4 * chunk as usize;
            c.read_response(1, &mut download, until);
        }
        assert_eq!(download.body.len(), old.len(), "{t:?}");
        if let Some(at) = (0..old.len()).find(|&i| download.body[i] != old[i]) {
            panic!("{t:?}: the old body differs from octet {at} on");
        }
        c.auto_window = true;
        let r = c.get(5, "/big.bin");
        assert!(
            r.body == new,
            "{t:?}: a new stream did not get the new body"
        );
        c.finish();
        let mut fresh = H2Client::connect(&server, t);
        assert_eq!(fresh.get(1, "/version.txt").body, b"v2", "{t:?}");
        fresh.finish();
    }
}

/// With the access log on, an HTTP/2 request is logged as HTTP/2.0.
#[test]
fn the_access_log_says_http_2() {
    let (_dir, server) = start(&["--access-log", "-"]);
    for t in TRANSPORTS {
        let mut c = H2Client::connect(&server, t);
        let agent = format!("http2-limits-{t:?}");
        let block = c.request_block("/hello.txt", &[("user-agent", &agent)]);
        c.send(&headers_frame(1, &block, true));
        assert_eq!(c.response(1).status, 200, "{t:?}");
        c.finish();
        // The log is flushed about once a second.
        let line = |s: &Server| {
            s.stdout
                .lock()
                .unwrap()
                .lines()
                .find(|l| l.contains(&agent))
                .map(str::to_owned)
        };
        let waiting = Instant::now();
        let logged = loop {
            if let Some(l) = line(&server) {
                break l;
            }
            assert!(
                waiting.elapsed() < Duration::from_secs(10),
                "{t:?}: not logged"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            logged.contains("\"GET /hello.txt HTTP/2.0\" 200 12 "),
            "{t:?}: {logged}"
        );
    }
}

/// Errors of the connection as a whole get GOAWAY with the code RFC 9113
/// gives them, naming the last stream opened, then the close.
#[test]
fn connection_errors_get_goaway_with_their_code() {
    let (_dir, server) = start(&[]);
    type Case = (&'static str, fn(&H2Client) -> Vec<u8>, u32, ErrorCode);
    let cases: [Case; 9] = [
        (
            "DATA on stream 0 (§6.1)",
            |_| raw_frame(ty::DATA, 0, 0, b"x"),
            0,
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            "a frame past SETTINGS_MAX_FRAME_SIZE (§4.2)",
            |c| {
                let mut bytes = c.request(1, "/hello.txt", false);
                let size = DEFAULT_MAX_FRAME_SIZE as usize + 1;
                bytes.extend(raw_frame(ty::DATA, 0, 1, &vec![b'c'; size]));
                bytes
            },
            1,
            ErrorCode::FRAME_SIZE_ERROR,
        ),
        (
            "SETTINGS of a length not a multiple of 6 (§6.5)",
            |_| raw_frame(ty::SETTINGS, 0, 0, &[0; 5]),
            0,
            ErrorCode::FRAME_SIZE_ERROR,
        ),
        (
            "HEADERS on an even stream (§5.1.1)",
            |c| c.request(2, "/hello.txt", true),
            0,
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            "CONTINUATION without HEADERS (§6.10)",
            |c| {
                let block = c.request_block("/hello.txt", &[]);
                let mut bytes =
                    frame::continuation_frame_header(1, block.len() as u32, true).to_vec();
                bytes.extend(block);
                bytes
            },
            0,
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            "another frame inside a field block (§6.10)",
            |c| {
                let block = c.request_block("/hello.txt", &[]);
                let mut bytes =
                    frame::headers_frame_header(1, block.len() as u32, true, false).to_vec();
                bytes.extend(block);
                bytes.extend(raw_frame(ty::PING, 0, 0, &[0; 8]));
                bytes
            },
            0,
            ErrorCode::PROTOCOL_ERROR,
        ),
        (
            "an HPACK index that is not in any table (§4.3)",
            |c| {
                let mut block = c.request_block("/hello.txt", &[]);
                block.push(0x80 | 70);
                headers_frame(1, &block, true)
            },
            0,
            ErrorCode::COMPRESSION_ERROR,
        ),
        (
            "a connection window past 2^31-1 (§6.9.1)",
            |_| frame::window_update(0, frame::MAX_WINDOW_SIZE).to_vec(),
            0,
            ErrorCode::FLOW_CONTROL_ERROR,
        ),
        (
            "SETTINGS_INITIAL_WINDOW_SIZE past 2^31-1 (§6.5.2)",
            |_| {
                let mut bytes = Vec::new();
                frame::write_settings(&mut bytes, &[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]);
                bytes
            },
            0,
            ErrorCode::FLOW_CONTROL_ERROR,
        ),
    ];
    for t in TRANSPORTS {
        for (what, bytes, last_stream, code) in cases {
            let mut c = H2Client::connect(&server, t);
            let bytes = bytes(&c);
            c.send_lossy(&bytes);
            assert_eq!(c.goaway(), GoAway { last_stream, code }, "{t:?}: {what}");
            let after = c.closed();
            assert!(
                after.is_empty(),
                "{t:?}: {what}: frames after GOAWAY: {after:?}"
            );
        }
    }
}
