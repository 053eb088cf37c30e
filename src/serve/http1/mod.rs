//! HTTP/1.1 (RFC 9112): turns the bytes of one read into responses. Every
//! complete request in the buffer is parsed and answered into one `Output`,
//! so a pipelined batch leaves in a single `writev`. Sans-IO: [`Conn`] is
//! one connection's state, fed the bytes the connection layer read.

pub mod body;
pub mod parse;
pub mod request_line;

use super::access_log::Entry;
use super::date::DateCache;
use super::handler::cold::{self, Parked};
use super::handler::live::EventStream;
use super::handler::{self, Body, Extra, Method, Response, Sites};
use super::metrics::Protocol;
use super::net::conn::Expiry;
use super::net::{Step, Wait};
use super::output::{Output, push_u64};
use super::request_context::RequestContext;
use super::server_headers::ServerHeaders;
pub use body::{Discard, Progress};
pub use parse::{Parsed, RequestHead, parse_request};

/// Request bodies up to this size (as sent: chunk framing counts) are read
/// and dropped (a GET with a body is legal if pointless); larger ones get
/// 413, or a closed connection once the request is answered.
pub const MAX_DISCARDED_BODY: u64 = 64 * 1024;

/// Most responses assembled from one buffer. Bounds the header bytes a
/// connection holds while its client is slow to read; requests beyond wait
/// in the buffer until the batch is sent.
pub const MAX_BATCH: u32 = 128;

/// What the connection layer must do after a batch.
#[derive(Debug, Default)]
pub struct Batch {
    /// Bytes of the buffer used up; the rest is the start of a request.
    pub consumed: usize,
    /// Close once the output is sent.
    pub close: bool,
    /// The close was asked for by the client (`Connection: close`, or
    /// HTTP/1.0 without keep-alive), which then sends nothing more.
    pub client_closes: bool,
    /// Number of responses written.
    pub responses: u32,
    /// Stopped at `MAX_BATCH`: the rest of the buffer may hold complete
    /// requests, to be served once this batch is sent.
    pub more: bool,
    /// The last response is the live preview's event stream, held open
    /// (its hello written): nothing after it on the connection is
    /// answered.
    pub events: Option<Held>,
    /// The request at `consumed` is for a cold site: parked until its
    /// site is loaded or its deadline.
    pub parked: Option<Parked>,
}

/// Whether a request for a cold site may be parked (the first of a batch;
/// those after it always may).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Park {
    /// A new request: until `--fetch-timeout` from now.
    New,
    /// Parked before: until its deadline (`cold::now_ms`).
    Until(u64),
    /// Its wait ran out, or the server drains: 503.
    Never,
}

/// The live preview's event stream, held open on a connection.
#[derive(Debug)]
pub struct Held {
    /// What it heard, and its place in the thread's count.
    stream: EventStream,
    /// Each event goes as a chunk (HTTP/1.1); else (HTTP/1.0) as it is,
    /// the connection's close ending the response.
    chunked: bool,
}

impl Held {
    /// Writes what the stream is owed now (`EventStream::owed`), as a
    /// chunk when chunked.
    fn write_owed(&mut self, ctx: &RequestContext<'_>, heartbeat: bool, out: &mut Output) {
        let Some(event) = self.stream.owed(ctx.sites, heartbeat) else {
            return;
        };
        if self.chunked {
            push_hex(&mut out.bytes, event.len());
            out.bytes.extend_from_slice(b"\r\n");
            out.bytes.extend_from_slice(event);
            out.bytes.extend_from_slice(b"\r\n");
        } else {
            out.bytes.extend_from_slice(event);
        }
        out.seal();
    }

    /// Ends the response: the last chunk (an HTTP/1.0 one ends with the
    /// connection).
    fn end(&self, out: &mut Output) {
        if self.chunked {
            out.bytes.extend_from_slice(b"0\r\n\r\n");
            out.seal();
        }
    }
}

