//! The ACME state folder (`--acme-dir`): what the client writes and the
//! server reads. The server only ever reads it (its sandbox gives it no
//! write right); every file the server reads is written beside its final
//! name and renamed, so a reader sees the old file or the new one, whole.
//!
//! ```text
//! DIR/                         mode 0700
//!   accounts/CA.json           account credentials per CA (client only)
//!   locks/NAME.lock            one client orders NAME at a time (client only)
//!   certs/NAME.crt             the managed chain, PEM, leaf first
//!   certs/NAME.key             its PKCS#8 ECDSA P-256 key, PEM, mode 0600
//!   challenges/http-01/TOKEN   the key authorization, exactly (RFC 8555 8.3)
//!   challenges/tls-alpn-01/NAME.pem
//!                              the RFC 8737 certificate, then its key, PEM
//!   status/NAME.json           the name's state, see [`Status`]
//! ```
//!
//! NAME is the domain in lower case ASCII (A-labels), no trailing dot.
//! A pair is renamed into place key first, then certificate: a reader
//! that finds a certificate finds its key.

use std::path::{Path, PathBuf};

/// Where a certificate pair of `name` lives.
pub fn cert_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("certs").join(format!("{name}.crt"))
}

/// Where the key of `name`'s certificate lives.
pub fn key_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("certs").join(format!("{name}.key"))
}

/// The folder of managed pairs.
pub fn certs_dir(dir: &Path) -> PathBuf {
    dir.join("certs")
}

/// The folder of HTTP-01 key authorizations, in the state folder.
pub const HTTP01: &str = "challenges/http-01";
/// The folder of TLS-ALPN-01 certificates, in the state folder.
pub const TLS_ALPN01: &str = "challenges/tls-alpn-01";

/// The folder of HTTP-01 key authorizations, one file per token.
pub fn http01_dir(dir: &Path) -> PathBuf {
    dir.join(HTTP01)
}

/// The folder of TLS-ALPN-01 certificates, one PEM file per name.
pub fn tls_alpn01_dir(dir: &Path) -> PathBuf {
    dir.join(TLS_ALPN01)
}

/// The TLS-ALPN-01 certificate and key for `name`.
pub fn tls_alpn01_path(dir: &Path, name: &str) -> PathBuf {
    tls_alpn01_dir(dir).join(format!("{name}.pem"))
}

/// The folder of status files.
pub fn status_dir(dir: &Path) -> PathBuf {
    dir.join("status")
}

/// The status file of `name`.
pub fn status_path(dir: &Path, name: &str) -> PathBuf {
    status_dir(dir).join(format!("{name}.json"))
}

/// One managed name's state, rewritten by the client at every event and
/// read by `/metrics` and `kiln acme status`. Times are Unix seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The domain.
    pub name: String,
    /// The directory URL of the CA that issued (or is to issue) it.
    pub ca: String,
    /// The current certificate's notAfter, if there is one.
    pub not_after: Option<i64>,
    /// When the client means to renew (or retry) next.
    pub next_attempt: Option<i64>,
    /// The last failure, one line, until a success clears it.
    pub last_error: Option<String>,
    /// When that failure happened.
    pub last_error_at: Option<i64>,
}

impl Status {
    /// The file's text: one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "name": self.name,
            "ca": self.ca,
            "not_after": self.not_after,
            "next_attempt": self.next_attempt,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
        })
        .to_string()
    }

    /// Reads a status file's text; `None` when it is not one.
    pub fn from_json(text: &str) -> Option<Status> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let int = |k: &str| v.get(k).and_then(serde_json::Value::as_i64);
        let string = |k: &str| v.get(k).and_then(|s| s.as_str()).map(str::to_owned);
        Some(Status {
            name: string("name")?,
            ca: string("ca").unwrap_or_default(),
            not_after: int("not_after"),
            next_attempt: int("next_attempt"),
            last_error: string("last_error"),
            last_error_at: int("last_error_at"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_back_what_was_written() {
        let s = Status {
            name: "example.com".into(),
            ca: "https://ca.test/dir".into(),
            not_after: Some(1_800_000_000),
            next_attempt: None,
            last_error: Some("order: 429 \"rate limited\"".into()),
            last_error_at: Some(1_700_000_000),
        };
        assert_eq!(Status::from_json(&s.to_json()), Some(s));
        assert_eq!(Status::from_json("{}"), None);
        assert_eq!(Status::from_json("not json"), None);
    }
}
