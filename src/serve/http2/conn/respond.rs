//! A response on one stream, written as frames: HEADERS (and CONTINUATION
//! frames when the block is beyond the client's frame size) from the
//! pack's prepared HPACK block (its shared fields inserted into the
//! client's table or named by index, `hpack::SharedState`), with
//! `:status`, the server's fields and `date` (also inserted, then named
//! by index) and the few fields of this response; then the body as DATA
//! frames from the mapping, as many bytes at a time as the scheduler
//! (`schedule`) gives the stream. Each response is counted and logged here.

use std::sync::Arc;

use crate::hpack;
use crate::pack::Encoding;
use crate::serve::access_log::Entry;
use crate::serve::date::DateCache;
use crate::serve::handler::{self, Body, Extra, Method, Response, Sites};
use crate::serve::metrics::Protocol;
use crate::serve::output::Output;
use crate::serve::request_context::RequestContext;
use crate::serve::server_headers::ServerHeaders;

use super::super::frame;
use super::{Conn, Stream};
use crate::serve::request_fields::RequestFields;

/// `server: kiln`: static name index 54, literal without indexing.
const SERVER_FIELD: [u8; 7] = [0x0f, 0x27, 0x04, b'k', b'i', b'l', b'n'];

/// What is left of a response body.
#[derive(Clone, Copy, Debug)]
pub(super) enum Remaining {
    /// Bytes of the pack of the site at slot `pack`, from the mapping.
    Pack { pack: u32, off: u64, len: u64 },
    /// A built-in message.
    Static(&'static [u8]),
}

impl Remaining {
    pub(super) fn len(&self) -> u64 {
        match self {
            Remaining::Pack { len, .. } => *len,
            Remaining::Static(bytes) => bytes.len() as u64,
        }
    }
}

impl Conn {
    /// Answers the request on `self.streams[i]`.
    pub(super) fn respond(
        &mut self,
        i: usize,
        request: &RequestFields,
        ctx: &mut RequestContext<'_>,
        out: &mut Output,
    ) {
        self.respond_parked(i, request, None, ctx, out);
    }

    /// `respond`, for a request parked before until `deadline` (its wait
    /// ran out: `Some(0)`).
    pub(super) fn respond_parked(
        &mut self,
        i: usize,
        request: &RequestFields,
        deadline: Option<u64>,
        ctx: &mut RequestContext<'_>,
        out: &mut Output,
    ) {
        let req = request.request();
        if request.target().len() > 8 * 1024 {
            self.respond_builtin(i, 414, b"414 URI Too Long\n", Some(request), ctx, out);
            return;
        }
        let mut resp =
            handler::answer(ctx.sites, &req, ctx.http01, ctx.https_redirect, ctx.scratch);
        if resp.body == Body::Cold {
            let parked = match deadline {
                _ if ctx.draining || self.goaway_sent => None,
                Some(0) => None,
                deadline => ctx.events.park(ctx.sites, deadline),
            };
            match parked {
                Some(parked) if !parked.expired() => {
                    // The cold path: the request kept, answered again as
                    // the connection is woken.
                    self.streams[i].parked = Some(Box::new((request.clone(), parked)));
                    return;
                }
                _ => resp = handler::cold::gave_up(ctx.sites),
            }
        }
        let head_only = req.method == Method::Head;
        let mut events = None;
        if resp.body == Body::Events && !head_only {
            match ctx.events.hold(resp.site) {
                Some(stream) => events = Some(stream),
                None => resp = handler::live::busy(),
            }
        }
        let held = events.is_some();
        self.write_response(i, &resp, head_only, held, ctx.date, ctx.server_headers, out);
        let sent = if head_only { 0 } else { resp.body.len() };
        let (status, encoding, site) = (resp.status, resp.encoding, resp.site);
        record(ctx, Some(request), site, status, sent, encoding);
        if held {
            // Its hello goes with the HEADERS.
            self.streams[i].events = events;
            self.write_events(i, ctx, false, out);
        }
    }

