//! What a private key looks like, by name and by content: no build or
//! preview ever publishes one, whatever its flags (`screen` applies this
//! to every file of a source before anything is planned).
//!
//! - by name: a file whose name ends in `.key` (any case), without a look
//!   at its bytes;
//! - PEM and its kin, anywhere in the bytes looked at: a `-----BEGIN …
//!   PRIVATE KEY-----` line (`RSA`, `EC`, `DSA`, `OPENSSH`, `ENCRYPTED`,
//!   any label ending so), `-----BEGIN PGP PRIVATE KEY BLOCK-----`, `----
//!   BEGIN SSH2 ENCRYPTED PRIVATE KEY ----`: a bundle with a key after its
//!   certificates, a JSON credential with the key inside a string
//!   (`"private_key": "-----BEGIN PRIVATE KEY-----\n…"`), a key pasted in
//!   a page. A page that quotes a sample key is left out too: a real key
//!   published is worse than a tutorial page missing, and the warning
//!   names the page (write the dash before BEGIN as `&#45;` to publish it);
//! - a PuTTY key file (`PuTTY-User-Key-File-` at its start);
//! - DER: a file that is exactly one of the structures keys are stored
//!   in: PKCS#8 `PrivateKeyInfo` (and `OneAsymmetricKey`),
//!   `EncryptedPrivateKeyInfo`, PKCS#1 `RSAPrivateKey` (and OpenSSL's
//!   DSA key, the same sequence of integers), SEC1 `ECPrivateKey`, and
//!   a PKCS#12 bundle (`.p12`, `.pfx`). A certificate, a request or
//!   anything else whose first element is not one of those is not.
//!
//! Matching is on bytes (PEM is ASCII): no allocation, the search is
//! `memchr::memmem` (SIMD), a few gigabytes a second.

use std::fmt;

use memchr::memmem;

/// Why a file was taken for a private key, for its warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFound {
    /// Its name ends in `.key`.
    Name,
    /// A PEM (or OpenSSH, PGP, SSH2) private key block.
    Pem,
    /// A PuTTY private key file.
    Putty,
    /// A DER structure of this kind.
    Der(&'static str),
}

impl fmt::Display for KeyFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyFound::Name => f.write_str("its name ends in .key"),
            KeyFound::Pem => f.write_str("it holds a PEM private key block"),
            KeyFound::Putty => f.write_str("a PuTTY private key file"),
            KeyFound::Der(kind) => write!(f, "a DER {kind} private key"),
        }
    }
}

/// Whether a file called `name` is a key by its name alone.
pub fn named_as_key(name: &str) -> bool {
    let name = name.rsplit('/').next().unwrap_or(name).as_bytes();
    name.len() > 4 && name[name.len() - 4..].eq_ignore_ascii_case(b".key")
}

/// Bytes kept from the end of one piece of a file and looked at again
/// with the next, so that a line cut between two pieces is found: longer
/// than any BEGIN line matched (`MAX_LABEL` and the dashes around it).
pub const PIECE_OVERLAP: usize = 128;

/// The longest label before `PRIVATE KEY` (`BEGIN SSH2 ENCRYPTED `).
const MAX_LABEL: usize = 48;

/// Whether `bytes` holds the BEGIN line of a private key block anywhere.
pub fn has_pem_key(bytes: &[u8]) -> bool {
    memmem::find_iter(bytes, b"PRIVATE KEY").any(|at| begins_key_block(bytes, at))
}

