//! `kiln serve`: answers HTTP/1.1 and HTTP/2 from packs' memory mappings.
//!
//! Layers: `net` (sockets, event loops, timers), `stack` (a connection's
//! protocols as the loop drives them), `tls`, `http1` and `http2` (the
//! protocols), `handler` (request → site by host → prepared pack bytes,
//! protocol-agnostic), `load` (opening a pack, a preview or a folder of
//! sites), `open` (what SITE is taken for at start, a preview's first
//! build inside the sandbox, the sandbox's plan), `control` (signals, hot reload, site by site), `watch` (the
//! live preview of a directory), `metrics` (counters and their
//! listener), `systemd` (socket activation, readiness) and `sandbox` (the
//! walls the serving threads run inside).

pub mod access_log;
pub mod acme;
mod bind;
pub mod control;
pub mod date;
pub mod handler;
pub mod http1;
pub mod http2;
pub mod http3;
pub mod in_place;
pub mod inotify;
pub mod listen;
pub mod load;
pub mod metrics;
pub mod net;
mod open;
pub mod output;
pub mod pack_limits;
pub mod poll;
pub mod quic;
pub mod request_context;
pub mod request_fields;
pub mod sandbox;
pub mod secret;
pub mod server_headers;
pub mod stack;
pub mod store;
mod store_status;
pub mod systemd;
pub mod tls;
mod tls_setup;
pub mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;

use bind::{
    Http3, Listeners, bind_listeners, listen_addresses, quic_sockets, serving_urls, sort_activated,
};
use listen::Listen;
use metrics::Metrics;
use net::uring::UringWorker;
use net::worker::Worker;
use net::{Backend, EventLoop, LoopConfig, Shared, Waker};
use server_headers::ServerHeaders;
use stack::{CurrentSites, Protocols, StackConfig};
use tls_setup::{
    acme_challenges, certificates, load_tls_at_start, managed_certificates, start_acme_client,
    switched_user,
};
pub use tls_setup::{load_tls, tls_config};