    pub(super) fn respond_builtin(
        &mut self,
        i: usize,
        status: u16,
        body: &'static [u8],
        request: Option<&RequestFields>,
        ctx: &mut RequestContext<'_>,
        out: &mut Output,
    ) {
        let resp = handler::builtin(status, body);
        self.write_response(i, &resp, false, false, ctx.date, ctx.server_headers, out);
        record(ctx, request, None, status, resp.body.len(), None);
    }

    /// HEADERS (and CONTINUATION) now; the body is left for `send_data`
    /// (`held`: an event stream, the stream stays open for its events).
    #[allow(clippy::too_many_arguments)]
    fn write_response(
        &mut self,
        i: usize,
        resp: &Response<'_>,
        head_only: bool,
        held: bool,
        date: &DateCache,
        server_headers: &ServerHeaders,
        out: &mut Output,
    ) {
        let body = match resp.body {
            _ if head_only => None,
            Body::Empty | Body::Events | Body::Cold => None,
            Body::Static(bytes) => Some(Remaining::Static(bytes)),
            Body::Pack { pack, off, len } => Some(Remaining::Pack { pack, off, len }),
        }
        .filter(|b| b.len() > 0);
        let stream = &mut self.streams[i];
        stream.answered = true;
        stream.body = body;
        let id = stream.id;
        let end_stream = body.is_none() && !held;

        let start = out.bytes.len();
        out.bytes.extend_from_slice(&[0; frame::FRAME_HEADER_LEN]);
        let b = &mut out.bytes;
        if std::mem::take(&mut self.table_resize) {
            hpack::encode_table_size_update(0, b);
            if self.table.table_max() > 0 {
                hpack::encode_table_size_update(self.table.table_max(), b);
            }
        }
        hpack::encode_status(resp.status, b);
        // The server's fields, the date and a pack's shared fields go into
        // the client's dynamic table the first time, then by index; the
        // table evicts as RFC 7541 does and `self.table` follows it, so a
        // field evicted (by the dates of later seconds) is inserted again.
        let key = server_headers.key(resp.overrides);
        let (indexing, server_sizes) = server_headers.hpack_indexing(key);
        let server_room: usize = server_sizes.iter().sum();
        if let Some(newer) = self.table.server_fields(key, server_sizes.len()) {
            server_headers.write_indexed(key, newer, b);
        } else if self.table.may_insert_server(server_room) {
            b.extend_from_slice(indexing);
            self.table.insert_server(key, server_sizes.iter().copied());
        } else {
            b.extend_from_slice(&SERVER_FIELD);
            b.extend_from_slice(server_headers.hpack(key));
        }
        self.table
            .write_date(date.second(), date.hpack(), date.hpack_indexing(), b);
        match resp.shared.set {
            Some(set) if self.table.accepts(&set, server_room) => {
                let shared = resp.shared;
                self.table
                    .write_block(&set, resp.hpack, shared.base, shared.spans, b);
            }
            _ => b.extend_from_slice(resp.hpack),
        }
        match resp.extra {
            Extra::Nothing => {}
            Extra::Length => encode_number(b"content-length", resp.body.len(), b),
            Extra::Range { start, end, total } => {
                let mut value = Digits::default();
                value.text(b"bytes ");
                value.push(start);
                value.text(b"-");
                value.push(end);
                value.text(b"/");
                value.push(total);
                hpack::encode_field(b"content-range", value.as_bytes(), b);
                encode_number(b"content-length", end - start + 1, b);
            }
            Extra::Unsatisfiable { total } => {
                let mut value = Digits::default();
                value.text(b"bytes */");
                value.push(total);
                hpack::encode_field(b"content-range", value.as_bytes(), b);
                encode_number(b"content-length", 0, b);
            }
            Extra::Location(location) => {
                hpack::encode_field(b"location", location, b);
                encode_number(b"content-length", 0, b);
            }
            Extra::Open => {}
        }
        let block_len = out.bytes.len() - start - frame::FRAME_HEADER_LEN;
        let max = self.peer_max_frame as usize;
        if block_len <= max {
            let header = frame::headers_frame_header(id, block_len as u32, end_stream, true);
            out.bytes[start..start + frame::FRAME_HEADER_LEN].copy_from_slice(&header);
        } else {
            // Rare: a block beyond the client's frame size goes out in
            // pieces, HEADERS then CONTINUATION frames.
            let block = out.bytes.split_off(start + frame::FRAME_HEADER_LEN);
            out.bytes.truncate(start);
            for (n, piece) in block.chunks(max).enumerate() {
                let last = (n + 1) * max >= block.len();
                let header = if n == 0 {
                    frame::headers_frame_header(id, piece.len() as u32, end_stream, last)
                } else {
                    frame::continuation_frame_header(id, piece.len() as u32, last)
                };
                out.bytes.extend_from_slice(&header);
                out.bytes.extend_from_slice(piece);
            }
        }
        if end_stream {
            self.stream_sent(i, out);
        }
    }
}

impl Stream {
    /// Whether this stream's body comes from a pack written in place
    /// without a lease (`serve::in_place`): it is reset, not sent.
    pub(super) fn reads_a_stale_pack(&self) -> bool {
        matches!(self.body, Some(Remaining::Pack { .. }))
            && self.site.as_ref().is_some_and(|site| site.is_stale())
    }

