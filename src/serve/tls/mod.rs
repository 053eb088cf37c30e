//! TLS for kiln's listeners: rustls driven sans-IO inside the event loops
//! (no async runtime). `certs` loads and chooses certificates, `session`
//! is one connection's TLS state between the loop and the protocol (rustls
//! for the handshake, after `hello` refused a client offering only TLS
//! 1.1 or older with `protocol_version`), `record` seals and opens records after it, in
//! place, with the keys rustls hands over; `ktls` (the cargo feature
//! `ktls`, off by default) would hand the same keys to the kernel where
//! it can take them, and is not called by the server.
//!
//! Settings (RFC 8446 and the choices): TLS 1.3 and 1.2, AEAD
//! suites only, X25519 and P-256 key exchange, session resumption by
//! tickets with rotating keys (random per process, or shared by a fleet:
//! `ticket_keys`; and a session cache for TLS 1.2 clients
//! without tickets), no 0-RTT, ALPN `h2` then `http/1.1` (what `serve`
//! offers, most preferred first); the server's order of suites
//! (AES-128-GCM first) wins over the client's.

pub mod certs;
mod hello;
#[cfg(feature = "ktls")]
pub mod ktls;
pub mod record;
#[cfg(test)]
mod rfc8448;
pub mod session;
pub mod ticket_keys;

use std::io;
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::crypto::aws_lc_rs::{self as provider, cipher_suite, kx_group};
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::{ServerConfig, version};

pub use certs::{PairPaths, SniResolver, Source};
pub use session::TlsSession;

/// The ALPN protocol of ACME TLS-ALPN-01 validations (RFC 8737): offered
/// last, and only under `--acme`; a connection that agrees on it gets the
/// challenge certificate and is closed once the handshake is done.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// TLS 1.2 sessions remembered for clients that do not take tickets.
const SESSION_CACHE: usize = 4096;

/// The crypto provider: aws-lc-rs, restricted to the suites and groups
/// above. Measured against ring (bench/tls_provider, docs/tls.md): 1.3×
/// the full TLS 1.3 handshakes and 1.4× the resumed ones per server
/// CPU-second, where a static server's TLS cost is; ring encrypts
/// AES-128-GCM 1.55× as fast on this CPU (AVX2 VAES, no AVX-512), which
/// only pays beyond ~250 KB of body per handshake.
pub fn provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ],
        kx_groups: vec![kx_group::X25519, kx_group::SECP256R1],
        ..provider::default_provider()
    }
}

/// What resumes sessions: the ticket keys and the TLS 1.2 session cache.
type Resumption = (Arc<dyn ProducesTickets>, Arc<dyn StoresServerSessions>);

/// The ticketer `--tls-ticket-keys` asked for, installed before the first
/// configuration is built.
static SHARED_TICKETER: OnceLock<Arc<dyn ProducesTickets>> = OnceLock::new();

/// Seals tickets with `keys` (`--tls-ticket-keys`) instead of random keys
/// of this process's own: called once, before any configuration is built.
pub fn use_ticket_keys(keys: ticket_keys::TicketKeys) -> Result<(), String> {
    SHARED_TICKETER
        .set(Arc::new(keys))
        .map_err(|_| "TLS session tickets: keys installed twice".to_owned())
}

/// The ticket keys (rotating) and the TLS 1.2 session cache, made once per
/// process: a certificate reload builds a new configuration, and the
/// tickets and sessions clients hold from before stay good.
fn resumption() -> Result<Resumption, String> {
    static STATE: OnceLock<Resumption> = OnceLock::new();
    if let Some(state) = STATE.get() {
        return Ok(state.clone());
    }
    let ticketer = match SHARED_TICKETER.get() {
        Some(shared) => Arc::clone(shared),
        None => provider::Ticketer::new().map_err(|e| format!("TLS session tickets: {e}"))?,
    };
    let sessions: Arc<dyn StoresServerSessions> = ServerSessionMemoryCache::new(SESSION_CACHE);
    Ok(STATE.get_or_init(|| (ticketer, sessions)).clone())
}

/// Builds the server configuration every new connection starts from.
/// `alpn`: the protocols offered, most preferred first.
pub fn server_config(
    resolver: Arc<SniResolver>,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>, String> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&version::TLS13, &version::TLS12])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let (ticketer, sessions) = resumption()?;
    config.ticketer = ticketer;
    config.session_storage = sessions;
    // One ticket per full handshake: a browser resumes with one, and each
    // ticket costs an encryption on the handshake path.
    config.send_tls13_tickets = 1;
    config.max_early_data_size = 0;
    // The server's order above, not the client's: OpenSSL clients (curl,
    // wrk, Python) list AES-256-GCM-SHA384 first, and SHA-384 has no
    // instructions of its own on x86 while SHA-256 has (SHA-NI): the
    // handshake's key schedule and HMACs then cost a fifth of its CPU
    // time (perf, one handshake per connection), for no security a
    // 128-bit key exchange can use.
    config.ignore_client_order = true;
    // The record layer after the handshake is kiln's (or the kernel's):
    // it takes the traffic secrets from rustls.
    config.enable_secret_extraction = true;
    Ok(Arc::new(config))
}

/// The upper-layer protocols TCP can attach now: `tls` is there when the
/// kernel has kTLS built in or its module loaded (one that could be loaded
/// on demand is not listed: `modprobe tls`).
const AVAILABLE_ULP: &str = "/proc/sys/net/ipv4/tcp_available_ulp";

/// Whether the kernel offers kTLS, read from `AVAILABLE_ULP` (no socket
/// opened); the error names the file when it cannot be read.
pub fn kernel_offers_ktls() -> io::Result<bool> {
    std::fs::read_to_string(AVAILABLE_ULP)
        .map(|list| lists_tls(&list))
        .map_err(|e| io::Error::new(e.kind(), format!("{AVAILABLE_ULP}: {e}")))
}

/// Whether a space-separated list of upper-layer protocols has `tls`.
fn lists_tls(list: &str) -> bool {
    list.split_ascii_whitespace().any(|ulp| ulp == "tls")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload's configuration resumes the sessions of the one before.
    #[test]
    fn configurations_share_ticket_keys_and_sessions() {
        let source = Source::SelfSigned(vec!["localhost".into()]);
        let make = || {
            let resolver = Arc::new(certs::load(&source, 1_700_000_000).unwrap());
            server_config(resolver, &[b"h2"]).unwrap()
        };
        let (first, second) = (make(), make());
        assert!(Arc::ptr_eq(&first.ticketer, &second.ticketer));
        assert!(Arc::ptr_eq(&first.session_storage, &second.session_storage));
    }

    #[test]
    fn tls_is_found_among_the_available_upper_layer_protocols() {
        assert!(lists_tls("espintcp mptcp tls\n"));
        assert!(lists_tls("tls\n"));
        assert!(!lists_tls("espintcp mptcp\n"));
        assert!(!lists_tls("tlsx smc\n"));
        assert!(!lists_tls(""));
    }
}