/// Appends `n` in hexadecimal, as a chunk size.
fn push_hex(out: &mut Vec<u8>, n: usize) {
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out.push(b"0123456789abcdef"[(n >> (4 * i)) & 0xf]);
    }
}

/// How the response says what happens to the connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ConnectionLine {
    /// HTTP/1.1 keep-alive is the default: no line.
    Omit,
    /// An HTTP/1.0 client that asked for keep-alive.
    KeepAlive,
    Close,
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Writes the status line and header block of `resp` into `out`, and the
/// body unless `head_only`. Returns the number of body bytes queued.
fn write_response(
    out: &mut Output,
    sites: &Sites,
    date: &DateCache,
    server_headers: &ServerHeaders,
    resp: &Response<'_>,
    head_only: bool,
    connection: ConnectionLine,
) -> u64 {
    let b = &mut out.bytes;
    b.extend_from_slice(b"HTTP/1.1 ");
    push_u64(b, u64::from(resp.status));
    b.push(b' ');
    b.extend_from_slice(reason(resp.status).as_bytes());
    b.extend_from_slice(b"\r\nServer: kiln\r\n");
    b.extend_from_slice(date.line());
    match connection {
        ConnectionLine::Omit => {}
        ConnectionLine::KeepAlive => b.extend_from_slice(b"Connection: keep-alive\r\n"),
        ConnectionLine::Close => b.extend_from_slice(b"Connection: close\r\n"),
    }
    b.extend_from_slice(server_headers.lines(resp.overrides));
    b.extend_from_slice(resp.head);
    match resp.extra {
        Extra::Nothing => {}
        Extra::Length => {
            b.extend_from_slice(b"Content-Length: ");
            push_u64(b, resp.body.len());
            b.extend_from_slice(b"\r\n");
        }
        Extra::Range { start, end, total } => {
            b.extend_from_slice(b"Content-Range: bytes ");
            push_u64(b, start);
            b.push(b'-');
            push_u64(b, end);
            b.push(b'/');
            push_u64(b, total);
            b.extend_from_slice(b"\r\nContent-Length: ");
            push_u64(b, end - start + 1);
            b.extend_from_slice(b"\r\n");
        }
        Extra::Unsatisfiable { total } => {
            b.extend_from_slice(b"Content-Range: bytes */");
            push_u64(b, total);
            b.extend_from_slice(b"\r\nContent-Length: 0\r\n");
        }
        Extra::Location(location) => {
            b.extend_from_slice(b"Location: ");
            b.extend_from_slice(location);
            b.extend_from_slice(b"\r\nContent-Length: 0\r\n");
        }
        Extra::Open => b.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
    }
    b.extend_from_slice(b"\r\n");
    if head_only {
        return 0;
    }
    match resp.body {
        Body::Empty | Body::Events | Body::Cold => 0,
        Body::Static(bytes) => {
            out.bytes.extend_from_slice(bytes);
            bytes.len() as u64
        }
        Body::Pack { pack, off, len } => {
            let held = sites.site(pack).and_then(|s| s.held_back_byte(off, len));
            out.pack_body_from(pack, off, len, held);
            len
        }
    }
}

/// Answers a request that could not be parsed (or timed out) and asks for
/// the connection to close.
pub fn write_error(out: &mut Output, ctx: &mut RequestContext<'_>, status: u16) {
    let body: &'static [u8] = match status {
        400 => b"400 Bad Request\n",
        408 => b"408 Request Timeout\n",
        413 => b"413 Content Too Large\n",
        414 => b"414 URI Too Long\n",
        431 => b"431 Request Header Fields Too Large\n",
        501 => b"501 Not Implemented\n",
        505 => b"505 HTTP Version Not Supported\n",
        _ => b"Error\n",
    };
    let resp = handler::builtin(status, body);
    let sent = write_response(
        out,
        ctx.sites,
        ctx.date,
        ctx.server_headers,
        &resp,
        false,
        ConnectionLine::Close,
    );
    ctx.count(Protocol::Http1, None, status, sent, None);
    if ctx.logs() {
        ctx.log(Entry {
            peer: None,
            request: None,
            host: None,
            status,
            bytes: sent,
            encoding: None,
            duration_us: 0,
            referer: None,
            user_agent: None,
        });
    }
}

