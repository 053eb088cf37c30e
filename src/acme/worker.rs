//! `kiln acme worker`: the ACME conversation. One loop over the names,
//! each with its own next moment: check the certificate it has, renew it
//! when due (ARI's window, else a third of its lifetime left), under the
//! name's lock, and after a failure wait (a minute doubling to a day, or
//! as the CA said). Every event is one log line and a fresh status file.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use instant_acme::{Account, AccountCredentials, CertificateIdentifier, NewAccount};

use super::bucket::{self, Bucket};
use super::client::{CaClient, CaRoot, RetryAfter};
use super::command::{Challenge, RunArgs};
use super::lock::{self, NameLock, Taken};
use super::schedule;
use super::store::{self, Current, unix_now};
use super::{layout, order, sandbox};

/// How soon a name whose lock another client holds is looked at again.
const LOCK_BUSY_RETRY: i64 = 10;
/// How soon an attempt is made again after the CA refused a nonce three
/// times in a row (RFC 8555 §6.5: the client is to retry with a fresh
/// one; instant-acme did so twice), and how many such quick retries come
/// before it counts as a failure.
const BAD_NONCE_RETRY: i64 = 1;
const BAD_NONCE_RETRIES: u32 = 5;
/// How often renewal information is fetched again at most, whatever the
/// CA's `Retry-After` says, and how soon after a failed fetch.
const ARI_REFETCH_FLOOR: i64 = 60;
const ARI_FAILED_RETRY: i64 = 3600;
/// How long one attempt (account, order, validation, issuance) may take
/// before it is abandoned as a failure: a CA that accepts connections and
/// never answers must not stall the worker.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(10 * 60);
/// The longest single sleep: the loop wakes at least this often to look
/// again (a clock that jumped, a certificate another server renewed).
const MAX_SLEEP: i64 = 3600;
/// How often `--sites` is looked at for new names.
const SITES_EVERY: i64 = 2;

/// The renewal moment chosen in a CA's suggested window, for one
/// certificate, until `refetch_at`.
struct AriPlan {
    certificate: String,
    window: (i64, i64),
    at: i64,
    refetch_at: i64,
}

/// One managed name's state between events.
struct Name {
    name: String,
    next: i64,
    failures: u32,
    ari: Option<AriPlan>,
    busy_owner: Option<String>,
    bad_nonces: u32,
    status: layout::Status,
}

/// When a certificate is to be renewed.
enum Renewal {
    /// Now: there is none, it is expired, or its moment has come. With
    /// the identifier of the certificate replaced, when the CA's renewal
    /// information chose the moment.
    Due(Option<CertificateIdentifier<'static>>),
    /// Not yet: renewal is planned for `renew_at`, and the next look
    /// (to fetch renewal information again) is at `wake` (Unix seconds).
    Wait { wake: i64, renew_at: i64 },
}

/// What one attempt ended with.
enum Outcome {
    /// A certificate, valid until this moment.
    Issued(i64),
    /// Nothing to do until `wake`; renewal planned for `renew_at`.
    Wait { wake: i64, renew_at: i64 },
    /// Another client holds the name's lock.
    Busy(String),
}

struct Worker {
    dir: PathBuf,
    /// `--acme-dir s3://…`: the bucket `dir` mirrors.
    bucket: Option<Arc<Bucket>>,
    /// The flags (`--sites` is looked at again and again).
    args: RunArgs,
    url: String,
    ca_root: Option<CaRoot>,
    email: Option<String>,
    challenges: Vec<Challenge>,
    names: Vec<Name>,
    account: Option<Account>,
    retry_after: RetryAfter,
}

/// The host and port of the CA's directory URL.
pub(super) fn ca_endpoint(url: &str) -> anyhow::Result<(String, u16)> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| anyhow!("--acme-ca {url:?}: not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        bail!("--acme-ca {url:?}: an ACME directory is an https:// URL");
    }
    let host = uri
        .host()
        .ok_or_else(|| anyhow!("--acme-ca {url:?}: no host"))?;
    Ok((
        host.trim_matches(['[', ']']).to_owned(),
        uri.port_u16().unwrap_or(443),
    ))
}

