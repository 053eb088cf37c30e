//! The TLS record layer once the handshake is done, in userspace: what kTLS
//! does in the kernel, for kernels without it (as here) and so that nothing
//! is buffered twice.
//!
//! Why our own and not rustls' (measured reasons, see docs/tls.md): rustls
//! 0.23 encrypts each record into a fresh `Vec` and decrypts each into
//! another, then copies both again (into its send queue or out of its
//! plaintext queue), and keeps a receive buffer per session. Here a record is
//! sealed in place in the loop's output buffer, right after the plaintext was
//! copied there from the pack mapping (the one copy encryption needs), and
//! opened in place in the buffer the loop read into. rustls still does the
//! handshake and keeps the key schedule (`rustls::kernel::KernelConnection`
//! gives the next traffic secrets on a KeyUpdate); this module only seals and
//! opens records with the secrets it extracted, as the kernel would.
//!
//! What it implements (RFC 8446 §5, RFC 5246 §6.2 with RFC 5288 and RFC
//! 7905): AES-128-GCM, AES-256-GCM and ChaCha20-Poly1305 records, TLS 1.3
//! inner content types and padding, TLS 1.2 explicit GCM nonces, sequence
//! numbers, size limits (`record_overflow`), and the confidentiality limit
//! of AES-GCM (a TLS 1.3 key update, or the end of a TLS 1.2 connection,
//! before 2^24 records under one key, as rustls does).

use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce};
use aws_lc_rs::aead::{Algorithm, UnboundKey};
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

/// Record content types (RFC 8446 §5.1).
pub const CHANGE_CIPHER_SPEC: u8 = 20;
pub const ALERT: u8 = 21;
pub const HANDSHAKE: u8 = 22;
pub const APPLICATION_DATA: u8 = 23;

/// Alert descriptions this layer sends or reads (RFC 8446 §6).
pub const CLOSE_NOTIFY: u8 = 0;
pub const UNEXPECTED_MESSAGE: u8 = 10;
pub const BAD_RECORD_MAC: u8 = 20;
pub const RECORD_OVERFLOW: u8 = 22;
pub const DECODE_ERROR: u8 = 50;
pub const INTERNAL_ERROR: u8 = 80;
pub const USER_CANCELED: u8 = 90;
pub const NO_RENEGOTIATION: u8 = 100;

/// The largest plaintext a record carries (2^14).
pub const MAX_FRAGMENT: usize = 16 * 1024;
/// The record header: type, legacy version, length.
pub const HEADER_LEN: usize = 5;
/// Every AEAD here has a 16-byte tag.
const TAG_LEN: usize = 16;
/// TLS 1.2 AES-GCM records carry the last 8 bytes of their nonce in clear.
const EXPLICIT_NONCE_LEN: usize = 8;
/// The most a sealed record adds to its plaintext: TLS 1.2 AES-GCM's
/// header, explicit nonce and tag (TLS 1.3 adds 22 bytes, with the inner
/// content type).
pub const MAX_OVERHEAD: usize = HEADER_LEN + EXPLICIT_NONCE_LEN + TAG_LEN;
/// The largest ciphertext a peer may send (RFC 8446 §5.2: 2^14 + 256;
/// RFC 5246 §6.2.3 allows 2^14 + 2048 in TLS 1.2).
const MAX_CIPHERTEXT_13: usize = MAX_FRAGMENT + 256;
const MAX_CIPHERTEXT_12: usize = MAX_FRAGMENT + 2048;
/// Records sealed under one AES-GCM key before it must change (RFC 8446
/// §5.5 gives 2^24.5 full records; rustls uses 2^24).
const AES_GCM_LIMIT: u64 = 1 << 24;

/// The alert a fatal receive error is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alert(pub u8);

/// The keys must change before another record can be sealed: a TLS 1.3
/// session sends a KeyUpdate first, a TLS 1.2 one can only close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    Tls12,
    Tls13,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cipher {
    AesGcm,
    Chacha20Poly1305,
}

/// One direction's key, IV and sequence number.
struct Direction {
    /// The AEAD key (aws-lc-rs zeroes it when dropped).
    key: LessSafeKey,
    /// TLS 1.3 and ChaCha20-Poly1305: XORed with the sequence number to make
    /// each record's nonce. TLS 1.2 AES-GCM: the 4-byte salt, then 8 bytes
    /// that rustls XORed with the sequence number for its explicit nonces
    /// (continued here, so that no nonce repeats across the hand-over).
    iv: [u8; 12],
    /// The sequence number of the next record in this direction.
    seq: u64,
}

