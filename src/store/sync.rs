//! `kiln store sync`: the child `kiln serve s3://…` starts before its
//! sandbox. It lists the prefix every `--sync-interval` (jittered by
//! ±20 %, so that a fleet does not list in step) and at once when a byte
//! arrives on its standard input (the server's SIGHUP); fetches each
//! `HOST.pack`, `HOST.crt` and `HOST.key` whose ETag or size changed to a
//! temporary file in the cache folder, verifies a pack's checksums,
//! fsyncs and renames it in (the server reloads it as any pack replaced
//! in a folder of sites); removes from the cache what the bucket no
//! longer holds; and writes the state file ([`super::state`]). It ends
//! when its standard input closes: the server is gone. Run without
//! `--worker`, it is the supervisor that restarts this worker
//! ([`super::supervisor`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use futures::StreamExt as _;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore as _};

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
    /// Enter no sandbox (as `kiln serve --no-sandbox`).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Be the worker the supervisor restarts, not the supervisor.
    #[arg(long, hide = true)]
    pub worker: bool,
}

/// The files of a folder of sites the store may hold.
const EXTENSIONS: [&str; 3] = ["pack", "crt", "key"];

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
        state: State::default(),
        held,
        refused: BTreeMap::new(),
        swept: false,
        failing: std::collections::BTreeSet::new(),
    };
    let mut first = true;
    loop {
        runtime.block_on(mirror.sync(first));
        first = false;
        if !wait_for_wake(jittered(interval)) {
            return Ok(());
        }
    }
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

/// Waits `timeout` or until a byte arrives on standard input; `false`
/// when standard input closed (the server is gone).
fn wait_for_wake(timeout: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let stdin = std::io::stdin();
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
        let timespec = Timespec::try_from(left).ok();
        match rustix::event::poll(&mut fds, timespec.as_ref()) {
            Ok(0) => return true,
            Ok(_) => {
                let mut buf = [0u8; 64];
                return match rustix::io::read(stdin.as_fd(), &mut buf) {
                    Ok(0) => false,
                    Ok(_) => true,
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => true,
                    Err(_) => false,
                };
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

impl Mirror {
    /// One listing and what follows it; the state file written at the end.
    async fn sync(&mut self, first: bool) {
        let started = Instant::now();
        let prefix = ObjectPath::from(self.url.prefix.trim_end_matches('/'));
        let prefix = (!self.url.prefix.is_empty()).then_some(&prefix);
        let listed = self.client.store.list_with_delimiter(prefix).await;
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
                self.apply(&listing.objects).await;
            }
        }
        self.state.listed_ms = now_ms();
        self.state.listing_ms = started.elapsed().as_millis() as u64;
        self.state.url = self.url.to_string();
        self.state.place.clone_from(&self.client.place);
        self.state.objects = self.held.values().cloned().collect();
        if let Err(e) = self.state.write(&self.cache) {
            tracing::warn!("cannot write {}: {e}", state::path(&self.cache).display());
        }
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

    /// Brings the cache in line with a listing.
    async fn apply(&mut self, objects: &[ObjectMeta]) {
        let mut listed = BTreeMap::new();
        for meta in objects {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            if site_file(name) {
                listed.insert(name.to_ascii_lowercase(), meta);
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
        // Keys before certificates: a certificate found has its key.
        let mut changed: Vec<(&String, &&ObjectMeta)> = listed
            .iter()
            .filter(|(name, meta)| {
                let etag = meta.e_tag.clone().unwrap_or_default();
                let known = |(e, s): (&String, u64)| *e == etag && s == meta.size;
                !self
                    .held
                    .get(*name)
                    .is_some_and(|o| known((&o.etag, o.size)))
                    && !self.refused.get(*name).is_some_and(|(e, s)| known((e, *s)))
            })
            .collect();
        changed.sort_by_key(|(name, _)| !name.ends_with(".key"));
        for (name, meta) in changed {
            self.fetch(name, meta).await;
        }
    }

    /// Fetches one object into the cache, or refuses it in one line.
    async fn fetch(&mut self, name: &str, meta: &ObjectMeta) {
        let etag = meta.e_tag.clone().unwrap_or_default();
        let started = Instant::now();
        let temp = self.cache.join(state::DIR).join(format!("{name}.part"));
        let checked = match self.download(meta, &temp).await {
            Err(why) => Err(Failure::Fetch(why)),
            Ok(bytes) => check(name, &temp, meta.size, bytes)
                .map_err(Failure::Refused)
                .and_then(|()| {
                    std::fs::rename(&temp, self.cache.join(name)).map_err(|e| {
                        Failure::Fetch(format!(
                            "cannot rename it into {}: {e}",
                            self.cache.display()
                        ))
                    })
                })
                .map(|()| bytes),
        };
        if checked.is_err() {
            let _ = std::fs::remove_file(&temp);
            self.state.fetch_errors += 1;
        }
        match checked {
            Ok(bytes) => {
                let fetch_ms = started.elapsed().as_millis() as u64;
                tracing::info!(
                    "store: fetched {name} ({bytes} bytes, ETag {etag}) in {fetch_ms} ms"
                );
                self.failing.retain(|(failed, _)| failed != name);
                self.held.insert(
                    name.to_string(),
                    Object {
                        name: name.to_string(),
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
                if self.failing.insert((name.to_string(), etag.clone())) {
                    tracing::warn!(
                        "store: cannot fetch {}{} (ETag {etag}): {why}; trying again at each listing",
                        self.url,
                        name
                    );
                }
            }
            Err(Failure::Refused(why)) => {
                let kept = if self.held.contains_key(name) {
                    "the previous one keeps serving"
                } else {
                    "not served"
                };
                tracing::error!(
                    "store: refused {}{} (ETag {etag}): {why}; {kept}",
                    self.url,
                    name
                );
                self.refused.insert(name.to_string(), (etag, meta.size));
            }
        }
    }

    /// Streams an object into `temp`, fsynced; its length.
    async fn download(&self, meta: &ObjectMeta, temp: &Path) -> Result<u64, String> {
        let got = self
            .client
            .store
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
        file.sync_all()
            .map_err(|e| format!("cannot sync {}: {e}", temp.display()))?;
        Ok(bytes)
    }
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
