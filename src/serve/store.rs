//! `kiln serve s3://BUCKET/PREFIX/`: the server's half of a bucket as the
//! folder of sites. The store's client is another process, `kiln store
//! sync` ([`crate::store::sync`]), started here before the sandbox, as
//! the ACME client is: it mirrors the bucket into the cache folder, which
//! the server serves as any folder of sites (a pack renamed in is reloaded
//! as one replaced by hand), and reads the state file it writes there for
//! `/ready` and `/metrics`. No network client and no async runtime run in
//! this process. The child's standard input is a pipe from the server:
//! `list` on it (the server's SIGHUP) makes it list at once, `fetch HOST`
//! fetches a cold site a request waits for, `used HOST` (every few
//! seconds, for the sites that answered requests) tells it which packs to
//! keep when it must make room; its end (the server gone) ends the child.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, anyhow};

use super::ServeArgs;
use super::handler::Sites;
use super::handler::cold::{self, ColdHosts};
use super::metrics::{header, label};
use crate::confine::Identity;
use crate::store::StoreUrl;
use crate::store::state::{self, State};

/// The longest the server waits at start for the child's first listing
/// (after it, the server serves what the cache holds and `/ready` stays
/// 503 until a listing is done).
const FIRST_LISTING_WAIT: Duration = Duration::from_secs(15);

/// How often the control thread reads the state file and the host list,
/// and says which sites were used.
pub const TICK: Duration = Duration::from_secs(1);

/// The child as started.
pub struct StoreChild {
    pub pid: u32,
    /// The write end of the child's standard input (non-blocking).
    pub wake: Arc<OwnedFd>,
    /// The cache folder served.
    pub cache: PathBuf,
    /// When it was started (Unix ms): listings before it do not count.
    pub started_ms: u64,
    /// With `--cache-size`: what the request path shares about cold
    /// sites, and what the control thread last saw.
    pub cold: Option<Cold>,
}

/// The control thread's side of cold sites.
pub struct Cold {
    pub store: Arc<cold::Store>,
    /// The host list's modification time last read.
    hosts_seen: Option<SystemTime>,
    /// Each site's response count when last looked at.
    responses: HashMap<String, u64>,
    cache: PathBuf,
}

impl StoreChild {
    /// Asks the child to list now (SIGHUP). A full pipe already holds
    /// requests: the write is non-blocking and its failure harmless.
    pub fn list_now(&self) {
        let _ = rustix::io::write(&*self.wake, b"list\n");
    }

    /// Once a `TICK` (the control thread): whether the store is up, from
    /// the state file; which sites answered requests since the last tick,
    /// said to the child; and, when the bucket's host list changed, the
    /// new cold hosts (to publish with a new generation of the sites).
    pub fn tick(&mut self, sites: &Sites) -> Option<Arc<ColdHosts>> {
        let previous = sites.cold();
        let cold = self.cold.as_mut()?;
        if let Some(state) = State::read(&self.cache) {
            cold.store.up.store(state.up, Ordering::Relaxed);
        }
        for site in sites.iter() {
            let count = site.stats().responses();
            let name = site.name();
            if cold.responses.get(name) != Some(&count) {
                cold.responses.insert(name.to_string(), count);
                cold.store.say(&[b"used", name.as_bytes()]);
            }
        }
        cold.hosts(previous)
    }

    /// The cold hosts as the host list says now (none before the first
    /// listing).
    pub fn cold_hosts(&mut self) -> Option<Arc<ColdHosts>> {
        let cold = self.cold.as_mut()?;
        Some(
            cold.hosts(None)
                .unwrap_or_else(|| ColdHosts::new(Arc::clone(&cold.store), [], None)),
        )
    }
}

impl Cold {
    /// The cold hosts, when the host list changed since last read (the
    /// fetches asked of `previous` kept).
    fn hosts(&mut self, previous: Option<&ColdHosts>) -> Option<Arc<ColdHosts>> {
        let modified = std::fs::metadata(state::hosts_path(&self.cache))
            .and_then(|m| m.modified())
            .ok();
        if modified.is_none() || modified == self.hosts_seen {
            return None;
        }
        self.hosts_seen = modified;
        let hosts = state::read_hosts(&self.cache).unwrap_or_default();
        Some(ColdHosts::new(Arc::clone(&self.store), hosts, previous))
    }
}

/// Whether SITE names a store.
pub fn is_store(args: &ServeArgs) -> bool {
    args.site
        .as_deref()
        .and_then(Path::to_str)
        .is_some_and(StoreUrl::is_store)
}

/// The cache folder for `url`.
fn cache_dir(args: &ServeArgs, url: &StoreUrl) -> PathBuf {
    args.cache_dir
        .clone()
        .unwrap_or_else(|| crate::store::default_cache_dir(url))
}

