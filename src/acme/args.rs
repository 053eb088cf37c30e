//! The flags `kiln serve --acme` and `kiln acme` share, each with its
//! `KILN_*` variable.

use std::path::PathBuf;

use crate::store::StoreUrl;

/// Let's Encrypt's production directory: the CA when none is named.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// Let's Encrypt's staging directory (`--acme-staging`).
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";

/// Which CA, which account, and where the state lives.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct AcmeArgs {
    /// The account's contact address, to which the CA may send notices.
    #[arg(long = "acme-email", value_name = "ADDRESS", env = "KILN_ACME_EMAIL")]
    pub email: Option<String>,
    /// The CA's ACME directory URL [default: Let's Encrypt].
    #[arg(
        long = "acme-ca",
        value_name = "URL",
        conflicts_with = "staging",
        env = "KILN_ACME_CA"
    )]
    pub ca: Option<String>,
    /// Use Let's Encrypt's staging CA (for trials: browsers do not trust
    /// its certificates).
    #[arg(long = "acme-staging", env = "KILN_ACME_STAGING")]
    pub staging: bool,
    /// Trust the root certificates in this PEM file for the CA's own
    /// HTTPS (a private CA), instead of the system's.
    #[arg(long = "acme-ca-root", value_name = "PEM", env = "KILN_ACME_CA_ROOT")]
    pub ca_root: Option<PathBuf>,
    /// The state folder: accounts, certificates, keys, renewal state
    /// (created with mode 0700); or `s3://BUCKET/PREFIX/`, the state in a
    /// bucket shared by a fleet (with --store-endpoint; docs/fleet.md),
    /// mirrored into --acme-cache-dir.
    #[arg(
        long = "acme-dir",
        value_name = "DIR|s3://BUCKET/PREFIX/",
        default_value = "/var/lib/kiln/acme",
        env = "KILN_ACME_DIR"
    )]
    pub dir: PathBuf,
    /// With --acme-dir s3://…: the local folder the bucket's state is
    /// mirrored into, which the server reads [default:
    /// /var/lib/kiln/acme-cache/BUCKET/HASH-OF-PREFIX].
    #[arg(
        long = "acme-cache-dir",
        id = "acme_cache_dir",
        value_name = "DIR",
        env = "KILN_ACME_CACHE_DIR"
    )]
    pub cache_dir: Option<PathBuf>,
}

impl AcmeArgs {
    /// The bucket `--acme-dir` names, if it names one.
    pub fn bucket(&self) -> anyhow::Result<Option<StoreUrl>> {
        match self.dir.to_str().filter(|d| StoreUrl::is_store(d)) {
            Some(text) => StoreUrl::parse_folder(text)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("--acme-dir {e}")),
            None => Ok(None),
        }
    }

    /// The local state folder: `--acme-dir`, or with a bucket its mirror.
    pub fn local_dir(&self) -> anyhow::Result<PathBuf> {
        Ok(match self.bucket()? {
            Some(url) => self.cache_dir.clone().unwrap_or_else(|| {
                let hash = blake3::hash(url.prefix.as_bytes()).to_hex();
                PathBuf::from("/var/lib/kiln/acme-cache")
                    .join(&url.bucket)
                    .join(&hash.as_str()[..16])
            }),
            None => {
                if self.cache_dir.is_some() {
                    anyhow::bail!("--acme-cache-dir goes with --acme-dir s3://…");
                }
                self.dir.clone()
            }
        })
    }

    /// The directory URL of the CA these flags name.
    pub fn directory_url(&self) -> &str {
        match (&self.ca, self.staging) {
            (Some(url), _) => url,
            (None, true) => LETS_ENCRYPT_STAGING,
            (None, false) => LETS_ENCRYPT,
        }
    }
}