/// Parses and answers every complete request at the start of `buf`.
/// `discard` is the connection's request body still being dropped: it
/// reads the start of `buf`, and is left holding the body of the last
/// request when that body goes on past `buf`.
/// `park` says whether the first request may be parked for a cold site.
pub fn serve_batch(
    buf: &[u8],
    discard: &mut Discard,
    ctx: &mut RequestContext<'_>,
    out: &mut Output,
    mut park: Park,
) -> Batch {
    let mut batch = Batch::default();
    match discard.feed(buf) {
        Progress::Ended(used) => batch.consumed = used,
        Progress::NeedMore => batch.consumed = buf.len(),
        Progress::Malformed => {
            write_error(out, ctx, 400);
            batch.responses += 1;
            batch.close = true;
        }
        // The request was answered already: nothing to say, just close.
        Progress::TooLarge => batch.close = true,
    }
    while batch.consumed < buf.len() && !batch.close {
        if batch.responses == MAX_BATCH {
            batch.more = true;
            break;
        }
        let head = match parse_request(&buf[batch.consumed..]) {
            Parsed::Partial => break,
            Parsed::Error(status) => {
                write_error(out, ctx, status);
                batch.responses += 1;
                batch.close = true;
                break;
            }
            Parsed::NotHttp => {
                batch.close = true;
                break;
            }
            Parsed::Complete(head) => head,
        };
        // As much of the body as has arrived is read before answering, so
        // that broken framing or a body over the cap is refused instead.
        let body_start = batch.consumed + head.head_len;
        let mut body = head.body;
        let body_end = match body.feed(&buf[body_start..]) {
            Progress::Ended(used) => Some(body_start + used),
            Progress::NeedMore => None,
            refused @ (Progress::Malformed | Progress::TooLarge) => {
                let status = if refused == Progress::Malformed {
                    400
                } else {
                    413
                };
                write_error(out, ctx, status);
                batch.responses += 1;
                batch.close = true;
                break;
            }
        };
        let req = &head.request;
        let head_only = req.method == Method::Head;
        let mut resp = handler::answer(ctx.sites, req, ctx.http01, ctx.https_redirect, ctx.scratch);
        if resp.body == Body::Cold {
            let parked = match park {
                _ if ctx.draining => None,
                Park::New => ctx.events.park(ctx.sites, None),
                Park::Until(deadline) => ctx.events.park(ctx.sites, Some(deadline)),
                Park::Never => None,
            };
            match parked {
                Some(parked) if !parked.expired() => {
                    // Answered again from the bytes at `consumed` when
                    // woken.
                    batch.parked = Some(parked);
                    break;
                }
                _ => resp = cold::gave_up(ctx.sites),
            }
        }
        park = Park::New;
        let mut events = None;
        if resp.body == Body::Events && !head_only {
            match ctx.events.hold(resp.site) {
                Some(stream) => {
                    let chunked = head.minor_version > 0;
                    if !chunked {
                        resp.extra = Extra::Nothing;
                    }
                    events = Some(Held { stream, chunked });
                }
                None => resp = handler::live::busy(),
            }
        }
        // An event stream of HTTP/1.0 ends with the connection.
        let close = !head.keep_alive
            || ctx.draining
            || matches!(resp.status, 400 | 405 | 501)
            || events.as_ref().is_some_and(|e| !e.chunked);
        let connection = match (close, head.minor_version) {
            (true, _) => ConnectionLine::Close,
            (false, 0) => ConnectionLine::KeepAlive,
            (false, _) => ConnectionLine::Omit,
        };
        let sent = write_response(
            out,
            ctx.sites,
            ctx.date,
            ctx.server_headers,
            &resp,
            head_only,
            connection,
        );
        batch.responses += 1;
        let (status, encoding, site) = (resp.status, resp.encoding, resp.site);
        ctx.count(Protocol::Http1, site, status, sent, encoding);
        if ctx.logs() {
            let protocol = if head.minor_version == 0 {
                "HTTP/1.0"
            } else {
                "HTTP/1.1"
            };
            ctx.log(Entry {
                peer: None,
                request: Some((head.method_token, req.target, protocol)),
                host: req.host,
                status,
                bytes: sent,
                encoding,
                duration_us: 0,
                referer: head.referer,
                user_agent: head.user_agent,
            });
        }
        if let Some(mut held) = events {
            // Held from here on: what follows it is not answered, and
            // a drain ends it at once (its connection closes).
            held.write_owed(ctx, false, out);
            if ctx.draining {
                held.end(out);
                batch.close = true;
            } else {
                batch.events = Some(held);
            }
            batch.consumed = buf.len();
            break;
        }
        batch.close = close;
        batch.client_closes = !head.keep_alive;
        match body_end {
            Some(end) => batch.consumed = end,
            None => {
                // The rest of the body arrives with later reads.
                batch.consumed = buf.len();
                *discard = body;
            }
        }
    }
    out.seal();
    batch
}

