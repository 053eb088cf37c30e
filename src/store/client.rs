//! The store client: object_store's, configured from the environment and
//! the flags, with short retries: a store that does not answer is said
//! within seconds, not minutes. The environment:
//! - S3: the AWS chain as object_store reads it (`AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`; web
//!   identity through `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`;
//!   the ECS container endpoint; else the EC2 instance metadata service)
//!   and the shared files under `~/.aws` ([`super::aws_files`]). The
//!   precedence is the AWS CLI's: keys in the environment, then web
//!   identity, then the profile's keys (credentials file, then config
//!   file), then the container endpoint and the instance metadata; the
//!   region from `AWS_REGION`, `AWS_DEFAULT_REGION`, then the profile; the
//!   endpoint from `--store-endpoint`, `AWS_ENDPOINT_URL`, then the
//!   profile's `endpoint_url`.
//! - GCS: `GOOGLE_SERVICE_ACCOUNT` (a key file) or
//!   `GOOGLE_APPLICATION_CREDENTIALS`, else the metadata server.
//! - Azure: `AZURE_STORAGE_ACCOUNT_NAME` with `AZURE_STORAGE_ACCOUNT_KEY`
//!   (or a SAS, a client secret, workload identity, managed identity).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

use super::aws_files::Profile;
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
    /// The endpoint it talks to, wherever it was given (the sandbox
    /// opens its port).
    pub endpoint: EndpointArgs,
}

/// Builds the client of `url`'s bucket.
pub fn connect(url: &StoreUrl, endpoint: &EndpointArgs) -> anyhow::Result<Client> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let profile = match url.scheme {
        Scheme::S3 => super::aws_files::load(&var)?.unwrap_or_default(),
        Scheme::Gcs | Scheme::Azure => Profile::default(),
    };
    let mut options = ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    let given = match (url.scheme, &endpoint.endpoint) {
        (_, Some(flag)) => Some((flag.clone(), "--store-endpoint".to_string())),
        (Scheme::S3, None) => s3_endpoint(&profile, &var),
        (Scheme::Gcs | Scheme::Azure, None) => None,
    };
    if let Some((endpoint, source)) = &given {
        if endpoint.starts_with("http://") {
            options = options.with_allow_http(true);
        } else if !endpoint.starts_with("https://") {
            bail!("{source} {endpoint}: not an http:// or https:// URL");
        }
    }
    let endpoint = given
        .as_ref()
        .map(|(endpoint, _)| endpoint.trim_end_matches('/'));
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
    let built = match url.scheme {
        Scheme::S3 => s3_builder(url, &profile, &var, endpoint)
            .with_client_options(options)
            .with_retry(retry)
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
        Scheme::Gcs => gcs_builder(url, endpoint)
            .with_client_options(options)
            .with_retry(retry)
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
        Scheme::Azure => azure_builder(url, endpoint)
            .with_client_options(options)
            .with_retry(retry)
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
    };
    let store = built.with_context(|| format!("the store {place}"))?;
    Ok(Client {
        store,
        place,
        endpoint: EndpointArgs {
            endpoint: given.map(|(endpoint, _)| endpoint),
        },
    })
}

/// An S3 endpoint given elsewhere than `--store-endpoint`, and where:
/// `AWS_ENDPOINT_URL`, `AWS_ENDPOINT`, then the profile's `endpoint_url`.
fn s3_endpoint(
    profile: &Profile,
    var: &dyn Fn(&str) -> Option<String>,
) -> Option<(String, String)> {
    if let Some(url) = var("AWS_ENDPOINT_URL") {
        return Some((url, "AWS_ENDPOINT_URL".to_string()));
    }
    if let Some(url) = var("AWS_ENDPOINT") {
        return Some((url, "AWS_ENDPOINT".to_string()));
    }
    profile.endpoint_url.clone().map(|url| {
        let file = profile
            .endpoint_from
            .as_deref()
            .unwrap_or(Path::new("~/.aws"));
        (url, format!("endpoint_url in {}", file.display()))
    })
}

/// The S3 client's builder: the environment's AWS chain, the profile's
/// keys and region where the environment has none.
fn s3_builder(
    url: &StoreUrl,
    profile: &Profile,
    var: &dyn Fn(&str) -> Option<String>,
    endpoint: Option<&str>,
) -> AmazonS3Builder {
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
    match endpoint {
        Some(endpoint) => builder.with_endpoint(endpoint),
        None => builder,
    }
}

/// The GCS client's builder: credentials from the environment.
fn gcs_builder(url: &StoreUrl, endpoint: Option<&str>) -> GoogleCloudStorageBuilder {
    let builder = GoogleCloudStorageBuilder::from_env().with_bucket_name(&url.bucket);
    match endpoint {
        // object_store takes another base URL only from a service account
        // key, and then asks Google for no token: what a GCS emulator
        // wants (object_store's own tests run so).
        Some(endpoint) => builder.with_service_account_key(
            serde_json::json!({
                "gcs_base_url": endpoint,
                "disable_oauth": true,
                "client_email": "",
                "private_key": "",
                "private_key_id": "",
            })
            .to_string(),
        ),
        None => builder,
    }
}

/// The Azure client's builder: the account and its credentials from the
/// environment.
fn azure_builder(url: &StoreUrl, endpoint: Option<&str>) -> MicrosoftAzureBuilder {
    let builder = MicrosoftAzureBuilder::from_env().with_container_name(&url.bucket);
    match endpoint {
        // The account's blob endpoint; path-style for an emulator
        // (Azurite: `http://127.0.0.1:10000/ACCOUNT`).
        Some(endpoint) => builder
            .with_endpoint(endpoint.to_string())
            .with_allow_http(endpoint.starts_with("http://")),
        None => builder,
    }
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