/// `kiln serve` options. Every flag can also come from the environment
/// variable named in `--help` (`KILN_LISTEN`, …; a list is comma-separated
/// there), for containers; a flag given on the command line wins.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// What to serve, told by content (not by name) and said at start: a
    /// pack; a folder of sites (packs named by host: `example.com.pack`,
    /// `_default.pack` for other hosts, `HOST.crt` and `HOST.key` beside
    /// them for TLS): any folder holding a `NAME.pack` that is a pack,
    /// whose other files are warned about and never served; or any other
    /// folder, or a tar archive, fired into a preview pack in memory
    /// (private keys and what the serving user cannot read left out);
    /// or `s3://BUCKET/PREFIX/` (`gs://`, `az://CONTAINER/PREFIX/`), a
    /// bucket of an object store served as a folder of sites through a
    /// local cache (--cache-dir,
    /// --sync-interval, --store-endpoint; docs/fleet.md).
    /// Default: a preview of the current folder.
    #[arg(env = "KILN_SITE")]
    pub site: Option<PathBuf>,
    /// Preview SITE, a folder holding packs, as a site (its files fired
    /// into a preview pack) rather than serve it as a folder of sites.
    #[arg(long, conflicts_with = "dummy", env = "KILN_PREVIEW")]
    pub preview: bool,
    /// Live preview of a directory: rebuild the pack in memory when a file
    /// under it changes (incrementally), swap it in, and log what changed;
    /// a build that fails keeps the last good site serving. Open pages
    /// reload by themselves (a stylesheet alone is swapped in place):
    /// each HTML page loads /_kiln/live.js, which listens to
    /// /_kiln/events.
    #[arg(long, conflicts_with = "dummy", env = "KILN_WATCH")]
    pub watch: bool,
    /// Also look for replaced packs (the one served, or those of a folder
    /// of sites), certificates and --acme-dir files every SECONDS, for a
    /// network filesystem (NFS, SMB, a FUSE mount) where inotify does not
    /// see another machine's writes: what changed is reloaded as an
    /// inotify event would have it, and nothing is said when nothing
    /// changed.
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=86_400),
        env = "KILN_POLL"
    )]
    pub poll: Option<u64>,
    /// Compression levels of the preview (default fast).
    #[arg(long, value_enum, requires = "watch", env = "KILN_COMPRESSION")]
    pub compression: Option<crate::build::compress::Level>,
    /// In a preview of a directory or archive, serve at `/dir/` of every
    /// folder without an index file a listing of it (as `kiln build
    /// --index-pages` does).
    #[arg(long, conflicts_with = "dummy", env = "KILN_INDEX_PAGES")]
    pub index_pages: bool,
    /// The `Cache-Control` of a preview (a directory or archive served):
    /// `no-cache` on every response, so that a browser revalidates each
    /// use and shows an edit at once (ETag and Last-Modified make that a
    /// 304), or what the site's build would send (`site`).
    #[arg(
        long,
        value_enum,
        default_value_t = crate::build::PreviewCacheControl::NoCache,
        value_name = "no-cache|site",
        env = "KILN_PREVIEW_CACHE_CONTROL"
    )]
    pub preview_cache_control: crate::build::PreviewCacheControl,
    /// Address to listen on (repeatable): IP:PORT, [IPv6]:PORT, :PORT (every
    /// address: 0.0.0.0 and [::]) or HOST:PORT (each address HOST resolves
    /// to at start); IPv6 addresses not typed out are skipped on a machine
    /// without IPv6. Default: 127.0.0.1:8080 and [::1]:8080, unless systemd
    /// passed listening sockets. Port 0 picks a free port, one per value,
    /// printed at start-up.
    #[arg(
        long = "listen",
        value_name = "ADDR",
        env = "KILN_LISTEN",
        value_delimiter = ','
    )]
    pub listen: Vec<String>,
    /// Address to listen on with TLS (repeatable, the same forms as
    /// --listen; needs --tls-cert and --tls-key, certificates beside the
    /// packs of a folder of sites, or --tls-self-signed).
    #[arg(
        long = "listen-tls",
        value_name = "ADDR",
        env = "KILN_LISTEN_TLS",
        value_delimiter = ','
    )]
    pub listen_tls: Vec<String>,
    /// PEM certificate chain for TLS, leaf first (repeatable, paired in
    /// order with --tls-key; chosen per connection by SNI, the first is
    /// the fallback).
    #[arg(long = "tls-cert", value_name = "FILE", env = "KILN_TLS_CERT")]
    pub tls_cert: Vec<PathBuf>,
    /// PEM private key (PKCS#8, SEC1 or RSA) of the --tls-cert at the same
    /// position.
    #[arg(long = "tls-key", value_name = "FILE", env = "KILN_TLS_KEY")]
    pub tls_key: Vec<PathBuf>,
    /// Serve TLS with a certificate made at start for localhost and the
    /// listen addresses (for development; prints its SHA-256 fingerprint).
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "acme_enabled"], env = "KILN_TLS_SELF_SIGNED")]
    pub tls_self_signed: bool,
    /// Write the self-signed certificate to FILE (PEM) at start, for a
    /// client to trust: `curl --cacert FILE https://localhost:PORT/`.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_self_signed",
        env = "KILN_TLS_SELF_SIGNED_OUT"
    )]
    pub tls_self_signed_out: Option<PathBuf>,
    /// A file of secret bytes (the rules of --quic-host-key: 32 to 4096,
    /// every byte counts) from which the keys of TLS session tickets are
    /// derived, so that every node of a fleet given the same file resumes
    /// the sessions of the others (TCP and HTTP/3): the key of each
    /// period of --tls-ticket-key-period seconds comes from the secret
    /// and the period's number, tickets are sealed with the current
    /// period's key and opened with the previous, current and next one's.
    /// Read once at start; `s3://BUCKET/KEY` names an object of the
    /// store (--store-endpoint, the AWS credentials), fetched at start by
    /// a short child before the sandbox, and the server does not start
    /// without it. Keep it secret (mode 0600, a private object): it opens
    /// every ticket of the fleet. Default: random keys per process.
    #[arg(
        long,
        value_name = "FILE|s3://BUCKET/KEY",
        env = "KILN_TLS_TICKET_KEYS"
    )]
    pub tls_ticket_keys: Option<PathBuf>,
    /// How long each ticket key seals tickets, in seconds (the same on
    /// every node; a ticket resumes for one to two periods).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = tls::ticket_keys::DEFAULT_PERIOD,
        value_parser = clap::value_parser!(u64).range(1..=tls::ticket_keys::MAX_PERIOD),
        requires = "tls_ticket_keys",
        env = "KILN_TLS_TICKET_KEY_PERIOD"
    )]
    pub tls_ticket_key_period: u64,
    /// Answer every request on the cleartext listeners with a 308 to the
    /// same host and path on HTTPS (the first --listen-tls port), except
    /// ACME challenges under /.well-known/acme-challenge/, still served.
    #[arg(long, env = "KILN_REDIRECT_HTTPS")]
    pub redirect_https: bool,
    /// Obtain and renew certificates from an ACME CA (Let's Encrypt by
    /// default) for every HOST.pack of a folder of sites (not _default, IP
    /// addresses or names without a dot; a site that appears later too),
    /// or for each --acme-domain of one pack. A separate process, `kiln
    /// acme run`, started before the sandbox, talks to the CA and writes
    /// --acme-dir (with `s3://…`, a bucket a fleet shares, through a local
    /// mirror); the server only reads it: HTTP-01 on the cleartext
    /// listeners, TLS-ALPN-01 on the TLS ones (the CA validates on ports
    /// 80 and 443). A name's own certificate (HOST.crt beside the packs,
    /// --tls-cert) wins and is never managed. Until its first certificate arrives, TLS
    /// handshakes for a managed name are refused. If the client process
    /// dies, the server goes on serving the certificates it has.
    #[arg(long = "acme", id = "acme_enabled", env = "KILN_ACME")]
    pub acme_enabled: bool,
    /// A name to obtain a certificate for when one pack is served
    /// (repeatable; a folder of sites names its own).
    #[arg(
        long = "acme-domain",
        value_name = "NAME",
        requires = "acme_enabled",
        env = "KILN_ACME_DOMAIN",
        value_delimiter = ','
    )]
    pub acme_domain: Vec<String>,
    #[command(flatten)]
    pub acme: crate::acme::args::AcmeArgs,
    /// Connection layer: io_uring (`uring`), epoll (`epoll`), or io_uring
    /// where the kernel offers every operation kiln needs, else epoll
    /// (`auto`; the choice is logged).
    #[arg(long, value_enum, default_value_t = IoChoice::Auto, value_name = "auto|uring|epoll", env = "KILN_IO")]
    pub io: IoChoice,
    /// Event-loop threads (default: number of cores).
    #[arg(long, env = "KILN_THREADS")]
    pub threads: Option<usize>,
    /// Most connections open at once; accepting pauses beyond. Default: the
    /// open-file limit (raised to its hard maximum at start) less a reserve
    /// for listeners, event loops and the packs' descriptors (at most a
    /// quarter of the limit: packs beyond are served from their mapping
    /// alone).
    #[arg(long, env = "KILN_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Write an access log to PATH, or `-` for stdout.
    #[arg(long, value_name = "PATH|-", env = "KILN_ACCESS_LOG")]
    pub access_log: Option<PathBuf>,
    /// The access log's format: `combined` (as Apache and nginx write it)
    /// or `json` (one object per line: time, host, method, path, status,
    /// bytes, duration, protocol, encoding, user agent, referer).
    #[arg(long, value_enum, default_value_t = access_log::Format::Combined, env = "KILN_ACCESS_LOG_FORMAT")]
    pub access_log_format: access_log::Format,
    /// Serve Prometheus metrics on this address (its own listener, the
    /// same forms as --listen): /metrics, and /healthz and /ready (503
    /// once shutting down) for health checks.
    #[arg(long, value_name = "ADDR", env = "KILN_METRICS")]
    pub metrics: Option<String>,
    /// Fault every page of each pack into memory when it is loaded, so
    /// that the first requests after a start or a deploy never wait on
    /// the disk (the verification of every load reads the whole pack
    /// already; this also maps each page into kiln).
    #[arg(long, env = "KILN_PRELOAD")]
    pub preload: bool,
    /// Lock each pack in memory (implies --preload), so that memory
    /// pressure cannot evict it; fails, saying so, when the locked-memory
    /// limit (`ulimit -l`, LimitMEMLOCK=) is too small.
    #[arg(long, env = "KILN_MLOCK")]
    pub mlock: bool,
    /// Answer `Hello World!` to every request, without a pack (measures the
    /// server core alone).
    #[arg(long, env = "KILN_DUMMY")]
    pub dummy: bool,
    /// Do not add the default security headers.
    #[arg(long, env = "KILN_NO_SECURITY_HEADERS")]
    pub no_security_headers: bool,
    /// Do not serve HTTP/3 (QUIC on UDP, on the --listen-tls ports).
    #[arg(long, env = "KILN_NO_HTTP3")]
    pub no_http3: bool,
    /// How long clients may remember that HTTP/3 is offered (the max-age
    /// of `Alt-Svc: h3=":PORT"`), in seconds.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 86_400,
        env = "KILN_ALT_SVC_MAX_AGE"
    )]
    pub alt_svc_max_age: u64,
    /// When a new HTTP/3 client must first prove its address with a QUIC
    /// Retry, which costs it a round trip: `auto` while a thread has 64
    /// handshakes in flight (a flood of Initials, perhaps from forged
    /// addresses), `always` for every new client (nginx's `quic_retry
    /// on`; a Retry token is good for 15 s, from the address it was sent
    /// to).
    #[arg(
        long,
        value_enum,
        default_value_t = QuicRetry::Auto,
        value_name = "auto|always",
        env = "KILN_QUIC_RETRY"
    )]
    pub quic_retry: QuicRetry,
    /// A file of secret bytes (at least 32, at most 4096; every byte
    /// counts, a newline too) from which the keys of QUIC's Retry tokens
    /// and stateless resets are derived, so that a restarted server
    /// resets the connections of the one before and takes the Retry
    /// tokens it sent (nginx's `quic_host_key`). Read once at start (a
    /// reload keeps the keys; `s3://BUCKET/KEY`: an object of the store,
    /// as for --tls-ticket-keys). Keep it secret (mode 0600); make one
    /// with `head -c 32 /dev/urandom > FILE`. Default: random keys per
    /// process.
    #[arg(
        long,
        value_name = "FILE|s3://BUCKET/KEY",
        conflicts_with = "no_http3",
        env = "KILN_QUIC_HOST_KEY"
    )]
    pub quic_host_key: Option<PathBuf>,
    /// Add `Strict-Transport-Security`: on TLS responses when kiln
    /// listens with TLS, else on every response (kiln behind a proxy that
    /// terminates TLS).
    #[arg(long, env = "KILN_HSTS")]
    pub hsts: bool,
    /// HSTS's max-age: how long a browser keeps to HTTPS (default two
    /// years; a short one while trying HTTPS out).
    #[arg(
        long,
        value_name = "S",
        default_value_t = server_headers::DEFAULT_HSTS_MAX_AGE,
        requires = "hsts",
        env = "KILN_HSTS_MAX_AGE"
    )]
    pub hsts_max_age: u64,
    /// Leave `includeSubDomains` out of HSTS (a subdomain still served
    /// over HTTP elsewhere).
    #[arg(long, requires = "hsts", env = "KILN_HSTS_NO_SUBDOMAINS")]
    pub hsts_no_subdomains: bool,
    /// Seconds a client has to send a whole request head.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 10.0,
        env = "KILN_HEADER_TIMEOUT"
    )]
    pub header_timeout: f64,
    /// Seconds an idle keep-alive connection stays open.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 60.0,
        env = "KILN_KEEPALIVE_TIMEOUT"
    )]
    pub keepalive_timeout: f64,
    /// Seconds a client may take without reading any of its response.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 30.0,
        env = "KILN_SEND_TIMEOUT"
    )]
    pub send_timeout: f64,
    /// Seconds between SIGTERM and the listeners closing: kiln goes on
    /// serving while /ready answers 503, so that a balancer or Kubernetes
    /// stops sending it connections first; then it drains.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 0.0,
        env = "KILN_SHUTDOWN_DELAY"
    )]
    pub shutdown_delay: f64,
    /// Bodies of at least this many bytes are sent with sendfile(2) after
    /// their headers instead of in the headers' writev (a tuning knob for
    /// measurements).
    #[arg(long, value_name = "BYTES", default_value_t = output::SENDFILE_MIN, hide = true)]
    pub sendfile_min: u64,
    /// Serve as this user once listeners are bound and the pack and
    /// certificates opened. Default: `nobody` when started as root (kiln
    /// refuses to serve as root unless told `--user root`), else the user
    /// kiln runs as. Reloads read the pack and certificates as this user.
    #[arg(long, value_name = "NAME", env = "KILN_USER")]
    pub user: Option<String>,
    /// Serve without the sandbox: no user switch, no Landlock, no system
    /// call filter (docs/security.md). Logged as a warning.
    #[arg(long, conflicts_with = "user", env = "KILN_NO_SANDBOX")]
    pub no_sandbox: bool,
    /// With SITE `s3://BUCKET/PREFIX/`: the local folder the store's packs
    /// are mirrored into and served from (docs/fleet.md). Default:
    /// /var/lib/kiln/store/BUCKET/HASH-OF-PREFIX.
    #[arg(long, value_name = "DIR", env = "KILN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// With SITE `s3://BUCKET/PREFIX/`: seconds between listings of the
    /// store (each jittered by ±20 %, so that a fleet does not list in
    /// step); SIGHUP lists at once.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 5.0,
        env = "KILN_SYNC_INTERVAL"
    )]
    pub sync_interval: f64,
    /// With SITE `s3://BUCKET/PREFIX/`: the most bytes the cache folder
    /// holds (`10G`, `500M`). Packs beyond are cold: fetched at a site's
    /// first request (which waits for it, up to --fetch-timeout), the
    /// least recently used removed to make room. Default: every pack of
    /// the bucket is fetched.
    #[arg(long, value_name = "BYTES", value_parser = crate::store::parse_size, env = "KILN_CACHE_SIZE")]
    pub cache_size: Option<u64>,
    /// With --cache-size: how long a request for a cold site waits for its
    /// pack before it gets 503 with Retry-After (HTTP/1.1, HTTP/2 and
    /// HTTP/3 alike).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10.0,
        env = "KILN_FETCH_TIMEOUT"
    )]
    pub fetch_timeout: f64,
    #[command(flatten)]
    pub store: crate::store::EndpointArgs,
}

