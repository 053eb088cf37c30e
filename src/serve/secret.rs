//! Secret files a fleet shares (`--quic-host-key`, `--tls-ticket-keys`):
//! read once at start, before the sandbox (which does not let them be
//! read again), with the same rules and one-line errors for each.

use std::io::Read as _;
use std::path::Path;

/// Fewest bytes a secret file holds: 256 bits of secret.
pub const SECRET_MIN: usize = 32;

/// Most bytes a secret file may hold: it is a key, not a stream
/// (`/dev/urandom` named by mistake is refused, not read forever).
pub const SECRET_MAX: usize = 4096;

/// Every byte of the file at `path`, from `SECRET_MIN` to `SECRET_MAX` of
/// them; what is wrong with it, in one line naming `flag` and the file.
pub fn read(flag: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    let name = path.display();
    let mut secret = Vec::with_capacity(SECRET_MAX + 1);
    std::fs::File::open(path)
        .and_then(|f| f.take(SECRET_MAX as u64 + 1).read_to_end(&mut secret))
        .map_err(|e| anyhow::anyhow!("{flag} {name}: cannot read: {e}"))?;
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