/// Starts `kiln store sync` for SITE, an `s3://` URL, and waits (bounded)
/// for its first listing. Called while the process has one thread,
/// before the sandbox; the child is reaped by the kernel, as the ACME
/// client is.
pub fn start(args: &ServeArgs, serving: Option<&Identity>) -> anyhow::Result<StoreChild> {
    let text = args.site.as_deref().and_then(Path::to_str).unwrap_or("");
    let url = StoreUrl::parse_folder(text).map_err(|e| anyhow!(e))?;
    if !(args.sync_interval.is_finite() && args.sync_interval >= 0.1) {
        anyhow::bail!(
            "--sync-interval must be at least 0.1 s, not {}",
            args.sync_interval
        );
    }
    if !(args.fetch_timeout.is_finite() && (0.0..=3600.0).contains(&args.fetch_timeout)) {
        anyhow::bail!(
            "--fetch-timeout must be between 0 and 3600 s, not {}",
            args.fetch_timeout
        );
    }
    let cache = cache_dir(args, &url);
    protect(&cache, serving)?;
    std::fs::create_dir_all(cache.join(state::DIR))
        .with_context(|| format!("--cache-dir: cannot create {}", cache.display()))?;
    // A state file left by an earlier run is kept (the worker knows from
    // it what the cache holds), but only a listing made since now counts.
    let started_ms = crate::store::state::now_ms();
    let exe = std::env::current_exe().context("cannot find kiln's own executable")?;
    let (read, wake) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(|e| anyhow!("cannot make the store client's pipe: {e}"))?;
    // The child's end blocks: it waits in poll, and reads only when told.
    rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::empty())
        .map_err(|e| anyhow!("cannot make the store client's pipe: {e}"))?;
    crate::sys::reap_children_automatically()
        .map_err(|e| anyhow!("cannot have the store client reaped: {e}"))?;
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .context("cannot pass stderr to the store client")?;
    let mut command = Command::new(&exe);
    command
        .args(["store", "sync", text, "--cache-dir"])
        .arg(&cache)
        .arg("--sync-interval")
        .arg(args.sync_interval.to_string());
    if let Some(endpoint) = &args.store.endpoint {
        command.args(["--store-endpoint", endpoint]);
    }
    if let Some(size) = args.cache_size {
        command.arg("--cache-size").arg(size.to_string());
    }
    if args.no_sandbox {
        command.arg("--no-sandbox");
    }
    let child = command
        .stdin(Stdio::from(read))
        .stdout(Stdio::from(stderr))
        .spawn()
        .with_context(|| format!("cannot start {} store sync", exe.display()))?;
    let pid = child.id();
    tracing::info!(
        "store: started the client (pid {pid}) for {url} into {}",
        cache.display()
    );
    let started = Instant::now();
    let listed = |cache: &Path| State::read(cache).is_some_and(|s| s.listed_ms >= started_ms);
    while !listed(&cache) && started.elapsed() < FIRST_LISTING_WAIT {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            anyhow::bail!("the store client (pid {pid}) ended at start; see its error above");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !listed(&cache) {
        tracing::warn!(
            "store: no listing of {url} within {} s: serving what {} holds, /ready 503 until one is done",
            FIRST_LISTING_WAIT.as_secs(),
            cache.display()
        );
    }
    let wake = Arc::new(wake);
    let cold = args.cache_size.map(|_| Cold {
        store: cold::Store::new(
            Arc::clone(&wake),
            Duration::from_secs_f64(args.fetch_timeout),
        ),
        hosts_seen: None,
        responses: HashMap::new(),
        cache: cache.clone(),
    });
    Ok(StoreChild {
        pid,
        wake,
        cache,
        started_ms,
        cold,
    })
}

/// Makes the cache folder one that only its owner and the serving user's
/// group can enter (0750): the bucket's `HOST.key` files are mirrored into
/// it, written by the client with the process's umask. A folder the user
/// named that others may enter is not changed, but said once.
fn protect(cache: &Path, serving: Option<&Identity>) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let fail = |e: std::io::Error| anyhow!("--cache-dir {}: {e}", cache.display());
    if let Some(parent) = cache.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(cache) {
        Ok(()) => {
            // The serving user reads the packs and keys (after the switch,
            // reloads read them as it): its group may enter.
            if let Some(user) = serving.filter(|u| u.uid != rustix::process::getuid().as_raw()) {
                rustix::fs::chown(cache, None, Some(rustix::fs::Gid::from_raw(user.gid)))
                    .map_err(|e| fail(e.into()))?;
            }
            std::fs::set_permissions(cache, std::fs::Permissions::from_mode(0o750)).map_err(fail)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(cache).map_err(fail)?.permissions().mode();
            if mode & 0o001 != 0 {
                tracing::warn!(
                    "--cache-dir {}: any user may enter it (mode {:o}), and the bucket's private keys are mirrored into it: chmod o-rwx it",
                    cache.display(),
                    mode & 0o7777
                );
            }
            Ok(())
        }
        Err(e) => Err(fail(e)),
    }
}