/// Raises the soft open-file limit to the hard one (a server's connections
/// are its files) and returns how many descriptors are left under it for
/// connections and packs, leaving room for every thread's descriptors and
/// the process's own files (a few packs among them).
fn descriptor_room(threads: usize, addresses: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = raised;
        }
    }
    // Per thread: its listeners, epoll or the ring, the waker, and the
    // ring's splice pipes.
    let reserve = 64 + threads * (addresses + 2 + 2 * net::uring::PIPES);
    // No soft limit: `None`.
    limit
        .current
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX))
        .saturating_sub(reserve)
        .max(1)
}

/// Packs that fit in `descriptor_room`'s reserve.
const PACKS_IN_RESERVE: usize = 16;

/// The packs that may keep their descriptor (`pack_limits`): a quarter of
/// the room, so that a folder of more sites than the limit allows leaves
/// the rest to connections (a pack beyond is mapped only).
fn pack_descriptor_budget(room: usize) -> usize {
    room / 4
}

/// How many connections fit in the room once `packs` hold a descriptor
/// each (the first few are in the reserve).
fn connection_budget(room: usize, packs: usize) -> usize {
    room.saturating_sub(packs.saturating_sub(PACKS_IN_RESERVE))
        .max(1)
}

fn seconds_ms(flag: &str, s: f64) -> anyhow::Result<u64> {
    if !(s.is_finite() && s > 0.0) {
        bail!("--{flag} must be a positive number of seconds, not {s}");
    }
    Ok(Duration::from_secs_f64(s).as_millis().max(1) as u64)
}