    /// Writes the next `n` bytes of `body`, what is left of this stream's,
    /// as one DATA frame (with END_STREAM when `last`). `current` are the
    /// sites the output's pack segments point into. False, with nothing
    /// written, when the bytes copied came from a pack that turned stale
    /// meanwhile (a fault in the copy: a zero page read in).
    #[must_use]
    pub(super) fn write_data(
        &mut self,
        body: Remaining,
        n: u64,
        last: bool,
        current: &Sites,
        out: &mut Output,
    ) -> bool {
        let frame_at = out.bytes.len();
        out.bytes
            .extend_from_slice(&frame::data_frame_header(self.id, n as u32, last));
        match body {
            Remaining::Pack { pack, off, len } => {
                match &self.site {
                    Some(site) if !current.site(pack).is_some_and(|c| Arc::ptr_eq(site, c)) => {
                        // Started before a reload: copied from the
                        // pack it started on, which this output does
                        // not point into.
                        let pack = site.pack().map_or(&[][..], |p| p.bytes());
                        let range = off as usize..(off + n) as usize;
                        out.bytes.extend_from_slice(&pack[range]);
                        if site.is_stale() {
                            // Nothing sealed since the frame's header.
                            out.bytes.truncate(frame_at);
                            return false;
                        }
                    }
                    // The last frame's last byte held back for a pack
                    // without a lease (`Seg::Checked`).
                    _ => {
                        let held = last
                            .then(|| current.site(pack)?.held_back_byte(off, n))
                            .flatten();
                        out.pack_body_from(pack, off, n, held);
                    }
                }
                self.body = Some(Remaining::Pack {
                    pack,
                    off: off + n,
                    len: len - n,
                });
            }
            Remaining::Static(bytes) => {
                out.bytes.extend_from_slice(&bytes[..n as usize]);
                self.body = Some(Remaining::Static(&bytes[n as usize..]));
            }
        }
        true
    }
}

/// A numeric field, as HTTP/2 sends `content-length`.
fn encode_number(name: &[u8], value: u64, out: &mut Vec<u8>) {
    let mut digits = Digits::default();
    digits.push(value);
    hpack::encode_field(name, digits.as_bytes(), out);
}

/// A short field value built on the stack (`content-range`, a length).
struct Digits {
    bytes: [u8; 64],
    len: usize,
}

impl Default for Digits {
    fn default() -> Self {
        Digits {
            bytes: [0; 64],
            len: 0,
        }
    }
}

impl Digits {
    fn text(&mut self, text: &[u8]) {
        self.bytes[self.len..self.len + text.len()].copy_from_slice(text);
        self.len += text.len();
    }