/// One direction's raw key material: cipher, key, IV.
type KeyParts<'a> = (Cipher, &'a [u8], [u8; 12]);

/// The key material rustls handed over, for the ciphers kiln offers.
fn key_parts(secrets: &ConnectionTrafficSecrets) -> Result<KeyParts<'_>, Alert> {
    let (cipher, key, iv) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::AesGcm, key, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            (Cipher::Chacha20Poly1305, key, iv)
        }
        _ => return Err(Alert(INTERNAL_ERROR)),
    };
    let iv = iv.as_ref().try_into().map_err(|_| Alert(INTERNAL_ERROR))?;
    Ok((cipher, key.as_ref(), iv))
}

impl Direction {
    fn new(seq: u64, (cipher, key, iv): KeyParts<'_>) -> Result<Direction, Alert> {
        let algorithm: &'static Algorithm = match (cipher, key.len()) {
            (Cipher::AesGcm, 16) => &AES_128_GCM,
            (Cipher::AesGcm, 32) => &AES_256_GCM,
            (Cipher::Chacha20Poly1305, 32) => &CHACHA20_POLY1305,
            _ => return Err(Alert(INTERNAL_ERROR)),
        };
        let key = UnboundKey::new(algorithm, key).map_err(|_| Alert(INTERNAL_ERROR))?;
        Ok(Direction {
            key: LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// The IV XOR the sequence number (RFC 8446 §5.3; rustls' TLS 1.2
    /// explicit nonces too).
    fn nonce(&self) -> [u8; 12] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }
}

/// A connection's record layer after the handshake.
pub struct RecordLayer {
    /// TLS 1.3 hides the content type inside the record; TLS 1.2 does not,
    /// and its AES-GCM records carry an explicit nonce.
    version: Version,
    /// Both directions use the negotiated suite's cipher.
    cipher: Cipher,
    /// Our records.
    seal: Direction,
    /// The peer's records.
    open: Direction,
    /// Records sealed under one key before it must change.
    seal_limit: u64,
}

/// Where a record begun by [`RecordLayer::begin`] starts in the output.
#[derive(Debug, Clone, Copy)]
pub struct Begun(usize);

impl RecordLayer {
    /// The record layer for the secrets a finished handshake gave: `tx`
    /// seals, `rx` opens, each with the sequence number to continue from.
    pub fn new(
        version: ProtocolVersion,
        tx: (u64, &ConnectionTrafficSecrets),
        rx: (u64, &ConnectionTrafficSecrets),
    ) -> Result<RecordLayer, Alert> {
        RecordLayer::from_parts(version, (tx.0, key_parts(tx.1)?), (rx.0, key_parts(rx.1)?))
    }

