//! The first invariant of ARCHITECTURE.md: the hot path never allocates.
//!
//! A counting global allocator (the only one in this test binary) counts
//! the allocations made on this thread while the server side runs: the
//! calls the event loop makes into `stack::Protocols` (`begin_turn`,
//! `input`, `resume`), driven in memory as the loop drives them (output
//! cleared once "sent", `resume` while `more`). The client side (a real
//! rustls client, the HTTP/1 and HTTP/2 parsing of the answers) allocates
//! freely and is not counted.
//!
//! Every case is one connection: HTTP/1.1, h2c, HTTP/1.1 over TLS and h2
//! over TLS; bodies of 1 KiB and 1 MiB (above the sendfile threshold, and
//! sixteen TLS steps); one request at a time, and a batch of pipelined
//! requests (HTTP/1) or concurrent streams (HTTP/2) in one read; and a
//! request naming a dictionary (`Available-Dictionary`, RFC 9842) that a
//! delta variant answers.
//!
//! HTTP/3 is counted one layer up: kiln's `http3::Conn` driven through its
//! `Streams` trait by a double of QUIC (`Quic`), not through quinn-proto,
//! whose own allocations (per stream) are out of scope and not counted;
//! 200 with a small and a large body, 304, a range and a delta.
//!
//! "Per request after warm-up" means: the connection first serves
//! `WARM_UP_ROUNDS` rounds of the same traffic, in which it may allocate
//! what it keeps for its life (the TLS session, the HTTP/2 connection and
//! its stream table, the buffer a TLS session keeps the plaintext of a
//! response it seals a step at a time in: allocated at the first response
//! larger than a step, then reused); then `MEASURED_ROUNDS` rounds must
//! make no allocation at all. Every large body here takes several turns
//! (`Step::more()`), which is what a slow client gets too: the loop only
//! calls `resume` once the socket took the previous output. What the
//! socket did not take is the loop's to keep: the epoll loop's
//! `io::send_output` and `io::resume` are counted the same way over a real
//! socket to a client slower than it (the io_uring loop hands its output
//! to the kernel in the same kind of reused buffers).
//!
//! Not counted: requests that arrive cut across reads (a TLS record or an
//! HTTP/1 head in pieces), which the invariant lets a connection keep in
//! a buffer of its own until whole, so that an idle connection owns none.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use bytes::Bytes;
use kiln::pack::{DeltaIn, Encoding, Pack, PackWriter, RouteIn, RouteKind, VariantIn};
use kiln::serve::date::DateCache;
use kiln::serve::handler::live::EventStreams;
use kiln::serve::handler::{Http01, Scratch as HandlerScratch, Site, Sites};
use kiln::serve::http3::frame as h3frame;
use kiln::serve::http3::{Answering, Bodies, Conn as H3Conn, Scratch as H3Scratch, Streams};
use kiln::serve::metrics::{Metrics, Scheme};
use kiln::serve::net::io::{self, Flush, Sent, SparePending};
use kiln::serve::net::{Backing, Output, Seg, Stack, TURN_SHARE};
use kiln::serve::output::SENDFILE_MIN;
use kiln::serve::request_context::RequestContext;
use kiln::serve::server_headers::ServerHeaders;
use kiln::serve::stack::{self, CurrentSites, Protocols, StackConfig};
use kiln::serve::tls::{self, certs};
use rustls::ClientConnection;

mod common;

struct Counting;

