//! A first look at the client's ClientHello before rustls reads it, sans-IO,
//! for one answer rustls does not give: a client that offers only TLS 1.1
//! or older gets the `protocol_version` alert (70, RFC 8446 §4.2.1,
//! RFC 5246 §7.4.1.2). rustls answers such a hello with
//! `handshake_failure` (40): it wants `signature_algorithms` (which TLS 1.0
//! and 1.1 have not) before it looks at the versions, so the client is
//! told the wrong reason and scanners report a broken server.
//!
//! Only a hello that arrives whole in its first record is looked at; one
//! that spans records, or does not parse, goes to rustls as it is, which
//! answers it as it would have.

use super::record::{ALERT, HANDSHAKE, HEADER_LEN, MAX_FRAGMENT};

/// `protocol_version` (RFC 8446 §6).
pub const PROTOCOL_VERSION: u8 = 70;

const CLIENT_HELLO: u8 = 1;
const SUPPORTED_VERSIONS: u16 = 43;
const TLS12: u16 = 0x0303;
const TLS13: u16 = 0x0304;

/// What the start of a connection says about the versions its client
/// offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first record has not arrived whole.
    NeedMore,
    /// TLS 1.2 or 1.3 is offered, or this is not a hello to judge: rustls
    /// takes it from here.
    ToRustls,
    /// Only versions before TLS 1.2: refuse with `protocol_version`, in a
    /// record of this version.
    TooOld { record_version: u16 },
}

/// Judges the connection's first bytes.
pub fn check(input: &[u8]) -> Verdict {
    let Some(header) = input.get(..HEADER_LEN) else {
        return Verdict::NeedMore;
    };
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if header[0] != HANDSHAKE || len > MAX_FRAGMENT {
        return Verdict::ToRustls;
    }
    let Some(fragment) = input.get(HEADER_LEN..HEADER_LEN + len) else {
        return Verdict::NeedMore;
    };
    match offered(fragment) {
        Some(Offered {
            legacy_version,
            modern: false,
        }) => Verdict::TooOld {
            record_version: legacy_version.clamp(0x0300, TLS12),
        },
        _ => Verdict::ToRustls,
    }
}

/// Appends the fatal `protocol_version` alert, in the clear, to `out`.
pub fn refuse(record_version: u16, out: &mut Vec<u8>) {
    let [major, minor] = record_version.to_be_bytes();
    out.extend_from_slice(&[ALERT, major, minor, 0, 2, 2, PROTOCOL_VERSION]);
}

/// The versions a ClientHello offers.
struct Offered {
    legacy_version: u16,
    /// TLS 1.2 or 1.3 is among them.
    modern: bool,
}

/// Reads the ClientHello that fills `fragment` (RFC 8446 §4.1.2), `None`
/// when it is not one, not whole or does not parse.
fn offered(fragment: &[u8]) -> Option<Offered> {
    let mut r = Reader(fragment);
    if r.u8()? != CLIENT_HELLO {
        return None;
    }
    let len = r.u24()?;
    let body = r.take(len)?;
    let mut r = Reader(body);
    let legacy_version = r.u16()?;
    r.take(32)?; // random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    let mut modern = legacy_version >= TLS12;
    if r.0.is_empty() {
        // No extensions: a TLS 1.0-era hello.
        return Some(Offered {
            legacy_version,
            modern,
        });
    }
    let mut extensions = Reader(r.vec16()?);
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let data = extensions.vec16()?;
        if kind == SUPPORTED_VERSIONS {
            // The list replaces legacy_version (RFC 8446 §4.2.1).
            let mut versions = Reader(Reader(data).vec8()?);
            modern = false;
            while !versions.0.is_empty() {
                modern |= matches!(versions.u16()?, TLS12 | TLS13);
            }
        }
    }
    Some(Offered {
        legacy_version,
        modern,
    })
}

