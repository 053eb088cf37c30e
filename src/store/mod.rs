//! An S3-compatible object store as the source of a folder of sites
//! (`docs/fleet.md`): `kiln publish` uploads a verified pack, and `kiln
//! store sync`, the child `kiln serve s3://…` starts before its sandbox,
//! mirrors the `HOST.pack` (and `HOST.crt`/`HOST.key`) objects under a
//! prefix into a local cache folder that the server serves as any folder
//! of sites.
//!
//! The network client (object_store over reqwest and rustls) and its tokio
//! runtime live only in these commands' processes, never in the serving
//! loops: the server only reads the cache folder and the state file the
//! child writes there ([`state`]).

mod aws_files;
pub mod client;
mod get;
pub mod publish;
pub(crate) mod sandbox;
pub mod state;
pub mod status;
mod supervisor;
pub mod sync;
mod url;

pub use self::url::StoreUrl;

use std::path::PathBuf;

/// `kiln store`: the commands `kiln serve s3://…` runs beside the server.
#[derive(clap::Args)]
pub struct StoreCommand {
    #[command(subcommand)]
    pub command: StoreSubcommand,
}

#[derive(clap::Subcommand)]
pub enum StoreSubcommand {
    /// Mirror the packs under s3://BUCKET/PREFIX/ into --cache-dir, every
    /// --sync-interval seconds and at once when standard input says
    /// `list` (the server's SIGHUP); with --cache-size, only what fits,
    /// and `fetch HOST` on standard input fetches a cold site first; ends
    /// when standard input closes (the server is gone).
    Sync(sync::SyncArgs),
    /// Write one small object (a secret the server is given as a store
    /// URL) to standard output, at most --max-bytes of it.
    Get(get::GetArgs),
}

/// Where to find the store: the flags `kiln publish`, `kiln store sync`
/// and `kiln serve s3://…` share (the last also for a secret given as
/// `s3://BUCKET/KEY`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct EndpointArgs {
    /// The store's endpoint, for an S3-compatible server other than AWS
    /// (MinIO, Ceph RGW, Garage, R2): `https://HOST[:PORT]`, or
    /// `http://HOST[:PORT]` (cleartext is allowed only when typed so).
    /// Default: AWS_ENDPOINT_URL, else the AWS profile's endpoint_url
    /// (~/.aws/config), else AWS, in the region of AWS_REGION or the
    /// profile's (us-east-1 without either).
    #[arg(
        long = "store-endpoint",
        value_name = "URL",
        env = "KILN_STORE_ENDPOINT"
    )]
    pub endpoint: Option<String>,
}

/// Runs `kiln store …`.
pub fn run(command: StoreCommand) -> anyhow::Result<()> {
    crate::report::init_logging();
    match command.command {
        StoreSubcommand::Sync(args) => sync::run(args),
        StoreSubcommand::Get(args) => get::run(args),
    }
}

/// The cache folder of `url` when `--cache-dir` is not given: one folder
/// per bucket and prefix under the state directory, so that two stores
/// served on one machine never share one.
pub fn default_cache_dir(url: &StoreUrl) -> PathBuf {
    let hash = blake3::hash(url.prefix.as_bytes()).to_hex();
    PathBuf::from("/var/lib/kiln/store")
        .join(&url.bucket)
        .join(&hash.as_str()[..16])
}

/// A `--cache-size`: bytes, or a number with a suffix K, M, G or T
/// (powers of 1024; a trailing `B` or `iB` allowed: `10G`, `500MiB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let upper = text.trim().to_ascii_uppercase();
    let digits = upper.trim_end_matches(['B', 'I']);
    let (number, shift) = match digits.chars().last() {
        Some('K') => (&digits[..digits.len() - 1], 10),
        Some('M') => (&digits[..digits.len() - 1], 20),
        Some('G') => (&digits[..digits.len() - 1], 30),
        Some('T') => (&digits[..digits.len() - 1], 40),
        _ if digits.len() == upper.len() || upper.ends_with('B') => (digits, 0),
        _ => ("", 0),
    };
    let bytes = number
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n > 0.0)
        .map(|n| n * (1u64 << shift) as f64)
        .filter(|n| *n >= 1.0 && *n < u64::MAX as f64)
        .ok_or_else(|| format!("{text:?} is not a size (bytes, or with K, M, G or T: 10G)"))?;
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        for (text, bytes) in [
            ("1000", Some(1000)),
            ("10G", Some(10 << 30)),
            ("500M", Some(500 << 20)),
            ("500MiB", Some(500 << 20)),
            ("1.5k", Some(1536)),
            ("64KB", Some(64 << 10)),
            ("2T", Some(2 << 40)),
            ("0", None),
            ("-1G", None),
            ("ten", None),
            ("10X", None),
            ("", None),
        ] {
            assert_eq!(parse_size(text).ok(), bytes, "{text}");
        }
    }
}
