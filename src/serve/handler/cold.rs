//! Cold sites (`kiln serve s3://… --cache-size`): a host whose pack the
//! bucket holds but the cache does not (yet, or no more). A request for
//! one asks the store client for the pack (`fetch HOST` on its pipe, once
//! per host however many requests wait) and waits for it: the protocol
//! parks the request (`Body::Cold`) until a generation of the sites
//! serves the host, or answers 503 with `Retry-After` at the deadline
//! (`--fetch-timeout`). When the store is down, a cold site gets the 503
//! at once. Only requests for a host no loaded site answers come here:
//! a warm site's requests never do.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use xxhash_rust::xxh3::Xxh3DefaultBuilder;

use super::{Body, Extra, RETRY_TEXT, RETRY_TEXT_HPACK, Response, Shared};

/// What every generation's cold hosts share: the store client's pipe,
/// whether the store is up, and the counts for `/metrics`.
pub struct Store {
    /// The write end of the store client's standard input (non-blocking).
    pipe: Arc<OwnedFd>,
    /// The last listing succeeded (the control thread reads the state
    /// file).
    pub up: AtomicBool,
    /// How long a request waits for its site.
    pub timeout: Duration,
    /// Requests that found their site cold.
    pub cold_requests: AtomicU64,
    /// `fetch HOST` lines written.
    pub asks: AtomicU64,
    /// Requests answered 503: the wait ran out, or the store was down.
    pub timed_out: AtomicU64,
    pub store_down: AtomicU64,
}

impl Store {
    pub fn new(pipe: Arc<OwnedFd>, timeout: Duration) -> Arc<Store> {
        Arc::new(Store {
            pipe,
            up: AtomicBool::new(true),
            timeout,
            cold_requests: AtomicU64::new(0),
            asks: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            store_down: AtomicU64::new(0),
        })
    }

    /// Writes one line to the store client. Non-blocking: a full pipe
    /// drops it (the client is behind; a request asks again as it waits).
    pub fn say(&self, words: &[&[u8]]) -> bool {
        let mut line = Vec::with_capacity(64);
        for (i, word) in words.iter().enumerate() {
            if i > 0 {
                line.push(b' ');
            }
            line.extend_from_slice(word);
        }
        line.push(b'\n');
        // Under PIPE_BUF: written whole or not at all.
        rustix::io::write(&*self.pipe, &line).is_ok_and(|n| n == line.len())
    }
}

/// The hosts the bucket holds (the store client's host list), for one
/// generation of the sites: a host among them that no loaded site
/// answers is cold.
pub struct ColdHosts {
    pub store: Arc<Store>,
    /// Host key → when its fetch was last asked for (monotonic ms of
    /// this process, 0: never).
    hosts: HashMap<Box<[u8]>, AtomicU64, Xxh3DefaultBuilder>,
}

/// Milliseconds since the first call: a monotonic clock for deadlines.
pub fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 1
}

impl ColdHosts {
    /// The hosts of a host list; a fetch asked of `previous` (the
    /// generation before) stays asked.
    pub fn new(
        store: Arc<Store>,
        hosts: impl IntoIterator<Item = String>,
        previous: Option<&ColdHosts>,
    ) -> Arc<ColdHosts> {
        let asked = |host: &[u8]| {
            previous
                .and_then(|p| p.hosts.get(host))
                .map_or(0, |a| a.load(Ordering::Relaxed))
        };
        Arc::new(ColdHosts {
            store,
            hosts: hosts
                .into_iter()
                .map(|h| {
                    let at = asked(h.as_bytes());
                    (h.into_bytes().into_boxed_slice(), AtomicU64::new(at))
                })
                .collect(),
        })
    }

    /// The entry of `key` (a host key), if the bucket holds its pack.
    pub fn get(&self, key: &[u8]) -> Option<ColdHost<'_>> {
        let (host, asked) = self.hosts.get_key_value(key)?;
        Some(ColdHost {
            store: &self.store,
            host,
            asked,
        })
    }

    /// `key`'s site was unloaded (its pack evicted): its next request
    /// asks for it again. (Not reset as it lands: a thread still on the
    /// generation before would ask a second time.)
    pub fn unloaded(&self, key: &[u8]) {
        if let Some(asked) = self.hosts.get(key) {
            asked.store(0, Ordering::Relaxed);
        }
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

/// A cold host a request asked for.
#[derive(Clone, Copy)]
pub struct ColdHost<'a> {
    store: &'a Store,
    host: &'a [u8],
    asked: &'a AtomicU64,
}

impl ColdHost<'_> {
    /// Asks the store client for the host's pack, unless a request asked
    /// within the last `--fetch-timeout` (concurrent requests share one
    /// fetch; one that outlived the wait asks again).
    fn ask(&self) {
        let now = now_ms();
        let last = self.asked.load(Ordering::Relaxed);
        let timeout = self.store.timeout.as_millis() as u64;
        if last != 0 && now.saturating_sub(last) < timeout {
            return;
        }
        if self
            .asked
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
            && self.store.say(&[b"fetch", self.host])
        {
            self.store.asks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The answer to a request for a cold site: parked while the store is up
/// (the fetch asked), 503 at once when it is down.
pub fn answer(cold: ColdHost<'_>) -> Response<'static> {
    let store = cold.store;
    store.cold_requests.fetch_add(1, Ordering::Relaxed);
    if !store.up.load(Ordering::Relaxed) {
        store.store_down.fetch_add(1, Ordering::Relaxed);
        return STORE_DOWN;
    }
    cold.ask();
    Response {
        body: Body::Cold,
        ..UNAVAILABLE
    }
}

/// 503 for a cold site whose pack did not arrive in time (or a request
/// no protocol could park): asked again in a second, it may be there.
pub const UNAVAILABLE: Response<'static> = Response {
    status: 503,
    head: RETRY_TEXT,
    hpack: RETRY_TEXT_HPACK,
    qpack: None,
    overrides: 0,
    extra: Extra::Length,
    body: Body::Static(b"503 Service Unavailable: the site is being fetched from the store\n"),
    site: None,
    encoding: None,
    shared: Shared::NONE,
};

/// 503 for a cold site while the store is down.
const STORE_DOWN: Response<'static> = Response {
    body: Body::Static(b"503 Service Unavailable: the site is not cached and the store is down\n"),
    ..UNAVAILABLE
};

/// What a protocol that holds the request no longer answers with: the
/// 503, counted.
pub fn gave_up(sites: &super::Sites) -> Response<'static> {
    if let Some(cold) = sites.cold() {
        cold.store.timed_out.fetch_add(1, Ordering::Relaxed);
    }
    UNAVAILABLE
}

/// Requests one thread parks at most; beyond, a cold site's request gets
/// the 503 at once.
pub const MAX_PARKED_PER_THREAD: usize = 4096;

/// A request parked for a cold site (`live::EventStreams::park`): its
/// deadline, and its place in the thread's count, given back on drop.
#[derive(Debug)]
pub struct Parked {
    pub deadline_ms: u64,
    pub(super) count: Arc<AtomicUsize>,
}

impl Parked {
    /// The wait ran out.
    pub fn expired(&self) -> bool {
        now_ms() >= self.deadline_ms
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}