/// Runs the worker until killed.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    // The supervisor blocks the signals it waits for, and a blocked mask
    // survives exec: SIGTERM must end the worker.
    crate::sys::SignalSet::of(&[])
        .set_as_mask()
        .context("cannot unblock signals")?;
    super::die_with_parent()?;
    let mut names = args.names()?;
    for name in args.site_names() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let url = args.acme.directory_url().to_owned();
    let (host, port) = ca_endpoint(&url)?;
    let dir = args.acme.local_dir()?;
    store::prepare(&dir, None)?;
    // Connected before the sandbox (no request is made yet): the client
    // reads its credentials' settings from the environment.
    let bucket = match args.acme.bucket()? {
        Some(url) => Some(Arc::new(Bucket::connect(url, &args.store, &dir)?)),
        None => None,
    };
    // One lookup before the sandbox: the C library loads its resolver
    // modules now, from folders the sandbox will not show. Failing is for
    // the loop to report.
    let _ = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port));
    // Read once, before the sandbox, which does not show it: from the
    // descriptor the supervisor opened before it gave up the rights of the
    // user kiln started as, or, for a worker started by hand, from the file.
    let ca_root = match &args.acme.ca_root {
        Some(path) if args.ca_root_on_stdin => {
            Some(CaRoot::from_descriptor(path, std::io::stdin())?)
        }
        Some(path) => Some(CaRoot::read(path)?),
        None => None,
    };
    sandbox::enter(&sandbox::WorkerPlan {
        dir: &dir,
        ca_port: port,
        store: bucket.as_ref().map(|_| &args.store),
        sites: args.sites.as_deref(),
    })?;
    let names = names
        .into_iter()
        .map(|name| Name::new(&dir, &url, name))
        .collect();
    let worker = Worker {
        dir,
        bucket,
        args: args.clone(),
        url,
        ca_root,
        email: args.acme.email.clone(),
        challenges: args.challenge_order(),
        names,
        account: None,
        retry_after: RetryAfter::default(),
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?
        .block_on(worker.run())
}

impl Name {
    /// A name to manage, its status as the folder has it.
    fn new(dir: &std::path::Path, url: &str, name: String) -> Name {
        let mut status = store::read_status(dir, &name).unwrap_or_default();
        status.name.clone_from(&name);
        status.ca = url.to_owned();
        Name {
            name,
            next: 0,
            failures: 0,
            ari: None,
            busy_owner: None,
            bad_nonces: 0,
            status,
        }
    }
}

/// A name's lock held: in the folder (with its heartbeat), or in the
/// bucket (which beats itself).
enum Held {
    File {
        _lock: NameLock,
        _beating: AbortOnDrop,
    },
    Bucket {
        _lock: bucket::Lock,
    },
}

/// A task stopped when its handle goes, also when the future holding it
/// is dropped half-way (an attempt past [`ATTEMPT_LIMIT`]).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps a lock's heartbeat until aborted.
async fn heartbeat(file: Arc<File>) {
    loop {
        tokio::time::sleep(lock::HEARTBEAT).await;
        if let Err(e) = NameLock::beat(&file) {
            tracing::warn!("acme: {e:#}");
        }
    }
}

/// Whether the CA refused `e`'s request for its nonce alone.
fn is_bad_nonce(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<instant_acme::Error>(),
            Some(instant_acme::Error::Api(problem))
                if problem.r#type.as_deref() == Some("urn:ietf:params:acme:error:badNonce")
        )
    })
}

/// An error as one line (a log line, a status field).
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace(['\n', '\r'], " ")
}

