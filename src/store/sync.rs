//! `kiln store sync`: the child `kiln serve s3://…` starts before its
//! sandbox. It lists the prefix every `--sync-interval` (jittered by
//! ±20 %, so that a fleet does not list in step) and at once when the
//! server says `list` on its standard input (SIGHUP); fetches each
//! `HOST.pack`, `HOST.crt` and `HOST.key` whose ETag or size changed to a
//! temporary file in the cache folder, up to `PARALLEL_FETCHES` at a
//! time, verifies a pack's checksums, fsyncs and renames it in (the
//! server reloads it as any pack replaced in a folder of sites); removes
//! from the cache what the bucket no longer holds; and writes the state
//! file and the host list ([`super::state`]).
//!
//! With `--cache-size`, packs are fetched in the background only while
//! they fit; the others are cold. The server asks for a cold site with
//! `fetch HOST` (a request is waiting for it): asked fetches start before
//! any other, and make room by removing the least recently used packs;
//! the server says which sites were used with `used HOST`. It ends when
//! its standard input closes: the server is gone. Run without
//! `--worker`, it is the supervisor that restarts this worker
//! ([`super::supervisor`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use object_store::path::Path as ObjectPath;
use object_store::{ListResult, ObjectMeta, ObjectStore};
use tokio::sync::mpsc;

use super::state::{self, Object, State, now_ms};
use super::{EndpointArgs, StoreUrl, client};
use crate::serve::load::site_name;

/// `kiln store sync`.
#[derive(clap::Args, Debug)]
pub struct SyncArgs {
    /// The folder of sites in the store: `s3://BUCKET/PREFIX/`.
    pub url: String,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// The local folder the packs are mirrored into.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: PathBuf,
    /// Seconds between listings (jittered by ±20 %).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub sync_interval: f64,
    /// The most bytes the cache holds (`10G`, `500M`): packs beyond are
    /// fetched when the server asks for them, the least recently used
    /// removed to make room. Default: every pack is fetched.
    #[arg(long, value_name = "BYTES", value_parser = super::parse_size)]
    pub cache_size: Option<u64>,
    /// Fetches in flight at most (for measurements: 1 is one at a time).
    #[arg(long, value_name = "N", default_value_t = PARALLEL_FETCHES as u16,
          value_parser = clap::value_parser!(u16).range(1..=64), hide = true)]
    pub parallel_fetches: u16,
    /// Enter no sandbox (as `kiln serve --no-sandbox`).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Be the worker the supervisor restarts, not the supervisor.
    #[arg(long, hide = true)]
    pub worker: bool,
}

/// The files of a folder of sites the store may hold.
const EXTENSIONS: [&str; 3] = ["pack", "crt", "key"];

/// Fetches in flight at most: a first sync of many small packs is bound
/// by each fetch's round trips and fsync, not by the network.
pub const PARALLEL_FETCHES: usize = 8;

/// What the server says on the child's standard input, a line each.
#[derive(Debug, PartialEq, Eq)]
enum Said {
    /// `list`: list now (SIGHUP).
    List,
    /// `fetch HOST`: a request waits for this cold site.
    Fetch(String),
    /// `used HOST`: the site answered requests lately.
    Used(String),
    /// Standard input closed: the server is gone.
    Gone,
}

impl Said {
    fn parse(line: &str) -> Option<Said> {
        let (word, host) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        let host = || {
            let host = host.trim().to_ascii_lowercase();
            (!host.is_empty() && !host.contains(['/', ' '])).then_some(host)
        };
        match word {
            "list" => Some(Said::List),
            "fetch" => host().map(Said::Fetch),
            "used" => host().map(Said::Used),
            _ => None,
        }
    }
}

/// Reads standard input on a thread of its own, what it says sent on.
fn read_stdin(sender: mpsc::UnboundedSender<Said>) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if let Some(said) = Said::parse(&line)
            && sender.send(said).is_err()
        {
            return;
        }
    }
    let _ = sender.send(Said::Gone);
}

