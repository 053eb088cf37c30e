//! What the server counts, and `--metrics`: the counters in the
//! Prometheus text format (version 0.0.4) on a listener of their own.
//!
//! Every counter has one writer: an event loop counts into its own block
//! (one per thread and per site, each on its own cache lines) with a
//! relaxed load and store, no locked instruction and nothing another
//! thread writes; the control thread alone writes reload counts. A scrape
//! reads every block and sums, so counting costs the serving threads a
//! few plain additions per request, whether or not anyone scrapes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::SocketFlags;

use super::net::Backend;
use crate::pack::format::{DELTA_ENCODINGS, ENCODINGS, Encoding};

/// A count with a single writer. `add` is a relaxed load and store rather
/// than a `fetch_add`: the writer is the only one, so no update is lost,
/// and the store costs what a plain one does; readers see every value
/// whole.
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The protocols responses are counted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1 = 0,
    Http2 = 1,
    Http3 = 2,
}

/// The scheme of the connection a response went out on, as the session
/// layer knows it: cleartext or TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http = 0,
    Https = 1,
}

const SCHEMES: [(Scheme, &str); 2] = [(Scheme::Http, "http"), (Scheme::Https, "https")];

const PROTOCOLS: [(Protocol, &str); 3] = [
    (Protocol::Http1, "http/1.1"),
    (Protocol::Http2, "h2"),
    (Protocol::Http3, "h3"),
];

/// What one thread counted for one site. Aligned so that two threads'
/// blocks never share a cache line.
#[derive(Default)]
#[repr(align(128))]
pub struct SiteCounters {
    /// Responses by protocol, scheme and status class
    /// (1xx … 5xx).
    responses: [[[Counter; 5]; 2]; 3],
    /// 304 Not Modified.
    not_modified: Counter,
    /// 206 Partial Content.
    partial: Counter,
    /// Body bytes of the responses (what the access log counts).
    body_bytes: Counter,
    /// Responses with a body from the pack, by its content coding.
    by_encoding: [Counter; 6],
}

/// One response, as counted.
pub struct Answered {
    pub protocol: Protocol,
    pub scheme: Scheme,
    pub status: u16,
    pub body_bytes: u64,
    /// The coding of a body from the pack; `None` for other responses.
    pub encoding: Option<Encoding>,
}

impl SiteCounters {
    #[inline]
    pub fn count(&self, r: &Answered) {
        let class = (usize::from(r.status / 100)).clamp(1, 5) - 1;
        self.responses[r.protocol as usize][r.scheme as usize][class].add(1);
        match r.status {
            304 => self.not_modified.add(1),
            206 => self.partial.add(1),
            _ => {}
        }
        self.body_bytes.add(r.body_bytes);
        if let Some(e) = r.encoding {
            self.by_encoding[e as usize].add(1);
        }
    }
}

/// Everything counted for one site (by host name), over every pack it was
/// served from: a reload keeps the counts, as Prometheus counters must
/// only grow.
pub struct SiteStats {
    /// The host, `_default`, or `_none` for responses no site gave.
    name: Box<str>,
    /// One block per event loop.
    threads: Box<[SiteCounters]>,
    /// Packs loaded for the site, the first included: the generation of
    /// the pack being served.
    pub loads: AtomicU64,
    /// Packs that failed to load (the previous one kept serving).
    pub failed_loads: AtomicU64,
}

impl SiteStats {
    pub fn new(name: &str, threads: usize) -> Arc<SiteStats> {
        Arc::new(SiteStats {
            name: name.into(),
            threads: (0..threads.max(1))
                .map(|_| SiteCounters::default())
                .collect(),
            loads: AtomicU64::new(0),
            failed_loads: AtomicU64::new(0),
        })
    }