/// Writes a line for the person who started kiln to stderr, where every
/// human message goes: stdout is left to the access log (`--access-log
/// -`), so that it can be piped into a parser. A closed or full stderr
/// must not stop the server: the line is informative.
fn say(line: &str) {
    crate::report::to_stderr(line);
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Opens the access log `--access-log` names, if any.
fn open_access_log(args: &ServeArgs) -> anyhow::Result<Option<Arc<access_log::Sink>>> {
    Ok(match args.access_log.as_deref() {
        None => None,
        Some(p) if p == Path::new("-") => Some(Arc::new(access_log::Sink::Stdout)),
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("{}: cannot open access log", p.display()))?;
            Some(Arc::new(access_log::Sink::File(f)))
        }
    })
}

/// What `--io` asks for: a connection layer, or the best one here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IoChoice {
    /// io_uring where the kernel offers every operation kiln uses, else
    /// epoll.
    Auto,
    /// io_uring, or fail to start.
    Uring,
    /// epoll.
    Epoll,
}

/// What `--quic-retry` asks for: when new QUIC clients get a Retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum QuicRetry {
    /// While a thread has 64 handshakes in flight
    /// (`quic::HANDSHAKES_BEFORE_RETRY`).
    Auto,
    /// Every new client.
    Always,
}