/// Whether `name` is a pack that may be cold (every other file, and the
/// `_default` site's pack, is always fetched).
fn evictable(name: &str) -> bool {
    name.ends_with(".pack") && name != "_default.pack"
}

/// What `name` in the prefix is to the folder of sites: a site's file, or
/// nothing (anything else, and anything in a deeper folder, is ignored).
fn site_file(name: &str) -> bool {
    !name.contains('/')
        && EXTENSIONS
            .iter()
            .any(|extension| site_name(name.as_ref(), extension).is_some())
}

/// `interval` give or take 20 %, at random.
pub fn jittered(interval: Duration) -> Duration {
    let mut random = [0u8; 2];
    let _ = rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty());
    // 0..=65535 onto 0.8..=1.2.
    let factor = 0.8 + 0.4 * f64::from(u16::from_le_bytes(random)) / 65535.0;
    interval.mul_f64(factor)
}

/// The mirror's memory: what the cache holds, and the objects refused
/// (not fetched again, nor said again, until they change).
struct Mirror {
    url: StoreUrl,
    cache: PathBuf,
    client: client::Client,
    state: State,
    held: BTreeMap<String, Object>,
    refused: BTreeMap<String, (String, u64)>,
    /// The objects (name, ETag) whose fetch failed, said once each.
    failing: std::collections::BTreeSet<(String, String)>,
    /// Whether the cache was cleared of what a previous run left that the
    /// bucket no longer holds (at the first listing that succeeds).
    swept: bool,
    /// `--cache-size`.
    limit: Option<u64>,
    /// The site files of the last listing, by name.
    listed: BTreeMap<String, ObjectMeta>,
    /// The host list last written.
    hosts_written: Option<Vec<(String, u64)>>,
    /// When each pack was last used (Unix ms), as the server says.
    used: HashMap<String, u64>,
    /// Fetches the server asked for, first come first served, and the
    /// others (what a listing found changed).
    asked: VecDeque<String>,
    background: VecDeque<String>,
    /// Fetches in flight: the bytes each will add.
    in_flight: BTreeMap<String, u64>,
    /// Fetches in flight at most.
    parallel: usize,
    /// The packs too large for the cache, said once each.
    too_large: BTreeSet<String>,
    /// The end of the last listing, written to the state file once its
    /// fetches are done.
    listing_done: Option<u64>,
    /// When the listing under way (or the last one) began: its duration
    /// goes to the state file (`kiln status`).
    listing_started: Instant,
}

/// A fetch in flight.
type Fetching = Pin<Box<dyn Future<Output = Fetched>>>;

/// A fetch ended.
struct Fetched {
    name: String,
    meta: ObjectMeta,
    asked: bool,
    result: Result<u64, Failure>,
    elapsed: Duration,
}

/// Runs `kiln store sync` until its standard input closes.
pub fn run(args: SyncArgs) -> anyhow::Result<()> {
    let url = StoreUrl::parse_folder(&args.url).map_err(|e| anyhow!(e))?;
    if !(args.sync_interval.is_finite() && args.sync_interval >= 0.1) {
        anyhow::bail!(
            "--sync-interval must be at least 0.1 s, not {}",
            args.sync_interval
        );
    }
    let interval = Duration::from_secs_f64(args.sync_interval);
    if !args.worker {
        // What every worker would refuse is refused here, once, rather
        // than by a worker restarted for ever.
        client::connect(&url, &args.endpoint)?;
        return super::supervisor::run(&args);
    }
    let parent = rustix::process::getppid();
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
        .map_err(|e| anyhow!("cannot ask for the parent's death signal: {e}"))?;
    if rustix::process::getppid() != parent {
        return Ok(());
    }
    prepare(&args.cache_dir)?;
    let client = client::connect(&url, &args.endpoint)?;
    if !args.no_sandbox {
        super::sandbox::enter(&args.cache_dir, &client.endpoint)?;
    }
    let (sender, mut said) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || read_stdin(sender))
        .context("cannot start the store client's reader")?;
    let runtime = client::runtime()?;
    let previous = State::read(&args.cache_dir).unwrap_or_default();
    let held = previous
        .objects
        .into_iter()
        .filter(|o| args.cache_dir.join(&o.name).exists())
        .map(|o| (o.name.clone(), o))
        .collect();
    let mut mirror = Mirror {
        url,
        cache: args.cache_dir,
        client,
        state: State {
            cache_limit: args.cache_size.unwrap_or(0),
            ..State::default()
        },
        held,
        refused: BTreeMap::new(),
        swept: false,
        failing: std::collections::BTreeSet::new(),
        limit: args.cache_size,
        listed: BTreeMap::new(),
        hosts_written: None,
        used: HashMap::new(),
        asked: VecDeque::new(),
        background: VecDeque::new(),
        in_flight: BTreeMap::new(),
        too_large: BTreeSet::new(),
        parallel: usize::from(args.parallel_fetches),
        listing_done: None,
        listing_started: Instant::now(),
    };
    runtime.block_on(mirror.run(&mut said, interval));
    Ok(())
}