    /// The block thread `thread` counts into (every site has one per
    /// event loop: `Metrics::site` makes them so).
    #[inline]
    pub fn thread(&self, thread: usize) -> &SiteCounters {
        &self.threads[thread]
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every response counted, on every thread (the store client hears
    /// of a site used when this changes).
    pub fn responses(&self) -> u64 {
        self.threads
            .iter()
            .flat_map(|t| t.responses.iter().flatten().flatten())
            .map(Counter::get)
            .sum()
    }
}

/// Why a connection was closed by a deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// A request head (or TLS handshake) did not arrive in time.
    Header = 0,
    /// An idle keep-alive connection.
    Idle = 1,
    /// The client did not read its response.
    Send = 2,
}

/// What one event loop counted besides responses.
#[derive(Default)]
#[repr(align(128))]
pub struct LoopCounters {
    pub accepted: Counter,
    pub closed: Counter,
    timeouts: [Counter; 3],
    pub tls_handshakes: Counter,
    pub tls_handshake_failures: Counter,
    /// QUIC (HTTP/3): connections accepted and ended, handshakes done,
    /// Retry packets sent, connections refused at the budget, packets
    /// the connections that ended had lost.
    pub quic_accepted: Counter,
    pub quic_closed: Counter,
    pub quic_handshakes: Counter,
    pub quic_retries: Counter,
    pub quic_refused: Counter,
    pub quic_lost_packets: Counter,
}

impl LoopCounters {
    #[inline]
    pub fn timeout(&self, kind: Timeout) {
        self.timeouts[kind as usize].add(1);
    }
}

/// The pack a site serves, for the gauges.
pub struct PackGauges {
    pub site: String,
    pub bytes: u64,
    /// Modification time of the pack file (Unix seconds).
    pub mtime: i64,
    /// When it was loaded (Unix seconds).
    pub loaded: i64,
}

/// Every count the server keeps.
pub struct Metrics {
    /// One block per event loop, by thread index.
    loops: Box<[LoopCounters]>,
    /// Per-site counts by name, sites removed since included; written
    /// only by the control thread (and at start).
    sites: Mutex<BTreeMap<String, Arc<SiteStats>>>,
    /// Responses no site answered.
    unrouted: Arc<SiteStats>,
    /// Certificate reloads that succeeded and failed.
    pub tls_reloads: AtomicU64,
    pub tls_reload_failures: AtomicU64,
    /// `kiln_build_info` labels: the connection layer, once chosen.
    io: std::sync::OnceLock<Backend>,
    /// Unix seconds at start.
    started: i64,
    /// Set once the server drains: `/ready` answers 503.
    pub draining: AtomicBool,
    /// Under `--acme`: the state folder and the managed names, whose
    /// status files each scrape reads.
    acme: std::sync::OnceLock<Arc<super::acme::Managed>>,
    /// Under `kiln serve s3://…`: the cache folder, whose state file each
    /// scrape and `/ready` read.
    store: std::sync::OnceLock<(std::path::PathBuf, u64)>,
    /// With `--cache-size`: the cold sites' counts.
    store_cold: std::sync::OnceLock<Arc<super::handler::cold::Store>>,
}

impl Metrics {
    pub fn new(threads: usize, started: i64) -> Arc<Metrics> {
        Arc::new(Metrics {
            loops: (0..threads.max(1))
                .map(|_| LoopCounters::default())
                .collect(),
            sites: Mutex::new(BTreeMap::new()),
            unrouted: SiteStats::new("_none", threads),
            tls_reloads: AtomicU64::new(0),
            tls_reload_failures: AtomicU64::new(0),
            io: std::sync::OnceLock::new(),
            started,
            draining: AtomicBool::new(false),
            acme: std::sync::OnceLock::new(),
            store: std::sync::OnceLock::new(),
            store_cold: std::sync::OnceLock::new(),
        })
    }

    /// With `--cache-size`: scrapes show the cold sites' counts.
    pub fn set_store_cold(&self, cold: &Arc<super::handler::cold::Store>) {
        let _ = self.store_cold.set(Arc::clone(cold));
    }

    /// Under `kiln serve s3://…`: scrapes show the store's state, and
    /// `/ready` waits for its first listing.
    /// `started_ms`: when the store's client was started (Unix ms).
    pub fn set_store(&self, cache: &std::path::Path, started_ms: u64) {
        let _ = self.store.set((cache.to_path_buf(), started_ms));
    }

    /// Whether the store (when there is one) has been listed.
    fn store_ready(&self) -> bool {
        self.store
            .get()
            .is_none_or(|(cache, started_ms)| super::store::ready(cache, *started_ms))
    }

    /// Under `--acme`: scrapes show the status of the managed names.
    pub fn set_acme(&self, managed: &Arc<super::acme::Managed>) {
        let _ = self.acme.set(Arc::clone(managed));
    }

