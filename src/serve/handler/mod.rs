//! Maps a parsed request to a response description made of prepared pack
//! bytes. Protocol-agnostic: HTTP/1.1 writes the description as a status line
//! and header block; HTTP/2 can write the same description as frames.
//!
//! Lookup order: forced pattern rules (only if the pack has any), the exact
//! route, the other pattern rules, wildcard routes walking up the directories,
//! the not-found page, a built-in 404.

pub mod challenges;
pub mod cold;
mod conditional;
mod field_lines;
pub mod live;
mod negotiate;
mod path;
mod rules;
pub mod sites;

use std::os::fd::AsFd;
use std::sync::Arc;

use super::metrics::{PackGauges, SiteStats};
use super::{in_place, pack_limits};
use crate::pack::{Encoding, Pack, RouteKind};
pub use challenges::Http01;
use conditional::{Precondition, RangeAsk};
pub use field_lines::{FieldLines, MAX_FIELD_LINES, TooManyLines};
pub use path::{PathError, normalize};
pub use rules::Rules;
pub use sites::Sites;

/// The request methods the handler tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    /// A standard method this static server does not allow: 405.
    NotAllowed,
    /// Anything else: 501.
    Unknown,
}

impl Method {
    pub fn from_token(token: &[u8]) -> Method {
        match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"OPTIONS" => Method::Options,
            b"POST" | b"PUT" | b"DELETE" | b"PATCH" | b"CONNECT" | b"TRACE" => Method::NotAllowed,
            _ => Method::Unknown,
        }
    }
}

/// What the handler needs of a request, whatever the protocol.
#[derive(Clone, Copy, Debug)]
pub struct Request<'r> {
    /// Decides between answering, 204, 405 and 501.
    pub method: Method,
    /// The raw request target (origin-form, absolute-form or `*`).
    pub target: &'r [u8],
    /// The `Host` value (HTTP/2: `:authority`), for redirects to HTTPS.
    pub host: Option<&'r [u8]>,
    /// Selects the stored variant.
    pub accept_encoding: FieldLines<'r>,
    /// Precondition: 412 unless a tag matches the variant's ETag strongly.
    pub if_match: FieldLines<'r>,
    /// Precondition by date, when `If-Match` is absent: 412 if the
    /// resource changed since.
    pub if_unmodified_since: Option<&'r [u8]>,
    /// Conditional GET: 304 when a tag matches.
    pub if_none_match: FieldLines<'r>,
    /// Conditional GET by date, when `If-None-Match` is absent.
    pub if_modified_since: Option<&'r [u8]>,
    /// A byte range of the selected variant.
    pub range: Option<&'r [u8]>,
    /// Applies `range` only if the resource is unchanged.
    pub if_range: Option<&'r [u8]>,
    /// RFC 9842: the dictionary the client holds for this URL, by its
    /// SHA-256 (a Structured Field byte sequence). A request carrying the
    /// field twice has `Some(b"")`, which names no dictionary.
    pub available_dictionary: Option<&'r [u8]>,
    /// `Sec-Fetch-Site` and `Sec-Fetch-Mode`: whether a delta may answer a
    /// cross-origin request the page could not read (RFC 9842 §7.2).
    pub sec_fetch_site: Option<&'r [u8]>,
    pub sec_fetch_mode: Option<&'r [u8]>,
}

