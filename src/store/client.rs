//! The store client: object_store's, configured from the environment and
//! the flags, with short retries: a store that does not answer is said
//! within seconds, not minutes. The environment, as object_store reads it:
//! - S3: the AWS chain (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_SESSION_TOKEN`, `AWS_REGION`; web identity through
//!   `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`; the ECS container
//!   endpoint; else the EC2 instance metadata service);
//! - GCS: `GOOGLE_SERVICE_ACCOUNT` (a key file) or
//!   `GOOGLE_APPLICATION_CREDENTIALS`, else the metadata server;
//! - Azure: `AZURE_STORAGE_ACCOUNT_NAME` with `AZURE_STORAGE_ACCOUNT_KEY`
//!   (or a SAS, a client secret, workload identity, managed identity).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

use super::url::Scheme;
use super::{EndpointArgs, StoreUrl};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A whole request, a pack's download among them.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
const RETRY_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_RETRIES: usize = 2;

/// A store client for one bucket.
pub struct Client {
    pub store: Arc<dyn ObjectStore>,
    /// Where it goes, for messages: the endpoint and the bucket.
    pub place: String,
}

/// Builds the client of `url`'s bucket.
pub fn connect(url: &StoreUrl, endpoint: &EndpointArgs) -> anyhow::Result<Client> {
    let mut options = ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    let endpoint = match &endpoint.endpoint {
        Some(endpoint) if endpoint.starts_with("http://") => {
            options = options.with_allow_http(true);
            Some(endpoint.trim_end_matches('/'))
        }
        Some(endpoint) if endpoint.starts_with("https://") => Some(endpoint.trim_end_matches('/')),
        Some(endpoint) => bail!("--store-endpoint {endpoint}: not an http:// or https:// URL"),
        None => None,
    };
    let place = match (endpoint, url.scheme) {
        (Some(endpoint), _) => format!("{} at {endpoint}", url.bucket),
        (None, Scheme::S3) => format!("{} on AWS", url.bucket),
        (None, Scheme::Gcs) => format!("{} on Google Cloud Storage", url.bucket),
        (None, Scheme::Azure) => format!("{} on Azure", url.bucket),
    };
    let retry = RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
        ..RetryConfig::default()
    };
    let store: Arc<dyn ObjectStore> = match url.scheme {
        Scheme::S3 => {
            let mut builder = AmazonS3Builder::from_env().with_bucket_name(&url.bucket);
            if let Some(endpoint) = endpoint {
                builder = builder.with_endpoint(endpoint);
            }
            let built = builder.with_client_options(options).with_retry(retry);
            Arc::new(
                built
                    .build()
                    .with_context(|| format!("the store {place}"))?,
            )
        }
        Scheme::Gcs => {
            let mut builder = GoogleCloudStorageBuilder::from_env().with_bucket_name(&url.bucket);
            if let Some(endpoint) = endpoint {
                // object_store takes another base URL only from a service
                // account key, and then asks no token of Google: what a
                // GCS emulator (fake-gcs-server) wants.
                let key = serde_json::json!({
                    "gcs_base_url": endpoint,
                    "disable_oauth": true,
                    "client_email": "",
                    "private_key": "",
                    "private_key_id": "",
                });
                builder = builder.with_service_account_key(key.to_string());
            }
            let built = builder.with_client_options(options).with_retry(retry);
            Arc::new(
                built
                    .build()
                    .with_context(|| format!("the store {place}"))?,
            )
        }
        Scheme::Azure => {
            let mut builder = MicrosoftAzureBuilder::from_env().with_container_name(&url.bucket);
            if let Some(endpoint) = endpoint {
                // The account's blob endpoint, path-style for an emulator
                // (Azurite: `http://127.0.0.1:10000/ACCOUNT`).
                builder = builder.with_endpoint(endpoint.to_string());
                if endpoint.starts_with("http://") {
                    builder = builder.with_allow_http(true);
                }
            }
            let built = builder.with_client_options(options).with_retry(retry);
            Arc::new(
                built
                    .build()
                    .with_context(|| format!("the store {place}"))?,
            )
        }
    };
    Ok(Client { store, place })
}

/// The runtime the store's requests run on: one thread, this one, only in
/// the processes that talk to the store.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the store client's runtime")
}

/// An error of the store on one line, with what it means when that is
/// known: the S3 error's code and message rather than the whole XML body
/// object_store's messages carry.
pub fn one_line(error: &object_store::Error) -> String {
    let text = error.to_string();
    let between = |open: &str, close: &str| {
        let start = text.find(open)? + open.len();
        let end = start + text[start..].find(close)?;
        Some(text[start..end].to_string())
    };
    match (
        between("<Code>", "</Code>"),
        between("<Message>", "</Message>"),
    ) {
        (Some(code), Some(message)) => {
            // Azure's message goes on with the request's id and time.
            let message = message.lines().next().unwrap_or_default();
            let meaning = match code.as_str() {
                "InvalidAccessKeyId"
                | "SignatureDoesNotMatch"
                | "ExpiredToken"
                | "AuthenticationFailed" => "wrong credentials: ",
                "AccessDenied" | "AuthorizationPermissionMismatch" => {
                    "access refused (the policy): "
                }
                // Azure's for a bad signature as for a network rule.
                "AuthorizationFailure" => "refused (the credentials or the policy): ",
                _ => "",
            };
            format!("{meaning}{code}: {message}")
        }
        _ => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}
