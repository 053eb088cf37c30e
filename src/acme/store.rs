//! The client's side of the state folder ([`super::layout`]): creating
//! it, writing files whole (beside, then renamed), and reading back the
//! certificate a name has now.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow};
use instant_acme::CertificateIdentifier;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::layout;

/// The folders of the layout, each created with mode 0700 if missing, by
/// the client and, before it starts, by `kiln serve --acme` (which
/// watches them from the start). `owner`: hand the state folder and its
/// folders to this uid/gid (the `--user` the client runs as, which the
/// server serves as too), so that it can write them.
pub fn prepare(dir: &Path, owner: Option<(u32, u32)>) -> anyhow::Result<()> {
    // Folders above it that do not exist yet (`/var/lib/kiln`) are made
    // 0755: the user switched to must pass through them.
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(|e| anyhow!("{}: cannot create: {e}", parent.display()))?;
    }
    let folders = [
        dir.to_path_buf(),
        dir.join("accounts"),
        dir.join("locks"),
        layout::certs_dir(dir),
        dir.join("challenges"),
        layout::http01_dir(dir),
        layout::tls_alpn01_dir(dir),
        layout::status_dir(dir),
    ];
    for folder in &folders {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(folder)
            .map_err(|e| anyhow!("{}: cannot create: {e}", folder.display()))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(folder, Some(uid), Some(gid))
                .with_context(|| format!("{}: cannot hand it to uid {uid}", folder.display()))?;
        }
    }
    // The state folder holds keys: never wider than 0700, whoever made it.
    let mode = fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("{}: cannot set mode 0700", dir.display()))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` whole: into a new file beside it (mode
/// `mode`), synced, then renamed over it.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let folder = path
        .parent()
        .ok_or_else(|| anyhow!("{}: no folder", path.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temp = folder.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        unix_now_nanos()
    ));
    let written = (|| -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(anyhow!("{}: cannot write: {e}", path.display()));
    }
    Ok(())
}

/// Writes `bytes` to `path` whole unless a file is there already (made
/// beside it, then hard-linked into place, which fails if one is):
/// whether it was written.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<bool> {
    let folder = path
        .parent()
        .ok_or_else(|| anyhow!("{}: no folder", path.display()))?;
    let temp = folder.join(format!(
        ".new.{}.{}.tmp",
        std::process::id(),
        unix_now_nanos()
    ));
    write_atomically(&temp, bytes, mode)?;
    let linked = fs::hard_link(&temp, path);
    remove(&temp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(anyhow!("{}: cannot write: {e}", path.display())),
    }
}

/// Removes `path`; a file already gone is not an error.
pub fn remove(path: &Path) {
    if let Err(e) = fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("acme: cannot remove {}: {e}", path.display());
    }
}

/// Now, in Unix seconds.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn unix_now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Where the account for the CA at `directory_url` is kept: one file per
/// CA, named after the URL (scheme left out, every other character not
/// a letter, digit, `.` or `-` made `_`).
pub fn account_path(dir: &Path, directory_url: &str) -> PathBuf {
    let bare = directory_url
        .split_once("://")
        .map_or(directory_url, |(_, rest)| rest);
    let file: String = bare
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join("accounts").join(format!("{file}.json"))
}

/// The certificate a name has now, as far as renewal cares.
pub struct Current {
    /// Its notBefore, Unix seconds.
    pub not_before: i64,
    /// Its notAfter, Unix seconds.
    pub not_after: i64,
    /// Its ARI identifier (RFC 9773 §4.1), when it has an AKI.
    pub id: Option<CertificateIdentifier<'static>>,
}

/// Reads `certs/NAME.crt`: `None` when there is none, or it is not a
/// certificate for `name` with a key beside it (then it is replaced).
pub fn current(dir: &Path, name: &str) -> Option<Current> {
    let pem = fs::read(layout::cert_path(dir, name)).ok()?;
    if !layout::key_path(dir, name).exists() {
        return None;
    }
    let leaf = CertificateDer::pem_slice_iter(&pem).next()?.ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let covers = cert.subject_alternative_name().ok().flatten().is_some_and(|san| {
        san.value.general_names.iter().any(|n| {
            matches!(n, x509_parser::extensions::GeneralName::DNSName(d) if d.eq_ignore_ascii_case(name))
        })
    });
    if !covers {
        return None;
    }
    let validity = cert.validity();
    Some(Current {
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        id: CertificateIdentifier::try_from(&leaf).ok(),
    })
}

/// Writes `status` to `status/NAME.json`; a failure is logged, not fatal
/// (the certificates matter more than their report).
pub fn write_status(dir: &Path, status: &layout::Status) {
    let path = layout::status_path(dir, &status.name);
    if let Err(e) = write_atomically(&path, status.to_json().as_bytes(), 0o644) {
        tracing::warn!("acme: {e:#}");
    }
}

/// The status file of `name` as it is, or a fresh one.
pub fn read_status(dir: &Path, name: &str) -> Option<layout::Status> {
    let text = fs::read_to_string(layout::status_path(dir, name)).ok()?;
    layout::Status::from_json(&text)
}