    /// Names the connection layer chosen at start (`uring`, `epoll`).
    pub fn set_io(&self, backend: Backend) {
        let _ = self.io.set(backend);
    }

    /// The block event loop `thread` counts into.
    #[inline]
    pub fn of_loop(&self, thread: usize) -> &LoopCounters {
        &self.loops[thread]
    }

    /// Where responses no site answered are counted.
    pub fn unrouted(&self) -> &Arc<SiteStats> {
        &self.unrouted
    }

    /// The counts of site `name`, made on first use.
    pub fn site(&self, name: &str) -> Arc<SiteStats> {
        let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            sites
                .entry(name.to_string())
                .or_insert_with(|| SiteStats::new(name, self.loops.len())),
        )
    }

    /// The whole text exposition; `packs` are the gauges of the packs
    /// served now.
    pub fn render(&self, packs: &[PackGauges], now: i64) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let sites: Vec<Arc<SiteStats>> = {
            let map = self.sites.lock().unwrap_or_else(|e| e.into_inner());
            map.values()
                .cloned()
                .chain([Arc::clone(&self.unrouted)])
                .collect()
        };
        let loops = |f: &dyn Fn(&LoopCounters) -> u64| self.loops.iter().map(f).sum::<u64>();
        let sum =
            |s: &SiteStats, f: &dyn Fn(&SiteCounters) -> u64| s.threads.iter().map(f).sum::<u64>();

        header(
            &mut out,
            "kiln_build_info",
            "gauge",
            "Always 1: the version and the connection layer.",
        );
        let _ = writeln!(
            out,
            "kiln_build_info{{version=\"{}\",io=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            self.io.get().map_or("", |b| b.name())
        );
        header(
            &mut out,
            "kiln_start_time_seconds",
            "gauge",
            "When the server started (Unix time).",
        );
        let _ = writeln!(out, "kiln_start_time_seconds {}", self.started);
        header(
            &mut out,
            "kiln_ready",
            "gauge",
            "1 while serving, 0 once shutting down.",
        );
        let _ = writeln!(
            out,
            "kiln_ready {}",
            u8::from(!self.draining.load(Ordering::Relaxed))
        );

