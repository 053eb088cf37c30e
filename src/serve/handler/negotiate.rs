//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3) over a route's stored
//! variants.
//!
//! When nothing stored is acceptable (even identity excluded by `identity;q=0`
//! or `*;q=0`), identity is sent: the RFC's SHOULD, and friendlier than a 406.

use crate::pack::{Encoding, Route, Variant};

/// A q-value in thousandths (`q=0.5` → 500); malformed values count as 0.
fn qvalue(params: &[u8]) -> u16 {
    for param in params.split(|&c| c == b';') {
        let p = param.trim_ascii();
        if p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") {
            let v = &p[2..];
            let (int, frac) = match v.iter().position(|&c| c == b'.') {
                Some(dot) => (&v[..dot], &v[dot + 1..]),
                None => (v, &b""[..]),
            };
            if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
                return 0;
            }
            let mut q = match int[0] {
                b'0' => 0u16,
                b'1' => 1000,
                _ => return 0,
            };
            for (i, d) in frac.iter().enumerate() {
                q += u16::from(d - b'0') * [100, 10, 1][i];
            }
            return q.min(1000);
        }
    }
    1000
}

/// The q-value the client gives each encoding, in `Encoding` order.
fn weights(accept: Option<&[u8]>) -> [u16; 4] {
    let Some(accept) = accept else {
        return [1000, 0, 0, 0];
    };
    let mut explicit: [Option<u16>; 4] = [None; 4];
    let mut star = None;
    for item in accept.split(|&c| c == b',') {
        let (token, params) = match item.iter().position(|&c| c == b';') {
            Some(semi) => (&item[..semi], &item[semi..]),
            None => (item, &b""[..]),
        };
        let token = token.trim_ascii();
        if token == b"*" {
            star = Some(qvalue(params));
        } else if let Some(e) = std::str::from_utf8(token)
            .ok()
            .and_then(Encoding::from_token)
        {
            explicit[e as usize] = Some(qvalue(params));
        }
    }
    let mut w = [0; 4];
    for (i, slot) in w.iter_mut().enumerate() {
        let fallback = if i == Encoding::Identity as usize {
            1000
        } else {
            0
        };
        *slot = explicit[i].or(star).unwrap_or(fallback);
    }
    w
}

/// The variant to send: highest q, then smallest body; identity if nothing
/// stored is acceptable. `None` only for a corrupt route without identity.
pub fn choose<'p>(route: &Route<'p>, accept: Option<&[u8]>) -> Option<Variant<'p>> {
    let w = weights(accept);
    let mut best: Option<(u16, usize, Variant<'p>)> = None;
    for v in route.variants() {
        let q = w[v.encoding as usize];
        if q == 0 {
            continue;
        }
        let better = match &best {
            None => true,
            Some((bq, blen, _)) => q > *bq || (q == *bq && v.body.len() < *blen),
        };
        if better {
            best = Some((q, v.body.len(), v));
        }
    }
    best.map(|(_, _, v)| v)
        .or_else(|| route.variant(Encoding::Identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_rfc() {
        assert_eq!(weights(None), [1000, 0, 0, 0]);
        assert_eq!(weights(Some(b"")), [1000, 0, 0, 0]);
        assert_eq!(weights(Some(b"gzip, br;q=0.5")), [1000, 500, 0, 1000]);
        assert_eq!(weights(Some(b"*")), [1000, 1000, 1000, 1000]);
        assert_eq!(weights(Some(b"*;q=0, gzip")), [0, 0, 0, 1000]);
        assert_eq!(weights(Some(b"identity;q=0, zstd;q=0.25")), [0, 0, 250, 0]);
        assert_eq!(weights(Some(b"GZIP;Q=1.0, br;q=2")), [1000, 0, 0, 1000]);
        assert_eq!(weights(Some(b"br;q=0.0001")), [1000, 0, 0, 0]);
    }
}