/// Whether `PRIVATE KEY` at `at` in `bytes` ends the label of a BEGIN
/// line: `----` (four dashes or more), an optional space, `BEGIN `, label
/// words in capitals and digits, then `PRIVATE KEY`, an optional
/// ` BLOCK`, an optional space and `----`.
fn begins_key_block(bytes: &[u8], at: usize) -> bool {
    let before = &bytes[..at];
    let label_len = before
        .iter()
        .rev()
        .take(MAX_LABEL + 1)
        .take_while(|&&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ')
        .count();
    if label_len > MAX_LABEL {
        return false;
    }
    let label = &before[before.len() - label_len..];
    let label = label.strip_prefix(b" ").unwrap_or(label);
    if !label.starts_with(b"BEGIN ") || !before[..before.len() - label_len].ends_with(b"----") {
        return false;
    }
    let after = &bytes[at + b"PRIVATE KEY".len()..];
    let after = after.strip_prefix(b" BLOCK").unwrap_or(after);
    let after = after.strip_prefix(b" ").unwrap_or(after);
    after.starts_with(b"----")
}

/// Whether `start`, the first bytes of a file, begin a PuTTY key file.
pub fn is_putty_key(start: &[u8]) -> bool {
    start.starts_with(b"PuTTY-User-Key-File-")
}

/// The kind of DER private key `content`, a file's whole content, is
/// exactly, if it is one.
pub fn der_key(content: &[u8]) -> Option<&'static str> {
    let (0x30, body, []) = tlv(content)? else {
        return None;
    };
    let mut elements = Vec::with_capacity(10);
    let mut rest = body;
    while !rest.is_empty() {
        let (tag, value, after) = tlv(rest)?;
        elements.push((tag, value));
        rest = after;
        if elements.len() > 16 {
            return None;
        }
    }
    const INTEGER: u8 = 0x02;
    const OCTETS: u8 = 0x04;
    const SEQUENCE: u8 = 0x30;
    const PKCS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01];
    let pkcs = |oid: &[u8], arc: &[u8]| oid.strip_prefix(PKCS).is_some_and(|o| o.starts_with(arc));
    match elements.as_slice() {
        // PrivateKeyInfo / OneAsymmetricKey: version 0 or 1, the
        // algorithm, the key.
        [(INTEGER, [0 | 1]), (SEQUENCE, algorithm), (OCTETS, _), ..]
            if first_oid(algorithm).is_some() =>
        {
            Some("PKCS#8")
        }
        // EncryptedPrivateKeyInfo: a PKCS#5 or PKCS#12 encryption scheme,
        // the encrypted key.
        [(SEQUENCE, algorithm), (OCTETS, _)]
            if first_oid(algorithm)
                .is_some_and(|oid| pkcs(oid, &[0x05]) || pkcs(oid, &[0x0c, 0x01])) =>
        {
            Some("encrypted PKCS#8")
        }
        // ECPrivateKey: version 1, the key, then optional [0] and [1].
        [(INTEGER, [1]), (OCTETS, _), tail @ ..]
            if tail.iter().all(|(tag, _)| matches!(tag, 0xa0 | 0xa1)) =>
        {
            Some("SEC1 EC")
        }
        // PFX: version 3, its content (data or signed data), a MAC.
        [(INTEGER, [3]), (SEQUENCE, content), ..]
            if first_oid(content).is_some_and(|oid| pkcs(oid, &[0x07])) =>
        {
            Some("PKCS#12")
        }
        // RSAPrivateKey: version, then n, e, d, p, q, dp, dq, qinv (and
        // other primes); OpenSSL's DSA key: 0, p, q, g, y, x.
        [(INTEGER, [0 | 1]), integers @ ..]
            if integers.len() >= 5 && integers.iter().all(|(tag, _)| *tag == INTEGER) =>
        {
            Some(if integers.len() == 5 {
                "DSA"
            } else {
                "PKCS#1 RSA"
            })
        }
        _ => None,
    }
}

/// The object identifier `value` (an AlgorithmIdentifier's or a
/// ContentInfo's) starts with.
fn first_oid(value: &[u8]) -> Option<&[u8]> {
    match tlv(value)? {
        (0x06, oid, _) => Some(oid),
        _ => None,
    }
}