    fn from_parts(
        version: ProtocolVersion,
        tx: (u64, KeyParts<'_>),
        rx: (u64, KeyParts<'_>),
    ) -> Result<RecordLayer, Alert> {
        let version = match version {
            ProtocolVersion::TLSv1_3 => Version::Tls13,
            ProtocolVersion::TLSv1_2 => Version::Tls12,
            _ => return Err(Alert(INTERNAL_ERROR)),
        };
        let cipher = tx.1.0;
        if rx.1.0 != cipher {
            return Err(Alert(INTERNAL_ERROR));
        }
        let seal_limit = match cipher {
            Cipher::AesGcm => AES_GCM_LIMIT,
            Cipher::Chacha20Poly1305 => u64::MAX,
        };
        Ok(RecordLayer {
            version,
            cipher,
            seal: Direction::new(tx.0, tx.1)?,
            open: Direction::new(rx.0, rx.1)?,
            seal_limit,
        })
    }

    /// Whether this is TLS 1.3 (which can change keys with a KeyUpdate).
    pub fn is_tls13(&self) -> bool {
        self.version == Version::Tls13
    }

    /// Seals under new keys from now on (after a KeyUpdate of ours).
    pub fn set_seal_keys(
        &mut self,
        seq: u64,
        secrets: &ConnectionTrafficSecrets,
    ) -> Result<(), Alert> {
        self.seal = Direction::new(seq, key_parts(secrets)?)?;
        Ok(())
    }

    /// Opens with new keys from now on (after the peer's KeyUpdate).
    pub fn set_open_keys(
        &mut self,
        seq: u64,
        secrets: &ConnectionTrafficSecrets,
    ) -> Result<(), Alert> {
        self.open = Direction::new(seq, key_parts(secrets)?)?;
        Ok(())
    }

    /// Whether the seal key is at its limit: the one record left under it
    /// is for a TLS 1.3 KeyUpdate, before which nothing else may be sealed.
    pub fn seal_exhausted(&self) -> bool {
        self.seal.seq.saturating_add(1) >= self.seal_limit
    }

    /// The sequence number of the next record sealed, for tests.
    #[cfg(test)]
    pub fn seal_seq_for_test(&self) -> u64 {
        self.seal.seq
    }

    /// Lets tests reach the limit without sealing 2^24 records.
    #[cfg(test)]
    pub fn set_seal_limit_for_test(&mut self, limit: u64) {
        self.seal_limit = limit;
    }

    /// Starts a record at the end of `out`: the caller appends at most
    /// [`MAX_FRAGMENT`] bytes of plaintext, then calls [`RecordLayer::end`].
    pub fn begin(&self, out: &mut Vec<u8>) -> Begun {
        let start = out.len();
        let prefix = match (self.version, self.cipher) {
            (Version::Tls12, Cipher::AesGcm) => HEADER_LEN + EXPLICIT_NONCE_LEN,
            _ => HEADER_LEN,
        };
        out.resize(start + prefix, 0);
        Begun(start)
    }

    /// Drops the record begun at `begun`, plaintext and all: nothing of
    /// it is sent.
    pub fn abandon(&self, begun: Begun, out: &mut Vec<u8>) {
        out.truncate(begun.0);
    }

    /// Seals the plaintext appended since `begun` as one record of type
    /// `content_type`, in place.
    pub fn end(
        &mut self,
        begun: Begun,
        content_type: u8,
        out: &mut Vec<u8>,
    ) -> Result<(), Exhausted> {
        if self.seal.seq >= self.seal_limit {
            out.truncate(begun.0);
            return Err(Exhausted);
        }
        let start = begun.0;
        let nonce = self.seal.nonce();
        let (outer_type, body_start) = match (self.version, self.cipher) {
            (Version::Tls13, _) => {
                out.push(content_type);
                (APPLICATION_DATA, start + HEADER_LEN)
            }
            (Version::Tls12, Cipher::AesGcm) => {
                out[start + HEADER_LEN..start + HEADER_LEN + EXPLICIT_NONCE_LEN]
                    .copy_from_slice(&nonce[4..]);
                (content_type, start + HEADER_LEN + EXPLICIT_NONCE_LEN)
            }
            (Version::Tls12, Cipher::Chacha20Poly1305) => (content_type, start + HEADER_LEN),
        };
        let plain_len = out.len() - body_start;
        let record_len = out.len() - start - HEADER_LEN + TAG_LEN;
        let header = [outer_type, 3, 3, (record_len >> 8) as u8, record_len as u8];
        out[start..start + HEADER_LEN].copy_from_slice(&header);
        let tag = match self.version {
            // RFC 8446 §5.2: the additional data is the record header.
            Version::Tls13 => self.seal_in_place(nonce, &header, &mut out[body_start..]),
            // RFC 5246 §6.2.3.3: seq, type, version, plaintext length.
            Version::Tls12 => {
                let aad = tls12_aad(self.seal.seq, content_type, plain_len);
                self.seal_in_place(nonce, &aad, &mut out[body_start..])
            }
        };
        out.extend_from_slice(&tag);
        self.seal.seq += 1;
        Ok(())
    }

    fn seal_in_place(&self, nonce: [u8; 12], aad: &[u8], body: &mut [u8]) -> [u8; TAG_LEN] {
        let tag = self
            .seal
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), body)
            .expect("an AEAD seal fails only for lengths far beyond a record");
        let mut bytes = [0; TAG_LEN];
        bytes.copy_from_slice(tag.as_ref());
        bytes
    }

