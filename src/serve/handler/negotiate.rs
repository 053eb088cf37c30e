//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3) over a route's stored
//! variants: the coding the client weights highest, then the smallest body.
//!
//! An unlisted identity is acceptable, not preferred: it ranks below every
//! coding the client accepts, whatever that coding's q, so `br;q=0.5` gets
//! br. Identity beats a coding only when the client weights it higher, by
//! name or through `*` (which covers identity too).
//!
//! When nothing stored is acceptable, identity is sent. The RFC says so
//! while identity is acceptable; when `identity;q=0` or `*;q=0` excluded it
//! as well, the RFC allows either a 406 or disregarding the field (§12.1,
//! §15.5.7). kiln disregards it, as nginx does: the resource is more use
//! to the client than an error, and browsers never send such a field.

use super::{FieldLines, Request};
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

/// How much the client wants one coding, in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Preference {
    /// Not listed, or listed with q=0.
    Refused,
    /// Identity that neither its name nor `*` weights: acceptable, but
    /// behind every coding the client lists.
    Unlisted,
    /// Listed, by name or through `*`, with this q in thousandths (> 0).
    Weighted(u16),
}

impl Preference {
    fn from_qvalue(q: u16) -> Preference {
        if q == 0 {
            Preference::Refused
        } else {
            Preference::Weighted(q)
        }
    }
}

/// What the client wants of each encoding, in `Encoding` order.
fn preferences(accept: &FieldLines<'_>) -> [Preference; 4] {
    let mut listed: [Option<u16>; 4] = [None; 4];
    let mut star = None;
    for item in accept.elements() {
        let (token, params) = match item.iter().position(|&c| c == b';') {
            Some(semi) => (&item[..semi], &item[semi..]),
            None => (item, &b""[..]),
        };
        let token = token.trim_ascii();
        if token == b"*" {
            star = Some(qvalue(params));
        } else if let Some(e) = Encoding::from_token(token) {
            listed[e as usize] = Some(qvalue(params));
        }
    }
    let mut prefs = [Preference::Refused; 4];
    for (i, pref) in prefs.iter_mut().enumerate() {
        *pref = match listed[i].or(star) {
            Some(q) => Preference::from_qvalue(q),
            None if i == Encoding::Identity as usize => Preference::Unlisted,
            None => Preference::Refused,
        };
    }
    prefs
}

/// The variant to send: the client's strongest preference, then the
/// smallest body; identity if nothing stored is acceptable, or if the
/// variant chosen is corrupt. `None` only for a corrupt route without
/// identity.
pub fn choose<'p>(route: &Route<'p>, accept: &FieldLines<'_>) -> Option<Variant<'p>> {
    let prefs = preferences(accept);
    // Compared by their records' lengths: only the variant picked is read
    // whole (its slices checked, the QPACK one included).
    let mut best: Option<(Preference, Encoding, u64)> = None;
    for (encoding, len) in route.variant_lengths() {
        let pref = prefs[encoding as usize];
        if pref == Preference::Refused {
            continue;
        }
        let better = match best {
            None => true,
            Some((best_pref, _, best_len)) => {
                pref > best_pref || (pref == best_pref && len < best_len)
            }
        };
        if better {
            best = Some((pref, encoding, len));
        }
    }
    best.and_then(|(_, encoding, _)| route.variant(encoding))
        .or_else(|| route.variant(Encoding::Identity))
}

/// Whether the client accepts `dcb` and `dcz` (listed by name with a q
/// above 0: `*` never selects a delta, which needs a dictionary).
fn delta_tokens(accept: &FieldLines<'_>) -> (bool, bool) {
    let (mut dcb, mut dcz) = (false, false);
    for item in accept.elements() {
        let (token, params) = match item.iter().position(|&c| c == b';') {
            Some(semi) => (&item[..semi], &item[semi..]),
            None => (item, &b""[..]),
        };
        let token = token.trim_ascii();
        if token.eq_ignore_ascii_case(b"dcb") {
            dcb = qvalue(params) > 0;
        } else if token.eq_ignore_ascii_case(b"dcz") {
            dcz = qvalue(params) > 0;
        }
    }
    (dcb, dcz)
}