/// One DER element at the start of `bytes`: its tag, its value and what
/// follows it; `None` unless well-formed (definite length, within
/// `bytes`).
fn tlv(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ending_in_key_are_keys() {
        for name in ["example.com.key", "a/b/SERVER.KEY", "x.Key"] {
            assert!(named_as_key(name), "{name}");
        }
        for name in [
            ".key",
            "key",
            "keys.html",
            "a.key/b.txt",
            "monkey",
            "x.keys",
        ] {
            assert!(!named_as_key(name), "{name}");
        }
    }

    #[test]
    fn every_pem_private_key_label_is_found_wherever_it_is() {
        for label in [
            "PRIVATE KEY",
            "RSA PRIVATE KEY",
            "EC PRIVATE KEY",
            "DSA PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "PGP PRIVATE KEY BLOCK",
        ] {
            let block = format!("-----BEGIN {label}-----\nMIIB\n-----END {label}-----\n");
            assert!(has_pem_key(block.as_bytes()), "{label}");
            let bundle =
                format!("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n{block}");
            assert!(
                has_pem_key(bundle.as_bytes()),
                "{label} after a certificate"
            );
            let json = format!(
                r#"{{"type": "service_account", "private_key": "{}"}}"#,
                block.replace('\n', "\\n")
            );
            assert!(has_pem_key(json.as_bytes()), "{label} in a JSON string");
            let page = format!("<pre>\r\n{}</pre>", block.replace('\n', "\r\n"));
            assert!(has_pem_key(page.as_bytes()), "{label} in a page");
        }
        assert!(has_pem_key(
            b"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nComment: x\n"
        ));
    }

    #[test]
    fn what_is_not_a_pem_private_key() {
        for text in [
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n",
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\n",
            "Keep your PRIVATE KEY safe.",
            "a private key starts with -----BEGIN (and its type)",
            "-----END PRIVATE KEY-----",
            "BEGIN PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY",
            "-----BEGIN private key-----",
            "----&#45;BEGIN PRIVATE KEY-----",
        ] {
            assert!(!has_pem_key(text.as_bytes()), "{text}");
        }
        // A label longer than any real one.
        let long = format!("-----BEGIN {} PRIVATE KEY-----", "X".repeat(60));
        assert!(!has_pem_key(long.as_bytes()));
    }

    /// A DER element.
    fn der(tag: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match value.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n < 0x100 => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(value);
        out
    }

    fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
        der(0x30, &parts.concat())
    }

    fn int(value: &[u8]) -> Vec<u8> {
        der(0x02, value)
    }

    /// id-ecPublicKey, rsaEncryption, PBES2, pkcs7-data.
    const EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    const PBES2: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0d];
    const DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01];

    #[test]
    fn der_keys_of_every_structure_are_found() {
        let big = vec![0x55u8; 300];
        let pkcs8 = seq(&[
            int(&[0]),
            seq(&[der(0x06, RSA), der(0x05, &[])]),
            der(0x04, &big),
        ]);
        let encrypted = seq(&[seq(&[der(0x06, PBES2), seq(&[])]), der(0x04, &big)]);
        let sec1 = seq(&[
            int(&[1]),
            der(0x04, &[7; 32]),
            der(0xa0, &der(0x06, EC)),
            der(0xa1, &der(0x03, &[0; 66])),
        ]);
        let rsa = seq(&(0..9)
            .map(|i| int(if i == 0 { &[0][..] } else { &big[..129] }))
            .collect::<Vec<_>>());
        let dsa = seq(&(0..6)
            .map(|i| int(if i == 0 { &[0][..] } else { &big[..64] }))
            .collect::<Vec<_>>());
        let pfx = seq(&[
            int(&[3]),
            seq(&[der(0x06, DATA), der(0xa0, &der(0x04, &big))]),
            seq(&[]),
        ]);
        for (bytes, kind) in [
            (&pkcs8, "PKCS#8"),
            (&encrypted, "encrypted PKCS#8"),
            (&sec1, "SEC1 EC"),
            (&rsa, "PKCS#1 RSA"),
            (&dsa, "DSA"),
            (&pfx, "PKCS#12"),
        ] {
            assert_eq!(der_key(bytes), Some(kind), "{kind}");
            // Not the whole file: not a key file.
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(der_key(&longer), None, "{kind} with a byte more");
            assert_eq!(der_key(&bytes[..bytes.len() - 1]), None, "{kind} cut");
        }
    }

    #[test]
    fn other_der_is_not_a_key() {
        // A certificate's shape: a sequence of tbs, algorithm, signature.
        let cert = seq(&[
            seq(&[
                der(0xa0, &int(&[2])),
                int(&[1, 2, 3]),
                seq(&[der(0x06, RSA)]),
            ]),
            seq(&[der(0x06, RSA)]),
            der(0x03, &[0; 65]),
        ]);
        // A request: a sequence whose info starts with a version.
        let csr = seq(&[
            seq(&[int(&[0]), seq(&[])]),
            seq(&[der(0x06, RSA)]),
            der(0x03, &[0; 9]),
        ]);
        // A public key.
        let spki = seq(&[seq(&[der(0x06, EC)]), der(0x03, &[0; 66])]);
        // Integers too few for a key.
        let short = seq(&[int(&[0]), int(&[5]), int(&[6])]);
        for (bytes, what) in [
            (&cert, "certificate"),
            (&csr, "request"),
            (&spki, "public key"),
            (&short, "three integers"),
        ] {
            assert_eq!(der_key(bytes), None, "{what}");
        }
        for bytes in [
            &b""[..],
            b"\x30",
            b"\x30\x80\x00\x00",
            b"\x30\x85\0\0\0\0\0",
            b"<html>",
        ] {
            assert_eq!(der_key(bytes), None, "{bytes:?}");
        }
    }

    #[test]
    fn putty_keys_are_found_by_their_first_line() {
        assert!(is_putty_key(b"PuTTY-User-Key-File-3: ssh-ed25519\n"));
        assert!(!is_putty_key(b"see PuTTY-User-Key-File-3"));
    }
}
