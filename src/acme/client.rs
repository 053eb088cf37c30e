//! The HTTP client instant-acme talks to the CA through: hyper over
//! rustls, trusting the system's roots or the `--acme-ca-root` bundle,
//! and noting the `Retry-After` of every 429 and 503 (instant-acme turns
//! those into problem documents without the header).

use std::future::Future;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::{Request, StatusCode};
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// How long a connection to the CA may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The last `Retry-After` a CA sent with a 429 or 503, as a moment.
#[derive(Clone, Default)]
pub struct RetryAfter(Arc<Mutex<Option<SystemTime>>>);

impl RetryAfter {
    /// How long from now the CA asked to wait, if it did since the last
    /// call; clears it.
    pub fn take(&self) -> Option<Duration> {
        let at = self.0.lock().ok()?.take()?;
        Some(at.duration_since(SystemTime::now()).unwrap_or_default())
    }

    fn note(&self, at: SystemTime) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(at);
        }
    }
}

/// The value of a `Retry-After` field: seconds or an HTTP date.
fn retry_after_value(value: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(SystemTime::now() + Duration::from_secs(secs));
    }
    let unix = crate::httpdate::parse_http_date(text.as_bytes())?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(unix).ok()?))
}

/// hyper with rustls, and the `Retry-After` it saw.
pub struct CaClient {
    hyper: HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>,
    retry_after: RetryAfter,
}

/// The most a `--acme-ca-root` bundle may hold: a few roots are a few
/// kilobytes, the whole of the Web PKI's under 300 KB.
const MAX_CA_ROOT_BYTES: u64 = 4 << 20;

/// A private CA's root certificates (`--acme-ca-root`), read once, where
/// the supervisor still has the rights of the user kiln started as: the
/// file may lie where the user the client runs as cannot read (anywhere in
/// root's home), and the worker, that user inside its sandbox, never
/// opens it (`CaRoot::from_descriptor`).
#[derive(Clone, Debug)]
pub struct CaRoot {
    /// The file, as messages name it.
    pub path: PathBuf,
    /// Its certificates, one at least.
    pub roots: Vec<CertificateDer<'static>>,
}

impl CaRoot {
    /// The certificates of the PEM bundle `pem`, read from `path`; an
    /// error, naming it, when there is none or one is broken.
    pub fn parse(path: &Path, pem: &[u8]) -> anyhow::Result<CaRoot> {
        let named = || format!("--acme-ca-root {}", path.display());
        let roots = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .with_context(named)?;
        if roots.is_empty() {
            bail!("{}: no certificate in it", named());
        }
        Ok(CaRoot {
            path: path.to_path_buf(),
            roots,
        })
    }

    /// The bundle in `file`, opened on `path`, read from its start (the
    /// descriptor is shared by every worker the supervisor starts, so its
    /// offset is not used).
    pub fn from_descriptor(path: &Path, file: impl AsFd) -> anyhow::Result<CaRoot> {
        let named = || format!("--acme-ca-root {}", path.display());
        let mut pem = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match rustix::io::pread(&file, &mut buf, pem.len() as u64) {
                Ok(0) => break,
                Ok(n) => pem.extend_from_slice(&buf[..n]),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(std::io::Error::from(e)).with_context(named),
            }
            if pem.len() as u64 > MAX_CA_ROOT_BYTES {
                bail!(
                    "{}: more than {MAX_CA_ROOT_BYTES} bytes, not a bundle of roots",
                    named()
                );
            }
        }
        CaRoot::parse(path, &pem)
    }

    /// Opens and reads the bundle at `path`.
    pub fn read(path: &Path) -> anyhow::Result<CaRoot> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("--acme-ca-root {}", path.display()))?;
        CaRoot::from_descriptor(path, &file)
    }
}

/// The crypto provider of every TLS configuration kiln builds.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl CaClient {
    /// A client trusting the certificates of `ca_root`, or the system's
    /// trust store.
    pub fn new(ca_root: Option<&CaRoot>, retry_after: RetryAfter) -> anyhow::Result<CaClient> {
        let builder = HttpsConnectorBuilder::new();
        let builder = match ca_root {
            Some(ca_root) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in &ca_root.roots {
                    roots
                        .add(cert.clone())
                        .with_context(|| format!("--acme-ca-root {}", ca_root.path.display()))?;
                }
                let config = rustls::ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                builder.with_tls_config(config)
            }
            // The provider named: rustls is built with ring too (for
            // object_store's reqwest, in `kiln store`), and with two
            // providers and none installed, `with_native_roots`'s
            // `ClientConfig::builder()` would panic.
            None => builder
                .with_provider_and_native_roots(provider())
                .context("the system's trust store")?,
        };
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.enforce_http(false);
        let connector = builder.https_only().enable_http1().wrap_connector(http);
        Ok(CaClient {
            hyper: HyperClient::builder(TokioExecutor::new()).build(connector),
            retry_after,
        })
    }
}

impl HttpClient for CaClient {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        let sent = self.hyper.request(req);
        let retry_after = self.retry_after.clone();
        Box::pin(async move {
            let rsp = sent.await.map_err(|e| Error::Other(Box::new(e)))?;
            if matches!(
                rsp.status(),
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            ) && let Some(at) = rsp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| retry_after_value(v.as_bytes()))
            {
                retry_after.note(at);
            }
            Ok(BytesResponse::from(rsp))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_a_date() {
        let secs = |v: &[u8]| {
            retry_after_value(v).map(|at| {
                at.duration_since(SystemTime::now())
                    .unwrap_or_default()
                    .as_secs()
            })
        };
        assert!(matches!(secs(b"120"), Some(119..=120)));
        assert_eq!(
            retry_after_value(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(retry_after_value(b"soon"), None);
    }

    #[test]
    fn a_client_on_the_system_trust_store_names_its_provider() {
        // Panicked once rustls had two providers built in (ring came with
        // object_store): the implicit default cannot be chosen then.
        CaClient::new(None, RetryAfter::default()).unwrap();
    }
}