/// Makes the cache folder and its hidden folder, and clears the
/// temporary files a fetch cut short left there.
fn prepare(cache: &Path) -> anyhow::Result<()> {
    let hidden = cache.join(state::DIR);
    std::fs::create_dir_all(&hidden)
        .with_context(|| format!("--cache-dir: cannot create {}", hidden.display()))?;
    for entry in std::fs::read_dir(&hidden)?.flatten() {
        if entry.file_name().as_encoded_bytes().ends_with(b".part") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

impl Mirror {
    /// Lists, fetches and answers the server until it is gone.
    async fn run(&mut self, said: &mut mpsc::UnboundedReceiver<Said>, interval: Duration) {
        let mut fetching: FuturesUnordered<Fetching> = FuturesUnordered::new();
        let mut listing: Option<Pin<Box<dyn Future<Output = object_store::Result<ListResult>>>>> =
            None;
        let mut next_listing = tokio::time::Instant::now();
        // `list` said while a listing was under way: another one after it.
        let mut list_again = false;
        let mut first = true;
        loop {
            if listing.is_none() && tokio::time::Instant::now() >= next_listing {
                listing = Some(self.list());
                self.listing_started = Instant::now();
            }
            self.start_fetches(&mut fetching);
            if self.listing_done.is_some()
                && fetching.is_empty()
                && self.asked.is_empty()
                && self.background.is_empty()
            {
                self.state.listed_ms = self.listing_done.take().unwrap_or_default();
                self.write_state();
            }
            tokio::select! {
                biased;
                message = said.recv() => match message {
                    None | Some(Said::Gone) => return,
                    Some(Said::List) => {
                        next_listing = tokio::time::Instant::now();
                        list_again = listing.is_some();
                    }
                    Some(Said::Fetch(host)) => self.ask(host),
                    Some(Said::Used(host)) => {
                        self.used.insert(format!("{host}.pack"), now_ms());
                    }
                },
                Some(fetched) = fetching.next(), if !fetching.is_empty() => {
                    let asked = fetched.asked;
                    self.finish(fetched);
                    if asked {
                        self.write_state();
                    }
                }
                listed = async { listing.as_mut().expect("listing").await }, if listing.is_some() => {
                    listing = None;
                    self.listed(listed, first);
                    first = false;
                    next_listing = tokio::time::Instant::now();
                    if !std::mem::take(&mut list_again) {
                        next_listing += jittered(interval);
                    }
                }
                () = tokio::time::sleep_until(next_listing), if listing.is_none() => {}
            }
        }
    }

    /// A listing of the prefix, as a future that owns what it needs.
    fn list(&self) -> Pin<Box<dyn Future<Output = object_store::Result<ListResult>>>> {
        let store = Arc::clone(&self.client.store);
        let prefix = self.url.prefix.trim_end_matches('/').to_string();
        Box::pin(async move {
            let prefix = ObjectPath::from(prefix.as_str());
            let prefix = (!prefix.as_ref().is_empty()).then_some(&prefix);
            store.list_with_delimiter(prefix).await
        })
    }

    /// What a listing found: the store up or down, the cache brought in
    /// line (what the bucket no longer holds removed, what changed
    /// queued), the host list written.
    fn listed(&mut self, listed: object_store::Result<ListResult>, first: bool) {
        let now = now_ms();
        match listed {
            Err(e) => {
                if self.state.up || first {
                    tracing::error!(
                        "store down: cannot list {} ({}): {}; serving the {} cached files until it is back",
                        self.url,
                        self.client.place,
                        client::one_line(&e),
                        self.held.len()
                    );
                    self.state.since_ms = now;
                }
                self.state.up = false;
            }
            Ok(listing) => {
                if !self.state.up {
                    if !first {
                        tracing::info!(
                            "store back: listed {} after {} s down",
                            self.url,
                            now.saturating_sub(self.state.since_ms) / 1000
                        );
                    }
                    self.state.since_ms = now;
                }
                self.state.up = true;
                if !self.swept {
                    self.sweep(&listing.objects);
                }
                self.apply(&listing.objects);
                self.write_hosts();
            }
        }
        self.listing_done = Some(now_ms());
        self.state.listing_ms = self.listing_started.elapsed().as_millis() as u64;
        self.state.url = self.url.to_string();
        self.state.place.clone_from(&self.client.place);
    }

    /// Writes the state file (what the cache holds now).
    fn write_state(&mut self) {
        self.state.objects = self.held.values().cloned().collect();
        self.state.cache_bytes = self.held_bytes();
        if let Err(e) = self.state.write(&self.cache) {
            tracing::warn!("cannot write {}: {e}", state::path(&self.cache).display());
        }
    }

    /// Writes the host list when the listing changed it.
    fn write_hosts(&mut self) {
        let hosts: Vec<(String, u64)> = self
            .listed
            .iter()
            .filter_map(|(name, meta)| Some((name.strip_suffix(".pack")?.to_string(), meta.size)))
            .collect();
        if self.hosts_written.as_ref() == Some(&hosts) {
            return;
        }
        let written = state::write_hosts(
            &self.cache,
            hosts.iter().map(|(host, size)| (host.as_str(), *size)),
        );
        match written {
            Ok(()) => self.hosts_written = Some(hosts),
            Err(e) => tracing::warn!(
                "cannot write {}: {e}",
                state::hosts_path(&self.cache).display()
            ),
        }
    }

    /// The bytes the cache holds.
    fn held_bytes(&self) -> u64 {
        self.held.values().map(|o| o.size).sum()
    }

    /// Removes the site files of the cache that neither the state file
    /// accounts for nor the bucket holds: left by a run whose state was
    /// lost, or deleted from the bucket while no worker ran. (Those the
    /// state accounts for are handled by `apply`.)
    fn sweep(&mut self, objects: &[ObjectMeta]) {
        self.swept = true;
        let listed: std::collections::BTreeSet<String> = objects
            .iter()
            .filter_map(|m| m.location.filename())
            .map(str::to_ascii_lowercase)
            .collect();
        let Ok(entries) = std::fs::read_dir(&self.cache) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if site_file(&name) && !self.held.contains_key(&name) && !listed.contains(&name) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => tracing::info!("store: {name} is not in {}: removed", self.url),
                    Err(e) => tracing::warn!("store: cannot remove {name}: {e}"),
                }
            }
        }
    }

    /// Brings the cache in line with a listing: removes what the bucket
    /// no longer holds, queues what changed.
    fn apply(&mut self, objects: &[ObjectMeta]) {
        let mut listed = BTreeMap::new();
        for meta in objects {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            if site_file(name) {
                listed.insert(name.to_ascii_lowercase(), meta.clone());
            }
        }
        let gone: Vec<String> = self
            .held
            .keys()
            .filter(|name| !listed.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            match std::fs::remove_file(self.cache.join(&name)) {
                Ok(()) => tracing::info!("store: {name} deleted from {}: removed", self.url),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("store: cannot remove {name}: {e}"),
            }
            self.held.remove(&name);
        }
        self.refused.retain(|name, _| listed.contains_key(name));
        self.used.retain(|name, _| listed.contains_key(name));
        self.listed = listed;
        // Keys before certificates: a certificate found has its key.
        let mut changed: Vec<String> = self
            .listed
            .keys()
            .filter(|name| self.changed(name))
            .cloned()
            .collect();
        changed.sort_by_key(|name| !name.ends_with(".key"));
        self.background = changed.into();
    }

    /// Whether the listed `name` is not in the cache as listed (nor
    /// refused as listed).
    fn changed(&self, name: &str) -> bool {
        let Some(meta) = self.listed.get(name) else {
            return false;
        };
        let etag = meta.e_tag.clone().unwrap_or_default().replace(' ', "_");
        let known = |e: &str, s: u64| e == etag && s == meta.size;
        !self.held.get(name).is_some_and(|o| known(&o.etag, o.size))
            && !self
                .refused
                .get(name)
                .is_some_and(|(e, s)| known(&e.replace(' ', "_"), *s))
    }

    /// The server asks for `host`: a request waits for it.
    fn ask(&mut self, host: String) {
        let name = format!("{host}.pack");
        self.used.insert(name.clone(), now_ms());
        if self.listed.contains_key(&name)
            && !self.in_flight.contains_key(&name)
            && !self.asked.contains(&name)
            && self.changed(&name)
        {
            self.asked.push_back(name);
        }
    }

    /// Starts what is queued, asked fetches first, while fewer than
    /// `PARALLEL_FETCHES` are in flight and the cache has room.
    fn start_fetches(&mut self, fetching: &mut FuturesUnordered<Fetching>) {
        // What the cache holds and will hold, counted once: a listing may
        // queue many packs that do not fit.
        let mut used = self.held_bytes() + self.in_flight.values().sum::<u64>();
        while self.in_flight.len() < self.parallel {
            let (name, asked) = match self.asked.pop_front() {
                Some(name) => (name, true),
                None => match self.background.pop_front() {
                    Some(name) => (name, false),
                    None => return,
                },
            };
            if self.in_flight.contains_key(&name) || !self.changed(&name) {
                continue;
            }
            let Some(meta) = self.listed.get(&name).cloned() else {
                continue;
            };
            // A new version of a cached pack replaces it, as one asked for.
            if !self.room_for(
                &name,
                meta.size,
                asked || self.held.contains_key(&name),
                &mut used,
            ) {
                // Room taken by fetches in flight: an asked fetch waits
                // for them (it starts as one ends), first in line.
                if asked && !self.in_flight.is_empty() && !self.too_large.contains(&name) {
                    self.asked.push_front(name);
                    return;
                }
                continue;
            }
            used += meta.size;
            self.in_flight.insert(name.clone(), meta.size);
            let store = Arc::clone(&self.client.store);
            let cache = self.cache.clone();
            fetching.push(Box::pin(async move {
                let started = Instant::now();
                let result = fetch(&*store, &cache, &name, &meta).await;
                Fetched {
                    name,
                    meta,
                    asked,
                    result,
                    elapsed: started.elapsed(),
                }
            }));
        }
    }

    /// Whether `size` more bytes for `name` fit the cache, which holds
    /// or will hold `used`; with `evict`, the least recently used packs
    /// are removed until they do (`used` counts them off).
    fn room_for(&mut self, name: &str, size: u64, evict: bool, used: &mut u64) -> bool {
        let Some(limit) = self.limit.filter(|_| evictable(name)) else {
            return true;
        };
        if size > limit {
            if self.too_large.insert(name.to_string()) {
                tracing::warn!(
                    "store: {name} ({size} bytes) is larger than --cache-size ({limit} bytes): not served"
                );
            }
            return false;
        }
        // A new version replaces the pack it is of.
        let replaced = self.held.get(name).map_or(0, |o| o.size);
        let fits = |used: u64| used.saturating_sub(replaced) + size <= limit;
        if fits(*used) {
            return true;
        }
        if !evict {
            return false;
        }
        let mut victims: Vec<(u64, String)> = self
            .held
            .keys()
            .filter(|held| {
                evictable(held) && held.as_str() != name && !self.in_flight.contains_key(*held)
            })
            .map(|held| (self.used.get(held).copied().unwrap_or(0), held.clone()))
            .collect();
        victims.sort();
        for (_, victim) in victims {
            if fits(*used) {
                break;
            }
            match std::fs::remove_file(self.cache.join(&victim)) {
                Ok(()) => {
                    tracing::info!("store: evicted {victim} (least recently used) for {name}");
                    if let Some(o) = self.held.remove(&victim) {
                        *used = used.saturating_sub(o.size);
                    }
                    self.state.evictions += 1;
                }
                Err(e) => tracing::warn!("store: cannot remove {victim}: {e}"),
            }
        }
        fits(*used)
    }

    /// A fetch ended: the object is in the cache, or said in one line.
    fn finish(&mut self, fetched: Fetched) {
        let Fetched {
            name,
            meta,
            asked,
            result,
            elapsed,
        } = fetched;
        self.in_flight.remove(&name);
        let etag = meta.e_tag.clone().unwrap_or_default();
        if result.is_err() {
            self.state.fetch_errors += 1;
        }
        match result {
            Ok(bytes) => {
                let fetch_ms = elapsed.as_millis() as u64;
                tracing::info!(
                    "store: fetched {name} ({bytes} bytes, ETag {etag}) in {fetch_ms} ms{}",
                    if asked { ", asked for" } else { "" }
                );
                if asked {
                    self.state.cold_fetches += 1;
                    self.state.cold_fetch_ms += fetch_ms;
                    self.state.cold_fetch_bytes += bytes;
                }
                self.used.entry(name.clone()).or_insert_with(now_ms);
                self.failing.retain(|(failed, _)| *failed != name);
                self.held.insert(
                    name.clone(),
                    Object {
                        name,
                        etag: etag.replace(' ', "_"),
                        size: meta.size,
                        fetch_ms,
                        fetched_bytes: bytes,
                        fetched_at_ms: now_ms(),
                    },
                );
            }
            Err(Failure::Fetch(why)) => {
                // Tried again at each listing, said once per version.
                if self.failing.insert((name.clone(), etag.clone())) {
                    tracing::warn!(
                        "store: cannot fetch {}{} (ETag {etag}): {why}; trying again at each listing",
                        self.url,
                        name
                    );
                }
            }
            Err(Failure::Refused(why)) => {
                let kept = if self.held.contains_key(&name) {
                    "the previous one keeps serving"
                } else {
                    "not served"
                };
                tracing::error!(
                    "store: refused {}{} (ETag {etag}): {why}; {kept}",
                    self.url,
                    name
                );
                self.refused.insert(name, (etag, meta.size));
            }
        }
    }
}