/// The step of a connection holding an event stream.
const HELD: Step = Step::Open {
    wait: Wait::Held,
    more: false,
};

/// One connection's HTTP/1 state between reads. Idle, it owns no buffer.
#[derive(Default)]
pub struct Conn {
    /// The live preview's event stream this connection holds open: its
    /// only business from then on.
    events: Option<Held>,
    /// The start of an incomplete request (or requests left over from a
    /// full batch); empty and unallocated otherwise.
    partial: Vec<u8>,
    /// The request body still arriving, to be dropped.
    discard: Discard,
    /// `partial` may hold complete requests left over from a full batch:
    /// serve them before reading more.
    backlog: bool,
    /// With an access log: when the request at the start of `partial`
    /// began arriving (see `RequestContext::started_us`); 0 otherwise.
    started_us: u64,
    /// The request at the start of `partial` waits for its cold site:
    /// answered again when the loop wakes the connection.
    parked: Option<Parked>,
    /// How the next batch's first request may park (set by `wake`).
    park: Option<Park>,
}

/// The most a client may send on a connection while its request is
/// parked (pipelined requests); beyond, the connection closes.
const MAX_PARKED_INPUT: usize = 64 * 1024;

impl Conn {
    /// Answers what `bytes` (just read) complete, into `out`.
    pub fn input(&mut self, bytes: &[u8], ctx: &mut RequestContext<'_>, out: &mut Output) -> Step {
        if self.events.is_some() {
            // A client has nothing to say on a held stream: what it sends
            // is dropped (reading on tells when it leaves).
            return self.wake(ctx, false, out).unwrap_or(HELD);
        }
        if self.parked.is_some() {
            // Kept for after the parked request; not answered before it.
            if self.partial.len() + bytes.len() > MAX_PARKED_INPUT {
                return Step::Close {
                    linger: false,
                    more: false,
                };
            }
            self.partial.extend_from_slice(bytes);
            return HELD;
        }
        let mut partial = std::mem::take(&mut self.partial);
        let from_partial = !partial.is_empty();
        if from_partial {
            partial.extend_from_slice(bytes);
        }
        let buf: &[u8] = if from_partial { &partial } else { bytes };
        // A request that began in an earlier read is timed from then.
        let this_turn = ctx.started_us;
        if from_partial && self.started_us != 0 {
            ctx.started_us = self.started_us;
        }
        let park = self.park.take().unwrap_or(Park::New);
        let mut batch = serve_batch(buf, &mut self.discard, ctx, out, park);
        ctx.started_us = this_turn;
        if let Some(parked) = batch.parked.take() {
            // The cold path: the request and what follows it kept.
            if from_partial {
                partial.drain(..batch.consumed);
                self.partial = partial;
            } else {
                self.partial = buf[batch.consumed..].to_vec();
            }
            self.parked = Some(parked);
            self.backlog = false;
            return HELD;
        }
        if let Some(held) = batch.events.take() {
            self.events = Some(held);
            self.partial = Vec::new();
            self.backlog = false;
            self.started_us = 0;
            return HELD;
        }
        self.backlog = batch.more;
        let rest_len = buf.len() - batch.consumed;
        let waiting = !batch.close && (rest_len > 0 || !self.discard.is_done());
        self.started_us = match (waiting, batch.consumed == 0 && from_partial) {
            (false, _) => 0,
            // Still the same request as before.
            (true, true) => self.started_us,
            (true, false) => this_turn,
        };
        if waiting {
            if from_partial {
                partial.drain(..batch.consumed);
                self.partial = partial;
            } else {
                self.partial = buf[batch.consumed..].to_vec();
            }
        }
        if batch.close {
            return Step::Close {
                linger: !(batch.client_closes && rest_len == 0 && self.discard.is_done()),
                more: false,
            };
        }
        let wait = if waiting {
            Wait::Input {
                restart: batch.responses > 0,
            }
        } else {
            Wait::Idle
        };
        Step::Open {
            wait,
            more: self.backlog,
        }
    }