impl<'r> Request<'r> {
    /// A request without any of the header fields the handler reads; the
    /// protocol fills in those it receives.
    pub fn new(method: Method, target: &'r [u8]) -> Request<'r> {
        Request {
            method,
            target,
            host: None,
            accept_encoding: FieldLines::default(),
            if_match: FieldLines::default(),
            if_unmodified_since: None,
            if_none_match: FieldLines::default(),
            if_modified_since: None,
            range: None,
            if_range: None,
            available_dictionary: None,
            sec_fetch_site: None,
            sec_fetch_mode: None,
        }
    }

    /// Records an `Available-Dictionary` line: a second one makes the
    /// field name no dictionary (RFC 9842 sends exactly one).
    pub fn set_available_dictionary(&mut self, value: &'r [u8]) {
        self.available_dictionary = Some(match self.available_dictionary {
            None => value,
            Some(_) => b"",
        });
    }
}

/// Header lines the protocol layer writes after `Response::head` (HTTP/2:
/// encodes after `Response::hpack`), computed per request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra<'a> {
    /// `head` is complete (it ends with `Content-Length` where one is due).
    Nothing,
    /// `Content-Length` of the body.
    Length,
    /// 206: `Content-Range: bytes start-end/total` and `Content-Length`.
    Range { start: u64, end: u64, total: u64 },
    /// 416: `Content-Range: bytes */total`, `Content-Length: 0`.
    Unsatisfiable { total: u64 },
    /// A redirect whose target is made per request (a rule's, or a stored
    /// one with the request's query): `Location: <value>`,
    /// `Content-Length: 0`.
    Location(&'a [u8]),
    /// A body of no known length, held open (`Body::Events`): HTTP/1.1
    /// frames it `Transfer-Encoding: chunked`; HTTP/2 and HTTP/3 say
    /// nothing (the stream's end is the body's).
    Open,
}

/// Where the body bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    Empty,
    /// A built-in message.
    Static(&'static [u8]),
    /// `len` bytes at `off` in the pack file (equal to the mapping offset)
    /// of the site at slot `pack`.
    Pack {
        pack: u32,
        off: u64,
        len: u64,
    },
    /// The live preview's event stream (`live`): the protocol holds the
    /// response open with a `live::EventStream` and appends what it is
    /// owed as it is woken.
    Events,
    /// A cold site (`cold`): its pack is being fetched; the protocol parks
    /// the request and answers it again once the site is loaded, or with
    /// `cold::UNAVAILABLE` at the deadline. Never written as a body.
    Cold,
}

impl Body {
    /// The bytes known now (none yet for an event stream).
    pub fn len(&self) -> u64 {
        match self {
            Body::Empty | Body::Events | Body::Cold => 0,
            Body::Static(b) => b.len() as u64,
            Body::Pack { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A response description; nothing here is copied from the pack.
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    /// The status code; the protocol adds the reason phrase.
    pub status: u16,
    /// Header lines (`Name: value\r\n`): a slice of a pack head or a
    /// built-in block.
    pub head: &'a [u8],
    /// The same fields as `head`, HPACK-encoded without the dynamic table
    /// (RFC 7541), for HTTP/2: a slice of the variant's HPACK block or a
    /// built-in one.
    pub hpack: &'a [u8],
    /// The same fields as QPACK field lines, for HTTP/3: a slice of the
    /// variant's prepared block; `None` for a built-in response, whose
    /// `head` HTTP/3 encodes as it sends it.
    pub qpack: Option<&'a [u8]>,
    /// Which of the server's own headers `head` already sets (the pack's
    /// `Variant::overrides`), so the protocol leaves those out.
    pub overrides: u8,
    /// Lines computed per request, written after `head`.
    pub extra: Extra<'a>,
    /// What follows the header block (left out for HEAD).
    pub body: Body,
    /// The slot of the site the request went to (see `Sites`), for the
    /// metrics; `None` for what no site answers (a bad `*` request, a host
    /// no site serves).
    pub site: Option<u32>,
    /// The content coding of the variant answered with, for the metrics
    /// and the log; `None` when no stored variant was chosen.
    pub encoding: Option<Encoding>,
    /// The pack's shared fields `hpack` has, which HTTP/2 names by index
    /// once a connection inserted them.
    pub shared: Shared<'a>,
}

/// Where a response's `hpack` has fields of its pack's shared set.
#[derive(Clone, Copy, Debug)]
pub struct Shared<'a> {
    /// The pack's set; `None` for a response from no pack, or a pack
    /// without shared fields.
    pub set: Option<crate::hpack::SharedView<'a>>,
    /// The variant's span records (`Variant::spans`).
    pub spans: &'a [u8],
    /// Where `hpack` starts in the variant's block, which the spans count
    /// from.
    pub base: usize,
}

impl Shared<'_> {
    /// No shared field.
    pub const NONE: Shared<'static> = Shared {
        set: None,
        spans: &[],
        base: 0,
    };
}

/// What is being served: a pack with its compiled rules, or (without a
/// pack) the dummy answer that measures the server core alone.
pub struct Site {
    /// The pack tracked for a write in place (`in_place`), when it is a
    /// file: declared first, so dropped before the pack is unmapped.
    in_place: Option<in_place::Guard>,
    /// The mapping every response points into; `None` in dummy mode.
    pack: Option<Pack>,
    /// The pack's place in the budget of descriptors (`pack_limits`):
    /// `None` for a pack whose descriptor was closed at load, declared
    /// after `pack` so that it is given back once the descriptor is
    /// closed.
    _descriptor: Option<pack_limits::Held>,
    /// The pack's pattern rules, compiled at load.
    rules: Rules,
    /// The number output segments name this site's pack by (see
    /// `sites`): kept by every generation of the site set while the site
    /// lives.
    slot: u32,
    /// What is counted for the site (its name: the host it answers for,
    /// `_default` for the fallback), kept across reloads.
    stats: Arc<SiteStats>,
    /// When the pack was loaded, and its file's modification time (Unix
    /// seconds), for the metrics.
    loaded_at: i64,
    modified_at: i64,
    /// A watched preview's generation, as its pages hear of it: answers
    /// the reserved paths (`live`). `None` for every other site.
    live: Option<live::Live>,
}

impl Site {
    /// The site of `pack`, at `slot` of its site set, counted in `stats`.
    pub fn new(mut pack: Pack, slot: u32, stats: Arc<SiteStats>) -> Arc<Site> {
        let descriptor = pack_limits::keep_or_close(&mut pack);
        Site::with(pack, descriptor, slot, stats, None)
    }