/// Which connection layer serves: io_uring when asked or usable, else
/// epoll. Logs the choice, with the receive buffers io_uring will use.
fn choose_io(choice: IoChoice) -> anyhow::Result<Backend> {
    let uring_buffers = match choice {
        IoChoice::Epoll => None,
        IoChoice::Uring => {
            Some(net::uring::probe().context("--io uring: io_uring is not usable here")?)
        }
        IoChoice::Auto => match net::uring::probe() {
            Ok(buffers) => Some(buffers),
            Err(e) => {
                tracing::info!("io_uring is not usable here ({e}); serving with epoll");
                None
            }
        },
    };
    Ok(match uring_buffers {
        Some(buffers) => {
            tracing::info!("connection layer: io_uring ({buffers})");
            Backend::Uring
        }
        None => {
            tracing::info!("connection layer: epoll");
            Backend::Epoll
        }
    })
}

/// The gauges of every pack served now, for a scrape.
fn pack_gauges(current: &CurrentSites) -> Vec<metrics::PackGauges> {
    current.sites().iter().filter_map(|s| s.gauges()).collect()
}

/// `kiln serve`, step by step, in the order the sandbox sets: everything
/// is opened, bound and built on one thread, the sandbox entered, and only
/// then do threads start (each step says why it is where it is).
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    crate::report::init_logging();
    let mut settings = read_settings(&args)?;
    // Before any TLS configuration is built: each takes the ticketer.
    if let Some(keys) = settings.ticket_keys.take() {
        tls::use_ticket_keys(keys).map_err(anyhow::Error::msg)?;
    }
    // Blocked before anything starts a thread (a preview build starts
    // rayon's pool): a thread spawned earlier would keep the default action,
    // and SIGHUP or SIGTERM would kill the process instead of reaching the
    // control thread. A signal during the preview build waits for it.
    let signals = control::block_signals().context("cannot set up signal handling")?;
    // Before any pack is mapped, and before the sandbox (which has no
    // `sigaction`): a pack written in place must not end the server.
    in_place::install_fault_handler().context("cannot set up the bus-error handler")?;
    let metrics = Metrics::new(settings.threads, now_unix());
    // The store's client starts while the process has one thread, before
    // the sandbox, as the ACME client does; its first listing fills the
    // cache folder that is then opened as a folder of sites.
    let mut store_child = if store::is_store(&args) {
        let child = store::start(&args, settings.identity.as_ref())?;
        metrics.set_store(&child.cache, child.started_ms);
        Some(child)
    } else {
        None
    };
    let store_cache = store_child.as_ref().map(|c| c.cache.clone());
    let mut opened = open::open_served(&args, &metrics, store_cache.as_deref())?;
    if let Some(child) = &mut store_child
        && let Some(cold) = &child.cold
        && let control::Served::Folder(folder) = &mut opened.served
    {
        metrics.set_store_cold(&cold.store);
        folder.set_cold(child.cold_hosts());
        opened.sites = folder.sites();
    }
    // Once the packs are open: they take their descriptors first.
    let mut loop_config = settings.loop_config;
    if let Some(room) = settings.descriptor_room {
        loop_config.max_connections = connection_budget(room, pack_limits::held());
    }
    let loop_config = Arc::new(loop_config);
    let access_log = open_access_log(&args)?;
    let activated = sort_activated(settings.activated);
    let certificates = certificates(&args, &settings.listens, &activated, &opened.served)?;
    let managed = managed_certificates(&args, &opened, &certificates, settings.identity.as_ref())?;
    let (listeners, metrics_listeners) =
        bind_listeners(&args, &settings.listens, settings.threads, activated)?;
    let acme_challenges = acme_challenges(managed.as_deref(), &listeners)?;
    // HTTP/3's sockets before the stack's configuration: `Alt-Svc` is
    // prepared once, and only when the UDP listener is up.
    let shared = Arc::new(Shared::default());
    let quic = quic_sockets(
        &args,
        &listeners,
        settings.threads,
        &loop_config,
        settings.quic_keys,
        &shared,
    )?;
    let stack_config = stack_config(
        &args,
        &listeners,
        certificates.tls_listener,
        access_log,
        &metrics,
        quic.as_ref().and_then(|h| h.alt_svc.as_deref()),
    );
    let urls = serving_urls(&listeners)?;
    let (tls_reload, tls_config) = load_tls_at_start(&args, &certificates, managed.as_deref())?;
    let backend = choose_io(args.io)?;
    metrics.set_io(backend);
    let current = Arc::new(CurrentSites::new(opened.sites, tls_config));
    if let Some(managed) = &managed {
        current.publish_http01(Arc::new(managed.http01()));
        metrics.set_acme(managed);
    }
    let Loops { loops, wakers } = build_loops(
        listeners,
        quic,
        backend,
        &shared,
        &loop_config,
        &metrics,
        &current,
        &stack_config,
    )?;
    let watched = watch_for_reloads(
        &opened.served,
        certificates.given.as_ref(),
        managed.as_deref(),
        tls_reload.is_some(),
        args.poll.map(Duration::from_secs),
    );
    // Read while the metrics listener's sockets are still here (they go
    // to its thread), for the start-up line.
    let metrics_addrs: Vec<SocketAddr> = metrics_listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();
    // The ACME client starts while the process has one thread, before the
    // sandbox, which it does not share: its own is narrower.
    let acme_client = match &managed {
        Some(managed) => Some(start_acme_client(
            &args,
            managed,
            &acme_challenges,
            settings.identity.as_ref(),
        )?),
        None => None,
    };
    let switched = switched_user(settings.identity.as_ref()).cloned();
    if let Some(user) = &switched {
        load::set_preview_builder(&user.name);
    }
    enter_sandbox(
        settings.identity,
        backend,
        opened.path.as_deref(),
        opened.first_build.is_some(),
        certificates.source.as_ref(),
        managed.as_ref().map(|m| m.dir.as_path()),
    )?;
    let (preview, what) = match opened.first_build {
        Some(first) => open::build_first_preview(
            first,
            &opened.served,
            opened.path.as_deref().unwrap_or(Path::new(".")),
            &current,
            &metrics,
            switched.as_ref(),
        )?,
        None => (None, opened.what),
    };
    let announcement = announcement(&what, &urls, settings.threads, &metrics_addrs);
    let handles = start_threads(
        preview,
        &current,
        &wakers,
        metrics_listeners,
        &metrics,
        loops,
    )?;
    // Every loop runs: ready for systemd; then the control thread (reloads
    // and shutdown), and the line for whoever started kiln.
    if let Some(n) = &settings.notifier {
        n.ready(&announcement["kiln: ".len()..]);
    }
    let reloader = control::Reloader {
        served: opened.served,
        tls: tls_reload,
        acme: managed,
        current,
        metrics,
        notifier: settings.notifier,
        store: store_child,
    };
    let control = control::spawn(
        signals,
        reloader,
        watched,
        acme_client,
        settings.shutdown_delay,
        Arc::clone(&shared),
        wakers,
    )?;
    say(&announcement);
    drain(handles, control)
}

