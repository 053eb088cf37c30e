//! `--acme-dir s3://BUCKET/PREFIX/`: the ACME state in a bucket, shared
//! by every node of a fleet (`docs/fleet.md`). The layout under the
//! prefix is the state folder's ([`super::layout`]); the worker keeps a
//! local mirror of it (`--acme-cache-dir`), which the server reads as it
//! reads a local state folder, and this module keeps the two in step:
//!
//! - what the worker writes (account, challenge files, pairs, status) is
//!   written to the mirror, then uploaded;
//! - what other nodes write is downloaded: the challenge folders are
//!   listed every [`CHALLENGE_POLL`] (so that whichever node the CA
//!   reaches answers a challenge another node's client wrote), the pairs
//!   every [`PAIR_POLL`], and a name's pair again under its lock before
//!   an order (a pair another node obtained a moment ago is not ordered
//!   twice);
//! - one client orders a name at a time: `locks/NAME.lock`, made by a
//!   conditional create (`If-None-Match: *`), holding its owner and an
//!   expiry the holder pushes forward by a conditional update on its
//!   ETag ([`HEARTBEAT`]); an expired lock is taken over by a conditional
//!   update on the ETag read (of two takers, one wins); released by
//!   deletion.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use futures::TryStreamExt as _;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::lock::{HEARTBEAT, STALE_AFTER, owner_line};
use super::store::{self, unix_now};
use crate::store::client::{self as store_client, one_line};
use crate::store::{EndpointArgs, StoreUrl};

/// How often the challenge folders are listed.
pub const CHALLENGE_POLL: Duration = Duration::from_secs(1);
/// How often the pairs are listed.
const PAIR_POLL: Duration = Duration::from_secs(5);
/// The longest wait between two uploads of a new pair.
const PATIENT_UPLOAD: Duration = Duration::from_secs(32);

/// The bucket and the local mirror.
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    url: StoreUrl,
    /// Where the bucket is, for messages (`sites at http://…`).
    place: String,
    /// The local mirror.
    local: PathBuf,
    /// The ETag of each object the mirror holds as the bucket does (by
    /// its path under the prefix): what was downloaded or uploaded.
    known: Mutex<HashMap<String, String>>,
}

/// What [`Bucket::take_lock`] found.
pub enum Taken {
    /// The lock is ours until dropped.
    Held(Lock),
    /// Another client holds it; its owner.
    Busy(String),
}

/// A name's lock in the bucket, refreshed while held, deleted on drop.
pub struct Lock {
    bucket: Arc<Bucket>,
    rel: String,
    etag: Arc<Mutex<String>>,
    heartbeat: tokio::task::JoinHandle<()>,
}

/// The text of a lock object.
fn lock_text(owner: &str) -> String {
    serde_json::json!({ "owner": owner.trim(), "expires": unix_now() + STALE_AFTER.as_secs() as i64 })
        .to_string()
}

/// A lock object's owner and expiry.
fn read_lock(bytes: &[u8]) -> (String, i64) {
    let v: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    (
        v["owner"]
            .as_str()
            .unwrap_or("(unreadable lock)")
            .to_owned(),
        v["expires"].as_i64().unwrap_or(0),
    )
}

/// Whether a path under the prefix is one the mirror keeps, by folder:
/// its file name checked as the server checks it (a domain, a token).
fn mirrored(rel: &str) -> bool {
    let Some((folder, file)) = rel.rsplit_once('/') else {
        return false;
    };
    let domain = |stem: Option<&str>| {
        stem.is_some_and(|s| super::command::domain_name(s).is_ok_and(|n| n == s))
    };
    match folder {
        "certs" => domain(
            file.strip_suffix(".crt")
                .or_else(|| file.strip_suffix(".key")),
        ),
        "challenges/tls-alpn-01" => domain(file.strip_suffix(".pem")),
        "challenges/http-01" => {
            !file.is_empty()
                && file
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        }
        _ => false,
    }
}

/// The mode a mirrored file is written with: keys and TLS-ALPN-01
/// certificates (which hold a key) for the owner alone.
fn mode_of(rel: &str) -> u32 {
    if rel.ends_with(".key") || rel.ends_with(".pem") || rel.starts_with("accounts/") {
        0o600
    } else {
        0o644
    }
}