    /// `new` for a pack whose descriptor was kept (`descriptor`) or
    /// closed already (`pack_limits::keep_or_close`).
    pub fn with_descriptor(
        pack: Pack,
        descriptor: Option<pack_limits::Held>,
        slot: u32,
        stats: Arc<SiteStats>,
    ) -> Arc<Site> {
        Site::with(pack, descriptor, slot, stats, None)
    }

    /// A watched preview of `pack` (its one site), whose pages hear of
    /// its generations through `live`.
    pub fn preview(mut pack: Pack, stats: Arc<SiteStats>, live: live::Live) -> Arc<Site> {
        let descriptor = pack_limits::keep_or_close(&mut pack);
        Site::with(pack, descriptor, 0, stats, Some(live))
    }

    /// The descriptor was kept or closed before (the guard leases the
    /// one a pack keeps).
    fn with(
        pack: Pack,
        descriptor: Option<pack_limits::Held>,
        slot: u32,
        stats: Arc<SiteStats>,
        live: Option<live::Live>,
    ) -> Arc<Site> {
        let rules = Rules::compile(&pack);
        let unix = |t: std::io::Result<std::time::SystemTime>| {
            t.ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs() as i64)
        };
        let modified_at = pack.stamp().modified.0;
        // A watched preview is in memory: nothing writes it in place.
        let in_place = live
            .is_none()
            .then(|| in_place::Guard::track(&pack))
            .flatten();
        Arc::new(Site {
            in_place,
            pack: Some(pack),
            _descriptor: descriptor,
            rules,
            slot,
            stats,
            loaded_at: unix(Ok(std::time::SystemTime::now())),
            modified_at,
            live,
        })
    }

    /// A pack served on its own, counted as `_default` (for tests and
    /// the fuzz targets).
    pub fn from_pack(pack: Pack) -> Arc<Site> {
        Site::new(pack, 0, SiteStats::new("_default", 1))
    }

    /// The dummy answer, counted in `stats`.
    pub fn dummy(stats: Arc<SiteStats>) -> Arc<Site> {
        Site::dummy_at(0, stats)
    }

    /// A dummy site at `slot`, for tests of the site set.
    pub fn dummy_at(slot: u32, stats: Arc<SiteStats>) -> Arc<Site> {
        Arc::new(Site {
            in_place: None,
            pack: None,
            _descriptor: None,
            rules: Rules::default(),
            slot,
            stats,
            loaded_at: 0,
            modified_at: 0,
            live: None,
        })
    }

    pub fn pack(&self) -> Option<&Pack> {
        self.pack.as_ref()
    }

    /// Whether the pack was written in place without a lease and is not
    /// to be served from (`in_place`): its site answers 503, and output
    /// still to be sent from it fails its connection.
    #[inline]
    pub fn is_stale(&self) -> bool {
        self.in_place
            .as_ref()
            .is_some_and(in_place::Guard::is_stale)
    }

    /// With a pack that has no read lease (`in_place`): the last byte of
    /// the body at `off`, `len` bytes long, read now, to be held back
    /// until the pack is found unchanged (`Seg::Checked`). `None` with a
    /// lease, or for an empty body: one load on the hot path, nothing
    /// more.
    #[inline]
    pub fn held_back_byte(&self, off: u64, len: u64) -> Option<u8> {
        if !self.in_place.as_ref()?.holds_back() || len == 0 {
            return None;
        }
        let at = usize::try_from(off.checked_add(len - 1)?).ok()?;
        // A fault in this read (the pack cut short) maps a zero page in
        // and marks the pack stale: the check before the byte goes out
        // finds it.
        self.pack()?.bytes().get(at).copied()
    }

    /// Whether the pack is as it was opened (`in_place::Guard::unchanged`;
    /// always, for a pack not tracked).
    pub fn unchanged(&self) -> bool {
        match (self.in_place.as_ref(), self.pack()) {
            (Some(guard), Some(pack)) => guard.unchanged(pack.file().map(AsFd::as_fd)),
            _ => true,
        }
    }

    /// A watched preview's generation (`live`).
    pub fn live(&self) -> Option<&live::Live> {
        self.live.as_ref()
    }

    pub fn slot(&self) -> u32 {
        self.slot
    }

    pub fn stats(&self) -> &Arc<SiteStats> {
        &self.stats
    }

    /// The name the site is served and counted by.
    pub fn name(&self) -> &str {
        self.stats.name()
    }

