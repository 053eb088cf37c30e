//! Kernel TLS (kTLS): once rustls has finished a handshake, hand the
//! connection's traffic keys to Linux, so that the socket itself encrypts what
//! is written to it and decrypts what is read from it.
//!
//! Built only with the cargo feature `ktls` (off by default) and called by
//! nothing in the server: no machine kiln is tested on has kTLS, so the
//! hand-off cannot be proven end to end, and records are sealed in userspace
//! by `record` (see docs/tls.md). Check it with
//! `cargo clippy --all-targets --features ktls -- -D warnings` and
//! `cargo test --lib --features ktls tls::`.
//!
//! Why: with the record layer in the kernel, a TLS connection is served like a
//! plain one. `sendfile` goes straight from the page cache to the socket and
//! `writev` sends plaintext head and body in one call; without kTLS every body
//! byte is copied from the mapping into a record sealed in userspace
//! (`record`), and out again.
//!
//! How, per connection:
//! 1. Once per process, `tls::kernel_offers_ktls` (`tls` among
//!    `/proc/sys/net/ipv4/tcp_available_ulp`). If it says no, never try: the
//!    kernel has no `tls` upper-layer protocol, or has it as a module that is
//!    not loaded (`modprobe tls` fixes that).
//! 2. Finish the handshake with rustls' unbuffered API
//!    (`ServerConfig::enable_secret_extraction` set) and get all of its
//!    output onto the wire before extracting: the last handshake flight and,
//!    in TLS 1.3, the NewSessionTicket records rustls encodes when the
//!    client's Finished arrives; the kernel's records must follow them.
//!    Equally, everything the peer sent must be whole records rustls has
//!    processed: the rx sequence number counts the records rustls decrypted,
//!    and bytes of a record not yet processed are the caller's to feed the
//!    kernel's socket first.
//! 3. `UnbufferedServerConnection::dangerous_into_kernel_connection()` (as
//!    `session` does for `record`), then [`crypto_info`] for its `tx` and
//!    `rx` halves (each a sequence number and
//!    [`rustls::ConnectionTrafficSecrets`]), then [`enable`] on the socket.
//! 4. From then on `read`, `write`, `writev` and `sendfile` on the socket carry
//!    plaintext.
//!
//! What the caller must live with after the switch:
//! - A record that is not application data (an alert such as close_notify, a
//!   TLS 1.3 KeyUpdate) makes a plain `read` fail with EIO: the kernel hands
//!   such records only to `recvmsg` with a control-message buffer. The caller
//!   treats EIO as the end of the connection, so a client's KeyUpdate ends the
//!   connection instead of being answered.
//! - Nothing rekeys any more and nothing counts records against the AEAD's
//!   limits, as `record` does.
//! - No close_notify is sent on close (that would take `sendmsg` with a
//!   record-type control message); the connection just ends.
//! - If [`enable`] fails, rustls' state is already gone (extraction consumed
//!   it) and the socket may be half-switched: the connection can only be
//!   closed. Hence the probe first. A kernel that has the ULP can still refuse
//!   a cipher or TLS 1.3 if it is old; that shows up as an error from
//!   [`enable`].

use std::fmt;
use std::io;
use std::os::fd::RawFd;

use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

use crate::sys::ktls as abi;

/// The upper-layer protocol name `TCP_ULP` takes. The kernel copies at most
/// `optlen` bytes and terminates the name itself, so no NUL is needed.
const ULP_NAME: &[u8] = b"tls";

/// The largest of the kernel structures below: AES-256-GCM and
/// ChaCha20-Poly1305 are both 56 bytes.
const MAX_LEN: usize = 56;

/// AES-GCM's salt (the implicit part of the nonce) is 4 bytes for both key
/// sizes.
const GCM_SALT_LEN: usize = abi::TLS_CIPHER_AES_GCM_128_SALT_SIZE;

/// One direction's parameters for `setsockopt(SOL_TLS, TLS_TX or TLS_RX)`,
/// laid out byte for byte as `<linux/tls.h>`'s
/// `struct tls12_crypto_info_aes_gcm_128` (40 bytes),
/// `struct tls12_crypto_info_aes_gcm_256` (56) or
/// `struct tls12_crypto_info_chacha20_poly1305` (56): `struct tls_crypto_info
/// { __u16 version; __u16 cipher_type; }` in host byte order, then `iv`,
/// `key`, `salt` and `rec_seq` (big-endian), all byte arrays, so no padding.
///
/// It holds a traffic key, so it has no `Debug` (nothing to leak into a log)
/// and overwrites itself when dropped, as rustls does with its own keys.
pub struct CryptoInfo {
    bytes: [u8; MAX_LEN],
    len: usize,
}

impl CryptoInfo {
    /// The structure as `setsockopt` takes it.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn push(&mut self, field: &[u8]) {
        let end = self.len + field.len();
        self.bytes[self.len..end].copy_from_slice(field);
        self.len = end;
    }
}

impl Drop for CryptoInfo {
    fn drop(&mut self) {
        // SAFETY: `self.bytes` is a live, aligned array borrowed exclusively
        // through `&mut self`. The write is volatile so that the compiler
        // cannot drop it as a store to memory that is about to be freed.
        unsafe { std::ptr::write_volatile(&mut self.bytes, [0; MAX_LEN]) };
    }
}

