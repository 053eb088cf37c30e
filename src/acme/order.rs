//! One order: a certificate for one name, proved by one challenge.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use instant_acme::{
    Account, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier, NewOrder,
    OrderStatus, RetryPolicy,
};
use rcgen::{
    CertificateParams, CustomExtension, DistinguishedName, KeyPair, PKCS_ECDSA_P256_SHA256,
};

use super::bucket::{self, Bucket};
use super::command::Challenge;
use super::{layout, store};

/// How long the CA is given to validate, and then to issue: polled from
/// one second, doubling, within two minutes (or as its `Retry-After`
/// says).
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_secs(1))
    .backoff(2.0)
    .timeout(Duration::from_secs(120));

/// How long a challenge file is left to the server before the CA is told
/// to validate: `kiln serve` is another process, which reads the folder
/// when inotify tells it of the file and says nothing back; a CA that
/// validates at once (Pebble does) would otherwise race it, and a failed
/// validation costs a minute of back-off here and counts against the
/// CA's rate limits.
const SERVER_PICKUP: Duration = Duration::from_secs(1);

/// A certificate obtained: the chain (PEM, leaf first) and its key (PEM,
/// PKCS#8).
pub struct Issued {
    pub chain: String,
    pub key: String,
}

/// With the state in a bucket, how long the other nodes are given to
/// fetch a challenge file too: whichever node the CA reaches answers it.
/// Each lists the challenges every [`bucket::CHALLENGE_POLL`]; two of
/// those, then the server's pickup.
fn pickup(bucket: bool) -> Duration {
    match bucket {
        true => 2 * bucket::CHALLENGE_POLL + SERVER_PICKUP,
        false => SERVER_PICKUP,
    }
}

/// The challenge files an order wrote (by their path in the state
/// folder), removed when it ends however it ends, from the bucket too.
struct ChallengeFiles<'a> {
    dir: &'a Path,
    bucket: Option<&'a Arc<Bucket>>,
    written: Vec<String>,
}

impl ChallengeFiles<'_> {
    /// Writes `bytes` as `rel` (and uploads it).
    async fn write(&mut self, rel: String, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
        self.written.push(rel.clone());
        match self.bucket {
            Some(bucket) => bucket.write(&rel, bytes).await,
            None => store::write_atomically(&self.dir.join(&rel), bytes, mode),
        }
    }
}

impl Drop for ChallengeFiles<'_> {
    fn drop(&mut self) {
        for rel in self.written.drain(..) {
            store::remove(&self.dir.join(&rel));
            if let Some(bucket) = self.bucket {
                bucket.delete_later(rel);
            }
        }
    }
}

/// Orders a certificate for `name`, answering `challenge` through the
/// state folder `dir` (and the bucket it mirrors, if any); `replaces`
/// names the certificate it renews (ARI).
pub async fn obtain(
    account: &Account,
    dir: &Path,
    bucket: Option<&Arc<Bucket>>,
    name: &str,
    challenge: Challenge,
    replaces: Option<CertificateIdentifier<'static>>,
) -> anyhow::Result<Issued> {
    let identifiers = [Identifier::Dns(name.to_owned())];
    let mut new = NewOrder::new(&identifiers);
    if let Some(id) = replaces {
        new = new.replaces(id);
    }
    let mut order = account.new_order(&new).await.context("new order")?;
    let mut files = ChallengeFiles {
        dir,
        bucket,
        written: Vec::new(),
    };
    let kind = match challenge {
        Challenge::Http01 => ChallengeType::Http01,
        Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.context("authorization")?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => bail!("authorization is {other:?}"),
        }
        let mut handle = authz
            .challenge(kind.clone())
            .ok_or_else(|| anyhow!("the CA offers no {} challenge", challenge.name()))?;
        let key_authorization = handle.key_authorization();
        match challenge {
            Challenge::Http01 => {
                // The token names a file: the CA's base64url alphabet only.
                let token = &handle.token;
                if token.is_empty()
                    || !token
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    bail!("the CA sent a token that is not base64url: {token:?}");
                }
                let rel = format!("{}/{token}", layout::HTTP01);
                files
                    .write(rel, key_authorization.as_str().as_bytes(), 0o644)
                    .await?;
            }
            Challenge::TlsAlpn01 => {
                let pem = tls_alpn01_certificate(name, key_authorization.digest().as_ref())?;
                let rel = format!("{}/{name}.pem", layout::TLS_ALPN01);
                files.write(rel, pem.as_bytes(), 0o600).await?;
            }
        }
        tokio::time::sleep(pickup(bucket.is_some())).await;
        handle.set_ready().await.context("challenge ready")?;
    }
    match order.poll_ready(&POLL).await.context("validation")? {
        OrderStatus::Ready => {}
        status => {
            let why = authorization_errors(&mut order).await;
            bail!(
                "{} validation failed (order {status:?}){why}",
                challenge.name()
            );
        }
    }
    drop(files);
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).context("key")?;
    let mut params = CertificateParams::new(vec![name.to_owned()]).context("CSR")?;
    params.distinguished_name = DistinguishedName::new();
    let csr = params.serialize_request(&key).context("CSR")?;
    order.finalize_csr(csr.der()).await.context("finalize")?;
    let chain = order.poll_certificate(&POLL).await.context("certificate")?;
    Ok(Issued {
        chain,
        key: key.serialize_pem(),
    })
}

/// The errors the CA gave the order's challenges, for the log line.
async fn authorization_errors(order: &mut instant_acme::Order) -> String {
    let mut why = String::new();
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authz)) = authorizations.next().await {
        if let Ok(state) = authz.refresh().await {
            for c in &state.challenges {
                if let Some(e) = &c.error {
                    why.push_str(&format!(": {e}"));
                }
            }
        }
    }
    why
}

/// The RFC 8737 certificate: self-signed, the name as its only SAN, the
/// key authorization's SHA-256 in the critical acmeIdentifier extension;
/// then its key, PEM.
fn tls_alpn01_certificate(name: &str, digest: &[u8]) -> anyhow::Result<String> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::new(vec![name.to_owned()])?;
    params.distinguished_name = DistinguishedName::new();
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key)?;
    Ok(format!("{}{}", cert.pem(), key.serialize_pem()))
}