    /// The pack's figures for the metrics; `None` in dummy mode.
    pub fn gauges(&self) -> Option<PackGauges> {
        Some(PackGauges {
            site: self.name().to_string(),
            bytes: self.pack.as_ref()?.bytes().len() as u64,
            mtime: self.modified_at,
            loaded: self.loaded_at,
        })
    }
}

/// Per-thread buffers reused by every request, so that the handler
/// allocates nothing.
pub struct Scratch {
    /// The decoded, normalised route key.
    path: Vec<u8>,
    /// A rule's expanded target.
    expanded: Vec<u8>,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            path: Vec::with_capacity(16 * 1024),
            expanded: Vec::with_capacity(16 * 1024),
        }
    }
}

const TEXT: &[u8] = b"Content-Type: text/plain; charset=utf-8\r\n";
const ALLOW: &[u8] = b"Allow: GET, HEAD, OPTIONS\r\n";
const ALLOW_TEXT: &[u8] =
    b"Allow: GET, HEAD, OPTIONS\r\nContent-Type: text/plain; charset=utf-8\r\n";

// The built-in blocks HPACK-encoded, as `hpack::encode_lines` writes them
// (the test `builtin_hpack_blocks_are_the_lines` checks it): constants, so
// that no response allocates or encodes anything.
/// `TEXT`: `content-type` (static name index 31: 0x0f 0x10), its value
/// Huffman-coded (0x92: 18 bytes).
const TEXT_HPACK: &[u8] = &[
    0x0f, 0x10, 0x92, 0x49, 0x7c, 0xa5, 0x8a, 0xe8, 0x19, 0xaa, 0xfb, 0x50, 0x93, 0x8e, 0xc4, 0x15,
    0x30, 0x5a, 0x99, 0x56, 0x7b,
];
/// `ALLOW`: `allow` (static name index 22: 0x0f 0x07), its value
/// Huffman-coded (0x90: 16 bytes).
const ALLOW_HPACK: &[u8] = &[
    0x0f, 0x07, 0x90, 0xc5, 0x83, 0x7f, 0xd2, 0x98, 0xf0, 0x43, 0x7f, 0xe9, 0x4d, 0x5a, 0xf7, 0xe4,
    0xd5, 0xa7, 0x77,
];
/// `ALLOW_TEXT`: `ALLOW_HPACK` then `TEXT_HPACK`.
const ALLOW_TEXT_HPACK: &[u8] = &[
    0x0f, 0x07, 0x90, 0xc5, 0x83, 0x7f, 0xd2, 0x98, 0xf0, 0x43, 0x7f, 0xe9, 0x4d, 0x5a, 0xf7, 0xe4,
    0xd5, 0xa7, 0x77, 0x0f, 0x10, 0x92, 0x49, 0x7c, 0xa5, 0x8a, 0xe8, 0x19, 0xaa, 0xfb, 0x50, 0x93,
    0x8e, 0xc4, 0x15, 0x30, 0x5a, 0x99, 0x56, 0x7b,
];
/// `RETRY_TEXT`: `retry-after` (static name index 53: 0x0f 0x26), the
/// literal `1` (0x01), then `TEXT_HPACK`.
pub(super) const RETRY_TEXT_HPACK: &[u8] = &[
    0x0f, 0x26, 0x01, b'1', 0x0f, 0x10, 0x92, 0x49, 0x7c, 0xa5, 0x8a, 0xe8, 0x19, 0xaa, 0xfb, 0x50,
    0x93, 0x8e, 0xc4, 0x15, 0x30, 0x5a, 0x99, 0x56, 0x7b,
];
pub(super) const RETRY_TEXT: &[u8] =
    b"Retry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\n";

/// A built-in plain-text response.
pub fn builtin(status: u16, body: &'static [u8]) -> Response<'static> {
    Response {
        status,
        head: TEXT,
        hpack: TEXT_HPACK,
        qpack: None,
        overrides: 0,
        extra: Extra::Length,
        body: Body::Static(body),
        site: None,
        encoding: None,
        shared: Shared::NONE,
    }
}

/// 503 for a site whose pack was written in place without a lease
/// (`in_place`): asked again in a second, the new pack may be whole.
const WRITTEN_IN_PLACE: Response<'static> = Response {
    status: 503,
    head: RETRY_TEXT,
    hpack: RETRY_TEXT_HPACK,
    qpack: None,
    overrides: 0,
    extra: Extra::Length,
    body: Body::Static(b"503 Service Unavailable: the site's pack is being replaced\n"),
    site: None,
    encoding: None,
    shared: Shared::NONE,
};

fn not_found<'a>(site: &'a Site, pack: &'a Pack) -> Response<'a> {
    match pack.not_found() {
        Some(route) => serve_route(site, route, 404, None).unwrap_or_else(corrupt),
        None => builtin(404, b"404 Not Found\n"),
    }
}