/// Fetches one object into the cache: downloaded to a temporary file,
/// checked, renamed in; its length.
async fn fetch(
    store: &dyn ObjectStore,
    cache: &Path,
    name: &str,
    meta: &ObjectMeta,
) -> Result<u64, Failure> {
    let temp = cache.join(state::DIR).join(format!("{name}.part"));
    let checked = match download(store, meta, &temp).await {
        Err(why) => Err(Failure::Fetch(why)),
        Ok((file, bytes)) => {
            // The disk's part on a blocking thread: the fsyncs and checks
            // of the fetches in flight overlap, as their downloads do.
            let (name, cache, part) = (name.to_string(), cache.to_path_buf(), temp.clone());
            let listed = meta.size;
            tokio::task::spawn_blocking(move || settle(file, &name, &cache, &part, listed, bytes))
                .await
                .unwrap_or_else(|e| Err(Failure::Fetch(format!("its check stopped: {e}"))))
        }
    };
    if checked.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    checked
}

/// Streams an object into `temp` (not yet synced); the file and its
/// length.
async fn download(
    store: &dyn ObjectStore,
    meta: &ObjectMeta,
    temp: &Path,
) -> Result<(std::fs::File, u64), String> {
    let got = store
        .get(&meta.location)
        .await
        .map_err(|e| client::one_line(&e))?;
    let mut file = std::fs::File::create(temp)
        .map_err(|e| format!("cannot create {}: {e}", temp.display()))?;
    let mut stream = got.into_stream();
    let mut bytes = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| client::one_line(&e))?;
        file.write_all(&chunk)
            .map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
        bytes += chunk.len() as u64;
    }
    Ok((file, bytes))
}