thread_local! {
    /// Set while the server side runs on this thread.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Allocations made on this thread while `COUNTING` was set (the tests
    /// run on threads of their own, side by side).
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// Counts an allocation if this thread is counting.
fn count() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` with this thread's allocations counted; returns its result
/// and how many it made.
fn counted<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATIONS.get();
    COUNTING.set(true);
    let result = f();
    COUNTING.set(false);
    (result, ALLOCATIONS.get() - before)
}

const WARM_UP_ROUNDS: usize = 2;
const MEASURED_ROUNDS: usize = 3;
/// Requests per round in the pipelined (HTTP/1) and concurrent (HTTP/2)
/// cases.
const BATCH: usize = 4;
const NOW: i64 = 1_700_000_000;

const SMALL: usize = 1024;
const LARGE: usize = 1024 * 1024;

/// A pack with `/small.bin` (1 KiB) and `/large.bin` (1 MiB).
fn sites(dir: &std::path::Path) -> Arc<Sites> {
    let path = dir.join("site.pack");
    let mut w = PackWriter::create(&path).unwrap();
    let large = common::big_body();
    for (key, body) in [("/small.bin", &large[..SMALL]), ("/large.bin", &large[..])] {
        common::add_plain(
            &mut w,
            &[(RouteKind::Exact, key)],
            "\"x\"",
            "application/octet-stream",
            body,
            200,
        );
    }
    // `/delta.bin`: the large body, and a `SMALL`-byte dcb delta of it
    // against `DICTIONARY` (the server never decodes it).
    let identity = w.add_body(&large).unwrap();
    let mut delta = kiln::dictionary::DCB_MAGIC.to_vec();
    delta.extend_from_slice(&kiln::dictionary::sha256(DICTIONARY));
    delta.resize(SMALL, 0);
    let delta = w.add_body(&delta).unwrap();
    let (plain_head, delta_head) = (
        common::head(
            "\"x\"",
            "application/octet-stream",
            None,
            true,
            identity.len,
        ),
        common::head(
            "\"d\"",
            "application/octet-stream",
            Some("dcb"),
            true,
            delta.len,
        ),
    );
    let set = w
        .add_variant_set_with_deltas(
            &[VariantIn {
                encoding: Encoding::Identity,
                head: &plain_head,
                body: identity,
            }],
            &[DeltaIn {
                encoding: Encoding::Dcb,
                dictionary: kiln::dictionary::sha256(DICTIONARY),
                head: &delta_head,
                body: delta,
            }],
        )
        .unwrap();
    w.add_route(RouteIn {
        kind: RouteKind::Exact,
        key: DELTA.as_bytes(),
        status: 200,
        last_modified: NOW,
        variants: set,
        validators: true,
    })
    .unwrap();
    w.finish().unwrap();
    Sites::single(Site::from_pack(Pack::open(&path).unwrap()))
}

/// The route with a delta variant, and the dictionary a client names.
const DELTA: &str = "/delta.bin";
const DICTIONARY: &[u8] = b"the old version";

/// The fields a request for `DELTA` carries.
fn delta_fields() -> [(&'static str, String); 2] {
    [
        ("accept-encoding", "gzip, br, dcb, dcz".to_owned()),
        (
            "available-dictionary",
            kiln::dictionary::available_dictionary_value(&kiln::dictionary::sha256(DICTIONARY)),
        ),
    ]
}

/// The server side of one connection, as one event loop drives it.
struct Server {
    protocols: Protocols,
    session: stack::Session,
    out: Output,
    /// What the loop read, which the stack may change in place.
    read: Vec<u8>,
    now: i64,
}

/// An ACME HTTP-01 token (`--acme`) whose key authorization is `SMALL`
/// bytes long, as `/small.bin`'s body.
const CHALLENGE: &str = "/.well-known/acme-challenge/hot-path";

impl Server {
    /// `http01`: answer `CHALLENGE`, as `--acme` does.
    fn new(sites: Arc<Sites>, tls: bool, http01: bool) -> Server {
        let tls_config = tls.then(|| {
            let source = certs::Source::SelfSigned(vec!["localhost".into()]);
            let resolver = certs::load(&source, NOW).unwrap();
            tls::server_config(Arc::new(resolver), &[b"h2", b"http/1.1"]).unwrap()
        });
        let config = StackConfig {
            server_headers: ServerHeaders::new(true, false),
            server_headers_tls: ServerHeaders::new(true, true),
            access_log: None,
            access_log_format: Default::default(),
            https_redirect: None,
            metrics: Metrics::new(1, NOW),
        };
        let current = Arc::new(CurrentSites::new(sites, tls_config));
        if http01 {
            let token = CHALLENGE.rsplit('/').next().unwrap();
            let authorization = vec![b'k'; SMALL];
            current.publish_http01(Arc::new(Http01::new([(
                token.as_bytes().to_vec(),
                authorization,
            )])));
        }
        let mut protocols = Protocols::new(current, Arc::new(config), SENDFILE_MIN, 0);
        protocols.begin_turn(NOW, false);
        let listener = if tls { stack::TLS } else { stack::CLEARTEXT };
        let session = protocols.open(listener, None);
        Server {
            protocols,
            session,
            out: Output::new(64 * 1024, SENDFILE_MIN),
            read: Vec::with_capacity(64 * 1024),
            now: NOW,
        }
    }

    /// One read of `bytes`, then every `resume` the stack asks for; the
    /// bytes it sent, and the allocations the server side made.
    fn serve(&mut self, bytes: &[u8]) -> (Vec<u8>, usize) {
        let mut sent = Vec::new();
        self.read.clear();
        self.read.extend_from_slice(bytes);
        self.out.clear();
        self.now += 1;
        let (mut step, mut allocations) = counted(|| {
            self.protocols.begin_turn(self.now, false);
            self.protocols
                .input(&mut self.session, &mut self.read, &mut self.out)
        });
        assert!(!step.closes(), "the server closed the connection");
        self.wire(&mut sent);
        while step.more() {
            self.out.clear();
            let resumed;
            (step, resumed) = counted(|| {
                self.protocols.begin_turn(self.now, false);
                self.protocols.resume(&mut self.session, &mut self.out)
            });
            allocations += resumed;
            assert!(!step.closes(), "the server closed the connection");
            self.wire(&mut sent);
        }
        (sent, allocations)
    }

    /// Appends the bytes `out` stands for, as the socket would get them.
    fn wire(&self, into: &mut Vec<u8>) {
        let mapping = self.protocols.backing().bytes(0);
        for seg in &self.out.segs {
            match *seg {
                Seg::Own { start, end } => into.extend_from_slice(&self.out.bytes[start..end]),
                Seg::Mapped { off, len, .. } => into.extend_from_slice(&mapping[off..off + len]),
                Seg::File { off, len, .. } => {
                    into.extend_from_slice(&mapping[off as usize..(off + len) as usize]);
                }
                Seg::Checked { at, .. } => into.push(self.out.bytes[at]),
            }
        }
    }
}

/// What carries the plaintext: nothing, or a rustls client session.
enum Transport {
    Cleartext,
    Tls(Box<ClientConnection>),
}

impl Transport {
    /// Opens the transport against `server`, completing a TLS handshake.
    fn open(server: &mut Server, tls: Option<&[u8]>) -> Transport {
        let Some(alpn) = tls else {
            return Transport::Cleartext;
        };
        let config = common::insecure_client_config(&[alpn]);
        let name = "localhost".try_into().unwrap();
        let mut client = Box::new(ClientConnection::new(config, name).unwrap());
        while client.is_handshaking() {
            let mut records = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut records).unwrap();
            }
            let (sent, _) = server.serve(&records);
            assert!(decrypt(&mut client, &sent).is_empty());
        }
        assert_eq!(client.alpn_protocol(), Some(alpn));
        Transport::Tls(client)
    }

    /// The bytes that carry `plain` to the server.
    fn carry(&mut self, plain: &[u8]) -> Vec<u8> {
        match self {
            Transport::Cleartext => plain.to_vec(),
            Transport::Tls(client) => {
                client.writer().write_all(plain).unwrap();
                let mut records = Vec::new();
                while client.wants_write() {
                    client.write_tls(&mut records).unwrap();
                }
                records
            }
        }
    }

    /// The plaintext the server's bytes carried.
    fn received(&mut self, wire: &[u8]) -> Vec<u8> {
        match self {
            Transport::Cleartext => wire.to_vec(),
            Transport::Tls(client) => decrypt(client, wire),
        }
    }
}

/// The plaintext of the server's records in `wire`.
fn decrypt(client: &mut ClientConnection, mut wire: &[u8]) -> Vec<u8> {
    let mut plain = Vec::new();
    while !wire.is_empty() {
        client.read_tls(&mut wire).unwrap();
        client
            .process_new_packets()
            .expect("the server's records decrypt");
        match client.reader().read_to_end(&mut plain) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("client read: {e}"),
        }
    }
    plain
}

/// A client of one protocol: writes a round of requests, checks the
/// answers.
trait Client {
    /// Plaintext sent once, before the first round.
    fn preface(&mut self) -> Vec<u8>;
    /// `count` GETs of `path`.
    fn requests(&mut self, path: &str, count: usize) -> Vec<u8>;
    /// Checks `plain` holds `count` whole 200 answers with bodies of
    /// `len` bytes.
    fn check(&mut self, plain: &[u8], count: usize, len: usize);
}

struct Http1;

impl Client for Http1 {
    fn preface(&mut self) -> Vec<u8> {
        Vec::new()
    }

    fn requests(&mut self, path: &str, count: usize) -> Vec<u8> {
        let fields: String = match path {
            DELTA => delta_fields()
                .iter()
                .map(|(name, value)| format!("{name}: {value}\r\n"))
                .collect(),
            _ => String::new(),
        };
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{fields}\r\n")
            .repeat(count)
            .into_bytes()
    }

    fn check(&mut self, mut plain: &[u8], count: usize, len: usize) {
        for i in 0..count {
            let end = plain
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .unwrap_or_else(|| panic!("response {i} has no whole head"));
            let head = std::str::from_utf8(&plain[..end]).unwrap();
            assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
            let length = format!("\r\ncontent-length: {len}");
            assert!(head.to_ascii_lowercase().contains(&length), "{head}");
            plain = &plain[end + 4 + len..];
        }
        assert!(plain.is_empty(), "{} bytes more", plain.len());
    }
}

/// An HTTP/2 client that opens a stream per request and grants the server
/// windows large enough for every body of the test.
#[derive(Default)]
struct Http2 {
    next_stream: u32,
    /// Bytes of a frame cut between two rounds.
    unread: Vec<u8>,
    /// The server's SETTINGS was acknowledged.
    acked: bool,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const WINDOW_UPDATE: u8 = 8;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const ACK: u8 = 1;
const MAX_WINDOW: u32 = (1 << 31) - 1;

impl Client for Http2 {
    fn preface(&mut self) -> Vec<u8> {
        self.next_stream = 1;
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // SETTINGS_INITIAL_WINDOW_SIZE, and the connection's window.
        let mut settings = vec![0, 4];
        settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        frame(SETTINGS, 0, 0, &settings, &mut out);
        frame(
            WINDOW_UPDATE,
            0,
            0,
            &(MAX_WINDOW - 65_535).to_be_bytes(),
            &mut out,
        );
        out
    }

    fn requests(&mut self, path: &str, count: usize) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.acked {
            frame(SETTINGS, ACK, 0, &[], &mut out);
            self.acked = true;
        }
        // :method GET, :scheme https, :authority and :path as literals
        // with indexed names.
        let mut block = vec![0x82, 0x87, 0x01, 9];
        block.extend_from_slice(b"localhost");
        block.extend_from_slice(&[0x04, path.len() as u8]);
        block.extend_from_slice(path.as_bytes());
        if path == DELTA {
            // Literals without indexing, new names.
            for (name, value) in delta_fields() {
                block.extend_from_slice(&[0x00, name.len() as u8]);
                block.extend_from_slice(name.as_bytes());
                block.push(value.len() as u8);
                block.extend_from_slice(value.as_bytes());
            }
        }
        for _ in 0..count {
            frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                self.next_stream,
                &block,
                &mut out,
            );
            self.next_stream += 2;
        }
        out
    }

    fn check(&mut self, plain: &[u8], count: usize, len: usize) {
        self.unread.extend_from_slice(plain);
        let first = self.next_stream - 2 * count as u32;
        let mut received = vec![0; count];
        let mut ended = vec![false; count];
        let mut at = 0;
        while self.unread.len() - at >= 9 {
            let h = &self.unread[at..at + 9];
            let length = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            let (kind, flags) = (h[3], h[4]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]);
            assert!(self.unread.len() - at - 9 >= length, "a frame cut short");
            let payload = &self.unread[at + 9..at + 9 + length];
            at += 9 + length;
            if stream == 0 {
                assert!(matches!(kind, SETTINGS | WINDOW_UPDATE), "frame {kind}");
                continue;
            }
            assert!(stream >= first && stream % 2 == 1, "stream {stream}");
            let i = ((stream - first) / 2) as usize;
            match kind {
                // `:status: 200`, static index 8.
                HEADERS => assert_eq!(payload.first(), Some(&0x88), "stream {stream}"),
                DATA => received[i] += length,
                other => panic!("frame {other} on stream {stream}"),
            }
            if flags & END_STREAM != 0 {
                ended[i] = true;
            }
        }
        self.unread.drain(..at);
        assert!(self.unread.is_empty(), "a frame cut short");
        assert_eq!(received, vec![len; count]);
        assert_eq!(ended, vec![true; count]);
    }
}

/// Serves `WARM_UP_ROUNDS` then `MEASURED_ROUNDS` rounds of `count`
/// requests for a body of `len` bytes on one connection; the allocations
/// of the measured rounds.
fn measured(
    sites: &Arc<Sites>,
    client: &mut dyn Client,
    tls: Option<&[u8]>,
    target: Target,
    len: usize,
    count: usize,
) -> usize {
    let challenge = target == Target::Challenge;
    let mut server = Server::new(Arc::clone(sites), tls.is_some(), challenge);
    let mut transport = Transport::open(&mut server, tls);
    let path = match (target, len) {
        (Target::Challenge, _) => CHALLENGE,
        (Target::Delta, _) => DELTA,
        (_, SMALL) => "/small.bin",
        _ => "/large.bin",
    };
    let preface = client.preface();
    let mut measured = 0;
    for round in 0..WARM_UP_ROUNDS + MEASURED_ROUNDS {
        let mut plain = if round == 0 {
            preface.clone()
        } else {
            Vec::new()
        };
        plain.extend(client.requests(path, count));
        let wire = transport.carry(&plain);
        let (sent, allocations) = server.serve(&wire);
        let answers = transport.received(&sent);
        client.check(&answers, count, len);
        if round >= WARM_UP_ROUNDS {
            measured += allocations;
        }
    }
    measured
}

/// What a case requests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A body of the pack.
    Body,
    /// An ACME HTTP-01 token (`--acme`).
    Challenge,
    /// `DELTA` with the dictionary named: its `SMALL` delta.
    Delta,
}

#[test]
fn no_allocation_per_request_after_warm_up() {
    let dir = tempfile::tempdir().unwrap();
    let sites = sites(dir.path());
    let mut failures = Vec::new();
    let mut table = String::new();
    for (name, h2, tls, target) in [
        ("HTTP/1.1", false, None, Target::Body),
        ("h2c", true, None, Target::Body),
        (
            "HTTP/1.1 over TLS",
            false,
            Some(&b"http/1.1"[..]),
            Target::Body,
        ),
        ("h2 over TLS", true, Some(&b"h2"[..]), Target::Body),
        (
            "HTTP/1.1, an ACME HTTP-01 token",
            false,
            None,
            Target::Challenge,
        ),
        ("h2c, an ACME HTTP-01 token", true, None, Target::Challenge),
        ("HTTP/1.1, a delta", false, None, Target::Delta),
        ("h2c, a delta", true, None, Target::Delta),
    ] {
        let lens: &[usize] = match target {
            Target::Body => &[SMALL, LARGE],
            Target::Challenge | Target::Delta => &[SMALL],
        };
        for &len in lens {
            for count in [1, BATCH] {
                let mut client: Box<dyn Client> = if h2 {
                    Box::new(Http2::default())
                } else {
                    Box::new(Http1)
                };
                let allocations = measured(&sites, &mut *client, tls, target, len, count);
                let requests = MEASURED_ROUNDS * count;
                let line = format!(
                    "{name}, {len}-byte bodies, {count} per read: {allocations} allocations in {requests} requests ({:.1} per request)\n",
                    allocations as f64 / requests as f64
                );
                table.push_str(&line);
                if allocations != 0 {
                    failures.push(line);
                }
            }
        }
    }
    eprint!("{table}");
    assert!(
        failures.is_empty(),
        "the hot path allocates:\n{}",
        failures.concat()
    );
}

/// A body as the epoll loop's writes see a pack: its bytes (`writev`) and
/// a file holding them (`sendfile`).
struct Body {
    bytes: Vec<u8>,
    file: std::fs::File,
}

impl Backing for Body {
    fn bytes(&self, _pack: u32) -> &[u8] {
        &self.bytes
    }

    fn file(&self, _pack: u32) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn unchanged(&self, _pack: u32) -> bool {
        true
    }
}

/// Shrinks a socket's send or receive buffer to 16 KiB.
fn set_buffer(fd: RawFd, which: libc::c_int) {
    let size: libc::c_int = 16 * 1024;
    // SAFETY: `size` is a valid c_int for the call's duration.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            which,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// The epoll loop's writes to a client slower than its socket: a 1 MiB
/// response is kept in a `Pending` from the loop's spares, resumed until
/// it drains, and given back. The io_uring loop keeps its sends the same
/// way (`Outgoing`, `spare_sends`); what it runs is the kernel's.
#[test]
fn partial_writes_allocate_nothing_after_warm_up() {
    let bytes = common::big_body();
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&bytes).unwrap();
    let backing: Arc<dyn Backing> = Arc::new(Body { bytes, file });
    let head = b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n";
    let mut table = String::new();
    for (name, sendfile_min) in [("writev", u64::MAX), ("sendfile", SENDFILE_MIN)] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        // Loopback buffers can take a megabyte: small ones make the client
        // slower than the socket.
        set_buffer(server.as_raw_fd(), libc::SO_SNDBUF);
        set_buffer(client.as_raw_fd(), libc::SO_RCVBUF);
        let fd = server.as_raw_fd();
        let mut out = Output::new(64 * 1024, sendfile_min);
        let mut spare = SparePending::default();
        let mut buf = vec![0; 64 * 1024];
        let mut measured = 0;
        for round in 0..WARM_UP_ROUNDS + MEASURED_ROUNDS {
            out.clear();
            out.bytes.extend_from_slice(head);
            out.pack_body(0, 0, LARGE as u64);
            let (sent, mut allocations) = counted(|| {
                io::send_output(fd, &backing, &mut out, &mut spare, &mut { TURN_SHARE })
            });
            let Sent::Partly(mut pending) = sent else {
                panic!("{name}: the socket took 1 MiB at once, or failed");
            };
            let mut received = 0;
            loop {
                // The socket is full: there is something to read.
                received += client.read(&mut buf).unwrap();
                // A share of a turn per call, as the loop gives.
                let (flush, resumed) =
                    counted(|| io::resume(fd, &mut pending, &mut { TURN_SHARE }));
                allocations += resumed;
                match flush {
                    Flush::Done => break,
                    Flush::Blocked(_) => {}
                    Flush::Failed => panic!("{name}: the write failed"),
                }
            }
            let ((), put) = counted(|| spare.put(pending));
            allocations += put;
            while received < head.len() + LARGE {
                received += client.read(&mut buf).unwrap();
            }
            assert_eq!(received, head.len() + LARGE, "{name}");
            if round >= WARM_UP_ROUNDS {
                measured += allocations;
            }
        }
        table.push_str(&format!(
            "{name}: {measured} allocations in {MEASURED_ROUNDS} partly written responses\n"
        ));
    }
    eprint!("{table}");
    assert!(
        table.lines().all(|line| line.contains(": 0 allocations")),
        "partial writes allocate:\n{table}"
    );
}

/// HTTP/3 as QUIC reaches it, for `http3_answers_allocate_nothing_after_warm_up`:
/// kiln's own HTTP/3 layer (`http3::Conn`) driven through its `Streams`
/// trait by this double, not by quinn-proto. quinn's allocations (its
/// per-stream send state and buffers, ACK ranges) are its own and out of
/// this test's scope, so quinn is not driven here at all: what is counted
/// is kiln's side only, from a request stream's bytes to the chunks handed
/// to QUIC. The double does what quinn does with those chunks without
/// allocating: it takes `Bytes` (a reference count, no copy) up to a
/// flow-control budget per write, and holds what it took until the next
/// round is served, as QUIC holds sent data until the peer acknowledges
/// it (so frame heads are still referenced when the next ones are carved).
struct Quic {
    next_uni: u64,
    /// Stream data taken this round, in order.
    written: Vec<(u64, Bytes)>,
    /// What the last round took, "acknowledged" (dropped) once this one
    /// is served.
    in_flight: Vec<(u64, Bytes)>,
    finished: Vec<u64>,
    /// Resets, stops and closes (kind, stream, code): none is expected.
    faults: Vec<(&'static str, u64, u64)>,
    /// Bytes flow control lets through per write.
    budget: usize,
}

impl Quic {
    fn new(budget: usize) -> Quic {
        Quic {
            next_uni: 0,
            written: Vec::new(),
            in_flight: Vec::new(),
            finished: Vec::new(),
            faults: Vec::new(),
            budget,
        }
    }
}

impl Streams for Quic {
    fn open_uni(&mut self) -> Option<u64> {
        let id = 3 + 4 * self.next_uni;
        self.next_uni += 1;
        Some(id)
    }

    fn write(&mut self, id: u64, chunks: &mut [Bytes]) {
        let mut left = self.budget;
        for chunk in chunks.iter_mut().filter(|c| !c.is_empty()) {
            if left == 0 {
                break;
            }
            let n = chunk.len().min(left);
            self.written.push((id, chunk.split_to(n)));
            left -= n;
        }
    }

    fn finish(&mut self, id: u64) {
        self.finished.push(id);
    }

    fn reset(&mut self, id: u64, code: u64) {
        self.faults.push(("reset", id, code));
    }

    fn stop(&mut self, id: u64, code: u64) {
        self.faults.push(("stop", id, code));
    }

    fn close(&mut self, code: u64, _reason: &'static str) {
        self.faults.push(("close", 0, code));
    }
}

/// One HTTP/3 connection's server side and the thread's parts it answers
/// with, as `stack::Protocols` lends them to `quic::Endpoint`.
struct H3Server {
    conn: H3Conn,
    quic: Quic,
    sites: Arc<Sites>,
    backing: Arc<dyn Backing>,
    metrics: Arc<Metrics>,
    handler: HandlerScratch,
    date: DateCache,
    headers: ServerHeaders,
    scratch: H3Scratch,
    bodies: Bodies,
    events: EventStreams,
    now: i64,
}

impl H3Server {
    fn new(sites: &Arc<Sites>, budget: usize) -> H3Server {
        let mut date = DateCache::new();
        date.update(NOW);
        let mut server = H3Server {
            conn: H3Conn::default(),
            quic: Quic::new(budget),
            sites: Arc::clone(sites),
            backing: Arc::clone(sites) as Arc<dyn Backing>,
            metrics: Metrics::new(1, NOW),
            handler: HandlerScratch::default(),
            date,
            headers: ServerHeaders::new(true, true).with_alt_svc(Some("h3=\":443\"; ma=86400")),
            scratch: H3Scratch::default(),
            bodies: Bodies::default(),
            events: EventStreams::default(),
            now: NOW,
        };
        server.conn.start(&mut server.quic);
        server
    }

    /// Runs `f` on the connection with what answering needs.
    fn with(&mut self, f: impl FnOnce(&mut H3Conn, &mut Quic, &mut Answering<'_, '_>)) {
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
        let mut answering = Answering {
            ctx: &mut ctx,
            scratch: &mut self.scratch,
            bodies: &mut self.bodies,
            backing: &self.backing,
        };
        f(&mut self.conn, &mut self.quic, &mut answering);
    }

    /// One round: each request stream's bytes (whole, with its end), then
    /// a `Writable` turn for each response not finished until all are, as
    /// quinn reports them; the stream data written, and the allocations
    /// the server side made.
    fn serve(&mut self, requests: &[(u64, Vec<u8>)]) -> (Vec<(u64, Bytes)>, usize) {
        self.now += 1;
        // The last round's data acknowledged, its vector reused for this
        // one's.
        let mut acknowledged = std::mem::take(&mut self.quic.in_flight);
        acknowledged.clear();
        self.quic.in_flight = std::mem::replace(&mut self.quic.written, acknowledged);
        self.quic.finished.clear();
        let ((), mut allocations) = counted(|| self.date.update(self.now));
        for (id, bytes) in requests {
            // A request stream ends with its request; the control stream
            // stays open.
            let fin = is_request_stream(*id);
            let ((), n) = counted(|| {
                self.with(|conn, quic, answering| conn.on_data(*id, bytes, fin, quic, answering))
            });
            allocations += n;
        }
        loop {
            let open: Vec<u64> = requests
                .iter()
                .map(|(id, _)| *id)
                .filter(|&id| is_request_stream(id) && !self.quic.finished.contains(&id))
                .collect();
            if open.is_empty() || !self.quic.faults.is_empty() {
                break;
            }
            for id in open {
                let ((), n) = counted(|| self.conn.on_writable(id, &mut self.quic));
                allocations += n;
            }
        }
        assert_eq!(self.quic.faults, [], "the server reset, stopped or closed");
        (self.quic.written.clone(), allocations)
    }
}

/// Client-initiated bidirectional streams carry requests (RFC 9000 §2.1).
fn is_request_stream(id: u64) -> bool {
    id.is_multiple_of(4)
}

/// An HTTP/3 response case: a GET of `path` with `fields`, answered with
/// `status` and a body of `len` bytes.
struct H3Case {
    name: &'static str,
    path: &'static str,
    fields: Vec<(&'static str, String)>,
    status: u16,
    len: usize,
}

/// The HTTP/3 client: request streams 0, 4, 8… as HEADERS frames.
#[derive(Default)]
struct H3Client {
    next_stream: u64,
}

impl H3Client {
    /// The client's control stream (2): its type and an empty SETTINGS.
    fn control(&self) -> (u64, Vec<u8>) {
        let mut bytes = Vec::new();
        h3frame::write_varint(h3frame::CONTROL_STREAM, &mut bytes);
        h3frame::write_frame_header(h3frame::SETTINGS, 0, &mut bytes);
        (2, bytes)
    }

    fn requests(&mut self, case: &H3Case, count: usize) -> Vec<(u64, Vec<u8>)> {
        let mut section = kiln::qpack::FIELD_SECTION_PREFIX.to_vec();
        for (name, value) in [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "localhost"),
            (":path", case.path),
        ]
        .into_iter()
        .chain(case.fields.iter().map(|(n, v)| (*n, v.as_str())))
        {
            kiln::qpack::encode_field(name.as_bytes(), value.as_bytes(), &mut section);
        }
        let mut headers = Vec::new();
        h3frame::write_frame_header(h3frame::HEADERS, section.len() as u64, &mut headers);
        headers.extend_from_slice(&section);
        (0..count)
            .map(|_| {
                let id = self.next_stream;
                self.next_stream += 4;
                (id, headers.clone())
            })
            .collect()
    }

    /// Checks that `written` holds a whole response to `case` on each of
    /// `streams`, each finished.
    fn check(case: &H3Case, streams: &[u64], written: &[(u64, Bytes)], finished: &[u64]) {
        for &id in streams {
            let bytes: Vec<u8> = written
                .iter()
                .filter(|(s, _)| *s == id)
                .flat_map(|(_, b)| b.iter().copied())
                .collect();
            let (mut status, mut length, mut data) = (None, None, 0u64);
            let mut qpack = Vec::new();
            let mut reader = h3frame::FrameReader::default();
            reader
                .read::<()>(&bytes, |frame| {
                    match frame {
                        h3frame::Frame::Whole {
                            frame_type: h3frame::HEADERS,
                            payload,
                        } => kiln::qpack::decode_field_section(
                            payload,
                            &mut qpack,
                            usize::MAX,
                            |name, value| {
                                let value = std::str::from_utf8(value).unwrap().to_owned();
                                match name {
                                    b":status" => status = Some(value),
                                    b"content-length" => length = Some(value),
                                    _ => {}
                                }
                                Ok::<(), ()>(())
                            },
                        )
                        .unwrap(),
                        h3frame::Frame::Skipped {
                            frame_type: h3frame::DATA,
                            len,
                        } => data += len,
                        other => panic!("{}: stream {id}: {other:?}", case.name),
                    }
                    Ok(())
                })
                .unwrap();
            assert!(!reader.mid_frame(), "{}: stream {id} cut short", case.name);
            assert_eq!(status, Some(case.status.to_string()), "{}", case.name);
            if case.status != 304 {
                assert_eq!(length, Some(case.len.to_string()), "{}", case.name);
            }
            assert_eq!(data, case.len as u64, "{}: stream {id}", case.name);
            assert!(
                finished.contains(&id),
                "{}: stream {id} not finished",
                case.name
            );
        }
    }
}

/// Responses carved per round in the `MANY` cases: more than a frame-head
/// block holds (`http3::Scratch`: 64 KiB of heads of about 300 bytes),
/// so that the measured rounds move from block to block while the last
/// round's heads are still held by QUIC.
const MANY: usize = 160;

/// Warm-up rounds of the `MANY` cases. The blocks a thread keeps grow to
/// the most heads it has had in flight at a block's fill; how many are in
/// flight when a block fills depends on where the fill falls in a round
/// (this round's heads and all or none of the last one's), which moves by
/// a block's remainder each fill, so the worst case comes round only
/// after some rounds (at most about 25 for heads of 150 to 700 bytes, by
/// a simulation of this schedule).
const MANY_WARM_UP_ROUNDS: usize = 32;

/// Flow control's budget per write: a 1 MiB body takes sixteen `Writable`
/// turns.
const H3_BUDGET: usize = 64 * 1024;

#[test]
fn http3_answers_allocate_nothing_after_warm_up() {
    let dir = tempfile::tempdir().unwrap();
    let sites = sites(dir.path());
    let cases = [
        H3Case {
            name: "200, 1 KiB",
            path: "/small.bin",
            fields: vec![],
            status: 200,
            len: SMALL,
        },
        H3Case {
            name: "200, 1 MiB",
            path: "/large.bin",
            fields: vec![],
            status: 200,
            len: LARGE,
        },
        H3Case {
            name: "304",
            path: "/small.bin",
            fields: vec![("if-none-match", "\"x\"".to_owned())],
            status: 304,
            len: 0,
        },
        H3Case {
            name: "206, a range",
            path: "/large.bin",
            fields: vec![("range", "bytes=1000-1999".to_owned())],
            status: 206,
            len: 1000,
        },
        H3Case {
            name: "200, a delta",
            path: DELTA,
            fields: delta_fields().to_vec(),
            status: 200,
            len: SMALL,
        },
    ];
    let mut failures = Vec::new();
    let mut table = String::new();
    for case in &cases {
        let counts: &[usize] = match case.len {
            LARGE => &[1, BATCH],
            _ => &[1, BATCH, MANY],
        };
        for &count in counts {
            let mut server = H3Server::new(&sites, H3_BUDGET);
            let mut client = H3Client::default();
            let warm_up = match count {
                MANY => MANY_WARM_UP_ROUNDS,
                _ => WARM_UP_ROUNDS,
            };
            let mut measured = 0;
            for round in 0..warm_up + MEASURED_ROUNDS {
                let mut requests = client.requests(case, count);
                if round == 0 {
                    requests.insert(0, client.control());
                }
                let (written, allocations) = server.serve(&requests);
                let streams: Vec<u64> = requests
                    .iter()
                    .map(|(id, _)| *id)
                    .filter(|&id| is_request_stream(id))
                    .collect();
                H3Client::check(case, &streams, &written, &server.quic.finished);
                if round >= warm_up {
                    measured += allocations;
                }
            }
            let responses = MEASURED_ROUNDS * count;
            let line = format!(
                "HTTP/3 {}, {count} per round: {measured} allocations in {responses} responses\n",
                case.name
            );
            table.push_str(&line);
            if measured != 0 {
                failures.push(line);
            }
        }
    }
    eprint!("{table}");
    assert!(
        failures.is_empty(),
        "HTTP/3's answers allocate:\n{}",
        failures.concat()
    );
}