fn corrupt<'a>() -> Response<'a> {
    builtin(500, b"500 Internal Server Error\n")
}

/// 412: no body, and none of the variant's lines. It describes no
/// representation, and the variant's `Cache-Control` would let a shared
/// cache store the failure and hand it to requests without the
/// precondition.
const PRECONDITION_FAILED: Response<'static> = Response {
    status: 412,
    head: b"",
    hpack: b"",
    qpack: None,
    overrides: 0,
    extra: Extra::Length,
    body: Body::Empty,
    site: None,
    encoding: None,
    shared: Shared::NONE,
};

/// What the protocols call: a target of `*` is for OPTIONS only (400
/// otherwise); with `http01` (`--acme`, on cleartext connections) an ACME
/// HTTP-01 challenge is answered from it, whatever the host (the CA asks
/// for names that may have no site yet); the site is chosen by host (the
/// authority of an absolute-form target, else `Host`), and a host no site
/// serves gets 421; with `https_redirect` (`--redirect-https`, on
/// cleartext connections) a request is sent to HTTPS when it can be;
/// everything else is answered from the site. Allocation-free.
pub fn answer<'a>(
    sites: &'a Sites,
    req: &Request<'_>,
    http01: Option<&'a Http01>,
    https_redirect: Option<u16>,
    scratch: &'a mut Scratch,
) -> Response<'a> {
    if req.target == b"*" && req.method != Method::Options {
        return builtin(400, b"400 Bad Request\n");
    }
    if let Some(resp) = http01.and_then(|h| h.answer(req)) {
        return resp;
    }
    let host = sites::target_authority(req.target).or(req.host);
    let site = match sites.lookup(host) {
        sites::Routed::Site(site) => site,
        sites::Routed::Cold(cold) => return cold::answer(cold),
        sites::Routed::Nowhere => {
            return builtin(
                421,
                b"421 Misdirected Request: no site here answers for this host\n",
            );
        }
    };
    let mut resp = match https_redirect.and_then(|port| Some((port, redirect_parts(req)?))) {
        Some((https_port, (name, target))) => redirect_to_https(name, target, https_port, scratch),
        None if site.is_stale() => WRITTEN_IN_PLACE,
        None => handle(site, req, scratch),
    };
    // Asked again after the lookup: a read of a pack written in place
    // faults it stale (`in_place`), and what it read is not an answer.
    if site.is_stale() {
        resp = WRITTEN_IN_PLACE;
    }
    resp.site = Some(site.slot);
    resp
}

/// The host name and target `--redirect-https` sends `req` to, or `None`
/// for requests still served here: ACME challenges (from the pack when
/// kiln does not run ACME itself, so that another client's tokens built
/// into it are still found) and requests without a Host to redirect to.
fn redirect_parts<'r>(req: &Request<'r>) -> Option<(&'r [u8], &'r [u8])> {
    let host = req.host.filter(|h| !h.is_empty())?;
    let target = match req.target.strip_prefix(b"http://") {
        // Absolute form: the path after the authority.
        Some(rest) => rest
            .iter()
            .position(|&c| c == b'/')
            .map_or(&b"/"[..], |i| &rest[i..]),
        None => req.target,
    };
    if target.starts_with(challenges::PREFIX) {
        return None;
    }
    // The port of the cleartext listener is not the HTTPS one.
    let name = match host.strip_prefix(b"[") {
        Some(_) => {
            &host[..host
                .iter()
                .position(|&c| c == b']')
                .map_or(host.len(), |i| i + 1)]
        }
        None => &host[..host.iter().position(|&c| c == b':').unwrap_or(host.len())],
    };
    Some((name, target))
}

/// A 308 to `name` and `target` on HTTPS (`https_port` added unless 443).
fn redirect_to_https<'a>(
    name: &[u8],
    target: &[u8],
    https_port: u16,
    scratch: &'a mut Scratch,
) -> Response<'a> {
    let location = &mut scratch.expanded;
    location.clear();
    location.extend_from_slice(b"https://");
    location.extend_from_slice(name);
    if https_port != 443 {
        location.push(b':');
        crate::serve::output::push_u64(location, u64::from(https_port));
    }
    location.extend_from_slice(if target == b"*" { b"/" } else { target });
    Response {
        status: 308,
        head: b"",
        hpack: b"",
        qpack: None,
        overrides: 0,
        extra: Extra::Location(location),
        body: Body::Empty,
        site: None,
        encoding: None,
        shared: Shared::NONE,
    }
}