/// Whether the node is ready as far as the store goes: a listing is done
/// since `started_ms`, and either it succeeded or the cache holds sites
/// to serve.
pub fn ready(cache: &Path, started_ms: u64) -> bool {
    State::read(cache).is_some_and(|s| s.listed_ms >= started_ms && (s.up || !s.objects.is_empty()))
}

/// The store's gauges, from the state file (read at scrape time, on the
/// metrics thread).
pub fn render_metrics(out: &mut String, cache: &Path, now: i64, cold: Option<&Arc<cold::Store>>) {
    let Some(state) = State::read(cache) else {
        return;
    };
    render_cache(out, &state, cold.map(|c| &**c));
    header(
        out,
        "kiln_store_up",
        "gauge",
        "Whether the last listing of the store succeeded.",
    );
    let _ = writeln!(out, "kiln_store_up {}", u8::from(state.up));
    header(
        out,
        "kiln_store_last_listing_age_seconds",
        "gauge",
        "Seconds since the last listing of the store ended.",
    );
    let age = (now * 1000 - state.listed_ms as i64).max(0) as f64 / 1000.0;
    let _ = writeln!(out, "kiln_store_last_listing_age_seconds {age:.3}");
    header(
        out,
        "kiln_store_fetch_errors_total",
        "counter",
        "Objects refused (corrupt, truncated) or not fetched, since the store client started.",
    );
    let _ = writeln!(out, "kiln_store_fetch_errors_total {}", state.fetch_errors);
    header(
        out,
        "kiln_store_object_info",
        "gauge",
        "Each object mirrored, by file name and the ETag served.",
    );
    for o in &state.objects {
        let _ = writeln!(
            out,
            "kiln_store_object_info{{name=\"{}\",etag=\"{}\"}} 1",
            label(&o.name),
            label(&o.etag)
        );
    }
    header(
        out,
        "kiln_store_fetch_seconds",
        "gauge",
        "How long the last fetch of the object took.",
    );
    for o in &state.objects {
        let _ = writeln!(
            out,
            "kiln_store_fetch_seconds{{name=\"{}\"}} {:.3}",
            label(&o.name),
            o.fetch_ms as f64 / 1000.0
        );
    }
    header(
        out,
        "kiln_store_fetch_bytes",
        "gauge",
        "The bytes of the last fetch of the object.",
    );
    for o in &state.objects {
        let _ = writeln!(
            out,
            "kiln_store_fetch_bytes{{name=\"{}\"}} {}",
            label(&o.name),
            o.fetched_bytes
        );
    }
}

/// The cache's gauges and counters (`--cache-size`): what the child
/// fetched for cold sites and evicted, from the state file; what the
/// server's requests found, from its own counts.
fn render_cache(out: &mut String, state: &State, cold: Option<&cold::Store>) {
    let gauges = [
        (
            "kiln_store_cache_bytes",
            "gauge",
            "The bytes of the objects the cache holds.",
            state.cache_bytes,
        ),
        (
            "kiln_store_cache_limit_bytes",
            "gauge",
            "--cache-size (0: none, every pack is fetched).",
            state.cache_limit,
        ),
        (
            "kiln_store_cold_fetches_total",
            "counter",
            "Packs fetched because a request asked for a cold site.",
            state.cold_fetches,
        ),
        (
            "kiln_store_cold_fetch_bytes_total",
            "counter",
            "The bytes of those fetches.",
            state.cold_fetch_bytes,
        ),
        (
            "kiln_store_evictions_total",
            "counter",
            "Packs removed from the cache (least recently used) to make room.",
            state.evictions,
        ),
    ];
    for (name, kind, help, value) in gauges {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
    header(
        out,
        "kiln_store_cold_fetch_seconds_total",
        "counter",
        "The time those fetches took (with kiln_store_cold_fetches_total: their mean).",
    );
    let _ = writeln!(
        out,
        "kiln_store_cold_fetch_seconds_total {:.3}",
        state.cold_fetch_ms as f64 / 1000.0
    );
    let Some(cold) = cold else {
        return;
    };
    let counters = [
        (
            "kiln_store_cold_requests_total",
            "Answers that found the site cold (the cache misses; a parked request answered again counts again; the hits are the sites' own responses).",
            &cold.cold_requests,
        ),
        (
            "kiln_store_fetch_asks_total",
            "Fetches the server asked the store client for (one per cold site, however many requests wait).",
            &cold.asks,
        ),
        (
            "kiln_store_cold_timeouts_total",
            "Requests for a cold site answered 503: its pack did not arrive within --fetch-timeout.",
            &cold.timed_out,
        ),
        (
            "kiln_store_cold_store_down_total",
            "Requests for a cold site answered 503 at once: the store was down.",
            &cold.store_down,
        ),
    ];
    for (name, help, counter) in counters {
        header(out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", counter.load(Ordering::Relaxed));
    }
}