/// RFC 9842 §7.2: a delta answers a request whose page could not read the
/// response (`Sec-Fetch-Mode: no-cors` from another origin) only when the
/// response is readable from any origin anyway.
fn readable_by_requester(route: &Route<'_>, req: &Request<'_>) -> bool {
    let cross_origin = req.sec_fetch_site.is_some_and(|s| s != b"same-origin");
    let no_cors = req.sec_fetch_mode.is_some_and(|m| m == b"no-cors");
    !(cross_origin && no_cors) || route.deltas_readable_cross_origin()
}

/// The delta variant to send instead of `plain`, if the request names a
/// dictionary the route has a delta against (`Available-Dictionary`), in
/// a delta coding it accepts, and may read it: the smaller of `dcb` and
/// `dcz`, if smaller than `plain`. A field that is not one well-formed
/// byte sequence of 32 bytes names nothing. No allocation.
pub fn choose_delta<'p>(
    route: &Route<'p>,
    req: &Request<'_>,
    plain: &Variant<'p>,
) -> Option<Variant<'p>> {
    let value = req.available_dictionary?;
    if route.delta_count() == 0 {
        return None;
    }
    let (dcb, dcz) = delta_tokens(&req.accept_encoding);
    if !(dcb || dcz) || !readable_by_requester(route, req) {
        return None;
    }
    let hash = crate::dictionary::parse_available_dictionary(value)?;
    route
        .deltas()
        .filter(|v| *v.dictionary == hash)
        .filter(|v| match v.encoding {
            Encoding::Dcb => dcb,
            Encoding::Dcz => dcz,
            _ => false,
        })
        .filter(|v| v.body.len() < plain.body.len())
        .min_by_key(|v| (v.body.len(), v.encoding))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefs(lines: &[&'static str]) -> [Preference; 4] {
        let mut accept = FieldLines::default();
        for line in lines {
            accept.push(line.as_bytes()).unwrap();
        }
        preferences(&accept)
    }

    #[test]
    fn preferences_follow_the_rfc() {
        use Preference::{Refused as R, Unlisted as U, Weighted as W};
        // Order: identity, br, zstd, gzip.
        assert_eq!(prefs(&[]), [U, R, R, R]);
        assert_eq!(prefs(&[""]), [U, R, R, R]);
        assert_eq!(prefs(&["gzip, br;q=0.5"]), [U, W(500), R, W(1000)]);
        assert_eq!(prefs(&["br;q=0.9"]), [U, W(900), R, R]);
        assert_eq!(prefs(&["br;q=0.9, identity"]), [W(1000), W(900), R, R]);
        assert_eq!(prefs(&["*"]), [W(1000), W(1000), W(1000), W(1000)]);
        assert_eq!(prefs(&["*;q=0, gzip"]), [R, R, R, W(1000)]);
        assert_eq!(prefs(&["identity;q=0, zstd;q=0.25"]), [R, R, W(250), R]);
        assert_eq!(prefs(&["GZIP;Q=1.0, br;q=2"]), [U, R, R, W(1000)]);
        assert_eq!(prefs(&["br;q=0.0001"]), [U, R, R, R]);
        assert_eq!(prefs(&["br", "gzip;q=0.5"]), [U, W(1000), R, W(500)]);
        assert_eq!(prefs(&["br;x=\"a,gzip\""]), [U, W(1000), R, R]);
    }

    #[test]
    fn delta_codings_are_accepted_only_by_name() {
        let tokens = |lines: &[&'static str]| {
            let mut accept = FieldLines::default();
            for line in lines {
                accept.push(line.as_bytes()).unwrap();
            }
            delta_tokens(&accept)
        };
        assert_eq!(tokens(&["gzip, br, zstd, dcb, dcz"]), (true, true));
        assert_eq!(tokens(&["br", "DCZ;q=0.5"]), (false, true));
        assert_eq!(tokens(&["dcb;q=0, dcz"]), (false, true));
        assert_eq!(tokens(&["*"]), (false, false));
        assert_eq!(tokens(&[]), (false, false));
    }

    #[test]
    fn an_unlisted_identity_ranks_below_any_acceptable_coding() {
        assert!(Preference::Unlisted < Preference::Weighted(1));
        assert!(Preference::Refused < Preference::Unlisted);
        assert_eq!(Preference::from_qvalue(0), Preference::Refused);
    }
}