    /// Serves the requests left over from a full batch.
    pub fn resume(&mut self, ctx: &mut RequestContext<'_>, out: &mut Output) -> Step {
        self.input(&[], ctx, out)
    }

    /// Writes what a held event stream is owed now (with `heartbeat`, a
    /// comment if nothing else), or ends it when the server drains;
    /// `None` when the connection holds none.
    pub fn wake(
        &mut self,
        ctx: &mut RequestContext<'_>,
        heartbeat: bool,
        out: &mut Output,
    ) -> Option<Step> {
        if let Some(parked) = self.parked.take() {
            // Answered again: from the site if it was loaded meanwhile,
            // else parked on, or 503 once its wait ran out.
            self.park = Some(if ctx.draining || parked.expired() {
                Park::Never
            } else {
                Park::Until(parked.deadline_ms)
            });
            return Some(self.input(&[], ctx, out));
        }
        let held = self.events.as_mut()?;
        if ctx.draining {
            held.end(out);
            return Some(Step::Close {
                linger: true,
                more: false,
            });
        }
        held.write_owed(ctx, heartbeat, out);
        Some(HELD)
    }

    /// The head did not arrive in time: 408. An idle connection closes
    /// without a word, a held event stream with its last chunk.
    pub fn expire(&mut self, expiry: Expiry, ctx: &mut RequestContext<'_>, out: &mut Output) {
        if let Some(held) = &self.events {
            held.end(out);
            return;
        }
        if expiry == Expiry::Stalled {
            write_error(out, ctx, 408);
            out.seal();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::handler::Scratch;
    use crate::serve::handler::live::{EventStreams, testing};
    use crate::serve::metrics::{Metrics, Scheme};
    use crate::serve::server_headers::ServerHeaders;

    /// What one thread lends a connection, around a watched preview.
    struct Thread {
        sites: std::sync::Arc<handler::Sites>,
        scratch: Scratch,
        date: DateCache,
        headers: ServerHeaders,
        metrics: std::sync::Arc<Metrics>,
        events: EventStreams,
        draining: bool,
    }

    impl Thread {
        fn new() -> Thread {
            Thread {
                sites: testing::preview(0),
                scratch: Scratch::default(),
                date: DateCache::new(),
                headers: ServerHeaders::new(false, false),
                metrics: Metrics::new(1, 0),
                events: EventStreams::default(),
                draining: false,
            }
        }

        /// Runs `f` with the context, and returns what it wrote.
        fn with(
            &mut self,
            f: impl FnOnce(&mut RequestContext<'_>, &mut Output) -> Step,
        ) -> (Step, String) {
            let mut ctx = RequestContext {
                sites: &self.sites,
                scratch: &mut self.scratch,
                date: &self.date,
                server_headers: &self.headers,
                log: None,
                peer: None,
                draining: self.draining,
                http01: None,
                https_redirect: None,
                scheme: Scheme::Http,
                metrics: &self.metrics,
                thread: 0,
                started_us: 0,
                events: &self.events,
            };
            let mut out = Output::new(4096, u64::MAX);
            let step = f(&mut ctx, &mut out);
            (step, String::from_utf8_lossy(&out.bytes).into_owned())
        }
    }

    #[test]
    fn an_event_stream_is_held_open_in_chunks() {
        let mut thread = Thread::new();
        let mut conn = Conn::default();
        // Pipelined after it: never answered.
        let request =
            b"GET /_kiln/events HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n";
        let (step, sent) = thread.with(|ctx, out| conn.input(request, ctx, out));
        assert_eq!(step, HELD);
        let (head, chunks) = sent.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("\r\nTransfer-Encoding: chunked"), "{head}");
        assert!(!head.contains("Content-Length"), "{head}");
        let hello = "retry: 1000\ndata: {\"hello\":true,\"id\":\"1-0\"}\n\n";
        assert_eq!(chunks, format!("{:x}\r\n{hello}\r\n", hello.len()));
        assert_eq!(sent.matches("HTTP/1.1").count(), 1);
        assert_eq!(thread.events.held(), 1);

        // What the client sends is dropped; a heartbeat is a comment.
        let (step, sent) = thread.with(|ctx, out| conn.input(b"anything", ctx, out));
        assert_eq!((step, sent.as_str()), (HELD, ""));
        let (_, sent) = thread.with(|ctx, out| conn.wake(ctx, true, out).unwrap());
        assert_eq!(sent, "3\r\n:\n\n\r\n");
        thread.sites = testing::preview(1);
        let (_, sent) = thread.with(|ctx, out| conn.wake(ctx, false, out).unwrap());
        assert!(sent.contains("data: {\"css\":[\"/style.css\"]"), "{sent}");

        // A drain ends it with the last chunk, and the connection.
        thread.draining = true;
        let (step, sent) = thread.with(|ctx, out| conn.wake(ctx, false, out).unwrap());
        assert!(step.closes());
        assert_eq!(sent, "0\r\n\r\n");
    }

    #[test]
    fn a_thread_holding_its_most_answers_503() {
        let mut thread = Thread::new();
        let mut held: Vec<Conn> = Vec::new();
        let request = b"GET /_kiln/events HTTP/1.1\r\nHost: t\r\n\r\n";
        for _ in 0..crate::serve::handler::live::MAX_PER_THREAD {
            let mut conn = Conn::default();
            let (step, _) = thread.with(|ctx, out| conn.input(request, ctx, out));
            assert_eq!(step, HELD);
            held.push(conn);
        }
        let mut conn = Conn::default();
        let (step, sent) = thread.with(|ctx, out| conn.input(request, ctx, out));
        assert!(
            sent.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{sent}"
        );
        assert_eq!(step.wait(), Some(Wait::Idle));
        held.pop();
        let (step, _) = thread.with(|ctx, out| conn.input(request, ctx, out));
        assert_eq!(step, HELD);
    }

    #[test]
    fn chunk_sizes_are_hexadecimal() {
        for (n, hex) in [(0, "0"), (9, "9"), (10, "a"), (255, "ff"), (4096, "1000")] {
            let mut out = Vec::new();
            push_hex(&mut out, n);
            assert_eq!(out, hex.as_bytes());
        }
    }
}