/// Answers `req` from `site`. Allocation-free.
pub fn handle<'a>(site: &'a Site, req: &Request<'_>, scratch: &'a mut Scratch) -> Response<'a> {
    match req.method {
        Method::Get | Method::Head => {}
        Method::Options => {
            return Response {
                status: 204,
                head: ALLOW,
                hpack: ALLOW_HPACK,
                qpack: None,
                overrides: 0,
                extra: Extra::Nothing,
                body: Body::Empty,
                site: None,
                encoding: None,
                shared: Shared::NONE,
            };
        }
        Method::NotAllowed => {
            return Response {
                status: 405,
                head: ALLOW_TEXT,
                hpack: ALLOW_TEXT_HPACK,
                qpack: None,
                overrides: 0,
                extra: Extra::Length,
                body: Body::Static(b"405 Method Not Allowed\n"),
                site: None,
                encoding: None,
                shared: Shared::NONE,
            };
        }
        Method::Unknown => return builtin(501, b"501 Not Implemented\n"),
    }
    let Some(pack) = &site.pack else {
        return builtin(200, b"Hello World!");
    };
    let rules = &site.rules;
    let Scratch { path, expanded } = scratch;
    match normalize(req.target, path) {
        Ok(()) => {}
        Err(PathError::BadRequest) => return builtin(400, b"400 Bad Request\n"),
        Err(PathError::Hidden) => return not_found(site, pack),
    }
    let path: &'a [u8] = path;
    // A watched preview's own paths (`live`) come before the site's
    // rules and fallbacks, after its files: looked at only where a rule
    // or a missing route would answer, which costs a served route nothing.
    if pack.has_forced_rules()
        && let Some(rule) = find_rule(rules, true, path, req.target, expanded)
    {
        if let Some(resp) = live::answer(site, path) {
            return resp;
        }
        return rule_response(site, pack, rule, req, expanded);
    }
    if let Some(route) = pack.lookup(RouteKind::Exact, path) {
        if (300..400).contains(&route.status())
            && let Some(query) = query(req.target)
            && let Some(resp) = redirect_passing_query(route, query, expanded)
        {
            return resp;
        }
        return serve_route(site, route, route.status(), Some(req)).unwrap_or_else(corrupt);
    }
    if let Some(resp) = live::answer(site, path) {
        return resp;
    }
    if !rules.list.is_empty()
        && let Some(rule) = find_rule(rules, false, path, req.target, expanded)
    {
        return rule_response(site, pack, rule, req, expanded);
    }
    let mut dir_end = path.iter().rposition(|&c| c == b'/').unwrap_or(0) + 1;
    loop {
        if let Some(route) = pack.lookup(RouteKind::Wildcard, &path[..dir_end]) {
            return serve_route(site, route, route.status(), Some(req)).unwrap_or_else(corrupt);
        }
        if dir_end <= 1 {
            break;
        }
        dir_end = path[..dir_end - 1]
            .iter()
            .rposition(|&c| c == b'/')
            .unwrap_or(0)
            + 1;
    }
    not_found(site, pack)
}

/// The first rule with `force` as given that matches `path`; its target
/// is expanded into `expanded`, with the query of the request's `target`
/// passed on if the rule redirects.
fn find_rule<'a>(
    rules: &'a Rules,
    forced: bool,
    path: &[u8],
    target: &[u8],
    expanded: &mut Vec<u8>,
) -> Option<&'a rules::Rule> {
    let mut caps = rules::Captures::default();
    let rule = rules
        .list
        .iter()
        .filter(|r| r.force == forced)
        .find(|r| r.matches(path, &mut caps))?;
    rule.expand(&caps, expanded, (300..400).contains(&rule.status));
    if (300..400).contains(&rule.status)
        && let Some(query) = query(target)
    {
        pass_query(expanded, query);
    }
    Some(rule)
}

/// The query of a request target (after `?`, before any `#`), when it has
/// a non-empty one.
fn query(target: &[u8]) -> Option<&[u8]> {
    let start = target.iter().position(|&c| c == b'?')? + 1;
    let end = target[start..]
        .iter()
        .position(|&c| c == b'#')
        .map_or(target.len(), |i| start + i);
    Some(&target[start..end]).filter(|q| !q.is_empty())
}

/// Passes the request's `query` on to a redirect's `location`, as Netlify
/// does, unless the target has a query of its own: `?query` goes before
/// the fragment, if any. In place: no allocation while `location`'s
/// capacity (the per-thread scratch's) holds it.
fn pass_query(location: &mut Vec<u8>, query: &[u8]) {
    let fragment = location
        .iter()
        .position(|&c| c == b'#')
        .unwrap_or(location.len());
    if location[..fragment].contains(&b'?') {
        return;
    }
    location.push(b'?');
    location.extend_from_slice(query);
    location[fragment..].rotate_right(1 + query.len());
}