/// Why [`crypto_info`] cannot describe a connection to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    /// Only TLS 1.2 and TLS 1.3 have a kernel record layer.
    Version(ProtocolVersion),
    /// A cipher this module does not map to the kernel's.
    Cipher,
    /// A key whose length is not its cipher's (rustls' own secrets always fit;
    /// a hand-built `AeadKey` is always 32 bytes, whatever the cipher).
    KeyLength {
        /// The cipher's name.
        cipher: &'static str,
        /// The key's length in bytes.
        len: usize,
        /// The cipher's key length in bytes.
        expected: usize,
    },
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version(version) => {
                write!(f, "kTLS takes only TLS 1.2 and TLS 1.3, not {version:?}")
            }
            Self::Cipher => f.write_str(
                "kTLS here takes only AES-128-GCM, AES-256-GCM and ChaCha20-Poly1305, \
                 not the negotiated cipher",
            ),
            Self::KeyLength {
                cipher,
                len,
                expected,
            } => write!(
                f,
                "a {len}-byte key for {cipher}, which takes {expected} bytes"
            ),
        }
    }
}

impl std::error::Error for Unsupported {}

/// The kernel structure for one direction of a connection (`TLS_TX` or
/// `TLS_RX` alike), from the secrets rustls gives for it: `seq`
/// is the sequence number of the next record in that direction, `version` the
/// negotiated protocol version (`CommonState::protocol_version`).
pub fn crypto_info(
    version: ProtocolVersion,
    seq: u64,
    secrets: &ConnectionTrafficSecrets,
) -> Result<CryptoInfo, Unsupported> {
    let (cipher, key, iv) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key, iv),
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key, iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            (Cipher::Chacha20Poly1305, key, iv)
        }
        _ => return Err(Unsupported::Cipher),
    };
    let iv = iv
        .as_ref()
        .try_into()
        .expect("rustls' Iv is a [u8; NONCE_LEN], 12 bytes");
    build(version, seq, cipher, key.as_ref(), iv)
}

#[derive(Clone, Copy)]
enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Cipher {
    /// The kernel's cipher number, its key length and a name for errors.
    fn kernel(self) -> (u16, usize, &'static str) {
        match self {
            Self::Aes128Gcm => (
                abi::TLS_CIPHER_AES_GCM_128,
                abi::TLS_CIPHER_AES_GCM_128_KEY_SIZE,
                "AES-128-GCM",
            ),
            Self::Aes256Gcm => (
                abi::TLS_CIPHER_AES_GCM_256,
                abi::TLS_CIPHER_AES_GCM_256_KEY_SIZE,
                "AES-256-GCM",
            ),
            Self::Chacha20Poly1305 => (
                abi::TLS_CIPHER_CHACHA20_POLY1305,
                abi::TLS_CIPHER_CHACHA20_POLY1305_KEY_SIZE,
                "ChaCha20-Poly1305",
            ),
        }
    }
}

/// [`crypto_info`] from the raw key and IV: rustls only lets a 32-byte
/// `AeadKey` be built outside it, so the AES-128 test vectors come in here.
///
/// How the kernel uses `iv` and `salt` (net/tls: `tls_set_sw_offload`,
/// `tls_do_encryption`, `tls_fill_prepend`, `tls_advance_record_sn`,
/// `decrypt_internal`): it keeps `salt || iv` as a 12-byte value, and
/// - for TLS 1.3 (any cipher) and for ChaCha20-Poly1305 (either version) the
///   nonce of a record is that value XOR the big-endian `rec_seq` in its last
///   8 bytes, as RFC 8446 §5.3 and RFC 7905 have it. rustls' 12-byte IV is
///   exactly that static value (rustls builds its TLS 1.3 and ChaCha nonces
///   the same way), so AES-GCM splits it into salt = IV[0..4] and iv =
///   IV[4..12], and ChaCha20-Poly1305, whose salt is empty, takes all 12 bytes
///   as iv.
/// - for TLS 1.2 AES-GCM (RFC 5288) the nonce is salt || an 8-byte explicit
///   nonce carried in clear at the start of each record. Sending, the kernel
///   uses `iv` itself as the explicit nonce of its next record and adds one to
///   it (big-endian, wrapping) after each record; `rec_seq` goes only into the
///   additional data. Receiving, it ignores `iv` and reads the explicit nonce
///   from the record. rustls' TLS 1.2 GCM IV is the salt (the key block's
///   client/server write IV) followed by 8 more key-block bytes E, and rustls
///   sent its record j with explicit nonce E XOR j. So `iv` must be an explicit
///   nonce from which counting up never meets E XOR j for any j < seq: a
///   repeated GCM nonce under one key gives away the authentication key. See
///   [`tls12_gcm_first_explicit_nonce`].
fn build(
    version: ProtocolVersion,
    seq: u64,
    cipher: Cipher,
    key: &[u8],
    iv: [u8; 12],
) -> Result<CryptoInfo, Unsupported> {
    let kernel_version = match version {
        ProtocolVersion::TLSv1_2 => abi::TLS_1_2_VERSION,
        ProtocolVersion::TLSv1_3 => abi::TLS_1_3_VERSION,
        other => return Err(Unsupported::Version(other)),
    };
    let (cipher_type, key_len, name) = cipher.kernel();
    if key.len() != key_len {
        return Err(Unsupported::KeyLength {
            cipher: name,
            len: key.len(),
            expected: key_len,
        });
    }

    let mut info = CryptoInfo {
        bytes: [0; MAX_LEN],
        len: 0,
    };
    info.push(&kernel_version.to_ne_bytes());
    info.push(&cipher_type.to_ne_bytes());
    match cipher {
        Cipher::Chacha20Poly1305 => {
            info.push(&iv);
            info.push(key);
            // The salt is empty.
        }
        Cipher::Aes128Gcm | Cipher::Aes256Gcm => {
            let (salt, rest) = iv.split_at(GCM_SALT_LEN);
            let rest = u64::from_be_bytes(rest.try_into().expect("12 - 4 bytes"));
            let nonce_part = match version {
                ProtocolVersion::TLSv1_2 => tls12_gcm_first_explicit_nonce(rest, seq),
                _ => rest,
            };
            info.push(&nonce_part.to_be_bytes());
            info.push(key);
            info.push(salt);
        }
    }
    info.push(&seq.to_be_bytes());
    Ok(info)
}

