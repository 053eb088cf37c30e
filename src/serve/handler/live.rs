//! The live preview's reload channel (`kiln serve DIR --watch`): the
//! script every page of the preview loads (`build::live` puts its tag in)
//! and the event stream it listens to, both answered at reserved paths of
//! a site that has a [`Live`] (only a watched preview's), whatever the
//! site's own routes and rules say.
//!
//! The event stream (Server-Sent Events) is the one response kiln holds
//! open. Here it is only bytes: what each generation of the preview says
//! (`Live`), and what one stream is owed since it last heard
//! (`EventStream::owed`): the hello first, then a change (the stylesheets
//! to swap, or a reload), a reload for a stream that missed a generation,
//! a comment now and then so that nothing on the way drops it. Each
//! protocol holds the stream its own way (HTTP/1.1 chunks, HTTP/2 and
//! HTTP/3 DATA frames), and the event loops wake held streams when the
//! sites' generation changes. A thread holds at most `MAX_PER_THREAD`
//! (`EventStreams`); beyond, the answer is 503.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{Body, Extra, Response, Shared, Site, Sites};
use crate::build::live::{EVENTS_PATH, SCRIPT_PATH};

/// Event streams one thread holds open at most: a developer's tabs are a
/// few; a client opening more is refused (503) rather than let hold
/// connections without end.
pub const MAX_PER_THREAD: usize = 64;

/// How often a held stream hears a comment when nothing happens: under
/// the minute after which proxies and browsers commonly drop a silent
/// response (and under `--keepalive-timeout`'s default, HTTP/3's idle
/// timeout).
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// The comment a held stream hears every `HEARTBEAT`.
pub const COMMENT: &[u8] = b":\n\n";

/// How long a browser waits before it opens a dropped stream again
/// (SSE's `retry`, in milliseconds).
const RETRY_MS: u32 = 1000;

/// The script's response head: no validators (it is a few hundred bytes),
/// asked again at every page load.
const SCRIPT_HEAD: &[u8] =
    b"Content-Type: text/javascript; charset=utf-8\r\nCache-Control: no-cache\r\n";
/// The event stream's head: never stored; `X-Accel-Buffering: no` keeps
/// nginx, if it proxies the preview, from holding events back.
const EVENTS_HEAD: &[u8] =
    b"Content-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Accel-Buffering: no\r\n";
const SCRIPT: &[u8] = include_bytes!("live.js");

/// What changed from one generation of the preview to the next, as a
/// page acts on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Only stylesheets, at these paths: swapped in place.
    Stylesheets(Vec<String>),
    /// Anything else: the page reloads.
    Reload,
}

/// One generation of a watched preview, as its pages hear of it.
pub struct Live {
    /// Counts the generations of this server's preview.
    generation: u64,
    /// A new stream's first event: the generation it starts from.
    hello: Box<[u8]>,
    /// The event for a stream that heard the generation before this one.
    change: Box<[u8]>,
    /// The event for a stream further behind.
    reload: Box<[u8]>,
    /// `SCRIPT_HEAD` and `EVENTS_HEAD` HPACK-coded.
    script_hpack: Box<[u8]>,
    events_hpack: Box<[u8]>,
}

impl Live {
    /// The first generation. `epoch` tells this server's generations from
    /// another's (the start time): a page whose stream is opened again
    /// by a restarted server reloads.
    pub fn first(epoch: u64) -> Live {
        Live::new(epoch, 0, &Change::Reload)
    }

    /// The generation after `self`, with what changed.
    pub fn next(&self, epoch: u64, change: &Change) -> Live {
        Live::new(epoch, self.generation + 1, change)
    }

    fn new(epoch: u64, generation: u64, change: &Change) -> Live {
        let id = format!("{epoch}-{generation}");
        let event = |fields: serde_json::Value| format!("data: {fields}\n\n").into_bytes();
        let hpack = |lines: &[u8]| {
            let mut block = Vec::new();
            crate::hpack::encode_lines(lines, &mut block);
            block.into_boxed_slice()
        };
        let reload = event(serde_json::json!({ "id": id, "reload": true }));
        let change = match change {
            Change::Stylesheets(paths) => event(serde_json::json!({ "id": id, "css": paths })),
            Change::Reload => reload.clone(),
        };
        let hello = [
            format!("retry: {RETRY_MS}\n").into_bytes(),
            event(serde_json::json!({ "id": id, "hello": true })),
        ]
        .concat();
        Live {
            generation,
            hello: hello.into(),
            change: change.into(),
            reload: reload.into(),
            script_hpack: hpack(SCRIPT_HEAD),
            events_hpack: hpack(EVENTS_HEAD),
        }
    }