/// A stored redirect with the request's query passed on: its `Location`
/// (the first line and field of the block, as `kiln build` writes a
/// redirect's) written again into `location` with the query, then the rest
/// of the block up to the representation, without the page. `None` when
/// the block does not start with `Location`: the stored answer is sent.
fn redirect_passing_query<'a>(
    route: crate::pack::Route<'a>,
    query: &[u8],
    location: &'a mut Vec<u8>,
) -> Option<Response<'a>> {
    let variant = route.variant(Encoding::Identity)?;
    let line_end = variant.head.windows(2).position(|w| w == b"\r\n")?;
    let value = variant.head[..line_end].strip_prefix(b"Location: ")?;
    let head = variant.head.get(line_end + 2..variant.repr_at)?;
    let field_end = crate::hpack::first_literal_len(variant.hpack)?;
    let hpack = variant.hpack.get(field_end..variant.hpack_repr_at)?;
    let qpack_block = variant.qpack_block();
    let qpack_start = crate::qpack::first_literal_len(qpack_block)?;
    let qpack = qpack_block.get(qpack_start..variant.qpack_repr_at())?;
    let shared = Shared {
        set: route.pack().shared_fields(),
        spans: variant.spans,
        base: field_end,
    };
    location.clear();
    location.extend_from_slice(value);
    pass_query(location, query);
    Some(Response {
        status: route.status(),
        head,
        hpack,
        qpack: Some(qpack),
        overrides: variant.overrides,
        extra: Extra::Location(location),
        body: Body::Empty,
        site: None,
        encoding: None,
        shared,
    })
}

/// Applies a matched rule whose target is `expanded`.
fn rule_response<'a>(
    site: &'a Site,
    pack: &'a Pack,
    rule: &rules::Rule,
    req: &Request<'_>,
    expanded: &'a [u8],
) -> Response<'a> {
    if (300..400).contains(&rule.status) {
        return Response {
            status: rule.status,
            head: b"",
            hpack: b"",
            qpack: None,
            overrides: 0,
            extra: Extra::Location(expanded),
            body: Body::Empty,
            site: None,
            encoding: None,
            shared: Shared::NONE,
        };
    }
    let key_end = expanded
        .iter()
        .position(|&c| c == b'?' || c == b'#')
        .unwrap_or(expanded.len());
    let Some(route) = pack.lookup(RouteKind::Exact, &expanded[..key_end]) else {
        return not_found(site, pack);
    };
    let resp = if rule.status == 200 {
        serve_route(site, route, route.status(), Some(req))
    } else {
        serve_route(site, route, rule.status, None)
    };
    resp.unwrap_or_else(corrupt)
}