/// Big-endian reads off the front of a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u24(&mut self) -> Option<usize> {
        let b = self.take(3)?;
        Some(usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u8()?);
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record: `legacy_version`, then extensions (type,
    /// data), none at all when `extensions` is `None`.
    fn hello(legacy_version: u16, extensions: Option<&[(u16, Vec<u8>)]>) -> Vec<u8> {
        let mut body = legacy_version.to_be_bytes().to_vec();
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 4, 0x00, 0x2f, 0x00, 0x35, 1, 0]);
        if let Some(extensions) = extensions {
            let mut all = Vec::new();
            for (kind, data) in extensions {
                all.extend_from_slice(&kind.to_be_bytes());
                all.extend_from_slice(&(data.len() as u16).to_be_bytes());
                all.extend_from_slice(data);
            }
            body.extend_from_slice(&(all.len() as u16).to_be_bytes());
            body.extend_from_slice(&all);
        }
        let mut message = vec![CLIENT_HELLO, 0, (body.len() >> 8) as u8, body.len() as u8];
        message.extend_from_slice(&body);
        let mut record = vec![HANDSHAKE, 3, 1];
        record.extend_from_slice(&(message.len() as u16).to_be_bytes());
        record.extend_from_slice(&message);
        record
    }

    fn versions(list: &[u16]) -> (u16, Vec<u8>) {
        let mut data = vec![(list.len() * 2) as u8];
        for v in list {
            data.extend_from_slice(&v.to_be_bytes());
        }
        (SUPPORTED_VERSIONS, data)
    }

    #[test]
    fn old_versions_are_told_apart_from_current_ones() {
        let sni = (0, b"\x00\x06\x00\x00\x03a.b".to_vec());
        for (record, want) in [
            (hello(0x0301, None), Some(0x0301)),
            (
                hello(0x0302, Some(std::slice::from_ref(&sni))),
                Some(0x0302),
            ),
            (hello(0x0300, None), Some(0x0300)),
            (hello(0x0303, None), None),
            (hello(0x0303, Some(std::slice::from_ref(&sni))), None),
            // supported_versions decides, whatever legacy_version says,
            // GREASE values (RFC 8701) being neither.
            (hello(0x0303, Some(&[versions(&[0x0a0a, TLS13])])), None),
            (hello(0x0301, Some(&[versions(&[TLS12])])), None),
            (
                hello(0x0303, Some(&[versions(&[0x0302, 0x0301])])),
                Some(0x0303),
            ),
            (
                hello(0x0303, Some(&[sni, versions(&[0x1a1a])])),
                Some(0x0303),
            ),
        ] {
            let verdict = check(&record);
            match want {
                Some(record_version) => assert_eq!(verdict, Verdict::TooOld { record_version }),
                None => assert_eq!(verdict, Verdict::ToRustls),
            }
            for cut in 0..record.len() {
                assert_eq!(check(&record[..cut]), Verdict::NeedMore, "cut at {cut}");
            }
        }
    }

    #[test]
    fn what_is_not_a_whole_hello_goes_to_rustls() {
        let mut spanning = hello(0x0301, None);
        spanning[3..5].copy_from_slice(&20u16.to_be_bytes());
        spanning.truncate(25);
        let mut truncated_extensions = hello(0x0301, Some(&[versions(&[0x0301])]));
        let n = truncated_extensions.len();
        truncated_extensions[n - 3] = 9;
        for input in [
            &b"GET / HTTP/1.1\r\n"[..],
            &[ALERT, 3, 1, 0, 2, 2, 40],
            &[HANDSHAKE, 3, 1, 0xff, 0xff, 1],
            &[HANDSHAKE, 3, 1, 0, 1, 2],
            &spanning,
            &truncated_extensions,
        ] {
            assert_eq!(check(input), Verdict::ToRustls, "{input:?}");
        }
        let mut out = Vec::new();
        refuse(0x0301, &mut out);
        assert_eq!(out, [ALERT, 3, 1, 0, 2, 2, PROTOCOL_VERSION]);
    }
}
