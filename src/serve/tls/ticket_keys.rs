//! `--tls-ticket-keys`: TLS session tickets sealed with keys every node of
//! a fleet computes alike, so that a ticket one node issued resumes on
//! any other, before and after a rotation.
//!
//! Time is cut into periods of `--tls-ticket-key-period` seconds (12 h by
//! default), numbered from the Unix epoch: period n is
//! floor(unix_time / P). Its key is HKDF-SHA256 of the shared secret
//! (salt `kiln tls ticket keys`), expanded with the label `tls ticket key`
//! and n as 8 big-endian bytes: an AES-256-GCM key. A ticket is sealed
//! with the current period's key and carries that period's number in the
//! clear; it is opened with its period's key when that period is the
//! previous, the current or the next one (the next for a node whose clock
//! runs ahead of this one's), and refused otherwise. Each key then leaves
//! memory two periods after its own: a stolen key opens at most three
//! periods' tickets, and the secret file, read once at start, is not kept.
//!
//! A ticket: the period (8 bytes) ‖ a random nonce (12) ‖ the sealed
//! session state and its tag (16), the period being the additional data.
//! Random nonces are safe for 2^32 tickets per key, fleet-wide: about
//! 100,000 full handshakes a second for 12 hours (a shorter period for
//! more).

use std::sync::RwLock;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf;
use rustls::server::ProducesTickets;

/// The default period: a key seals tickets for 12 hours (rustls' own
/// ticketer's lifetime).
pub const DEFAULT_PERIOD: u64 = 12 * 60 * 60;

/// The longest period: a ticket then lives up to twice that, and TLS 1.3
/// allows at most 7 days (RFC 8446, 4.6.1).
pub const MAX_PERIOD: u64 = 3 * 24 * 60 * 60;

/// Bytes before the sealed state: the period and the nonce.
const HEADER: usize = 8 + NONCE_LEN;

/// Bytes of the tag after it.
const TAG: usize = 16;

/// The three keys a node may need in one period.
struct Window {
    /// The current period.
    period: u64,
    /// The keys of the periods before, at and after it.
    keys: [LessSafeKey; 3],
}

/// The ticketer: keys derived from a shared secret, by period.
pub struct TicketKeys {
    /// The secret, extracted: what each period's key is expanded from.
    prk: hkdf::Prk,
    /// Seconds a period lasts.
    period: u64,
    /// The keys around the current period, derived again when it ends.
    window: RwLock<Window>,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys are left out.
        f.debug_struct("TicketKeys")
            .field("period", &self.period)
            .finish()
    }
}

/// Seconds since the Unix epoch (0 for a clock before it).
fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl TicketKeys {
    /// The ticketer of `secret` (as `secret::read` gives it) with periods
    /// of `period` seconds (from 1 to `MAX_PERIOD`, checked by the caller).
    pub fn new(secret: &[u8], period: u64) -> Result<TicketKeys, aws_lc_rs::error::Unspecified> {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"kiln tls ticket keys").extract(secret);
        let current = now_unix() / period;
        let keys = window_keys(&prk, current)?;
        Ok(TicketKeys {
            prk,
            period,
            window: RwLock::new(Window {
                period: current,
                keys,
            }),
        })
    }

    /// Runs `use_key` on the key of `period` when it is the one before,
    /// at or after the period of `now`; `None` for any other (or when the
    /// keys cannot be derived).
    fn with_key<T>(
        &self,
        now: u64,
        period: u64,
        use_key: impl FnOnce(&LessSafeKey) -> Option<T>,
    ) -> Option<T> {
        let current = now / self.period;
        let slot = usize::try_from(period.checked_add(1)?.checked_sub(current)?).ok()?;
        if slot > 2 {
            return None;
        }
        {
            let window = self.window.read().ok()?;
            if window.period == current {
                return use_key(&window.keys[slot]);
            }
        }
        let mut window = self.window.write().ok()?;
        if window.period != current {
            *window = Window {
                period: current,
                keys: window_keys(&self.prk, current).ok()?,
            };
        }
        use_key(&window.keys[slot])
    }

    /// `plain` sealed with the key of the period of `now`.
    fn seal_at(&self, now: u64, plain: &[u8]) -> Option<Vec<u8>> {
        let period = now / self.period;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut ticket = Vec::with_capacity(HEADER + plain.len() + TAG);
        ticket.extend_from_slice(&period.to_be_bytes());
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(plain);
        let mut sealed = ticket.split_off(HEADER);
        self.with_key(now, period, |key| {
            key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(period.to_be_bytes()),
                &mut sealed,
            )
            .ok()
        })?;
        ticket.append(&mut sealed);
        Some(ticket)
    }

    /// The state sealed in `ticket`, when its period is near enough to
    /// that of `now` and it opens with that period's key.
    fn open_at(&self, now: u64, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < HEADER + TAG {
            return None;
        }
        let (header, sealed) = ticket.split_at(HEADER);
        let (period, nonce) = header.split_at(8);
        let period_bytes: [u8; 8] = period.try_into().ok()?;
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let period = u64::from_be_bytes(period_bytes);
        let mut state = sealed.to_vec();
        let len = self.with_key(now, period, |key| {
            key.open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(period_bytes),
                &mut state,
            )
            .ok()
            .map(|plain| plain.len())
        })?;
        state.truncate(len);
        Some(state)
    }
}