impl Worker {
    async fn run(mut self) -> anyhow::Result<()> {
        tracing::info!(
            "acme: managing {} with {} ({})",
            self.names
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            self.url,
            self.challenges
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", then ")
        );
        let _in_step = self
            .bucket
            .as_ref()
            .map(|b| AbortOnDrop(tokio::spawn(Arc::clone(b).keep_in_step())));
        let longest = match self.args.sites {
            Some(_) => SITES_EVERY,
            None => MAX_SLEEP,
        };
        loop {
            self.learn_names();
            let next = (0..self.names.len()).min_by_key(|&i| self.names[i].next);
            let wait = next.map_or(longest, |i| self.names[i].next - unix_now());
            match next {
                Some(i) if wait <= 0 => self.step(i).await,
                _ => tokio::time::sleep(Duration::from_secs(wait.clamp(1, longest) as u64)).await,
            }
        }
    }

    /// Adds the names `--sites` holds now that are not managed yet.
    fn learn_names(&mut self) {
        for name in self.args.site_names() {
            if self.names.iter().any(|n| n.name == name) {
                continue;
            }
            tracing::info!("acme: {name}: a new site; managing it");
            self.names.push(Name::new(&self.dir, &self.url, name));
        }
    }

    /// One event for name `i`: an attempt, its log line, its status.
    async fn step(&mut self, i: usize) {
        let outcome = tokio::time::timeout(ATTEMPT_LIMIT, self.attempt(i))
            .await
            .unwrap_or_else(|_| {
                Err(anyhow!(
                    "no result from the CA within {} s; abandoned",
                    ATTEMPT_LIMIT.as_secs()
                ))
            });
        let now = unix_now();
        let retry_after = self.retry_after.take();
        let current = store::current(&self.dir, &self.names[i].name);
        let n = &mut self.names[i];
        n.status.not_after = current.map(|c| c.not_after);
        match outcome {
            Ok(Outcome::Issued(_)) | Ok(Outcome::Wait { .. }) => {
                n.busy_owner = None;
                n.bad_nonces = 0;
            }
            _ => {}
        }
        match outcome {
            Ok(Outcome::Issued(not_after)) => {
                n.failures = 0;
                n.status.last_error = None;
                n.status.last_error_at = None;
                n.status.not_after = Some(not_after);
                // Look again at once: the new certificate's renewal moment.
                n.next = now;
                n.status.next_attempt = Some(now);
            }
            Ok(Outcome::Wait { wake, renew_at }) => {
                // Logged when the plan changes, not at every wake-up.
                if n.status.next_attempt != Some(renew_at) {
                    tracing::info!(
                        "acme: {}: certificate valid until {}; renewing in {} s, next look in {} s",
                        n.name,
                        n.status.not_after.unwrap_or_default(),
                        renew_at - now,
                        wake - now
                    );
                }
                n.next = wake;
                n.status.next_attempt = Some(renew_at);
            }
            Ok(Outcome::Busy(owner)) => {
                if n.busy_owner.as_ref() != Some(&owner) {
                    tracing::info!(
                        "acme: {}: another client ({owner}) is ordering it; looking again every {LOCK_BUSY_RETRY} s",
                        n.name
                    );
                    n.busy_owner = Some(owner);
                }
                n.next = now + LOCK_BUSY_RETRY;
                n.status.next_attempt = Some(n.next);
            }
            Err(e) if is_bad_nonce(&e) && n.bad_nonces < BAD_NONCE_RETRIES => {
                n.bad_nonces += 1;
                n.next = now + BAD_NONCE_RETRY;
                n.status.next_attempt = Some(n.next);
                tracing::info!(
                    "acme: {}: the CA refused three nonces in a row; trying again in {BAD_NONCE_RETRY} s",
                    n.name
                );
            }
            Err(e) => {
                n.bad_nonces = 0;
                n.failures += 1;
                let wait = schedule::backoff(n.failures, retry_after);
                n.next = now + wait.as_secs() as i64;
                let line = one_line(&e);
                tracing::warn!(
                    "acme: {}: {line}; attempt {} failed, next in {} s",
                    n.name,
                    n.failures,
                    wait.as_secs()
                );
                n.status.last_error = Some(line);
                n.status.last_error_at = Some(now);
                n.status.next_attempt = Some(n.next);
            }
        }
        store::write_status(&self.dir, &n.status);
        if let Some(bucket) = &self.bucket {
            let rel = format!("status/{}.json", n.name);
            if let Err(e) = bucket.put(&rel, n.status.to_json().as_bytes()).await {
                tracing::warn!("acme: {e:#}");
            }
        }
    }

    /// The account with the CA: loaded from `accounts/` (in the bucket,
    /// with one), or created and stored there. Stored only if none is
    /// there yet (a new file hard-linked into place, or an object created
    /// with `If-None-Match: *`): of two clients creating one at once,
    /// every client uses the one stored.
    async fn account(&mut self) -> anyhow::Result<Account> {
        if let Some(account) = &self.account {
            return Ok(account.clone());
        }
        let place = self.account_place();
        let account = match self.stored_account().await? {
            Some(bytes) => {
                let account = self.account_from(&place, &bytes).await?;
                tracing::info!("acme: account {} (from {place})", account.id());
                account
            }
            None => {
                let contact = self.email.as_ref().map(|e| format!("mailto:{e}"));
                let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
                let (account, credentials) = Account::builder_with_http(self.ca_client()?)
                    .create(
                        &NewAccount {
                            contact: &contacts,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        },
                        self.url.clone(),
                        None,
                    )
                    .await
                    .context("new account")?;
                let json = serde_json::to_vec(&credentials)?;
                if self.store_new_account(&json).await? {
                    tracing::info!(
                        "acme: created account {} at {}, kept in {place}",
                        account.id(),
                        self.url
                    );
                    account
                } else {
                    let bytes = self
                        .stored_account()
                        .await?
                        .ok_or_else(|| anyhow!("{place}: gone just after it was made"))?;
                    let account = self.account_from(&place, &bytes).await?;
                    tracing::info!(
                        "acme: account {} (created by another client at the same time)",
                        account.id()
                    );
                    account
                }
            }
        };
        self.account = Some(account.clone());
        Ok(account)
    }

    /// A client for the CA.
    fn ca_client(&self) -> anyhow::Result<Box<CaClient>> {
        Ok(Box::new(CaClient::new(
            self.ca_root.as_ref(),
            self.retry_after.clone(),
        )?))
    }

    /// Where the account is stored, relative to the state: `accounts/CA.json`.
    fn account_rel(&self) -> String {
        let path = store::account_path(&self.dir, &self.url);
        let file = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        format!("accounts/{file}")
    }

    /// Where the account is stored, for messages.
    fn account_place(&self) -> String {
        match &self.bucket {
            Some(_) => format!("the bucket's {}", self.account_rel()),
            None => store::account_path(&self.dir, &self.url)
                .display()
                .to_string(),
        }
    }

    /// The stored account's credentials, if there are.
    async fn stored_account(&self) -> anyhow::Result<Option<Vec<u8>>> {
        if let Some(bucket) = &self.bucket {
            return bucket.get(&self.account_rel()).await;
        }
        let path = store::account_path(&self.dir, &self.url);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => bail!("{}: {e}", path.display()),
        }
    }

    /// Stores new credentials unless some are there: whether they were.
    async fn store_new_account(&self, json: &[u8]) -> anyhow::Result<bool> {
        match &self.bucket {
            Some(bucket) => bucket.create(&self.account_rel(), json).await,
            None => store::write_new(&store::account_path(&self.dir, &self.url), json, 0o600),
        }
    }

    /// The account whose stored credentials are `bytes`.
    async fn account_from(&self, place: &str, bytes: &[u8]) -> anyhow::Result<Account> {
        let credentials: AccountCredentials =
            serde_json::from_slice(bytes).with_context(|| format!("{place}: not an account"))?;
        Account::builder_with_http(self.ca_client()?)
            .from_credentials(credentials)
            .await
            .context("account")
    }

    /// When name `i`'s certificate `current` is to be renewed.
    async fn renewal(&mut self, i: usize, account: &Account, current: Option<&Current>) -> Renewal {
        let now = unix_now();
        let Some(current) = current.filter(|c| c.not_after > now) else {
            return Renewal::Due(None);
        };
        let n = &mut self.names[i];
        let third = schedule::one_third_left(current.not_before, current.not_after);
        let by_third = |wake: i64| match third <= now {
            true => Renewal::Due(None),
            false => Renewal::Wait {
                wake: wake.min(third),
                renew_at: third,
            },
        };
        let Some(id) = &current.id else {
            return by_third(third);
        };
        let key = id.to_string();
        let cached = n
            .ari
            .as_ref()
            .filter(|p| p.certificate == key && now < p.refetch_at);
        let plan = match cached {
            Some(plan) => plan,
            None => match account.renewal_info(id).await {
                Ok((info, retry_after)) => {
                    let window = (
                        info.suggested_window.start.unix_timestamp(),
                        info.suggested_window.end.unix_timestamp(),
                    );
                    let refetch_at = now + (retry_after.as_secs() as i64).max(ARI_REFETCH_FLOOR);
                    // The same window again keeps the moment drawn in it.
                    let kept = n
                        .ari
                        .as_ref()
                        .filter(|p| p.certificate == key && p.window == window)
                        .map(|p| p.at);
                    let at = kept.unwrap_or_else(|| {
                        let latest =
                            schedule::latest_renewal(current.not_before, current.not_after);
                        let (start, end) = window;
                        let at = schedule::in_window(
                            start,
                            end.min(latest),
                            now,
                            schedule::random_u64(),
                        );
                        tracing::info!(
                            "acme: {}: the CA suggests renewing between {start} and {end} (ARI); renewing at {at}, in {} s",
                            n.name,
                            at - now
                        );
                        at
                    });
                    n.ari.insert(AriPlan {
                        certificate: key,
                        window,
                        at,
                        refetch_at,
                    })
                }
                Err(instant_acme::Error::Unsupported(_)) => return by_third(third),
                Err(e) => {
                    tracing::warn!(
                        "acme: {}: renewal information: {e}; renewing when a third of the lifetime is left, asking again in {ARI_FAILED_RETRY} s",
                        n.name
                    );
                    return by_third(now + ARI_FAILED_RETRY);
                }
            },
        };
        if plan.at <= now {
            Renewal::Due(Some(id.clone()))
        } else {
            Renewal::Wait {
                wake: plan.at.min(plan.refetch_at),
                renew_at: plan.at,
            }
        }
    }

    /// Checks name `i` and orders its certificate when due.
    async fn attempt(&mut self, i: usize) -> anyhow::Result<Outcome> {
        let account = self.account().await?;
        let name = self.names[i].name.clone();
        let current = store::current(&self.dir, &name);
        if let Renewal::Wait { wake, renew_at } = self.renewal(i, &account, current.as_ref()).await
        {
            return Ok(Outcome::Wait { wake, renew_at });
        }
        let held = match &self.bucket {
            Some(bucket) => match bucket.take_lock(&name).await? {
                bucket::Taken::Held(lock) => Held::Bucket { _lock: lock },
                bucket::Taken::Busy(owner) => return Ok(Outcome::Busy(owner)),
            },
            None => match lock::take(&self.dir, &name)? {
                Taken::Held(lock) => {
                    let beating = AbortOnDrop(tokio::spawn(heartbeat(lock.heartbeat_handle())));
                    Held::File {
                        _lock: lock,
                        _beating: beating,
                    }
                }
                Taken::Busy(owner) => return Ok(Outcome::Busy(owner)),
            },
        };
        let result = self.order_locked(i, &account).await;
        drop(held);
        result
    }

    /// With name `i`'s lock held: looks again (another client may have
    /// renewed it meanwhile), then orders with each challenge in turn.
    async fn order_locked(&mut self, i: usize, account: &Account) -> anyhow::Result<Outcome> {
        let name = self.names[i].name.clone();
        // The bucket's pair, which another node may have obtained since
        // the mirror was last brought in step.
        if let Some(bucket) = &self.bucket {
            bucket.fetch_pair(&name).await?;
        }
        let current = store::current(&self.dir, &name);
        let replaces = match self.renewal(i, account, current.as_ref()).await {
            Renewal::Wait { wake, renew_at } => return Ok(Outcome::Wait { wake, renew_at }),
            Renewal::Due(replaces) => replaces,
        };
        let mut last_error = anyhow!("no challenge to try");
        for (k, &challenge) in self.challenges.iter().enumerate() {
            tracing::info!(
                "acme: {name}: ordering a certificate ({}{})",
                challenge.name(),
                replaces
                    .as_ref()
                    .map(|id| format!(", replacing {id}"))
                    .unwrap_or_default()
            );
            let bucket = self.bucket.as_ref();
            match order::obtain(
                account,
                &self.dir,
                bucket,
                &name,
                challenge,
                replaces.clone(),
            )
            .await
            {
                Ok(issued) => return self.install(&name, &issued).await,
                Err(e) => {
                    if let Some(next) = self.challenges.get(k + 1) {
                        tracing::warn!(
                            "acme: {name}: {}: {}; trying {}",
                            challenge.name(),
                            one_line(&e),
                            next.name()
                        );
                    }
                    last_error = e.context(challenge.name());
                }
            }
        }
        Err(last_error)
    }

    /// Writes a new pair: key first, then the chain (a reader that finds
    /// the chain finds its key).
    /// With a bucket, both are uploaded after, in the same order.
    async fn install(&self, name: &str, issued: &order::Issued) -> anyhow::Result<Outcome> {
        store::write_atomically(
            &layout::key_path(&self.dir, name),
            issued.key.as_bytes(),
            0o600,
        )?;
        store::write_atomically(
            &layout::cert_path(&self.dir, name),
            issued.chain.as_bytes(),
            0o644,
        )?;
        let current = store::current(&self.dir, name)
            .ok_or_else(|| anyhow!("the CA's certificate does not cover {name}"))?;
        if let Some(bucket) = &self.bucket {
            bucket
                .put_patiently(&format!("certs/{name}.key"), issued.key.as_bytes())
                .await?;
            bucket
                .put_patiently(&format!("certs/{name}.crt"), issued.chain.as_bytes())
                .await?;
        }
        tracing::info!(
            "acme: {name}: certificate obtained, valid until {} (in {}s), written to {}",
            current.not_after,
            current.not_after - unix_now(),
            layout::cert_path(&self.dir, name).display()
        );
        Ok(Outcome::Issued(current.not_after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_endpoint_is_read_from_its_directory_url() {
        assert_eq!(
            ca_endpoint("https://acme-v02.api.letsencrypt.org/directory").unwrap(),
            ("acme-v02.api.letsencrypt.org".to_owned(), 443)
        );
        assert_eq!(
            ca_endpoint("https://127.0.0.1:14000/dir").unwrap(),
            ("127.0.0.1".to_owned(), 14000)
        );
        assert_eq!(
            ca_endpoint("https://[::1]:14000/dir").unwrap(),
            ("::1".to_owned(), 14000)
        );
        assert!(ca_endpoint("http://ca.test/dir").is_err());
        assert!(ca_endpoint("not a url").is_err());
    }
}