    /// The answer at a reserved path (`path`: the request's route key),
    /// or `None` for any other path.
    pub fn answer(&self, path: &[u8]) -> Option<Response<'_>> {
        let (head, hpack, extra, body) = if path == SCRIPT_PATH.as_bytes() {
            (
                SCRIPT_HEAD,
                &*self.script_hpack,
                Extra::Length,
                Body::Static(SCRIPT),
            )
        } else if path == EVENTS_PATH.as_bytes() {
            (EVENTS_HEAD, &*self.events_hpack, Extra::Open, Body::Events)
        } else {
            return None;
        };
        Some(Response {
            status: 200,
            head,
            hpack,
            qpack: None,
            overrides: 0,
            extra,
            body,
            site: None,
            encoding: None,
            shared: Shared::NONE,
        })
    }
}

/// The answer to the event stream on a thread that holds
/// `MAX_PER_THREAD` already.
pub fn busy() -> Response<'static> {
    super::builtin(
        503,
        b"503 Service Unavailable: too many live-reload streams open\n",
    )
}

/// What `Site` answers at a reserved path, if it is a watched preview's.
pub(super) fn answer<'a>(site: &'a Site, path: &[u8]) -> Option<Response<'a>> {
    site.live()?.answer(path)
}

/// The event streams one thread holds open: counted, and capped at
/// `MAX_PER_THREAD`.
#[derive(Default)]
pub struct EventStreams {
    /// Streams held now; each `EventStream` gives its count back when
    /// dropped (with its connection or its stream).
    held: Arc<AtomicUsize>,
    /// Requests for cold sites parked now (`super::cold::Parked`), which
    /// the loop wakes as the sites change and once a second.
    parked: Arc<AtomicUsize>,
}

impl EventStreams {
    /// A stream for the site at `slot`, unless the thread holds its most.
    pub fn hold(&self, slot: Option<u32>) -> Option<EventStream> {
        if self.held.load(Ordering::Relaxed) >= MAX_PER_THREAD {
            return None;
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        Some(EventStream {
            slot: slot.unwrap_or(0),
            heard: None,
            count: Arc::clone(&self.held),
        })
    }

    /// How many streams the thread holds.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Parks a request for a cold site of `sites` until `deadline` (ms of
    /// `cold::now_ms`; `None`: `--fetch-timeout` from now), unless the
    /// thread parks its most.
    pub fn park(&self, sites: &Sites, deadline: Option<u64>) -> Option<super::cold::Parked> {
        let timeout = sites.cold()?.store.timeout.as_millis() as u64;
        if self.parked.load(Ordering::Relaxed) >= super::cold::MAX_PARKED_PER_THREAD {
            return None;
        }
        self.parked.fetch_add(1, Ordering::Relaxed);
        Some(super::cold::Parked {
            deadline_ms: deadline.unwrap_or_else(|| super::cold::now_ms() + timeout),
            count: Arc::clone(&self.parked),
        })
    }

    /// How many requests the thread holds parked.
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::Relaxed)
    }
}

/// One event stream held open: which site's, and what it heard.
#[derive(Debug)]
pub struct EventStream {
    /// The slot of the preview's site.
    slot: u32,
    /// The generation it last heard of; `None` before its hello.
    heard: Option<u64>,
    /// Its thread's count, given back on drop.
    count: Arc<AtomicUsize>,
}

