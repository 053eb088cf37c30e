//! ACME HTTP-01 (RFC 8555 §8.3) under `kiln serve --acme`: the key
//! authorizations the ACME client leaves in its state folder, answered at
//! `/.well-known/acme-challenge/TOKEN` on cleartext connections.
//!
//! One [`Http01`] is one immutable generation, read by the control thread
//! and published to the loops as the sites are; a lookup hashes the token
//! and allocates nothing. The bodies are one block of bytes that output
//! segments point into as the backing's pack [`SLOT`] (the stack maps that
//! number to [`Http01::bytes`]), so that a response written in pieces, or
//! an HTTP/2 stream's DATA sent later, stays valid as a pack body does.

use std::collections::HashMap;

use xxhash_rust::xxh3::Xxh3DefaultBuilder;

use super::{Body, Extra, Method, Request, Response, builtin};

/// The backing number output segments name the key authorizations by:
/// never a site's slot (slots count up from 0, one per site), nor
/// `u32::MAX`, which `net::io::gather` takes for "no pack looked up yet".
pub const SLOT: u32 = u32::MAX - 1;

/// Where HTTP-01 challenges are fetched (RFC 8555 §8.3).
pub const PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// The header lines of an answer: the CA reads the body as text, and no
/// cache may keep a token that is valid for minutes.
const HEAD: &[u8] = b"Content-Type: text/plain\r\nCache-Control: no-store\r\n";

/// Longest token kept (RFC 8555 tokens are 43 base64url characters; a CA
/// may use more, not this many).
const MAX_TOKEN: usize = 255;

/// The tokens answered now, each with its key authorization.
pub struct Http01 {
    /// Token → (offset, length) of its key authorization in `bytes`.
    tokens: HashMap<Box<[u8]>, (u32, u32), Xxh3DefaultBuilder>,
    /// Every key authorization, one after the other.
    bytes: Box<[u8]>,
    /// `HEAD` HPACK-encoded, for HTTP/2 (made once per generation).
    hpack: Box<[u8]>,
}

impl Http01 {
    /// A generation of `(token, key authorization)` pairs; tokens that are
    /// not base64url (RFC 8555 §8.3: the only alphabet a token has) or
    /// longer than [`MAX_TOKEN`] are left out, and so is a key
    /// authorization that is not one printable ASCII line.
    pub fn new(pairs: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Http01 {
        let mut tokens = HashMap::default();
        let mut bytes = Vec::new();
        for (token, authorization) in pairs {
            let authorization = authorization.trim_ascii_end();
            if !is_token(&token) || !authorization.iter().all(|c| c.is_ascii_graphic()) {
                continue;
            }
            let (Ok(off), Ok(len)) = (
                u32::try_from(bytes.len()),
                u32::try_from(authorization.len()),
            ) else {
                break;
            };
            bytes.extend_from_slice(authorization);
            tokens.insert(token.into_boxed_slice(), (off, len));
        }
        let mut hpack = Vec::new();
        crate::hpack::encode_lines(HEAD, &mut hpack);
        Http01 {
            tokens,
            bytes: bytes.into_boxed_slice(),
            hpack: hpack.into_boxed_slice(),
        }
    }

    /// How many tokens are answered.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The key authorizations, which responses' bodies point into as the
    /// backing's pack [`SLOT`].
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The answer to `req` when it asks for a challenge (GET or HEAD of
    /// `PREFIX` + token, in origin or absolute form): 200 with the key
    /// authorization, or 404 for a token not known now. `None` for every
    /// other request. Allocation-free.
    pub fn answer(&self, req: &Request<'_>) -> Option<Response<'_>> {
        if !matches!(req.method, Method::Get | Method::Head) {
            return None;
        }
        let path = match req
            .target
            .strip_prefix(b"http://")
            .or_else(|| req.target.strip_prefix(b"https://"))
        {
            Some(rest) => &rest[rest.iter().position(|&c| c == b'/')?..],
            None => req.target,
        };
        let token = path.strip_prefix(PREFIX)?;
        let token = &token[..token.iter().position(|&c| c == b'?').unwrap_or(token.len())];
        let Some(&(off, len)) = self.tokens.get(token) else {
            return Some(builtin(404, b"404 Not Found: no such ACME challenge\n"));
        };
        Some(Response {
            status: 200,
            head: HEAD,
            hpack: &self.hpack,
            qpack: None,
            overrides: 0,
            extra: Extra::Length,
            body: Body::Pack {
                pack: SLOT,
                off: u64::from(off),
                len: u64::from(len),
            },
            site: None,
            encoding: None,
            shared: super::Shared::NONE,
        })
    }
}

/// A token as RFC 8555 §8.3 makes them: base64url characters only.
pub fn is_token(token: &[u8]) -> bool {
    !token.is_empty()
        && token.len() <= MAX_TOKEN
        && token
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Http01 {
        Http01::new([
            (b"tok-1_A".to_vec(), b"tok-1_A.thumb\n".to_vec()),
            (b"second".to_vec(), b"second.thumb".to_vec()),
            (b"../bad".to_vec(), b"x".to_vec()),
            (b"badvalue".to_vec(), b"two\nlines".to_vec()),
        ])
    }

    fn body<'a>(h: &'a Http01, resp: &Response<'_>) -> &'a [u8] {
        match resp.body {
            Body::Pack { pack, off, len } => {
                assert_eq!(pack, SLOT);
                &h.bytes()[off as usize..(off + len) as usize]
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_known_token_gets_its_key_authorization_in_any_target_form() {
        let h = tokens();
        assert_eq!(h.len(), 2, "bad tokens and values are left out");
        for target in [
            &b"/.well-known/acme-challenge/tok-1_A"[..],
            b"/.well-known/acme-challenge/tok-1_A?x=1",
            b"http://a.example/.well-known/acme-challenge/tok-1_A",
        ] {
            for method in [Method::Get, Method::Head] {
                let resp = h.answer(&Request::new(method, target)).unwrap();
                assert_eq!(resp.status, 200);
                assert_eq!(body(&h, &resp), b"tok-1_A.thumb");
                assert_eq!(resp.head, HEAD);
            }
        }
        let resp = h
            .answer(&Request::new(
                Method::Get,
                b"/.well-known/acme-challenge/second",
            ))
            .unwrap();
        assert_eq!(body(&h, &resp), b"second.thumb");
    }

    #[test]
    fn unknown_tokens_are_404_and_other_requests_are_not_challenges() {
        let h = tokens();
        for target in [
            &b"/.well-known/acme-challenge/nope"[..],
            b"/.well-known/acme-challenge/",
            b"/.well-known/acme-challenge/badvalue",
        ] {
            let resp = h.answer(&Request::new(Method::Get, target)).unwrap();
            assert_eq!(resp.status, 404, "{}", String::from_utf8_lossy(target));
        }
        for (method, target) in [
            (Method::Get, &b"/"[..]),
            (Method::Get, b"/.well-known/acme-challengeX"),
            (Method::NotAllowed, b"/.well-known/acme-challenge/tok-1_A"),
        ] {
            assert!(h.answer(&Request::new(method, target)).is_none());
        }
    }

    #[test]
    fn the_hpack_block_is_the_lines() {
        let h = tokens();
        let mut fields = Vec::new();
        crate::hpack::Decoder::new(0)
            .decode(&h.hpack, &mut Vec::new(), usize::MAX, |n, v| {
                fields.push(format!(
                    "{}: {}",
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(v)
                ));
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(
            fields,
            ["content-type: text/plain", "cache-control: no-store"]
        );
    }
}
