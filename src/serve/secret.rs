//! Secret files a fleet shares (`--quic-host-key`, `--tls-ticket-keys`):
//! read once at start, before the sandbox (which does not let them be
//! read again), with the same rules and one-line errors for each. A
//! secret named `s3://BUCKET/KEY` is an object of the store: a short
//! child, `kiln store get`, fetches it (the server runs no network
//! client), and the server refuses to start when it cannot.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context as _;

use super::ServeArgs;
use crate::store::StoreUrl;

/// Fewest bytes a secret file holds: 256 bits of secret.
pub const SECRET_MIN: usize = 32;

/// Most bytes a secret file may hold: it is a key, not a stream
/// (`/dev/urandom` named by mistake is refused, not read forever).
pub const SECRET_MAX: usize = 4096;

/// Every byte of the file at `path` (or of the object, for an `s3://`
/// URL, from the store `args` name), from `SECRET_MIN` to `SECRET_MAX` of
/// them; what is wrong with it, in one line naming `flag` and the file.
pub fn read(flag: &str, path: &Path, args: &ServeArgs) -> anyhow::Result<Vec<u8>> {
    let name = path.display();
    let secret = match path.to_str().filter(|p| StoreUrl::is_store(p)) {
        Some(url) => fetch(flag, url, args)?,
        None => {
            let mut secret = Vec::with_capacity(SECRET_MAX + 1);
            std::fs::File::open(path)
                .and_then(|f| f.take(SECRET_MAX as u64 + 1).read_to_end(&mut secret))
                .map_err(|e| anyhow::anyhow!("{flag} {name}: cannot read: {e}"))?;
            secret
        }
    };
    if secret.len() < SECRET_MIN {
        anyhow::bail!(
            "{flag} {name}: {} bytes, fewer than the {SECRET_MIN} a key needs \
             (make one with `head -c 32 /dev/urandom > FILE`)",
            secret.len()
        );
    }
    if secret.len() > SECRET_MAX {
        anyhow::bail!("{flag} {name}: more than {SECRET_MAX} bytes: not a key file");
    }
    Ok(secret)
}

/// The object at `url`, as `kiln store get` fetches it; its failure in
/// one line naming `flag` and the URL.
fn fetch(flag: &str, url: &str, args: &ServeArgs) -> anyhow::Result<Vec<u8>> {
    let exe = std::env::current_exe().context("cannot find kiln's own executable")?;
    let mut command = Command::new(&exe);
    command
        .args(["store", "get", url, "--max-bytes"])
        .arg((SECRET_MAX + 1).to_string());
    if let Some(endpoint) = &args.store.endpoint {
        command.args(["--store-endpoint", endpoint]);
    }
    if args.no_sandbox {
        command.arg("--no-sandbox");
    }
    let out = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("{flag} {url}: cannot start {} store get", exe.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .map_or("no reason given", |l| l.trim_start_matches("kiln: error: "));
        anyhow::bail!("{flag} {url}: cannot fetch it: {why}");
    }
    Ok(out.stdout)
}