impl EventStream {
    /// What the stream is owed now from `sites`: its hello, the change
    /// of a newer generation (a reload when it missed one), else with
    /// `heartbeat` a comment; else nothing.
    pub fn owed<'s>(&mut self, sites: &'s Sites, heartbeat: bool) -> Option<&'s [u8]> {
        let live = sites.site(self.slot).and_then(|s| s.live());
        let Some(live) = live else {
            return heartbeat.then_some(COMMENT);
        };
        let heard = self.heard.replace(live.generation);
        Some(match heard {
            None => &live.hello,
            Some(g) if g == live.generation => return heartbeat.then_some(COMMENT),
            Some(g) if g.checked_add(1) == Some(live.generation) => &live.change,
            Some(_) => &live.reload,
        })
    }

    /// The protocol could not send what it was last owed: its page is
    /// owed a reload instead, at the next wake.
    pub fn missed(&mut self) {
        self.heard = Some(u64::MAX);
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Watched previews for the protocols' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use super::{Change, Live, Site, Sites};
    use crate::build::compress::Level;
    use crate::build::{BuildOptions, PreviewCacheControl, build_preview_with};

    /// A one-page preview, as its generation `generation` (each after the
    /// first a change of `/style.css` alone).
    pub fn preview(generation: u64) -> Arc<Sites> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "<p>a page</p>").unwrap();
        let mut opts = BuildOptions::preview(Level::Fast, PreviewCacheControl::NoCache);
        opts.live_reload = true;
        let (pack, _) = build_preview_with(dir.path(), &opts, None).unwrap();
        let css = Change::Stylesheets(vec!["/style.css".into()]);
        let mut live = Live::first(1);
        for _ in 0..generation {
            live = live.next(1, &css);
        }
        let stats = crate::serve::metrics::SiteStats::new("_default", 1);
        Sites::single(Site::preview(pack, stats, live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::metrics::SiteStats;

    fn text(bytes: Option<&[u8]>) -> String {
        String::from_utf8_lossy(bytes.unwrap_or(b"(nothing)")).into_owned()
    }

    #[test]
    fn a_stream_hears_its_hello_then_each_change_or_a_reload() {
        let stats = SiteStats::new("_default", 1);
        let site = |live: Live| {
            Sites::single(Arc::new(Site {
                in_place: None,
                pack: None,
                _descriptor: None,
                rules: super::super::Rules::default(),
                slot: 0,
                stats: Arc::clone(&stats),
                loaded_at: 0,
                modified_at: 0,
                live: Some(live),
            }))
        };
        let first = Live::first(7);
        let streams = EventStreams::default();
        let mut stream = streams.hold(Some(0)).unwrap();
        let sites = site(Live::first(7));
        assert_eq!(
            text(stream.owed(&sites, false)),
            "retry: 1000\ndata: {\"hello\":true,\"id\":\"7-0\"}\n\n"
        );
        assert_eq!(text(stream.owed(&sites, false)), "(nothing)");
        assert_eq!(text(stream.owed(&sites, true)), ":\n\n");

        let css = Change::Stylesheets(vec!["/a b.css".into()]);
        let second = first.next(7, &css);
        let sites = site(second);
        assert_eq!(
            text(stream.owed(&sites, true)),
            "data: {\"css\":[\"/a b.css\"],\"id\":\"7-1\"}\n\n"
        );
        // Two generations on at once: a reload, whatever the last was.
        let fourth = first.next(7, &css).next(7, &css).next(7, &css);
        let sites = site(fourth);
        assert_eq!(
            text(stream.owed(&sites, false)),
            "data: {\"id\":\"7-3\",\"reload\":true}\n\n"
        );
        assert_eq!(streams.held(), 1);
        drop(stream);
        assert_eq!(streams.held(), 0);
    }

    #[test]
    fn a_thread_holds_at_most_its_share() {
        let streams = EventStreams::default();
        let held: Vec<EventStream> = (0..MAX_PER_THREAD)
            .map(|_| streams.hold(None).expect("below the cap"))
            .collect();
        assert!(streams.hold(None).is_none());
        drop(held);
        assert!(streams.hold(None).is_some());
    }

    #[test]
    fn the_heads_hpack_blocks_are_their_lines() {
        let live = Live::first(1);
        for (path, lines) in [(SCRIPT_PATH, SCRIPT_HEAD), (EVENTS_PATH, EVENTS_HEAD)] {
            let resp = live.answer(path.as_bytes()).unwrap();
            assert_eq!(resp.head, lines);
            let mut fields = Vec::new();
            crate::hpack::Decoder::new(0)
                .decode(resp.hpack, &mut Vec::new(), usize::MAX, |n, v| {
                    fields.push((n.to_vec(), v.to_vec()));
                    Ok::<(), ()>(())
                })
                .unwrap();
            let expected: Vec<(Vec<u8>, Vec<u8>)> = crate::hpack::fields(lines)
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
                .collect();
            assert_eq!(fields, expected);
        }
        assert!(live.answer(b"/_kiln/other").is_none());
    }
}