        header(
            &mut out,
            "kiln_requests_total",
            "counter",
            "Responses sent, by site, protocol, scheme and status class.",
        );
        for s in &sites {
            for (protocol, pname) in PROTOCOLS {
                for (scheme, sname) in SCHEMES {
                    for class in 0..5 {
                        let n = sum(s, &|c| {
                            c.responses[protocol as usize][scheme as usize][class].get()
                        });
                        if n > 0 {
                            let _ = writeln!(
                                out,
                                "kiln_requests_total{{site=\"{}\",protocol=\"{pname}\",scheme=\"{sname}\",status=\"{}xx\"}} {n}",
                                label(&s.name),
                                class + 1
                            );
                        }
                    }
                }
            }
        }
        header(
            &mut out,
            "kiln_not_modified_total",
            "counter",
            "304 Not Modified responses, by site.",
        );
        for s in &sites {
            let _ = writeln!(
                out,
                "kiln_not_modified_total{{site=\"{}\"}} {}",
                label(&s.name),
                sum(s, &|c| c.not_modified.get())
            );
        }
        header(
            &mut out,
            "kiln_partial_content_total",
            "counter",
            "206 Partial Content responses, by site.",
        );
        for s in &sites {
            let _ = writeln!(
                out,
                "kiln_partial_content_total{{site=\"{}\"}} {}",
                label(&s.name),
                sum(s, &|c| c.partial.get())
            );
        }
        header(
            &mut out,
            "kiln_sent_body_bytes_total",
            "counter",
            "Response body bytes sent, by site (as the access log counts them).",
        );
        for s in &sites {
            let _ = writeln!(
                out,
                "kiln_sent_body_bytes_total{{site=\"{}\"}} {}",
                label(&s.name),
                sum(s, &|c| c.body_bytes.get())
            );
        }
        header(
            &mut out,
            "kiln_responses_by_encoding_total",
            "counter",
            "Responses with a body from the pack, by site and content coding.",
        );
        for s in &sites {
            for e in ENCODINGS.into_iter().chain(DELTA_ENCODINGS) {
                let n = sum(s, &|c| c.by_encoding[e as usize].get());
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "kiln_responses_by_encoding_total{{site=\"{}\",encoding=\"{}\"}} {n}",
                        label(&s.name),
                        e.token()
                    );
                }
            }
        }
        header(
            &mut out,
            "kiln_connections_accepted_total",
            "counter",
            "Connections accepted.",
        );
        let accepted = loops(&|l| l.accepted.get());
        let _ = writeln!(out, "kiln_connections_accepted_total {accepted}");
        header(
            &mut out,
            "kiln_connections_open",
            "gauge",
            "Connections open now.",
        );
        let closed = loops(&|l| l.closed.get());
        let _ = writeln!(
            out,
            "kiln_connections_open {}",
            accepted.saturating_sub(closed)
        );
        header(
            &mut out,
            "kiln_timeouts_total",
            "counter",
            "Connections closed by a deadline, by kind.",
        );
        for (kind, name) in [
            (Timeout::Header, "header"),
            (Timeout::Idle, "idle"),
            (Timeout::Send, "send"),
        ] {
            let _ = writeln!(
                out,
                "kiln_timeouts_total{{kind=\"{name}\"}} {}",
                loops(&|l| l.timeouts[kind as usize].get())
            );
        }
        let quic_accepted = loops(&|l| l.quic_accepted.get());
        let quic_closed = loops(&|l| l.quic_closed.get());
        let quic: [(&str, &str, &str, u64); 6] = [
            (
                "kiln_quic_connections_total",
                "counter",
                "QUIC connections accepted (HTTP/3).",
                quic_accepted,
            ),
            (
                "kiln_quic_connections_open",
                "gauge",
                "QUIC connections open now.",
                quic_accepted.saturating_sub(quic_closed),
            ),
            (
                "kiln_quic_handshakes_total",
                "counter",
                "QUIC handshakes completed.",
                loops(&|l| l.quic_handshakes.get()),
            ),
            (
                "kiln_quic_retries_total",
                "counter",
                "QUIC Retry packets sent (address validation under load).",
                loops(&|l| l.quic_retries.get()),
            ),
            (
                "kiln_quic_refused_total",
                "counter",
                "QUIC connections refused at --max-connections or while draining.",
                loops(&|l| l.quic_refused.get()),
            ),
            (
                "kiln_quic_lost_packets_total",
                "counter",
                "Packets QUIC connections lost (counted when each ends).",
                loops(&|l| l.quic_lost_packets.get()),
            ),
        ];
        for (name, kind, help, value) in quic {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        header(
            &mut out,
            "kiln_tls_handshakes_total",
            "counter",
            "TLS handshakes completed.",
        );
        let _ = writeln!(
            out,
            "kiln_tls_handshakes_total {}",
            loops(&|l| l.tls_handshakes.get())
        );
        header(
            &mut out,
            "kiln_tls_handshake_failures_total",
            "counter",
            "TLS handshakes that failed.",
        );
        let _ = writeln!(
            out,
            "kiln_tls_handshake_failures_total {}",
            loops(&|l| l.tls_handshake_failures.get())
        );
        header(
            &mut out,
            "kiln_tls_reloads_total",
            "counter",
            "Certificate reloads that succeeded.",
        );
        let _ = writeln!(
            out,
            "kiln_tls_reloads_total {}",
            self.tls_reloads.load(Ordering::Relaxed)
        );
        header(
            &mut out,
            "kiln_tls_reload_failures_total",
            "counter",
            "Certificate reloads that failed (the previous certificates kept serving).",
        );
        let _ = writeln!(
            out,
            "kiln_tls_reload_failures_total {}",
            self.tls_reload_failures.load(Ordering::Relaxed)
        );

        let named = sites.iter().filter(|s| !Arc::ptr_eq(s, &self.unrouted));
        header(
            &mut out,
            "kiln_site_reloads_total",
            "counter",
            "Packs loaded for a site after the first.",
        );
        for s in named.clone() {
            let loads = s.loads.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "kiln_site_reloads_total{{site=\"{}\"}} {}",
                label(&s.name),
                loads.saturating_sub(1)
            );
        }
        header(
            &mut out,
            "kiln_site_reload_failures_total",
            "counter",
            "Packs that failed to load for a site (the previous one kept serving).",
        );
        for s in named.clone() {
            let _ = writeln!(
                out,
                "kiln_site_reload_failures_total{{site=\"{}\"}} {}",
                label(&s.name),
                s.failed_loads.load(Ordering::Relaxed)
            );
        }
        header(
            &mut out,
            "kiln_site_generation",
            "gauge",
            "How many packs the site has loaded: 1 for the first.",
        );
        for s in named {
            let _ = writeln!(
                out,
                "kiln_site_generation{{site=\"{}\"}} {}",
                label(&s.name),
                s.loads.load(Ordering::Relaxed)
            );
        }
        header(
            &mut out,
            "kiln_site_pack_bytes",
            "gauge",
            "Size of the pack a site serves.",
        );
        for p in packs {
            let _ = writeln!(
                out,
                "kiln_site_pack_bytes{{site=\"{}\"}} {}",
                label(&p.site),
                p.bytes
            );
        }
        header(
            &mut out,
            "kiln_site_pack_age_seconds",
            "gauge",
            "Seconds since the served pack file was last modified.",
        );
        for p in packs {
            let _ = writeln!(
                out,
                "kiln_site_pack_age_seconds{{site=\"{}\"}} {}",
                label(&p.site),
                (now - p.mtime).max(0)
            );
        }
        header(
            &mut out,
            "kiln_site_pack_loaded_timestamp_seconds",
            "gauge",
            "When the served pack was loaded (Unix time).",
        );
        for p in packs {
            let _ = writeln!(
                out,
                "kiln_site_pack_loaded_timestamp_seconds{{site=\"{}\"}} {}",
                label(&p.site),
                p.loaded
            );
        }
        if let Some(managed) = self.acme.get() {
            render_acme(&mut out, &managed.dir, &managed.current_names());
        }
        if let Some((cache, _)) = self.store.get() {
            super::store::render_metrics(&mut out, cache, now, self.store_cold.get());
            super::store_status::render_metrics(&mut out, cache);
        }
        out
    }
}

