//! The S3 client: object_store's, configured from the environment (the
//! AWS chain as object_store reads it: `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`; web
//! identity through `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`; the
//! ECS container endpoint; else the EC2 instance metadata service. Not
//! the shared files under `~/.aws`) and the flags, with short retries: a
//! store that does not answer is said within seconds, not minutes.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use object_store::aws::AmazonS3Builder;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

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
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(&url.bucket);
    let place = match &endpoint.endpoint {
        Some(endpoint) => {
            if endpoint.starts_with("http://") {
                options = options.with_allow_http(true);
            } else if !endpoint.starts_with("https://") {
                bail!("--store-endpoint {endpoint}: not an http:// or https:// URL");
            }
            builder = builder.with_endpoint(endpoint.trim_end_matches('/'));
            format!("{} at {endpoint}", url.bucket)
        }
        None => format!("{} on AWS", url.bucket),
    };
    let retry = RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
        ..RetryConfig::default()
    };
    let store = builder
        .with_client_options(options)
        .with_retry(retry)
        .build()
        .with_context(|| format!("the store {place}"))?;
    Ok(Client {
        store: Arc::new(store),
        place,
    })
}

/// The runtime the store's requests run on: one thread, this one, only in
/// the processes that talk to the store; the disk's work of fetches
/// (fsync, checksums) on up to `PARALLEL_FETCHES` blocking threads.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(super::sync::PARALLEL_FETCHES)
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
            let meaning = match code.as_str() {
                "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "ExpiredToken" => {
                    "wrong credentials: "
                }
                "AccessDenied" => "access refused (the policy): ",
                _ => "",
            };
            format!("{meaning}{code}: {message}")
        }
        _ => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}