/// The keys of the periods before, at and after `current`.
fn window_keys(
    prk: &hkdf::Prk,
    current: u64,
) -> Result<[LessSafeKey; 3], aws_lc_rs::error::Unspecified> {
    let key = |period: u64| -> Result<LessSafeKey, aws_lc_rs::error::Unspecified> {
        let n = period.to_be_bytes();
        let info: [&[u8]; 2] = [b"tls ticket key", &n];
        let okm = prk.expand(&info, &AES_256_GCM)?;
        Ok(LessSafeKey::new(UnboundKey::from(okm)))
    };
    Ok([
        key(current.wrapping_sub(1))?,
        key(current)?,
        key(current.wrapping_add(1))?,
    ])
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    /// A ticket sealed at the start of a period opens until the end of
    /// the next: two periods (one at least, when sealed at its end; a
    /// client that offers it later gets a full handshake).
    fn lifetime(&self) -> u32 {
        u32::try_from(self.period * 2).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal_at(now_unix(), plain)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        self.open_at(now_unix(), ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"thirty-two bytes of test secret!";
    const P: u64 = 100;

    #[test]
    fn a_ticket_opens_on_another_node_with_the_same_secret_only() {
        let (one, two) = (
            TicketKeys::new(SECRET, P).unwrap(),
            TicketKeys::new(SECRET, P).unwrap(),
        );
        let other = TicketKeys::new(b"another thirty-two bytes secret!", P).unwrap();
        let now = 1_700_000_050;
        let ticket = one.seal_at(now, b"session state").unwrap();
        assert_eq!(ticket.len(), HEADER + 13 + TAG);
        assert_eq!(two.open_at(now, &ticket).unwrap(), b"session state");
        assert_eq!(other.open_at(now, &ticket), None);
    }

    #[test]
    fn a_ticket_opens_in_the_periods_beside_its_own_and_no_others() {
        let keys = TicketKeys::new(SECRET, P).unwrap();
        let sealed_at = 1_700_000_050;
        let ticket = keys.seal_at(sealed_at, b"state").unwrap();
        for (now, opens) in [
            (sealed_at - 2 * P, false),
            (sealed_at - P, true),
            (sealed_at, true),
            (sealed_at + P, true),
            (sealed_at + 2 * P, false),
            (0, false),
            (u64::MAX, false),
        ] {
            assert_eq!(keys.open_at(now, &ticket).is_some(), opens, "at {now}");
        }
    }

    #[test]
    fn altered_or_short_tickets_are_refused() {
        let keys = TicketKeys::new(SECRET, P).unwrap();
        let now = 1_700_000_050;
        let ticket = keys.seal_at(now, b"state").unwrap();
        for i in 0..ticket.len() {
            let mut altered = ticket.clone();
            altered[i] ^= 1;
            assert_eq!(keys.open_at(now, &altered), None, "byte {i}");
        }
        for len in 0..ticket.len() {
            assert_eq!(keys.open_at(now, &ticket[..len]), None, "{len} bytes");
        }
    }

    #[test]
    fn periods_have_keys_of_their_own() {
        let keys = TicketKeys::new(SECRET, P).unwrap();
        let now = 1_700_000_050;
        let mut ticket = keys.seal_at(now, b"state").unwrap();
        // The same bytes claiming the next period do not open with its key.
        let next = (now / P + 1).to_be_bytes();
        ticket[..8].copy_from_slice(&next);
        assert_eq!(keys.open_at(now, &ticket), None);
    }
}