/// The ACME gauges of each managed name, from the status files the ACME
/// client writes (read here, at scrape time, on the metrics thread): a
/// name without a status file yet, or with one that cannot be read, has
/// no sample.
fn render_acme(out: &mut String, dir: &std::path::Path, names: &[String]) {
    use crate::acme::layout;
    let statuses: Vec<layout::Status> = names
        .iter()
        .filter_map(|name| std::fs::read_to_string(layout::status_path(dir, name)).ok())
        .filter_map(|text| layout::Status::from_json(&text))
        .collect();
    header(
        out,
        "kiln_acme_certificate_expiry_seconds",
        "gauge",
        "When the managed certificate of the name expires (its notAfter, Unix time).",
    );
    for s in &statuses {
        if let Some(not_after) = s.not_after {
            let _ = writeln!(
                out,
                "kiln_acme_certificate_expiry_seconds{{name=\"{}\"}} {not_after}",
                label(&s.name)
            );
        }
    }
    header(
        out,
        "kiln_acme_last_error_timestamp_seconds",
        "gauge",
        "When the last ACME failure for the name happened (Unix time), the failure in `error`; no sample once a success cleared it.",
    );
    for s in &statuses {
        if let (Some(error), Some(at)) = (&s.last_error, s.last_error_at) {
            let _ = writeln!(
                out,
                "kiln_acme_last_error_timestamp_seconds{{name=\"{}\",error=\"{}\"}} {at}",
                label(&s.name),
                label(error)
            );
        }
    }
}