/// A downloaded file fsynced, checked and renamed into the cache; its
/// length.
fn settle(
    file: std::fs::File,
    name: &str,
    cache: &Path,
    temp: &Path,
    listed: u64,
    bytes: u64,
) -> Result<u64, Failure> {
    file.sync_all()
        .map_err(|e| Failure::Fetch(format!("cannot sync {}: {e}", temp.display())))?;
    drop(file);
    check(name, temp, listed, bytes).map_err(Failure::Refused)?;
    std::fs::rename(temp, cache.join(name))
        .map_err(|e| Failure::Fetch(format!("cannot rename it into {}: {e}", cache.display())))?;
    Ok(bytes)
}

/// Why an object is not in the cache.
enum Failure {
    /// Not fetched (the store or the disk failed): tried again.
    Fetch(String),
    /// Fetched and found wrong: refused until the object changes.
    Refused(String),
}

/// Checks a fetched file before it is renamed in: its length as listed,
/// and a pack's checksums.
fn check(name: &str, temp: &Path, listed: u64, bytes: u64) -> Result<(), String> {
    if bytes != listed {
        return Err(format!("{bytes} bytes fetched of the {listed} listed"));
    }
    if name.ends_with(".pack") {
        let pack = crate::pack::Pack::open(temp).map_err(|e| format!("not a pack: {e}"))?;
        crate::pack::verify::verify(&pack).map_err(|e| format!("a corrupt pack: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_folder_of_sites_files_are_mirrored() {
        for (name, mirrored) in [
            ("example.com.pack", true),
            ("_default.pack", true),
            ("example.com.crt", true),
            ("example.com.key", true),
            ("notes.txt", false),
            (".hidden.pack", false),
            ("example.com.pack.bak", false),
            ("deeper/example.com.pack", false),
        ] {
            assert_eq!(site_file(name), mirrored, "{name}");
        }
    }

    #[test]
    fn the_server_says_one_thing_a_line() {
        assert_eq!(Said::parse("list"), Some(Said::List));
        assert_eq!(
            Said::parse("fetch Example.COM\n"),
            Some(Said::Fetch("example.com".into()))
        );
        assert_eq!(
            Said::parse("used a.example"),
            Some(Said::Used("a.example".into()))
        );
        assert_eq!(Said::parse("fetch "), None);
        assert_eq!(Said::parse("fetch ../x"), None);
        assert_eq!(Said::parse("what"), None);
    }

    /// A mirror of a bucket of packs `listed` (name, size) holding `held`
    /// (name, size, last used), in a cache of `limit` bytes.
    fn mirror(
        cache: &Path,
        limit: u64,
        listed: &[(&str, u64)],
        held: &[(&str, u64, u64)],
    ) -> Mirror {
        let meta = |name: &str, size: u64| ObjectMeta {
            location: ObjectPath::from(format!("prod/{name}")),
            last_modified: Default::default(),
            size,
            e_tag: Some(format!("\"{name}\"")),
            version: None,
        };
        for (name, _, _) in held {
            std::fs::write(cache.join(name), b"pack").unwrap();
        }
        Mirror {
            url: StoreUrl::parse_folder("s3://sites/prod/").unwrap(),
            cache: cache.to_path_buf(),
            client: client::Client {
                store: Arc::new(object_store::memory::InMemory::new()),
                place: "memory".into(),
                endpoint: EndpointArgs::default(),
            },
            state: State::default(),
            held: held
                .iter()
                .map(|(name, size, _)| {
                    let object = Object {
                        name: name.to_string(),
                        etag: format!("\"{name}\""),
                        size: *size,
                        ..Object::default()
                    };
                    (name.to_string(), object)
                })
                .collect(),
            refused: BTreeMap::new(),
            failing: BTreeSet::new(),
            swept: true,
            limit: Some(limit),
            listed: listed
                .iter()
                .map(|(name, size)| (name.to_string(), meta(name, *size)))
                .collect(),
            hosts_written: None,
            used: held
                .iter()
                .map(|(name, _, used)| (name.to_string(), *used))
                .collect(),
            asked: VecDeque::new(),
            background: VecDeque::new(),
            in_flight: BTreeMap::new(),
            too_large: BTreeSet::new(),
            parallel: PARALLEL_FETCHES,
            listing_done: None,
            listing_started: Instant::now(),
        }
    }

    #[test]
    fn an_asked_fetch_evicts_the_least_recently_used_packs_and_waits_for_those_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let listed = [
            ("a.test.pack", 10),
            ("b.test.pack", 10),
            ("c.test.pack", 10),
            ("d.test.pack", 10),
        ];
        // a used last, b before it: b goes first.
        let mut m = mirror(
            dir.path(),
            25,
            &listed,
            &[("a.test.pack", 10, 200), ("b.test.pack", 10, 100)],
        );
        let mut fetching = FuturesUnordered::new();
        m.ask("c.test".into());
        m.start_fetches(&mut fetching);
        assert_eq!(fetching.len(), 1);
        assert!(m.in_flight.contains_key("c.test.pack"));
        assert!(!dir.path().join("b.test.pack").exists(), "b evicted");
        assert!(dir.path().join("a.test.pack").exists(), "a kept");
        assert_eq!(m.state.evictions, 1);
        // d needs room that only c's end (in flight) can make after a
        // is evicted: it waits, first in line, not dropped.
        m.limit = Some(15);
        m.ask("d.test".into());
        m.start_fetches(&mut fetching);
        assert_eq!(fetching.len(), 1);
        assert_eq!(m.asked, ["d.test.pack"]);
        assert!(!dir.path().join("a.test.pack").exists(), "a evicted");
        // A host the bucket does not hold is not asked for.
        m.ask("nowhere.test".into());
        assert_eq!(m.asked, ["d.test.pack"]);
    }

    #[test]
    fn background_fetches_fill_the_cache_without_evicting() {
        let dir = tempfile::tempdir().unwrap();
        let listed = [
            ("a.test.pack", 10),
            ("b.test.pack", 10),
            ("c.test.pack", 10),
            ("_default.pack", 10),
        ];
        let mut m = mirror(dir.path(), 35, &listed, &[("a.test.pack", 10, 1)]);
        m.background = ["_default.pack", "b.test.pack", "c.test.pack"]
            .map(String::from)
            .into();
        let mut fetching = FuturesUnordered::new();
        m.start_fetches(&mut fetching);
        // `_default` always (its bytes count), b while it fits (30 of
        // 35), not c.
        assert!(m.in_flight.contains_key("_default.pack"));
        assert!(m.in_flight.contains_key("b.test.pack"));
        assert!(!m.in_flight.contains_key("c.test.pack"), "c would not fit");
        assert!(dir.path().join("a.test.pack").exists(), "nothing evicted");
        assert!(m.background.is_empty());
    }

    #[test]
    fn only_packs_of_named_sites_may_be_cold() {
        assert!(evictable("example.com.pack"));
        assert!(!evictable("_default.pack"));
        assert!(!evictable("example.com.crt"));
        assert!(!evictable("example.com.key"));
    }

    #[test]
    fn the_interval_is_jittered_within_a_fifth() {
        let interval = Duration::from_secs(5);
        for _ in 0..100 {
            let d = jittered(interval);
            assert!(
                d >= Duration::from_secs(4) && d <= Duration::from_secs(6),
                "{d:?}"
            );
        }
    }
}