    /// Appends one record of `content_type` carrying `plaintext` (at most
    /// [`MAX_FRAGMENT`] bytes) to `out`.
    pub fn seal(
        &mut self,
        content_type: u8,
        plaintext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Exhausted> {
        let begun = self.begin(out);
        out.extend_from_slice(plaintext);
        self.end(begun, content_type, out)
    }

    /// The length of the whole record at the start of `input`, once all of
    /// it has arrived (`None` before); an alert for a length no peer may
    /// send.
    pub fn whole_record(&self, input: &[u8]) -> Result<Option<usize>, Alert> {
        let Some(header) = input.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        let max = match self.version {
            Version::Tls13 => MAX_CIPHERTEXT_13,
            Version::Tls12 => MAX_CIPHERTEXT_12,
        };
        if len > max {
            return Err(Alert(RECORD_OVERFLOW));
        }
        Ok((input.len() >= HEADER_LEN + len).then_some(HEADER_LEN + len))
    }

    /// Opens the whole record `record` (as [`RecordLayer::whole_record`]
    /// measured it) in place: its content type and plaintext.
    pub fn open<'a>(&mut self, record: &'a mut [u8]) -> Result<(u8, &'a [u8]), Alert> {
        let (header, body) = record.split_at_mut(HEADER_LEN);
        let outer_type = header[0];
        let (content_type, plaintext) = match self.version {
            Version::Tls13 => {
                // RFC 8446 §5: after the handshake every record is
                // protected application_data.
                if outer_type != APPLICATION_DATA {
                    return Err(Alert(UNEXPECTED_MESSAGE));
                }
                let nonce = self.open.nonce();
                let aad: [u8; HEADER_LEN] = (&*header).try_into().expect("header length");
                let inner = self.open_in_place(nonce, &aad, body)?;
                // §5.4: the content type is the last non-zero byte; zeros
                // after it are padding.
                let Some(end) = inner.iter().rposition(|&b| b != 0) else {
                    return Err(Alert(UNEXPECTED_MESSAGE));
                };
                if end > MAX_FRAGMENT {
                    return Err(Alert(RECORD_OVERFLOW));
                }
                (inner[end], &inner[..end])
            }
            Version::Tls12 => {
                let (nonce, sealed) = match self.cipher {
                    Cipher::AesGcm => {
                        if body.len() < EXPLICIT_NONCE_LEN + TAG_LEN {
                            return Err(Alert(BAD_RECORD_MAC));
                        }
                        let (explicit, sealed) = body.split_at_mut(EXPLICIT_NONCE_LEN);
                        let mut nonce = self.open.iv;
                        nonce[4..].copy_from_slice(explicit);
                        (nonce, sealed)
                    }
                    Cipher::Chacha20Poly1305 => (self.open.nonce(), body),
                };
                let Some(plain_len) = sealed.len().checked_sub(TAG_LEN) else {
                    return Err(Alert(BAD_RECORD_MAC));
                };
                if plain_len > MAX_FRAGMENT {
                    return Err(Alert(RECORD_OVERFLOW));
                }
                let aad = tls12_aad(self.open.seq, outer_type, plain_len);
                let plaintext = self.open_in_place(nonce, &aad, sealed)?;
                (outer_type, &*plaintext)
            }
        };
        Ok((content_type, plaintext))
    }

    fn open_in_place<'a>(
        &mut self,
        nonce: [u8; 12],
        aad: &[u8],
        sealed: &'a mut [u8],
    ) -> Result<&'a mut [u8], Alert> {
        let plaintext = self
            .open
            .key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), sealed)
            .map_err(|_| Alert(BAD_RECORD_MAC))?;
        // A peer cannot send 2^64 records; if it could, the sequence number
        // must not wrap.
        self.open.seq = self.open.seq.checked_add(1).ok_or(Alert(INTERNAL_ERROR))?;
        Ok(plaintext)
    }
}