/// What the environment and the flags ask for, checked before anything is
/// opened.
struct Settings {
    /// The sockets systemd passed.
    activated: Vec<systemd::Activated>,
    /// systemd's notification socket, when it gave one.
    notifier: Option<systemd::Notifier>,
    /// The addresses `--listen` and `--listen-tls` ask for.
    listens: Vec<(Listen, u32)>,
    /// Every loop's timeouts and connection limit.
    /// Every loop's timeouts and connection limit (the default limit set
    /// once the packs are open, from `descriptor_room`).
    loop_config: LoopConfig,
    /// The descriptors left for connections and packs, without
    /// `--max-connections`.
    descriptor_room: Option<usize>,
    /// `--shutdown-delay`.
    shutdown_delay: Duration,
    /// Event loops, one per thread.
    threads: usize,
    /// The user the sandbox switches to; `None` with `--no-sandbox`.
    identity: Option<sandbox::Identity>,
    /// The QUIC keys derived from `--quic-host-key`, if given.
    quic_keys: Option<quic::Keys>,
    /// The ticket keys derived from `--tls-ticket-keys`, if given.
    ticket_keys: Option<tls::ticket_keys::TicketKeys>,
}

/// Reads systemd's variables and checks the flags, first: systemd's
/// listeners and notifier read and clear the environment, which is safe
/// only while the process has one thread; and a bad flag is said before
/// anything is opened.
fn read_settings(args: &ServeArgs) -> anyhow::Result<Settings> {
    let activated = systemd::listeners()?;
    let notifier = systemd::Notifier::from_env();
    let listens = listen_addresses(args, !activated.is_empty())?;
    let header_timeout_ms = seconds_ms("header-timeout", args.header_timeout)?;
    let keepalive_timeout_ms = seconds_ms("keepalive-timeout", args.keepalive_timeout)?;
    let send_timeout_ms = seconds_ms("send-timeout", args.send_timeout)?;
    if !(args.shutdown_delay.is_finite() && args.shutdown_delay >= 0.0) {
        bail!(
            "--shutdown-delay must be zero or a positive number of seconds, not {}",
            args.shutdown_delay
        );
    }
    let shutdown_delay = Duration::from_secs_f64(args.shutdown_delay);
    let acme_flags = [
        ("--acme-email", args.acme.email.is_some()),
        ("--acme-ca", args.acme.ca.is_some()),
        ("--acme-staging", args.acme.staging),
        ("--acme-ca-root", args.acme.ca_root.is_some()),
        ("--acme-cache-dir", args.acme.cache_dir.is_some()),
    ];
    if let Some((flag, _)) = acme_flags
        .iter()
        .find(|(_, given)| *given && !args.acme_enabled)
    {
        bail!("{flag} goes with --acme");
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let addresses = listens.iter().map(|(l, _)| l.addrs.len()).sum::<usize>() + activated.len();
    let room = descriptor_room(threads, addresses);
    pack_limits::set_descriptor_budget(pack_descriptor_budget(room));
    pack_limits::set_map_budget();
    let (max_connections, descriptor_room) = match args.max_connections {
        Some(0) => bail!("--max-connections must be at least 1"),
        Some(n) => (n, None),
        None => (connection_budget(room, 0), Some(room)),
    };
    let identity = if args.no_sandbox {
        None
    } else {
        Some(sandbox::resolve_user(args.user.as_deref())?)
    };
    // Read here, with the flags: the file is checked before anything is
    // opened or bound, and read before the sandbox, which does not let
    // it be read again (the keys are the process's, reloads keep them).
    let quic_keys = args
        .quic_host_key
        .as_deref()
        .map(|path| quic::Keys::read(path, args))
        .transpose()?;
    let ticket_keys = match &args.tls_ticket_keys {
        Some(path) => {
            let secret = secret::read("--tls-ticket-keys", path, args)?;
            Some(
                tls::ticket_keys::TicketKeys::new(&secret, args.tls_ticket_key_period).map_err(
                    |_| {
                        anyhow::anyhow!(
                            "--tls-ticket-keys {}: cannot derive the keys",
                            path.display()
                        )
                    },
                )?,
            )
        }
        None => None,
    };
    let loop_config = LoopConfig {
        header_timeout_ms,
        keepalive_timeout_ms,
        send_timeout_ms,
        max_connections,
        sendfile_min: args.sendfile_min,
    };
    Ok(Settings {
        activated,
        notifier,
        listens,
        loop_config,
        descriptor_room,
        shutdown_delay,
        threads,
        identity,
        quic_keys,
        ticket_keys,
    })
}

/// What every connection's stack is configured with: the server's own
/// headers, the access log, the HTTPS redirect. Once the listeners are
/// bound, for the TLS port a redirect names.
fn stack_config(
    args: &ServeArgs,
    listeners: &[Listeners],
    has_tls_listener: bool,
    access_log: Option<Arc<access_log::Sink>>,
    metrics: &Arc<Metrics>,
    alt_svc: Option<&str>,
) -> Arc<StackConfig> {
    let https_port = listeners[0]
        .iter()
        .find(|(_, tag)| *tag == stack::TLS)
        .and_then(|(l, _)| l.local_addr().ok())
        .map(|a| a.port());
    let security = !args.no_security_headers;
    // Without TLS listeners kiln sits behind something that terminates TLS
    // (where --hsts belongs on every response); with them, only its own
    // TLS responses may carry it.
    let hsts_on_cleartext = args.hsts && !has_tls_listener;
    let hsts = server_headers::hsts_value(args.hsts_max_age, !args.hsts_no_subdomains);
    Arc::new(StackConfig {
        server_headers: ServerHeaders::with_hsts(
            security,
            Some(hsts.as_str()).filter(|_| hsts_on_cleartext),
        ),
        server_headers_tls: ServerHeaders::with_hsts(
            security,
            Some(hsts.as_str()).filter(|_| args.hsts),
        )
        .with_alt_svc(alt_svc),
        access_log,
        access_log_format: args.access_log_format,
        https_redirect: https_port.filter(|_| args.redirect_https),
        metrics: Arc::clone(metrics),
    })
}

/// The event loops, built and not running yet, and the wakers the control
/// thread stops them with.
struct Loops {
    loops: Vec<EventLoop<Protocols>>,
    wakers: Vec<Arc<Waker>>,
}

/// Builds every thread's event loop (its epoll instance or ring, its
/// waker, its stack) on the chosen connection layer: before the sandbox,
/// which allows only the calls a running loop makes.
#[allow(clippy::too_many_arguments)]
fn build_loops(
    listeners: Vec<Listeners>,
    quic: Option<Http3>,
    backend: Backend,
    shared: &Arc<Shared>,
    config: &Arc<LoopConfig>,
    metrics: &Arc<Metrics>,
    current: &Arc<CurrentSites>,
    stack_config: &Arc<StackConfig>,
) -> anyhow::Result<Loops> {
    let mut wakers = Vec::new();
    let mut loops = Vec::new();
    let (mut udp, quic_config) = match quic {
        Some(http3) => (http3.sockets, Some(http3.config)),
        None => (Vec::new(), None),
    };
    for (thread, l) in listeners.into_iter().enumerate() {
        let waker = Arc::new(Waker::new()?);
        wakers.push(Arc::clone(&waker));
        let sockets = udp.get_mut(thread).map(std::mem::take).unwrap_or_default();
        let mut stack = Protocols::new(
            Arc::clone(current),
            Arc::clone(stack_config),
            config.sendfile_min,
            thread,
        );
        if let Some(quic_config) = &quic_config {
            stack = stack.with_quic(sockets.len(), quic_config);
        }
        let (shared, config) = (Arc::clone(shared), Arc::clone(config));
        let counted = net::Counted {
            metrics: Arc::clone(metrics),
            thread,
        };
        loops.push(match backend {
            Backend::Uring => EventLoop::Uring(Box::new(
                UringWorker::new(l, sockets, waker, shared, config, counted, stack)
                    .context("cannot set up io_uring")?,
            )),
            Backend::Epoll => EventLoop::Epoll(Box::new(Worker::new(
                l, sockets, waker, shared, config, counted, stack,
            )?)),
        });
    }
    Ok(Loops { loops, wakers })
}

/// Sets the inotify watches of what the control thread reloads: a pack
/// (not a live preview: it rebuilds on its own), a folder of sites, the
/// certificates. Before the sandbox, as everything opened; a failure only
/// leaves SIGHUP (and `--poll`'s scans of the same files, every `poll`)
/// to reload.
fn watch_for_reloads(
    served: &control::Served,
    given: Option<&tls::Source>,
    managed: Option<&acme::Managed>,
    tls_on: bool,
    poll: Option<Duration>,
) -> control::FileWatch {
    let mut watched_files: Vec<(&Path, control::Role)> = Vec::new();
    match served {
        control::Served::One { source, .. } => {
            watched_files.push((&source.path, control::Role::Pack));
        }
        control::Served::Folder(folder) => {
            watched_files.push((folder.dir(), control::Role::Folder))
        }
        control::Served::Nothing => {}
    }
    if let Some(tls::Source::Files(pairs)) = given {
        for pair in pairs {
            watched_files.push((&pair.cert, control::Role::Certificate));
            watched_files.push((&pair.key, control::Role::Certificate));
        }
    }
    // Under --acme: the challenges the client writes, and its pairs and
    // TLS-ALPN-01 certificates when a listener speaks TLS.
    let acme_folders = managed.map(|m| {
        (
            crate::acme::layout::http01_dir(&m.dir),
            crate::acme::layout::certs_dir(&m.dir),
            crate::acme::layout::tls_alpn01_dir(&m.dir),
        )
    });
    if let Some((http01, certs, tls_alpn01)) = &acme_folders {
        watched_files.push((http01, control::Role::AcmeHttp01));
        if tls_on {
            watched_files.push((certs, control::Role::AcmeCertificates));
            watched_files.push((tls_alpn01, control::Role::AcmeTlsAlpn01));
        }
    }
    let poll = poll.map(|every| poll::Poll::new(&watched_files, every));
    let inotify = match control::watch(&watched_files) {
        Ok(w) => Some(w),
        Err(e) if poll.is_some() => {
            tracing::warn!("cannot watch files for replacement ({e}); --poll looks for them");
            None
        }
        Err(e) => {
            tracing::warn!("cannot watch files for replacement ({e}); reload with SIGHUP");
            None
        }
    };
    control::FileWatch { inotify, poll }
}

/// The start-up line: what is served, on which URLs, with how many
/// threads, and the metrics addresses.
fn announcement(
    what: &str,
    urls: &[String],
    threads: usize,
    metrics_addrs: &[SocketAddr],
) -> String {
    let mut announcement = format!(
        "kiln: serving {what} on {} with {threads} {}",
        urls.join(" "),
        if threads == 1 { "thread" } else { "threads" }
    );
    if !metrics_addrs.is_empty() {
        let addrs: Vec<String> = metrics_addrs.iter().map(SocketAddr::to_string).collect();
        announcement.push_str(&format!("; metrics on {}", addrs.join(" ")));
    }
    announcement
}

/// Enters the sandbox (or says it is off). Everything is open and every
/// worker built: the sandbox goes up before the first thread starts, so
/// that every thread is inside it.
fn enter_sandbox(
    identity: Option<sandbox::Identity>,
    backend: Backend,
    site: Option<&Path>,
    preview: bool,
    tls_source: Option<&tls::Source>,
    acme_dir: Option<&Path>,
) -> anyhow::Result<()> {
    match identity {
        Some(identity) => {
            let mut plan = open::sandbox_plan(identity, backend, site, preview, tls_source);
            if let Some(dir) = acme_dir {
                plan.read_tree_again(dir, sandbox::Held::Tree);
            }
            #[cfg(debug_assertions)]
            sandbox::debug_exiting_thread();
            sandbox::enter(&plan)?;
        }
        None => tracing::warn!(
            "sandbox off (--no-sandbox): serving with the privileges kiln started with, \
             no Landlock domain and no system call filter"
        ),
    }
    #[cfg(debug_assertions)]
    sandbox::debug_probes();
    Ok(())
}

/// Starts the live preview's watcher, the metrics listener and the event
/// loops, each on its own thread: only now, inside the sandbox.
fn start_threads(
    preview: Option<watch::Preview>,
    current: &Arc<CurrentSites>,
    wakers: &[Arc<Waker>],
    metrics_listeners: Vec<std::net::TcpListener>,
    metrics: &Arc<Metrics>,
    loops: Vec<EventLoop<Protocols>>,
) -> anyhow::Result<Vec<std::thread::JoinHandle<std::io::Result<()>>>> {
    if let Some(preview) = preview {
        watch::spawn(preview, Arc::clone(current), wakers.to_vec())?;
    }
    if !metrics_listeners.is_empty() {
        let current = Arc::clone(current);
        metrics::spawn_listener(metrics_listeners, Arc::clone(metrics), move || {
            pack_gauges(&current)
        })
        .context("cannot start the metrics listener")?;
    }
    let mut handles = Vec::new();
    for (i, event_loop) in loops.into_iter().enumerate() {
        handles.push(
            std::thread::Builder::new()
                .name(format!("kiln-loop-{i}"))
                .spawn(move || event_loop.run())?,
        );
    }
    Ok(handles)
}

/// Waits for the event loops to end (a shutdown drains them), then says
/// why the server stopped: last, as the process ends when `run` returns.
fn drain(
    handles: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
    control: control::Control,
) -> anyhow::Result<()> {
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("event loop failed: {e}"),
            Err(_) => tracing::error!("event loop panicked"),
        }
    }
    if let Some(failure) = control.failure() {
        bail!("{failure}; the server shut down");
    }
    tracing::info!("stopped");
    Ok(())
}