pub(super) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value escaped as the text format asks (backslash, quote,
/// newline); host names never need it, but a pack's file name might.
pub(super) fn label(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains(['\\', '"', '\n']) {
        value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
            .into()
    } else {
        value.into()
    }
}

/// How long a scrape may take to send its request and read the answer:
/// one thread serves the metrics listener, so a stalled client must not
/// hold it long.
const SCRAPE_TIMEOUT_MS: i32 = 2_000;

/// The longest request head the metrics listener reads.
const MAX_HEAD: usize = 8 * 1024;

/// The metrics listener's thread: `GET /metrics` (the exposition),
/// `GET /healthz` (200 while the process serves), `GET /ready` (200 until
/// shutdown begins, then 503: for load balancers and readiness probes);
/// anything else 404. One connection at a time, each closed after its
/// answer. The listener waits in `poll` (blocking or not, it is the only
/// one to accept on it); the thread runs inside the sandbox, so it makes
/// no call the filter does not allow (no `ioctl` to change blocking).
pub fn spawn_listener(
    listeners: Vec<TcpListener>,
    metrics: Arc<Metrics>,
    packs: impl Fn() -> Vec<PackGauges> + Send + 'static,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("kiln-metrics".into())
        .spawn(move || {
            let mut fds: Vec<PollFd> = listeners
                .iter()
                .map(|l| PollFd::new(l, PollFlags::IN))
                .collect();
            loop {
                if !matches!(rustix::event::poll(&mut fds, None), Ok(1..)) {
                    continue;
                }
                for (pfd, listener) in fds.iter_mut().zip(&listeners) {
                    if pfd.revents().is_empty() {
                        continue;
                    }
                    pfd.clear_revents();
                    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
                    match rustix::net::accept_with(listener, flags) {
                        Ok(conn) => answer_scrape(conn.as_fd(), &metrics, &packs),
                        Err(Errno::MFILE | Errno::NFILE | Errno::NOMEM) => {
                            // Back off while descriptors free up: a ppoll on
                            // nothing, since sleep's clock_nanosleep is not
                            // on the sandbox's list (it ended the server).
                            let pause = Timespec {
                                tv_sec: 0,
                                tv_nsec: 100_000_000,
                            };
                            let _ = rustix::event::poll(&mut [], Some(&pause));
                        }
                        Err(_) => {}
                    }
                }
            }
        })?;
    Ok(())
}

/// Polls one descriptor; false on timeout or error.
fn wait(fd: BorrowedFd<'_>, events: PollFlags, timeout_ms: u64) -> bool {
    let timeout = Timespec {
        tv_sec: (timeout_ms / 1000) as i64,
        tv_nsec: (timeout_ms % 1000) as i64 * 1_000_000,
    };
    let mut pfd = [PollFd::from_borrowed_fd(fd, events)];
    matches!(rustix::event::poll(&mut pfd, Some(&timeout)), Ok(1..))
}

fn answer_scrape(fd: BorrowedFd<'_>, metrics: &Metrics, packs: &dyn Fn() -> Vec<PackGauges>) {
    let mut head = [0u8; MAX_HEAD];
    let mut len = 0;
    let deadline = super::net::clock::monotonic_ms() + SCRAPE_TIMEOUT_MS as u64;
    while !head[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_sub(super::net::clock::monotonic_ms());
        if len == head.len() || left == 0 || !wait(fd, PollFlags::IN, left) {
            return;
        }
        match rustix::io::read(fd, &mut head[len..]) {
            Ok(n @ 1..) => len += n,
            _ => return,
        }
    }
    let line = head[..len].split(|&c| c == b'\r').next().unwrap_or(b"");
    let mut words = line.split(|&c| c == b' ');
    let (method, target) = (words.next().unwrap_or(b""), words.next().unwrap_or(b""));
    let path = target.split(|&c| c == b'?').next().unwrap_or(b"");
    let (status, content_type, body) = match (method, path) {
        (b"GET" | b"HEAD", b"/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(&packs(), super::net::clock::unix_seconds()),
        ),
        (b"GET" | b"HEAD", b"/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        (b"GET" | b"HEAD", b"/ready") if metrics.draining.load(Ordering::Relaxed) => (
            "503 Service Unavailable",
            "text/plain",
            "shutting down\n".to_string(),
        ),
        (b"GET" | b"HEAD", b"/ready") if !metrics.store_ready() => (
            "503 Service Unavailable",
            "text/plain",
            "waiting for the store's first listing\n".to_string(),
        ),
        (b"GET" | b"HEAD", b"/ready") => ("200 OK", "text/plain", "ready\n".to_string()),
        (b"GET" | b"HEAD", _) => (
            "404 Not Found",
            "text/plain",
            "try /metrics, /healthz or /ready\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != b"HEAD" {
        response.extend_from_slice(body.as_bytes());
    }
    let mut sent = 0;
    while sent < response.len() {
        let left = deadline.saturating_sub(super::net::clock::monotonic_ms());
        if left == 0 || !wait(fd, PollFlags::OUT, left) {
            return;
        }
        match rustix::io::write(fd, &response[sent..]) {
            Ok(n @ 1..) => sent += n,
            _ => return,
        }
    }
}
