//! The S3 client: object_store's, configured from the environment (the
//! AWS chain as object_store reads it: `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`; web
//! identity through `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`; the
//! ECS container endpoint; else the EC2 instance metadata service), the
//! shared files under `~/.aws` ([`super::aws_files`]) and the flags, with
//! short retries: a store that does not answer is said within seconds,
//! not minutes.
//!
//! The precedence is the AWS CLI's: keys in the environment, then web
//! identity, then the profile's keys (credentials file, then config
//! file), then the container endpoint and the instance metadata; the
//! region from `AWS_REGION`, `AWS_DEFAULT_REGION`, then the profile; the
//! endpoint from `--store-endpoint`, `AWS_ENDPOINT_URL`, then the
//! profile's `endpoint_url`.

use std::path::Path;
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
    /// The endpoint it talks to, wherever it was given (the sandbox
    /// opens its port).
    pub endpoint: EndpointArgs,
}

/// Builds the client of `url`'s bucket.
pub fn connect(url: &StoreUrl, endpoint: &EndpointArgs) -> anyhow::Result<Client> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let profile = super::aws_files::load(&var)?.unwrap_or_default();
    let mut options = ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(&url.bucket);
    let environment_keys =
        var("AWS_ACCESS_KEY_ID").is_some() || var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some();
    if !environment_keys
        && let (Some(id), Some(secret)) = (&profile.access_key_id, &profile.secret_access_key)
    {
        builder = builder
            .with_access_key_id(id)
            .with_secret_access_key(secret);
        if let Some(token) = &profile.session_token {
            builder = builder.with_token(token);
        }
    }
    if var("AWS_REGION").is_none()
        && var("AWS_DEFAULT_REGION").is_none()
        && let Some(region) = &profile.region
    {
        builder = builder.with_region(region);
    }
    let given = match (
        &endpoint.endpoint,
        var("AWS_ENDPOINT_URL"),
        var("AWS_ENDPOINT"),
    ) {
        (Some(flag), _, _) => Some((flag.clone(), "--store-endpoint".to_string())),
        (None, Some(url), _) => Some((url, "AWS_ENDPOINT_URL".to_string())),
        (None, None, Some(url)) => Some((url, "AWS_ENDPOINT".to_string())),
        (None, None, None) => profile.endpoint_url.clone().map(|url| {
            let file = profile
                .endpoint_from
                .as_deref()
                .unwrap_or(Path::new("~/.aws"));
            (url, format!("endpoint_url in {}", file.display()))
        }),
    };
    let place = match &given {
        Some((endpoint, source)) => {
            if endpoint.starts_with("http://") {
                options = options.with_allow_http(true);
            } else if !endpoint.starts_with("https://") {
                bail!("{source} {endpoint}: not an http:// or https:// URL");
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
        endpoint: EndpointArgs {
            endpoint: given.map(|(endpoint, _)| endpoint),
        },
    })
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