/// TLS 1.2's additional data: sequence number, type, version, length.
fn tls12_aad(seq: u64, content_type: u8, plain_len: usize) -> [u8; 13] {
    let mut aad = [0; 13];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = content_type;
    aad[9] = 3;
    aad[10] = 3;
    aad[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::super::rfc8448::*;
    use super::*;

    /// Key material in the form the record layer takes it (rustls lets a
    /// 32-byte `AeadKey` only be built outside it, so AES-128 keys come in
    /// raw).
    #[derive(Clone, Copy)]
    enum Keys {
        Aes128([u8; 16], [u8; 12]),
        Chacha([u8; 32], [u8; 12]),
    }

    impl Keys {
        fn parts(&self) -> KeyParts<'_> {
            match self {
                Keys::Aes128(key, iv) => (Cipher::AesGcm, key, *iv),
                Keys::Chacha(key, iv) => (Cipher::Chacha20Poly1305, key, *iv),
            }
        }
    }

    fn aes128(key: [u8; 16], iv: [u8; 12]) -> Keys {
        Keys::Aes128(key, iv)
    }

    fn chacha(key: [u8; 32], iv: [u8; 12]) -> Keys {
        Keys::Chacha(key, iv)
    }

    fn layer(version: ProtocolVersion, tx: (u64, &Keys), rx: (u64, &Keys)) -> RecordLayer {
        RecordLayer::from_parts(version, (tx.0, tx.1.parts()), (rx.0, rx.1.parts())).unwrap()
    }

    /// The server's and the client's record layers of one connection:
    /// what one seals, the other opens.
    fn pair(version: ProtocolVersion, server: &Keys, client: &Keys) -> (RecordLayer, RecordLayer) {
        (
            layer(version, (0, server), (0, client)),
            layer(version, (0, client), (0, server)),
        )
    }

    #[test]
    fn rfc8448_records_seal_and_open() {
        let server = aes128(RFC8448_SERVER_KEY, RFC8448_SERVER_IV);
        let client = aes128(RFC8448_CLIENT_KEY, RFC8448_CLIENT_IV);
        // The server's record 0 was its NewSessionTicket.
        let mut layer = layer(ProtocolVersion::TLSv1_3, (1, &server), (0, &client));
        let mut out = Vec::new();
        layer
            .seal(APPLICATION_DATA, &rfc8448_payload(), &mut out)
            .unwrap();
        assert_eq!(out, RFC8448_SERVER_RECORD);

        let mut record = RFC8448_CLIENT_RECORD;
        assert_eq!(layer.whole_record(&record[..10]), Ok(None));
        assert_eq!(layer.whole_record(&record), Ok(Some(record.len())));
        let (content_type, plaintext) = layer.open(&mut record).unwrap();
        assert_eq!(content_type, APPLICATION_DATA);
        assert_eq!(plaintext, rfc8448_payload());
    }

    #[test]
    fn every_version_and_cipher_round_trips() {
        let keys = [
            (aes128([1; 16], [2; 12]), aes128([3; 16], [4; 12])),
            (chacha([5; 32], [6; 12]), chacha([7; 32], [8; 12])),
        ];
        for version in [ProtocolVersion::TLSv1_3, ProtocolVersion::TLSv1_2] {
            for (server_keys, client_keys) in &keys {
                let (mut server, mut client) = pair(version, server_keys, client_keys);
                for len in [0, 1, 100, MAX_FRAGMENT] {
                    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
                    for content_type in [APPLICATION_DATA, ALERT] {
                        let mut wire = Vec::new();
                        server.seal(content_type, &payload, &mut wire).unwrap();
                        assert_eq!(client.whole_record(&wire), Ok(Some(wire.len())));
                        let (got_type, got) = client.open(&mut wire).unwrap();
                        assert_eq!((got_type, got), (content_type, &payload[..]));
                    }
                }
            }
        }
    }

    #[test]
    fn tls12_gcm_continues_rustls_explicit_nonces() {
        // rustls' record j under IV salt || E had explicit nonce E XOR j.
        let iv = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0f];
        let secrets = aes128([9; 16], iv);
        let mut layer = layer(ProtocolVersion::TLSv1_2, (3, &secrets), (0, &secrets));
        let mut out = Vec::new();
        layer.seal(APPLICATION_DATA, b"x", &mut out).unwrap();
        assert_eq!(
            out[HEADER_LEN..HEADER_LEN + 8],
            [0, 0, 0, 0, 0, 0, 0, 0x0f ^ 3]
        );
    }

    #[test]
    fn a_changed_byte_is_a_bad_record_mac() {
        let (mut server, mut client) = pair(
            ProtocolVersion::TLSv1_3,
            &aes128([1; 16], [2; 12]),
            &aes128([3; 16], [4; 12]),
        );
        let mut wire = Vec::new();
        server.seal(APPLICATION_DATA, b"hello", &mut wire).unwrap();
        for at in HEADER_LEN..wire.len() {
            let mut changed = wire.clone();
            changed[at] ^= 1;
            let (mut fresh, _) = pair(
                ProtocolVersion::TLSv1_3,
                &aes128([3; 16], [4; 12]),
                &aes128([1; 16], [2; 12]),
            );
            assert_eq!(
                fresh.open(&mut changed).unwrap_err(),
                Alert(BAD_RECORD_MAC),
                "byte {at}"
            );
        }
        // The header is authenticated too (TLS 1.3's additional data).
        wire[2] = 1;
        assert_eq!(client.open(&mut wire).unwrap_err(), Alert(BAD_RECORD_MAC));
    }

    #[test]
    fn oversized_records_are_record_overflow() {
        let (_, client) = pair(
            ProtocolVersion::TLSv1_3,
            &aes128([1; 16], [2; 12]),
            &aes128([3; 16], [4; 12]),
        );
        let too_long = (MAX_FRAGMENT + 257) as u16;
        let header = [
            APPLICATION_DATA,
            3,
            3,
            (too_long >> 8) as u8,
            too_long as u8,
        ];
        assert_eq!(client.whole_record(&header), Err(Alert(RECORD_OVERFLOW)));
        let longest = (MAX_FRAGMENT + 256) as u16;
        let header = [APPLICATION_DATA, 3, 3, (longest >> 8) as u8, longest as u8];
        assert_eq!(client.whole_record(&header), Ok(None));
    }

    #[test]
    fn tls13_inner_padding_and_types() {
        let (mut server, mut client) = pair(
            ProtocolVersion::TLSv1_3,
            &aes128([1; 16], [2; 12]),
            &aes128([3; 16], [4; 12]),
        );
        // Padding: zeros after the content type are dropped.
        let mut wire = Vec::new();
        let begun = server.begin(&mut wire);
        wire.extend_from_slice(b"data");
        wire.push(HANDSHAKE);
        wire.extend_from_slice(&[0; 40]);
        server.end(begun, 0, &mut wire).unwrap();
        // `end` appended type 0: the real type is the last non-zero byte.
        let (content_type, plaintext) = client.open(&mut wire).unwrap();
        assert_eq!((content_type, plaintext), (HANDSHAKE, &b"data"[..]));

        // All zeros: no content type at all.
        let mut wire = Vec::new();
        let begun = server.begin(&mut wire);
        wire.extend_from_slice(&[0; 8]);
        server.end(begun, 0, &mut wire).unwrap();
        assert_eq!(
            client.open(&mut wire).unwrap_err(),
            Alert(UNEXPECTED_MESSAGE)
        );

        // An outer type other than application_data.
        let mut wire = Vec::new();
        server.seal(APPLICATION_DATA, b"x", &mut wire).unwrap();
        wire[0] = HANDSHAKE;
        assert_eq!(
            client.open(&mut wire).unwrap_err(),
            Alert(UNEXPECTED_MESSAGE)
        );
    }

    #[test]
    fn the_seal_limit_keeps_one_record_for_a_key_update() {
        let (mut server, _) = pair(
            ProtocolVersion::TLSv1_3,
            &aes128([1; 16], [2; 12]),
            &aes128([3; 16], [4; 12]),
        );
        server.set_seal_limit_for_test(3);
        let mut wire = Vec::new();
        server.seal(APPLICATION_DATA, b"1", &mut wire).unwrap();
        assert!(!server.seal_exhausted());
        server.seal(APPLICATION_DATA, b"2", &mut wire).unwrap();
        assert!(server.seal_exhausted());
        server.seal(HANDSHAKE, b"key update", &mut wire).unwrap();
        let before = wire.len();
        assert_eq!(
            server.seal(APPLICATION_DATA, b"4", &mut wire),
            Err(Exhausted)
        );
        assert_eq!(wire.len(), before, "a refused record leaves nothing behind");
        server.seal = Direction::new(0, aes128([5; 16], [6; 12]).parts()).unwrap();
        assert!(!server.seal_exhausted());
        server.seal(APPLICATION_DATA, b"4", &mut wire).unwrap();
    }
}