impl Bucket {
    /// Connects (no request yet) to the bucket mirrored into `local`.
    pub fn connect(url: StoreUrl, endpoint: &EndpointArgs, local: &Path) -> anyhow::Result<Bucket> {
        let client = store_client::connect(&url, endpoint)?;
        Ok(Bucket {
            store: client.store,
            url,
            place: client.place,
            local: local.to_path_buf(),
            known: Mutex::new(HashMap::new()),
        })
    }

    fn key(&self, rel: &str) -> ObjectPath {
        ObjectPath::from(self.url.key(rel))
    }

    /// An error of the store as one line naming the object.
    fn error(&self, rel: &str, e: &object_store::Error) -> anyhow::Error {
        anyhow!("{}{rel} ({}): {}", self.url, self.place, one_line(e))
    }

    /// Uploads `bytes` as `rel` (the mirror holds them already).
    pub async fn put(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let result = self
            .store
            .put(&self.key(rel), PutPayload::from(bytes.to_vec()))
            .await
            .map_err(|e| self.error(rel, &e))?;
        if let Some(etag) = result.e_tag {
            self.known.lock().unwrap().insert(rel.to_owned(), etag);
        }
        Ok(())
    }

    /// Uploads `bytes` as `rel`, trying again for about a minute (1 s,
    /// doubling): for a new pair, which the other nodes would otherwise
    /// never get from this one.
    pub async fn put_patiently(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let mut wait = Duration::from_secs(1);
        loop {
            match self.put(rel, bytes).await {
                Ok(()) => return Ok(()),
                Err(e) if wait <= PATIENT_UPLOAD => {
                    tracing::warn!("acme: {e:#}; trying again in {} s", wait.as_secs());
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Uploads `bytes` as `rel` unless an object is there: whether it was.
    pub async fn create(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<bool> {
        let options = PutOptions::from(PutMode::Create);
        match self
            .store
            .put_opts(&self.key(rel), PutPayload::from(bytes.to_vec()), options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.error(rel, &e)),
        }
    }

    /// The object `rel` and its ETag, or `None` when there is none.
    async fn get_with_etag(&self, rel: &str) -> anyhow::Result<Option<(Vec<u8>, String)>> {
        match self.store.get(&self.key(rel)).await {
            Ok(result) => {
                let etag = result.meta.e_tag.clone().unwrap_or_default();
                let bytes = result.bytes().await.map_err(|e| self.error(rel, &e))?;
                Ok(Some((bytes.to_vec(), etag)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(rel, &e)),
        }
    }

    /// The object `rel`, or `None` when there is none.
    pub async fn get(&self, rel: &str) -> anyhow::Result<Option<Vec<u8>>> {
        Ok(self.get_with_etag(rel).await?.map(|(bytes, _)| bytes))
    }

    /// Deletes `rel`; one already gone is no error.
    pub async fn delete(&self, rel: &str) -> anyhow::Result<()> {
        self.known.lock().unwrap().remove(rel);
        match self.store.delete(&self.key(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(rel, &e)),
        }
    }

    /// Deletes `rel` in the background (from a `Drop`).
    pub fn delete_later(self: &Arc<Self>, rel: String) {
        let bucket = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = bucket.delete(&rel).await {
                tracing::warn!("acme: {e:#}");
            }
        });
    }

    /// Writes `bytes` to the mirror as `rel`, then uploads them.
    pub async fn write(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<()> {
        store::write_atomically(&self.local.join(rel), bytes, mode_of(rel))?;
        self.put(rel, bytes).await
    }

    /// Brings the mirror's pair of `name` in line with the bucket's: both
    /// objects fetched, the key checked against the certificate, the key
    /// renamed in first. A pair the bucket does not hold (or holds half of,
    /// being written) leaves the mirror as it is.
    pub async fn fetch_pair(&self, name: &str) -> anyhow::Result<()> {
        let (crt, key) = (format!("certs/{name}.crt"), format!("certs/{name}.key"));
        let Some((chain, chain_etag)) = self.get_with_etag(&crt).await? else {
            return Ok(());
        };
        let Some((pem, key_etag)) = self.get_with_etag(&key).await? else {
            return Ok(());
        };
        if !key_matches(&chain, &pem) {
            // Another node is between its two uploads: the next look
            // finds the pair whole.
            return Ok(());
        }
        store::write_atomically(&self.local.join(&key), &pem, 0o600)?;
        store::write_atomically(&self.local.join(&crt), &chain, 0o644)?;
        let mut known = self.known.lock().unwrap();
        known.insert(key, key_etag);
        known.insert(crt, chain_etag);
        Ok(())
    }

    /// Lists `folder` (under the prefix): each mirrored object's path
    /// under the prefix and ETag.
    async fn list(&self, folder: &str) -> anyhow::Result<Vec<(String, String)>> {
        let objects: Vec<_> = self
            .store
            .list(Some(&self.key(folder)))
            .try_collect()
            .await
            .map_err(|e| self.error(folder, &e))?;
        Ok(objects
            .into_iter()
            .filter_map(|meta| {
                let rel = meta.location.as_ref().strip_prefix(&self.url.prefix)?;
                mirrored(rel).then(|| (rel.to_owned(), meta.e_tag.unwrap_or_default()))
            })
            .collect())
    }

    /// One look at the challenge folders: new or changed files downloaded
    /// into the mirror, those gone from the bucket removed from it.
    async fn sync_challenges(&self) -> anyhow::Result<()> {
        // Only what the mirror held before the listing can be gone from
        // it: a challenge this node uploads meanwhile is not listed yet.
        let held: Vec<String> = self
            .known
            .lock()
            .unwrap()
            .keys()
            .filter(|rel| rel.starts_with("challenges/"))
            .cloned()
            .collect();
        let listed = self.list("challenges/").await?;
        for (rel, etag) in &listed {
            if self.known.lock().unwrap().get(rel) == Some(etag) {
                continue;
            }
            if let Some((bytes, etag)) = self.get_with_etag(rel).await? {
                store::write_atomically(&self.local.join(rel), &bytes, mode_of(rel))?;
                self.known.lock().unwrap().insert(rel.clone(), etag);
            }
        }
        let gone = held
            .into_iter()
            .filter(|rel| !listed.iter().any(|(l, _)| l == rel));
        for rel in gone {
            self.known.lock().unwrap().remove(&rel);
            store::remove(&self.local.join(&rel));
        }
        Ok(())
    }

    /// One look at the pairs: each whose certificate or key changed
    /// fetched again.
    async fn sync_pairs(&self) -> anyhow::Result<()> {
        let listed = self.list("certs/").await?;
        let mut names: Vec<&str> = Vec::new();
        for (rel, etag) in &listed {
            if self.known.lock().unwrap().get(rel) == Some(etag) {
                continue;
            }
            let stem = rel.trim_start_matches("certs/");
            let name = stem
                .strip_suffix(".crt")
                .or_else(|| stem.strip_suffix(".key"))
                .unwrap_or(stem);
            if !names.contains(&name) {
                names.push(name);
            }
        }
        for name in names {
            self.fetch_pair(name).await?;
        }
        Ok(())
    }

    /// Keeps the mirror in step with the bucket until the worker ends;
    /// the store down is said once, and once when it is back.
    pub async fn keep_in_step(self: Arc<Self>) {
        let mut down = false;
        let mut ticks: u64 = 0;
        let every = (PAIR_POLL.as_millis() / CHALLENGE_POLL.as_millis()).max(1) as u64;
        loop {
            let mut result = self.sync_challenges().await;
            if result.is_ok() && ticks.is_multiple_of(every) {
                result = self.sync_pairs().await;
            }
            match result {
                Err(e) if !down => {
                    down = true;
                    tracing::warn!(
                        "acme: cannot bring {} in step with the bucket: {e:#}; trying again every {} s",
                        self.local.display(),
                        CHALLENGE_POLL.as_secs()
                    );
                }
                Ok(()) if down => {
                    down = false;
                    tracing::info!("acme: {} is in step with the bucket again", self.url);
                }
                _ => {}
            }
            ticks += 1;
            tokio::time::sleep(CHALLENGE_POLL).await;
        }
    }

    /// Tries to take the lock of `name`.
    pub async fn take_lock(self: &Arc<Self>, name: &str) -> anyhow::Result<Taken> {
        let rel = format!("locks/{name}.lock");
        let owner = owner_line();
        let path = self.key(&rel);
        let payload = || PutPayload::from(lock_text(&owner).into_bytes());
        let created = self
            .store
            .put_opts(&path, payload(), PutOptions::from(PutMode::Create))
            .await;
        let etag = match created {
            Ok(result) => result.e_tag,
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                let Some((bytes, etag)) = self.get_with_etag(&rel).await? else {
                    // Released between the two requests: the next look.
                    return Ok(Taken::Busy("(changing hands)".to_owned()));
                };
                let (holder, expires) = read_lock(&bytes);
                if expires > unix_now() {
                    return Ok(Taken::Busy(holder));
                }
                let update = PutMode::Update(UpdateVersion {
                    e_tag: Some(etag),
                    version: None,
                });
                match self
                    .store
                    .put_opts(&path, payload(), PutOptions::from(update))
                    .await
                {
                    Ok(result) => {
                        tracing::info!(
                            "acme: {name}: took over the lock of {holder:?} (expired {} s ago)",
                            unix_now() - expires
                        );
                        result.e_tag
                    }
                    Err(object_store::Error::Precondition { .. })
                    | Err(object_store::Error::NotFound { .. }) => {
                        return Ok(Taken::Busy("(taken over by another client)".to_owned()));
                    }
                    Err(e) => return Err(self.error(&rel, &e)),
                }
            }
            Err(e) => return Err(self.error(&rel, &e)).context("lock"),
        };
        let etag = Arc::new(Mutex::new(etag.unwrap_or_default()));
        let heartbeat = tokio::spawn(heartbeat(
            Arc::clone(self),
            rel.clone(),
            owner,
            Arc::clone(&etag),
        ));
        Ok(Taken::Held(Lock {
            bucket: Arc::clone(self),
            rel,
            etag,
            heartbeat,
        }))
    }
}

/// Pushes a held lock's expiry forward every [`HEARTBEAT`], by a
/// conditional update on the ETag it wrote last.
async fn heartbeat(bucket: Arc<Bucket>, rel: String, owner: String, etag: Arc<Mutex<String>>) {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        let update = PutMode::Update(UpdateVersion {
            e_tag: Some(etag.lock().unwrap().clone()),
            version: None,
        });
        let payload = PutPayload::from(lock_text(&owner).into_bytes());
        match bucket
            .store
            .put_opts(&bucket.key(&rel), payload, PutOptions::from(update))
            .await
        {
            Ok(result) => *etag.lock().unwrap() = result.e_tag.unwrap_or_default(),
            Err(e) => tracing::warn!("acme: lock heartbeat: {:#}", bucket.error(&rel, &e)),
        }
    }
}

impl Drop for Lock {
    /// Stops the heartbeat and deletes the lock, if it is still this one
    /// (the same ETag): the name is free at once rather than at expiry.
    fn drop(&mut self) {
        self.heartbeat.abort();
        let bucket = Arc::clone(&self.bucket);
        let rel = std::mem::take(&mut self.rel);
        let ours = self.etag.lock().unwrap().clone();
        tokio::spawn(async move {
            let still_ours = match bucket.store.head(&bucket.key(&rel)).await {
                Ok(meta) => meta.e_tag.as_deref() == Some(ours.as_str()),
                Err(_) => false,
            };
            if still_ours && let Err(e) = bucket.delete(&rel).await {
                tracing::warn!("acme: {e:#}");
            }
        });
    }
}

/// Whether the PEM key `key` is that of the chain's leaf.
fn key_matches(chain: &[u8], key: &[u8]) -> bool {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let Some(Ok(leaf)) = CertificateDer::pem_slice_iter(chain).next() else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
        return false;
    };
    let Ok(key) = std::str::from_utf8(key)
        .map_err(|_| ())
        .and_then(|k| rcgen::KeyPair::from_pem(k).map_err(|_| ()))
    else {
        return false;
    };
    key.public_key_raw() == cert.public_key().subject_public_key.data.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bucket in memory (object_store's, with the same conditional
    /// puts), mirrored into `local`.
    fn in_memory(local: &Path) -> Arc<Bucket> {
        Arc::new(Bucket {
            store: Arc::new(object_store::memory::InMemory::new()),
            url: StoreUrl::parse_folder("s3://sites/acme/").unwrap(),
            place: "sites in memory".to_owned(),
            local: local.to_path_buf(),
            known: Mutex::new(HashMap::new()),
        })
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_lock_is_held_once_taken_over_when_expired_and_freed_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = in_memory(dir.path());
        block_on(async {
            let Taken::Held(first) = bucket.take_lock("a.test").await.unwrap() else {
                panic!("a free lock was busy")
            };
            let Taken::Busy(owner) = bucket.take_lock("a.test").await.unwrap() else {
                panic!("a held lock was taken again")
            };
            assert!(owner.contains(&std::process::id().to_string()), "{owner}");
            drop(first);
            // The release runs in the background.
            for _ in 0..100 {
                if bucket.get("locks/a.test.lock").await.unwrap().is_none() {
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert!(bucket.get("locks/a.test.lock").await.unwrap().is_none());

            // A dead node's lock, expired: taken over once.
            let expired = serde_json::json!({ "owner": "gone 1 0", "expires": unix_now() - 1 });
            bucket
                .put("locks/b.test.lock", expired.to_string().as_bytes())
                .await
                .unwrap();
            let Taken::Held(_taken) = bucket.take_lock("b.test").await.unwrap() else {
                panic!("an expired lock was not taken over")
            };
            assert!(matches!(
                bucket.take_lock("b.test").await.unwrap(),
                Taken::Busy(_)
            ));
        });
    }

    #[test]
    fn of_two_nodes_taking_over_an_expired_lock_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = in_memory(dir.path());
        block_on(async {
            let expired = serde_json::json!({ "owner": "gone 1 0", "expires": unix_now() - 1 });
            bucket
                .put("locks/a.test.lock", expired.to_string().as_bytes())
                .await
                .unwrap();
            let (one, two) = tokio::join!(bucket.take_lock("a.test"), bucket.take_lock("a.test"));
            let held = [one.unwrap(), two.unwrap()]
                .iter()
                .filter(|t| matches!(t, Taken::Held(_)))
                .count();
            assert_eq!(held, 1);
        });
    }

    #[test]
    fn the_mirror_follows_the_challenges_and_keeps_its_own_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path();
        crate::acme::store::prepare(local, None).unwrap();
        let node = in_memory(local);
        block_on(async {
            // Another node's challenge: fetched, then removed with it.
            let theirs = "challenges/http-01/theirs";
            node.store
                .put(&node.key(theirs), PutPayload::from_static(b"theirs.key"))
                .await
                .unwrap();
            node.sync_challenges().await.unwrap();
            assert_eq!(std::fs::read(local.join(theirs)).unwrap(), b"theirs.key");
            node.store.delete(&node.key(theirs)).await.unwrap();
            // This node's own, written since: kept.
            let ours = "challenges/http-01/ours";
            node.write(ours, b"ours.key").await.unwrap();
            node.sync_challenges().await.unwrap();
            assert!(!local.join(theirs).exists());
            assert_eq!(std::fs::read(local.join(ours)).unwrap(), b"ours.key");
        });
    }

    #[test]
    fn only_the_layouts_files_are_mirrored() {
        for rel in [
            "certs/a.example.crt",
            "certs/a.example.key",
            "challenges/http-01/Ab-9_x",
            "challenges/tls-alpn-01/a.example.pem",
        ] {
            assert!(mirrored(rel), "{rel}");
        }
        for rel in [
            "certs/../x.crt",
            "certs/A.example.crt",
            "certs/a.example.pem",
            "challenges/http-01/a.b",
            "challenges/http-01/",
            "locks/a.example.lock",
            "status/a.example.json",
            "accounts/x.json",
            "certs/sub/a.example.crt",
        ] {
            assert!(!mirrored(rel), "{rel}");
        }
    }

    #[test]
    fn a_lock_says_its_owner_and_expiry() {
        let (owner, expires) = read_lock(lock_text("host 1 ab\n").as_bytes());
        assert_eq!(owner, "host 1 ab");
        assert!(expires > unix_now());
        assert_eq!(read_lock(b"junk").1, 0);
    }
}