/// Serves a stored route with `status`. `req` is given when content
/// negotiation and (for a 200 with validators) preconditions and ranges
/// apply; `None` serves identity as is (not-found pages, status rewrites).
/// A redirect or a not-found page ignores preconditions, as RFC 9110
/// §13.2.1 asks of any response that would not be 2xx.
fn serve_route<'a>(
    site: &Site,
    route: crate::pack::Route<'a>,
    status: u16,
    req: Option<&Request<'_>>,
) -> Option<Response<'a>> {
    let no_accept = FieldLines::default();
    let accept = req.map_or(&no_accept, |r| &r.accept_encoding);
    let mut variant = negotiate::choose(&route, accept)?;
    // Only a request naming a dictionary looks further: one `Option` test
    // for every other request.
    if let Some(req) = req
        && req.available_dictionary.is_some()
        && let Some(delta) = negotiate::choose_delta(&route, req, &variant)
    {
        variant = delta;
    }
    let shared = Shared {
        set: route.pack().shared_fields(),
        spans: variant.spans,
        base: 0,
    };
    let full = Response {
        status,
        head: variant.head,
        hpack: variant.hpack,
        qpack: Some(variant.qpack_block()),
        overrides: variant.overrides,
        extra: Extra::Nothing,
        body: Body::Pack {
            pack: site.slot,
            off: variant.body_off,
            len: variant.body.len() as u64,
        },
        site: None,
        encoding: Some(variant.encoding),
        shared,
    };
    let Some(req) = req.filter(|_| status == 200 && route.has_validators()) else {
        return Some(full);
    };
    match conditional::evaluate(req, variant.etag, route.last_modified()) {
        Precondition::Holds => {}
        Precondition::NotModified => {
            return Some(Response {
                status: 304,
                head: &variant.head[..variant.repr_at],
                hpack: &variant.hpack[..variant.hpack_repr_at],
                qpack: Some(&variant.qpack_block()[..variant.qpack_repr_at()]),
                overrides: variant.overrides,
                extra: Extra::Nothing,
                body: Body::Empty,
                site: None,
                encoding: Some(variant.encoding),
                shared,
            });
        }
        Precondition::Failed => return Some(PRECONDITION_FAILED),
    }
    let Some(range) = req.range.filter(|_| req.method == Method::Get) else {
        return Some(full);
    };
    if let Some(if_range) = req.if_range
        && !conditional::if_range_holds(if_range, variant.etag, route.last_modified())
    {
        return Some(full);
    }
    let total = variant.body.len() as u64;
    Some(match conditional::parse_range(range, total) {
        RangeAsk::Full => full,
        RangeAsk::Part { start, end } => Response {
            status: 206,
            head: &variant.head[..variant.length_at],
            hpack: &variant.hpack[..variant.hpack_length_at],
            qpack: Some(&variant.qpack_block()[..variant.qpack_length_at()]),
            overrides: variant.overrides,
            extra: Extra::Range { start, end, total },
            body: Body::Pack {
                pack: site.slot,
                off: variant.body_off + start,
                len: end - start + 1,
            },
            site: None,
            encoding: Some(variant.encoding),
            shared,
        },
        RangeAsk::Unsatisfiable => Response {
            status: 416,
            head: &variant.head[..variant.repr_at],
            hpack: &variant.hpack[..variant.hpack_repr_at],
            qpack: Some(&variant.qpack_block()[..variant.qpack_repr_at()]),
            overrides: variant.overrides,
            extra: Extra::Unsatisfiable { total },
            body: Body::Empty,
            site: None,
            encoding: Some(variant.encoding),
            shared,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of an HPACK block, decoded by a decoder with no dynamic
    /// table, as the lines they stand for (names lowercase).
    fn decoded_lines(block: &[u8]) -> String {
        let mut lines = String::new();
        crate::hpack::Decoder::new(0)
            .decode(block, &mut Vec::new(), usize::MAX, |name, value| {
                lines.push_str(&String::from_utf8_lossy(name));
                lines.push_str(": ");
                lines.push_str(&String::from_utf8_lossy(value));
                lines.push_str("\r\n");
                Ok::<(), ()>(())
            })
            .unwrap();
        lines
    }

    /// `lines` with their names lowercased, as HTTP/2 spells them.
    fn lowercase_names(lines: &[u8]) -> String {
        String::from_utf8_lossy(lines)
            .lines()
            .map(|l| {
                let (name, value) = l.split_once(": ").unwrap();
                format!("{}: {value}\r\n", name.to_ascii_lowercase())
            })
            .collect()
    }

    #[test]
    fn builtin_hpack_blocks_are_the_lines() {
        for (lines, block) in [
            (TEXT, TEXT_HPACK),
            (ALLOW, ALLOW_HPACK),
            (ALLOW_TEXT, ALLOW_TEXT_HPACK),
            (RETRY_TEXT, RETRY_TEXT_HPACK),
        ] {
            let text = String::from_utf8_lossy(lines);
            assert_eq!(decoded_lines(block), lowercase_names(lines), "{text}");
            let mut encoded = Vec::new();
            crate::hpack::encode_lines(lines, &mut encoded);
            assert_eq!(encoded, block, "{text}");
        }
    }

    #[test]
    fn the_query_is_passed_on_unless_the_target_has_one() {
        assert_eq!(query(b"/a?x=1&y=2#f"), Some(&b"x=1&y=2"[..]));
        assert_eq!(query(b"/a?"), None);
        assert_eq!(query(b"/a"), None);
        let mut location = Vec::with_capacity(64);
        for (target, expected) in [
            (&b"/new"[..], &b"/new?x=1"[..]),
            (b"/new#top", b"/new?x=1#top"),
            (b"https://b.example/?q=2", b"https://b.example/?q=2"),
            (b"/new?q=2#top", b"/new?q=2#top"),
            (b"/new#a?b", b"/new?x=1#a?b"),
        ] {
            location.clear();
            location.extend_from_slice(target);
            pass_query(&mut location, b"x=1");
            assert_eq!(location, expected, "{}", String::from_utf8_lossy(target));
        }
    }

    #[test]
    fn every_builtin_response_carries_both_blocks() {
        let site = Sites::single(Site::dummy(SiteStats::new("_default", 1)));
        let mut scratch = Scratch::default();
        for (method, target) in [
            (Method::Get, &b"/"[..]),
            (Method::Options, b"*"),
            (Method::Options, b"/"),
            (Method::NotAllowed, b"/"),
            (Method::Unknown, b"/"),
            (Method::Get, b"*"),
        ] {
            let req = Request::new(method, target);
            let resp = answer(&site, &req, None, None, &mut scratch);
            assert_eq!(
                decoded_lines(resp.hpack),
                lowercase_names(resp.head),
                "{method:?}"
            );
        }
        let mut req = Request::new(Method::Get, b"/x");
        req.host = Some(b"example.com");
        let resp = answer(&site, &req, None, Some(443), &mut scratch);
        assert_eq!(
            (resp.status, resp.head, resp.hpack),
            (308, &b""[..], &b""[..])
        );
    }
}