/// The explicit nonce the kernel is to put on the first record it sends over
/// TLS 1.2 AES-GCM, given rustls' E (the IV's last 8 bytes) and the number of
/// records rustls has sent, `seq`.
///
/// rustls used E XOR j for j in 0..seq. Every such j fits in the bit length of
/// seq - 1, so those nonces differ from E only in those low bits: they all lie
/// in the aligned block from E with the low bits cleared to E with them set.
/// The kernel starts just above that block and counts up, so it could only
/// come back into it by wrapping around 2^64, nearly 2^64 records later.
/// The obvious choices are unsafe: E itself is the nonce of rustls' record 0
/// (the Finished), and E XOR seq (rustls' next nonce) counts up into rustls'
/// earlier ones (seq = 1, E odd: the kernel would send E - 1, then E).
fn tls12_gcm_first_explicit_nonce(rustls_nonce_base: u64, seq: u64) -> u64 {
    let used_bits = u64::MAX
        .checked_shr(seq.saturating_sub(1).leading_zeros())
        .unwrap_or(0);
    (rustls_nonce_base | used_bits).wrapping_add(1)
}

/// Switch the connected TCP socket `fd` to kernel TLS: attach the `tls` ULP,
/// then give it the transmit and the receive parameters, in that order. On
/// success, plaintext written to `fd` goes out as TLS records and reads return
/// the peer's decrypted application data.
///
/// The error is that of the first `setsockopt` that failed. After any error
/// the connection is unusable (see the module documentation) and should be
/// closed.
pub fn enable(fd: RawFd, tx: &CryptoInfo, rx: &CryptoInfo) -> io::Result<()> {
    abi::set_socket_option(fd, abi::SOL_TCP, abi::TCP_ULP, ULP_NAME)?;
    abi::set_socket_option(fd, abi::SOL_TLS, abi::TLS_TX, tx.as_bytes())?;
    abi::set_socket_option(fd, abi::SOL_TLS, abi::TLS_RX, rx.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    /// What a test found about this machine, on stderr; a stream that
    /// cannot be written loses the line and fails nothing.
    fn report(line: std::fmt::Arguments<'_>) {
        let _ = writeln!(std::io::stderr(), "{line}");
    }

    use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
    use rustls::crypto::aws_lc_rs::cipher_suite;
    use rustls::crypto::cipher::{AeadKey, Iv};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use rustls::{
        ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig, ServerConnection,
        SupportedCipherSuite, SupportedProtocolVersion,
    };

    use super::*;

    use super::super::kernel_offers_ktls;
    use super::super::rfc8448::*;

    /// Consecutive bytes from `start`: made-up key material that is easy to
    /// write out in an expected structure.
    fn counting<const N: usize>(start: u8) -> [u8; N] {
        std::array::from_fn(|i| start + i as u8)
    }

    fn aes256(key: [u8; 32], iv: [u8; 12]) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from(key),
            iv: Iv::new(iv),
        }
    }

    fn chacha(key: [u8; 32], iv: [u8; 12]) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Chacha20Poly1305 {
            key: AeadKey::from(key),
            iv: Iv::new(iv),
        }
    }

    // The expected structures below are written for a little-endian host
    // (x86_64, aarch64): the first four bytes are the host-order u16s version
    // (0x0303 or 0x0304) and cipher_type (51 = 0x33, 52 = 0x34, 54 = 0x36).

    #[test]
    fn constants_and_layouts_match_linux_tls_h() {
        // The numbers of <linux/tls.h> and <bits/socket.h> (SOL_TLS) as
        // published, and libc's names for them.
        assert_eq!(abi::SOL_TLS, 282);
        assert_eq!(abi::TLS_TX, 1);
        assert_eq!(abi::TLS_RX, 2);
        assert_eq!(abi::TCP_ULP, 31);
        assert_eq!(abi::TLS_1_2_VERSION, 0x0303);
        assert_eq!(abi::TLS_1_3_VERSION, 0x0304);
        assert_eq!(abi::TLS_CIPHER_AES_GCM_128, 51);
        assert_eq!(abi::TLS_CIPHER_AES_GCM_256, 52);
        assert_eq!(abi::TLS_CIPHER_CHACHA20_POLY1305, 54);

        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<abi::tls12_crypto_info_aes_gcm_128>(), 40);
        assert_eq!(size_of::<abi::tls12_crypto_info_aes_gcm_256>(), 56);
        assert_eq!(size_of::<abi::tls12_crypto_info_chacha20_poly1305>(), 56);
        // The field offsets the explicit layout of CryptoInfo relies on.
        macro_rules! offsets {
            ($t:ty) => {
                [
                    offset_of!($t, info),
                    offset_of!($t, iv),
                    offset_of!($t, key),
                    offset_of!($t, salt),
                    offset_of!($t, rec_seq),
                ]
            };
        }
        assert_eq!(
            offsets!(abi::tls12_crypto_info_aes_gcm_128),
            [0, 4, 12, 28, 32]
        );
        assert_eq!(
            offsets!(abi::tls12_crypto_info_aes_gcm_256),
            [0, 4, 12, 44, 48]
        );
        assert_eq!(
            offsets!(abi::tls12_crypto_info_chacha20_poly1305),
            [0, 4, 16, 48, 48]
        );

        // And the sizes of what this module builds.
        let v13 = ProtocolVersion::TLSv1_3;
        let gcm128 = build(v13, 0, Cipher::Aes128Gcm, &[0; 16], [0; 12]).unwrap();
        let gcm256 = crypto_info(v13, 0, &aes256([0; 32], [0; 12])).unwrap();
        let chacha = crypto_info(v13, 0, &chacha([0; 32], [0; 12])).unwrap();
        assert_eq!(gcm128.as_bytes().len(), 40);
        assert_eq!(gcm256.as_bytes().len(), 56);
        assert_eq!(chacha.as_bytes().len(), 56);
    }

    /// Where the machine has the kernel header, its `#define`s against libc's
    /// constants that this module uses.
    #[test]
    fn libc_constants_match_the_installed_header() {
        let Ok(header) = std::fs::read_to_string("/usr/include/linux/tls.h") else {
            report(format_args!(
                "no /usr/include/linux/tls.h (linux-libc-dev): skipped"
            ));
            return;
        };
        let define = |name: &str| -> u64 {
            let value = header
                .lines()
                .find_map(|line| {
                    let mut words = line.split_whitespace();
                    (words.next() == Some("#define") && words.next() == Some(name))
                        .then(|| words.next())
                        .flatten()
                })
                .unwrap_or_else(|| panic!("{name} is not defined in linux/tls.h"));
            match value.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
                None => value.parse().unwrap(),
            }
        };
        assert_eq!(define("TLS_TX"), abi::TLS_TX as u64);
        assert_eq!(define("TLS_RX"), abi::TLS_RX as u64);
        let version = |major: &str, minor: &str| (define(major) << 8) | define(minor);
        assert_eq!(
            version("TLS_1_2_VERSION_MAJOR", "TLS_1_2_VERSION_MINOR"),
            u64::from(abi::TLS_1_2_VERSION)
        );
        assert_eq!(
            version("TLS_1_3_VERSION_MAJOR", "TLS_1_3_VERSION_MINOR"),
            u64::from(abi::TLS_1_3_VERSION)
        );
        for (name, id, [iv, key, salt, rec_seq]) in [
            (
                "AES_GCM_128",
                abi::TLS_CIPHER_AES_GCM_128,
                [
                    abi::TLS_CIPHER_AES_GCM_128_IV_SIZE,
                    abi::TLS_CIPHER_AES_GCM_128_KEY_SIZE,
                    abi::TLS_CIPHER_AES_GCM_128_SALT_SIZE,
                    abi::TLS_CIPHER_AES_GCM_128_REC_SEQ_SIZE,
                ],
            ),
            (
                "AES_GCM_256",
                abi::TLS_CIPHER_AES_GCM_256,
                [
                    abi::TLS_CIPHER_AES_GCM_256_IV_SIZE,
                    abi::TLS_CIPHER_AES_GCM_256_KEY_SIZE,
                    abi::TLS_CIPHER_AES_GCM_256_SALT_SIZE,
                    abi::TLS_CIPHER_AES_GCM_256_REC_SEQ_SIZE,
                ],
            ),
            (
                "CHACHA20_POLY1305",
                abi::TLS_CIPHER_CHACHA20_POLY1305,
                [
                    abi::TLS_CIPHER_CHACHA20_POLY1305_IV_SIZE,
                    abi::TLS_CIPHER_CHACHA20_POLY1305_KEY_SIZE,
                    abi::TLS_CIPHER_CHACHA20_POLY1305_SALT_SIZE,
                    abi::TLS_CIPHER_CHACHA20_POLY1305_REC_SEQ_SIZE,
                ],
            ),
        ] {
            let cipher = format!("TLS_CIPHER_{name}");
            assert_eq!(define(&cipher), u64::from(id), "{cipher}");
            for (field, size) in [
                ("IV", iv),
                ("KEY", key),
                ("SALT", salt),
                ("REC_SEQ", rec_seq),
            ] {
                let name = format!("{cipher}_{field}_SIZE");
                assert_eq!(define(&name), size as u64, "{name}");
            }
        }
    }

    #[test]
    fn rfc8448_server_tx_after_one_new_session_ticket() {
        let info = build(
            ProtocolVersion::TLSv1_3,
            1,
            Cipher::Aes128Gcm,
            &RFC8448_SERVER_KEY,
            RFC8448_SERVER_IV,
        )
        .unwrap();
        #[rustfmt::skip]
        let expected: [u8; 40] = [
            0x04, 0x03, 0x33, 0x00,
            // iv: the static IV's last 8 bytes
            0xdd, 0x83, 0x54, 0x9a, 0xad, 0xf1, 0xe9, 0x84,
            // key
            0x9f, 0x02, 0x28, 0x3b, 0x6c, 0x9c, 0x07, 0xef,
            0xc2, 0x6b, 0xb9, 0xf2, 0xac, 0x92, 0xe3, 0x56,
            // salt: the static IV's first 4 bytes
            0xcf, 0x78, 0x2b, 0x88,
            // rec_seq: 1, big-endian
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        ];
        assert_eq!(info.as_bytes(), expected);
    }

    #[test]
    fn rfc8448_client_keys_as_server_rx() {
        let info = build(
            ProtocolVersion::TLSv1_3,
            0,
            Cipher::Aes128Gcm,
            &RFC8448_CLIENT_KEY,
            RFC8448_CLIENT_IV,
        )
        .unwrap();
        #[rustfmt::skip]
        let expected: [u8; 40] = [
            0x04, 0x03, 0x33, 0x00,
            0xee, 0x08, 0x57, 0x90, 0x33, 0xe5, 0x23, 0xd9,
            0x17, 0x42, 0x2d, 0xda, 0x59, 0x6e, 0xd5, 0xd9,
            0xac, 0xd8, 0x90, 0xe3, 0xc6, 0x3f, 0x50, 0x51,
            0x5b, 0x78, 0x92, 0x3d,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(info.as_bytes(), expected);
    }

    /// The structures, put through what the kernel does with them, give the
    /// RFC's own records: the split of the IV, the key and the sequence
    /// number are the ones the nonce of RFC 8446 §5.3 needs.
    #[test]
    fn rfc8448_records_through_the_kernel_model() {
        let v13 = ProtocolVersion::TLSv1_3;
        let tx = build(
            v13,
            1,
            Cipher::Aes128Gcm,
            &RFC8448_SERVER_KEY,
            RFC8448_SERVER_IV,
        );
        let mut kernel_tx = KernelModel::new(tx.unwrap().as_bytes());
        let record = kernel_tx.seal(APPLICATION_DATA, &rfc8448_payload());
        assert_eq!(record, RFC8448_SERVER_RECORD);

        let rx = build(
            v13,
            0,
            Cipher::Aes128Gcm,
            &RFC8448_CLIENT_KEY,
            RFC8448_CLIENT_IV,
        );
        let mut kernel_rx = KernelModel::new(rx.unwrap().as_bytes());
        let (content_type, plaintext) = kernel_rx.open(&RFC8448_CLIENT_RECORD);
        assert_eq!(content_type, APPLICATION_DATA);
        assert_eq!(plaintext, rfc8448_payload());
    }

    #[test]
    fn tls13_aes256gcm() {
        let secrets = aes256(counting(0x00), counting(0xa0));
        let info = crypto_info(ProtocolVersion::TLSv1_3, 2, &secrets).unwrap();
        #[rustfmt::skip]
        let expected: [u8; 56] = [
            0x04, 0x03, 0x34, 0x00,
            0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab,
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
            0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
            0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
            0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
            0xa0, 0xa1, 0xa2, 0xa3,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
        ];
        assert_eq!(info.as_bytes(), expected);
    }

    #[test]
    fn tls13_chacha20poly1305_takes_the_whole_iv_and_no_salt() {
        let secrets = chacha(counting(0x40), counting(0xc0));
        let info = crypto_info(ProtocolVersion::TLSv1_3, 0x0102_0304_0506_0708, &secrets).unwrap();
        #[rustfmt::skip]
        let expected: [u8; 56] = [
            0x04, 0x03, 0x36, 0x00,
            0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb,
            0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,
            0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f,
            0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57,
            0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f,
            0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
        ];
        assert_eq!(info.as_bytes(), expected);
    }

    /// TLS 1.2 AES-GCM after rustls sent only its Finished (seq 1), with an
    /// odd E, the case where the kernel starting at E XOR seq would repeat
    /// the Finished's nonce on its second record.
    #[test]
    fn tls12_aes128gcm_after_the_finished() {
        let iv = [
            0x5a, 0x5b, 0x5c, 0x5d, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
        ];
        let key: [u8; 16] = counting(0x00);
        let info = build(ProtocolVersion::TLSv1_2, 1, Cipher::Aes128Gcm, &key, iv).unwrap();
        #[rustfmt::skip]
        let expected: [u8; 40] = [
            0x03, 0x03, 0x33, 0x00,
            // iv: the first explicit nonce, E + 1 (rustls used E for seq 0)
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x78,
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
            0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
            0x5a, 0x5b, 0x5c, 0x5d,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        ];
        assert_eq!(info.as_bytes(), expected);
    }

    /// rustls sent records 0..=3 with E XOR 0..=3, which fills the block
    /// ..fc..=..ff of this E; the kernel starts after it, carrying into the
    /// next byte.
    #[test]
    fn tls12_aes256gcm_after_four_records() {
        let iv = [
            0x01, 0x02, 0x03, 0x04, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xfd,
        ];
        let info = crypto_info(ProtocolVersion::TLSv1_2, 4, &aes256(counting(0x20), iv)).unwrap();
        #[rustfmt::skip]
        let expected: [u8; 56] = [
            0x03, 0x03, 0x34, 0x00,
            0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xef, 0x00,
            0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27,
            0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
            0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
            0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f,
            0x01, 0x02, 0x03, 0x04,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04,
        ];
        assert_eq!(info.as_bytes(), expected);
    }

    /// ChaCha20-Poly1305 has the same nonce in TLS 1.2 (RFC 7905) as in 1.3:
    /// only the version differs.
    #[test]
    fn tls12_chacha20poly1305() {
        let secrets = chacha(counting(0x60), counting(0xe0));
        let info = crypto_info(ProtocolVersion::TLSv1_2, 1, &secrets).unwrap();
        #[rustfmt::skip]
        let expected: [u8; 56] = [
            0x03, 0x03, 0x36, 0x00,
            0xe0, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb,
            0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
            0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f,
            0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77,
            0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        ];
        assert_eq!(info.as_bytes(), expected);
    }

    #[test]
    fn sequence_numbers_land_big_endian_in_rec_seq() {
        for (seq, rec_seq) in [
            (1, [0, 0, 0, 0, 0, 0, 0, 1]),
            (0x0100, [0, 0, 0, 0, 0, 0, 1, 0]),
            (
                0x0a0b_0c0d_0e0f_1011,
                [0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11],
            ),
            (u64::MAX, [0xff; 8]),
        ] {
            for version in [ProtocolVersion::TLSv1_2, ProtocolVersion::TLSv1_3] {
                let gcm = crypto_info(version, seq, &aes256([7; 32], [9; 12])).unwrap();
                assert_eq!(gcm.as_bytes()[48..], rec_seq, "{seq:#x} {version:?}");
                let chacha = crypto_info(version, seq, &chacha([7; 32], [9; 12])).unwrap();
                assert_eq!(chacha.as_bytes()[48..], rec_seq, "{seq:#x} {version:?}");
            }
        }
    }

    #[test]
    fn tls12_first_explicit_nonce_values() {
        // (E, seq, first kernel nonce)
        for (base, seq, first) in [
            (0x77, 0, 0x78),
            (0x77, 1, 0x78),
            (0x76, 1, 0x77),
            (0x76, 2, 0x78),
            (0x10, 3, 0x14),
            (0x10, 4, 0x14),
            (0x10, 5, 0x18),
            (0xffff_ffff_ffff_fffe, 2, 0),
            // No overflow at the extreme (where no nonce is left unused).
            (0, u64::MAX, 0),
        ] {
            assert_eq!(
                tls12_gcm_first_explicit_nonce(base, seq),
                first,
                "E {base:#x}, seq {seq}"
            );
        }
    }

    /// The kernel's explicit nonces, counting up from the first, never meet
    /// one rustls used, E XOR j for j < seq.
    #[test]
    fn tls12_kernel_nonces_never_repeat_rustls_ones() {
        for base in [
            0,
            1,
            0x77,
            0x8899_aabb_ccdd_eeff,
            0x5555_5555_5555_5555,
            u64::MAX - 40,
            u64::MAX,
        ] {
            for seq in 0..=130 {
                let used: HashSet<u64> = (0..seq).map(|j| base ^ j).collect();
                let first = tls12_gcm_first_explicit_nonce(base, seq);
                for k in 0..2000 {
                    let nonce = first.wrapping_add(k);
                    assert!(
                        !used.contains(&nonce),
                        "E {base:#x}, seq {seq}: kernel record {k} repeats {nonce:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn unsupported_inputs_are_errors_that_say_why() {
        let err = crypto_info(ProtocolVersion::TLSv1_0, 0, &aes256([0; 32], [0; 12])).err();
        assert_eq!(err, Some(Unsupported::Version(ProtocolVersion::TLSv1_0)));
        assert_eq!(
            err.unwrap().to_string(),
            "kTLS takes only TLS 1.2 and TLS 1.3, not TLSv1_0"
        );

        // The only AeadKey rustls lets be built outside it is 32 bytes.
        let wrong = ConnectionTrafficSecrets::Aes128Gcm {
            key: AeadKey::from([0; 32]),
            iv: Iv::new([0; 12]),
        };
        let err = crypto_info(ProtocolVersion::TLSv1_3, 0, &wrong).err();
        assert_eq!(
            err,
            Some(Unsupported::KeyLength {
                cipher: "AES-128-GCM",
                len: 32,
                expected: 16,
            })
        );
        assert_eq!(
            err.unwrap().to_string(),
            "a 32-byte key for AES-128-GCM, which takes 16 bytes"
        );

        assert!(Unsupported::Cipher.to_string().contains("AES-128-GCM"));
    }

    #[test]
    fn enable_without_kernel_support_fails_on_the_ulp() {
        if kernel_offers_ktls().unwrap() {
            report(format_args!(
                "kTLS available: kernel_round_trip covers enable"
            ));
            return;
        }
        let (server, _client) = loopback_pair();
        let v13 = ProtocolVersion::TLSv1_3;
        let tx = crypto_info(v13, 0, &aes256([1; 32], [2; 12])).unwrap();
        let rx = crypto_info(v13, 0, &aes256([3; 32], [4; 12])).unwrap();
        let err = enable(server.as_raw_fd(), &tx, &rx).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(abi::ENOENT), "{err}");
    }

    /// On a kernel with kTLS: the real thing against RFC 8448. The kernel,
    /// given the server's structures, must write the RFC's server record for
    /// the RFC's payload, read the RFC's client record as that payload, and
    /// fail a plain read on an alert with EIO.
    #[test]
    fn kernel_round_trip() {
        if !kernel_offers_ktls().unwrap() {
            report(format_args!("no kTLS on this kernel: skipped"));
            return;
        }
        let (mut server, mut client) = loopback_pair();
        let v13 = ProtocolVersion::TLSv1_3;
        let tx = build(
            v13,
            1,
            Cipher::Aes128Gcm,
            &RFC8448_SERVER_KEY,
            RFC8448_SERVER_IV,
        );
        let rx = build(
            v13,
            0,
            Cipher::Aes128Gcm,
            &RFC8448_CLIENT_KEY,
            RFC8448_CLIENT_IV,
        );
        let rx = rx.unwrap();
        enable(server.as_raw_fd(), &tx.unwrap(), &rx).unwrap();

        server.write_all(&rfc8448_payload()).unwrap();
        let mut record = [0; RFC8448_SERVER_RECORD.len()];
        client.read_exact(&mut record).unwrap();
        assert_eq!(record, RFC8448_SERVER_RECORD);

        client.write_all(&RFC8448_CLIENT_RECORD).unwrap();
        let mut plaintext = vec![0; rfc8448_payload().len()];
        server.read_exact(&mut plaintext).unwrap();
        assert_eq!(plaintext, rfc8448_payload());

        // The client's next record: a close_notify alert.
        let mut peer = KernelModel::new(rx.as_bytes());
        peer.open(&RFC8448_CLIENT_RECORD);
        client.write_all(&peer.seal(ALERT, &[1, 0])).unwrap();
        let err = server.read(&mut plaintext).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(abi::EIO), "{err}");
    }

    fn loopback_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (server, client)
    }

    const CHANGE_CIPHER_SPEC: u8 = 20;
    const ALERT: u8 = 21;
    const APPLICATION_DATA: u8 = 23;

    /// What the kernel's software TLS does with a crypto_info, written from
    /// net/tls (`tls_set_sw_offload`, `tls_do_encryption`, `decrypt_internal`,
    /// `tls_xor_iv_with_seq`, `tls_fill_prepend`, `tls_make_aad`,
    /// `tls_advance_record_sn`), with aws-lc-rs for the AEAD. It reads the
    /// structure by the header's offsets, independently of `build`.
    struct KernelModel {
        tls13: bool,
        /// TLS 1.2 AES-GCM: the explicit nonce travels in each record.
        explicit_nonce: bool,
        key: LessSafeKey,
        /// `cctx->iv`: salt || iv.
        iv: [u8; 12],
        rec_seq: u64,
    }

    impl KernelModel {
        fn new(info: &[u8]) -> Self {
            let tls13 = match u16::from_ne_bytes([info[0], info[1]]) {
                0x0303 => false,
                0x0304 => true,
                other => panic!("version {other:#x}"),
            };
            let (algorithm, iv_len, key_len, salt_len) =
                match u16::from_ne_bytes([info[2], info[3]]) {
                    51 => (&aead::AES_128_GCM, 8, 16, 4),
                    52 => (&aead::AES_256_GCM, 8, 32, 4),
                    54 => (&aead::CHACHA20_POLY1305, 12, 32, 0),
                    other => panic!("cipher {other}"),
                };
            assert_eq!(info.len(), 4 + iv_len + key_len + salt_len + 8);
            let (iv, rest) = info[4..].split_at(iv_len);
            let (key, rest) = rest.split_at(key_len);
            let (salt, rec_seq) = rest.split_at(salt_len);
            let mut salted_iv = [0; 12];
            salted_iv[..salt_len].copy_from_slice(salt);
            salted_iv[salt_len..].copy_from_slice(iv);
            Self {
                tls13,
                explicit_nonce: !tls13 && salt_len != 0,
                key: LessSafeKey::new(UnboundKey::new(algorithm, key).unwrap()),
                iv: salted_iv,
                rec_seq: u64::from_be_bytes(rec_seq.try_into().unwrap()),
            }
        }

        /// The nonce of the current record; `wire` is the explicit nonce read
        /// from a received TLS 1.2 GCM record.
        fn nonce(&self, wire: Option<&[u8]>) -> Nonce {
            let mut nonce = self.iv;
            if let Some(explicit) = wire {
                nonce[4..].copy_from_slice(explicit);
            }
            if !self.explicit_nonce {
                for (n, s) in nonce[4..].iter_mut().zip(self.rec_seq.to_be_bytes()) {
                    *n ^= s;
                }
            }
            Nonce::assume_unique_for_key(nonce)
        }

        fn tls12_aad(&self, content_type: u8, len: usize) -> [u8; 13] {
            let mut aad = [0; 13];
            aad[..8].copy_from_slice(&self.rec_seq.to_be_bytes());
            aad[8..].copy_from_slice(&[content_type, 3, 3, (len >> 8) as u8, len as u8]);
            aad
        }

        fn advance(&mut self) {
            self.rec_seq += 1;
            if self.explicit_nonce {
                let next = u64::from_be_bytes(self.iv[4..].try_into().unwrap()).wrapping_add(1);
                self.iv[4..].copy_from_slice(&next.to_be_bytes());
            }
        }

        fn seal(&mut self, content_type: u8, plaintext: &[u8]) -> Vec<u8> {
            let tag_len = self.key.algorithm().tag_len();
            let mut record = Vec::new();
            if self.tls13 {
                let mut inner = [plaintext, &[content_type]].concat();
                let len = inner.len() + tag_len;
                let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
                self.key
                    .seal_in_place_append_tag(self.nonce(None), Aad::from(header), &mut inner)
                    .unwrap();
                record.extend_from_slice(&header);
                record.extend_from_slice(&inner);
            } else {
                let explicit = if self.explicit_nonce {
                    &self.iv[4..]
                } else {
                    &[][..]
                };
                let len = explicit.len() + plaintext.len() + tag_len;
                record.extend_from_slice(&[content_type, 3, 3, (len >> 8) as u8, len as u8]);
                record.extend_from_slice(explicit);
                let aad = self.tls12_aad(content_type, plaintext.len());
                let mut body = plaintext.to_vec();
                self.key
                    .seal_in_place_append_tag(self.nonce(None), Aad::from(aad), &mut body)
                    .unwrap();
                record.extend_from_slice(&body);
            }
            self.advance();
            record
        }

        /// One whole record: its content type and plaintext.
        fn open(&mut self, record: &[u8]) -> (u8, Vec<u8>) {
            let (header, body) = record.split_at(5);
            assert_eq!(
                usize::from(u16::from_be_bytes([header[3], header[4]])),
                body.len()
            );
            let tag_len = self.key.algorithm().tag_len();
            let opened = if self.tls13 {
                let mut body = body.to_vec();
                let nonce = self.nonce(None);
                let aad = Aad::from(<[u8; 5]>::try_from(header).unwrap());
                let inner = self.key.open_in_place(nonce, aad, &mut body).unwrap();
                let end = inner.iter().rposition(|&b| b != 0).unwrap();
                (inner[end], inner[..end].to_vec())
            } else {
                let explicit_len = if self.explicit_nonce { 8 } else { 0 };
                let (explicit, sealed) = body.split_at(explicit_len);
                let nonce = self.nonce(self.explicit_nonce.then_some(explicit));
                let aad = self.tls12_aad(header[0], sealed.len() - tag_len);
                let mut sealed = sealed.to_vec();
                let plain = self
                    .key
                    .open_in_place(nonce, Aad::from(aad), &mut sealed)
                    .unwrap();
                (header[0], plain.to_vec())
            };
            self.advance();
            opened
        }
    }

    /// Split a byte stream into whole TLS records.
    fn records(mut wire: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        while !wire.is_empty() {
            let len = 5 + usize::from(u16::from_be_bytes([wire[3], wire[4]]));
            let (record, rest) = wire.split_at(len);
            out.push(record);
            wire = rest;
        }
        out
    }

    /// Everything `from` has to send, delivered to `to` and processed; the
    /// bytes that went over.
    fn deliver(from: &mut Connection, to: &mut Connection) -> Vec<u8> {
        let mut wire = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut wire).unwrap();
        }
        let mut unread = &wire[..];
        while !unread.is_empty() {
            to.read_tls(&mut unread).unwrap();
            to.process_new_packets().unwrap();
        }
        wire
    }

    fn read_plaintext(conn: &mut Connection) -> Vec<u8> {
        let mut plaintext = Vec::new();
        match conn.reader().read_to_end(&mut plaintext) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => plaintext,
            other => panic!("{other:?}"),
        }
    }

    /// A real rustls handshake in memory, the server's secrets extracted after
    /// `early` application-data records of its own, and the kernel model
    /// standing in for the server from then on: the client must accept what
    /// it sends, and it must read what the client sends.
    fn hand_off(
        version: &'static SupportedProtocolVersion,
        suite: SupportedCipherSuite,
        early: usize,
    ) {
        let certified = rcgen::generate_simple_self_signed(["localhost".to_owned()]).unwrap();
        let cert = certified.cert.der().clone();
        let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
        let provider = Arc::new(rustls::crypto::CryptoProvider {
            cipher_suites: vec![suite],
            ..rustls::crypto::aws_lc_rs::default_provider()
        });

        let mut server_config = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], PrivateKeyDer::Pkcs8(key))
            .unwrap();
        server_config.enable_secret_extraction = true;
        let mut roots = RootCertStore::empty();
        roots.add(cert).unwrap();
        let mut client_config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client_config.enable_secret_extraction = true;

        let mut server =
            Connection::Server(ServerConnection::new(Arc::new(server_config)).unwrap());
        let mut client = Connection::Client(
            ClientConnection::new(Arc::new(client_config), "localhost".try_into().unwrap())
                .unwrap(),
        );
        let mut server_wire = Vec::new();
        while client.is_handshaking()
            || server.is_handshaking()
            || client.wants_write()
            || server.wants_write()
        {
            deliver(&mut client, &mut server);
            server_wire.extend(deliver(&mut server, &mut client));
        }
        for i in 0..early {
            // One write, one record (write! would write each piece apart).
            let message = format!("early record {i}");
            server.writer().write_all(message.as_bytes()).unwrap();
            server_wire.extend(deliver(&mut server, &mut client));
            assert_eq!(read_plaintext(&mut client), message.as_bytes());
        }
        assert_eq!(server.negotiated_cipher_suite(), Some(suite));
        let protocol = server.protocol_version().unwrap();

        let secrets = server.dangerous_extract_secrets().unwrap();
        let (tx_seq, tx_secrets) = &secrets.tx;
        let (rx_seq, rx_secrets) = &secrets.rx;
        let tx = crypto_info(protocol, *tx_seq, tx_secrets).unwrap();
        let rx = crypto_info(protocol, *rx_seq, rx_secrets).unwrap();
        let mut kernel_tx = KernelModel::new(tx.as_bytes());
        let mut kernel_rx = KernelModel::new(rx.as_bytes());

        let mut kernel_records = Vec::new();
        for message in ["first from the kernel", "second from the kernel"] {
            let record = kernel_tx.seal(APPLICATION_DATA, message.as_bytes());
            client.read_tls(&mut &record[..]).unwrap();
            client.process_new_packets().unwrap();
            assert_eq!(read_plaintext(&mut client), message.as_bytes());
            kernel_records.push(record);
        }

        for message in ["first from the client", "second from the client"] {
            client.writer().write_all(message.as_bytes()).unwrap();
            let mut record = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut record).unwrap();
            }
            let (content_type, plaintext) = kernel_rx.open(&record);
            assert_eq!(content_type, APPLICATION_DATA);
            assert_eq!(plaintext, message.as_bytes());
        }

        if protocol == ProtocolVersion::TLSv1_2 && kernel_tx.explicit_nonce {
            // Every record after the server's ChangeCipherSpec is encrypted
            // and starts with its explicit nonce.
            let server_records = records(&server_wire);
            let ccs = server_records
                .iter()
                .position(|r| r[0] == CHANGE_CIPHER_SPEC)
                .unwrap();
            let explicit = |record: &&[u8]| record[5..13].to_vec();
            let rustls_nonces: HashSet<_> =
                server_records[ccs + 1..].iter().map(explicit).collect();
            assert_eq!(rustls_nonces.len(), 1 + early);
            for record in &kernel_records {
                let nonce = explicit(&&record[..]);
                assert!(!rustls_nonces.contains(&nonce), "nonce {nonce:02x?} reused");
            }
        }
    }

    #[test]
    fn hand_off_tls13_aes128gcm() {
        hand_off(
            &rustls::version::TLS13,
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            0,
        );
    }

    #[test]
    fn hand_off_tls13_aes256gcm() {
        hand_off(
            &rustls::version::TLS13,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            1,
        );
    }

    #[test]
    fn hand_off_tls13_chacha20poly1305() {
        hand_off(
            &rustls::version::TLS13,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            0,
        );
    }

    #[test]
    fn hand_off_tls12_aes128gcm() {
        hand_off(
            &rustls::version::TLS12,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            0,
        );
    }

    #[test]
    fn hand_off_tls12_aes256gcm() {
        hand_off(
            &rustls::version::TLS12,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            3,
        );
    }

    #[test]
    fn hand_off_tls12_chacha20poly1305() {
        hand_off(
            &rustls::version::TLS12,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            1,
        );
    }
}