    fn push(&mut self, value: u64) {
        self.text(itoa::Buffer::new().format(value).as_bytes());
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Counts a response and logs it; `site` is the slot of the site that
/// answered.
fn record(
    ctx: &mut RequestContext<'_>,
    request: Option<&RequestFields>,
    site: Option<u32>,
    status: u16,
    bytes: u64,
    encoding: Option<Encoding>,
) {
    ctx.count(Protocol::Http2, site, status, bytes, encoding);
    if ctx.logs() {
        ctx.log(Entry {
            peer: None,
            request: request.map(|r| (r.method_token(), r.target(), "HTTP/2.0")),
            host: request.and_then(RequestFields::host),
            status,
            bytes,
            encoding,
            duration_us: 0,
            referer: request.and_then(RequestFields::referer),
            user_agent: request.and_then(RequestFields::user_agent),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::frame::{PREFACE, frame_type, setting};
    use super::super::test_peer::*;
    use crate::hpack::Decoder;
    use crate::serve::server_headers::ServerHeaders;

    /// Every HEADERS payload of `sent`, decoded in order on one decoder
    /// of `table` bytes (as the client's), as (name, value) lists.
    fn decode_all(sent: &[Sent], table: usize) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut decoder = Decoder::new(table);
        sent.iter()
            .filter(|f| f.frame_type == frame_type::HEADERS)
            .map(|f| {
                let mut fields = Vec::new();
                decoder
                    .decode(&f.payload, &mut Vec::new(), 1 << 16, |n, v| {
                        fields.push((n.to_vec(), v.to_vec()));
                        Ok::<(), ()>(())
                    })
                    .expect("the client decodes every block");
                fields
            })
            .collect()
    }

    #[test]
    fn the_server_fields_go_once_then_by_index() {
        let mut peer = Peer::new();
        peer.headers = ServerHeaders::new(true, true);
        let mut bytes = start();
        for stream in [1, 3, 5] {
            bytes.extend(headers(stream, true, &get_block("/", &[])));
        }
        let (_, sent) = peer.send(&bytes);
        let blocks = decode_all(&sent, 4096);
        assert_eq!(blocks.len(), 3);
        assert!(blocks[0].contains(&(b"x-frame-options".to_vec(), b"SAMEORIGIN".to_vec())));
        let sizes: Vec<usize> = sent
            .iter()
            .filter(|f| f.frame_type == frame_type::HEADERS)
            .map(|f| f.payload.len())
            .collect();
        assert!(sizes[1] + 100 < sizes[0], "{sizes:?}");
        // Same fields, in any order (the date may tick between them).
        let names = |b: &Vec<(Vec<u8>, Vec<u8>)>| {
            let mut n: Vec<Vec<u8>> = b.iter().map(|(n, _)| n.clone()).collect();
            n.sort();
            n
        };
        assert_eq!(names(&blocks[0]), names(&blocks[2]));
    }

    #[test]
    fn a_client_without_a_dynamic_table_gets_stateless_blocks() {
        let mut peer = Peer::new();
        peer.headers = ServerHeaders::new(true, true);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(header(6, frame_type::SETTINGS, 0, 0));
        bytes.extend(setting::HEADER_TABLE_SIZE.to_be_bytes());
        bytes.extend(0u32.to_be_bytes());
        for stream in [1, 3] {
            bytes.extend(headers(stream, true, &get_block("/", &[])));
        }
        let (_, sent) = peer.send(&bytes);
        let blocks = decode_all(&sent, 0);
        assert_eq!(blocks.len(), 2);
        assert!(blocks[1].contains(&(b"server".to_vec(), b"kiln".to_vec())));
    }
}
