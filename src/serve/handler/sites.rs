//! The sites a server answers for, and which one answers a request: by
//! the request's host (`Host`, `:authority`, or the authority of an
//! absolute-form target), compared without case, port or trailing dot,
//! once per request and without allocating.
//!
//! A [`Sites`] is one generation: immutable, replaced whole when a site is
//! added, replaced or removed. Each site keeps the *slot* it was given for
//! its whole life, and output segments name the pack they point into by
//! that slot, so a response assembled from one generation is sent against
//! that same generation (the connection holds its `Arc`).

use std::collections::HashMap;
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3DefaultBuilder;

use super::Site;
use super::cold::{ColdHost, ColdHosts};

/// Longest host name looked up (RFC 1035: 253 characters, and a bracketed
/// IPv6 literal is shorter); a longer one matches no site.
pub const MAX_HOST: usize = 255;

/// One generation of the sites being served.
pub struct Sites {
    /// Each site at its slot; `None` where a removed site was.
    slots: Vec<Option<Arc<Site>>>,
    /// Host key (see [`host_key`]) → slot.
    hosts: HashMap<Box<[u8]>, u32, Xxh3DefaultBuilder>,
    /// The slot that answers hosts not in `hosts`, and requests without a
    /// host; `None`: those get 421 Misdirected Request.
    fallback: Option<u32>,
    /// `kiln serve s3://… --cache-size`: the hosts the bucket holds, of
    /// which those not in `hosts` are cold.
    cold: Option<Arc<ColdHosts>>,
}

/// Where a request goes.
pub enum Routed<'a> {
    Site(&'a Arc<Site>),
    /// A host the bucket holds whose site is not loaded.
    Cold(ColdHost<'a>),
    /// No site answers: 421.
    Nowhere,
}

impl Sites {
    /// One site for every host: `kiln serve site.pack`, a preview, and
    /// the dummy answer.
    pub fn single(site: Arc<Site>) -> Arc<Sites> {
        Arc::new(Sites {
            slots: vec![Some(site)],
            hosts: HashMap::default(),
            fallback: Some(0),
            cold: None,
        })
    }

    /// Sites by host. Each site sits at its own slot (`Site::slot`);
    /// `fallback` is the slot of the site for other hosts.
    pub fn by_host(
        sites: impl IntoIterator<Item = (Vec<u8>, Arc<Site>)>,
        fallback: Option<Arc<Site>>,
    ) -> Arc<Sites> {
        Sites::by_host_cold(sites, fallback, None)
    }

    /// `by_host`, with the hosts the bucket holds (`cold`): those of them
    /// no site answers are cold, before the fallback.
    pub fn by_host_cold(
        sites: impl IntoIterator<Item = (Vec<u8>, Arc<Site>)>,
        fallback: Option<Arc<Site>>,
        cold: Option<Arc<ColdHosts>>,
    ) -> Arc<Sites> {
        let mut slots: Vec<Option<Arc<Site>>> = Vec::new();
        let mut place = |site: Arc<Site>| {
            let slot = site.slot() as usize;
            if slots.len() <= slot {
                slots.resize(slot + 1, None);
            }
            slots[slot] = Some(site);
            slot as u32
        };
        let fallback = fallback.map(&mut place);
        let mut hosts = HashMap::default();
        for (host, site) in sites {
            let slot = place(site);
            hosts.insert(host.into_boxed_slice(), slot);
        }
        Arc::new(Sites {
            slots,
            hosts,
            fallback,
            cold,
        })
    }

    /// The site that answers requests for `host` (a `Host` value, a port
    /// and trailing dot allowed); `None` when no site does (421) or the
    /// host's site is cold.
    pub fn route(&self, host: Option<&[u8]>) -> Option<&Arc<Site>> {
        match self.lookup(host) {
            Routed::Site(site) => Some(site),
            Routed::Cold(_) | Routed::Nowhere => None,
        }
    }

    /// Where a request for `host` goes: a loaded site, a cold one, or
    /// nowhere.
    pub fn lookup(&self, host: Option<&[u8]>) -> Routed<'_> {
        let slot = match host {
            Some(host) if !self.hosts.is_empty() || self.cold.is_some() => {
                let mut key = [0u8; MAX_HOST];
                let key = host_key(host, &mut key);
                match key.and_then(|k| self.hosts.get(k).copied()) {
                    Some(slot) => Some(slot),
                    None => {
                        // Only a miss looks at the cold hosts.
                        if let Some(cold) = key.zip(self.cold.as_ref()).and_then(|(k, c)| c.get(k))
                        {
                            return Routed::Cold(cold);
                        }
                        self.fallback
                    }
                }
            }
            _ => self.fallback,
        };
        match slot.and_then(|slot| self.site(slot)) {
            Some(site) => Routed::Site(site),
            None => Routed::Nowhere,
        }
    }

    /// The hosts the bucket holds, with `--cache-size`.
    pub fn cold(&self) -> Option<&ColdHosts> {
        self.cold.as_deref()
    }

    /// The site at `slot`, if this generation has one there.
    pub fn site(&self, slot: u32) -> Option<&Arc<Site>> {
        self.slots.get(slot as usize)?.as_ref()
    }

    /// Every site with its slot.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Site>> {
        self.slots.iter().flatten()
    }
}

/// Writes into `key` the form `host` is compared in: lower case, without
/// `:port` and without one trailing dot. `None` when it does not fit, so
/// matches no site.
pub fn host_key<'k>(host: &[u8], key: &'k mut [u8; MAX_HOST]) -> Option<&'k [u8]> {
    let name = match host.first() {
        // A bracketed IPv6 literal keeps its brackets; the port follows.
        Some(b'[') => {
            &host[..host
                .iter()
                .position(|&c| c == b']')
                .map_or(host.len(), |i| i + 1)]
        }
        _ => &host[..host.iter().position(|&c| c == b':').unwrap_or(host.len())],
    };
    let name = name.strip_suffix(b".").unwrap_or(name);
    let key = key.get_mut(..name.len())?;
    for (k, c) in key.iter_mut().zip(name) {
        *k = c.to_ascii_lowercase();
    }
    Some(key)
}

/// The authority of an absolute-form target (`http://host:port/path`),
/// which a server must route by instead of `Host` (RFC 9112 §3.2.2).
pub fn target_authority(target: &[u8]) -> Option<&[u8]> {
    let rest = target
        .strip_prefix(b"http://")
        .or_else(|| target.strip_prefix(b"https://"))?;
    let end = rest
        .iter()
        .position(|&c| matches!(c, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    // Userinfo is not allowed in an http URI's authority (RFC 9110 §4.2.4).
    Some(
        &authority[authority
            .iter()
            .position(|&c| c == b'@')
            .map_or(0, |i| i + 1)..],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::metrics::SiteStats;

    fn key(host: &str) -> Option<String> {
        let mut buf = [0u8; MAX_HOST];
        host_key(host.as_bytes(), &mut buf).map(|k| String::from_utf8(k.to_vec()).unwrap())
    }

    #[test]
    fn host_keys_ignore_case_port_and_trailing_dot() {
        for (host, expected) in [
            ("example.com", "example.com"),
            ("Example.COM", "example.com"),
            ("example.com:8080", "example.com"),
            ("example.com.", "example.com"),
            ("EXAMPLE.com.:443", "example.com"),
            ("[::1]:8080", "[::1]"),
            ("[::1]", "[::1]"),
            ("127.0.0.1:80", "127.0.0.1"),
            ("", ""),
        ] {
            assert_eq!(key(host).as_deref(), Some(expected), "{host:?}");
        }
        assert_eq!(key(&"a".repeat(MAX_HOST)).map(|k| k.len()), Some(MAX_HOST));
        assert_eq!(key(&"a".repeat(MAX_HOST + 1)), None);
    }

    #[test]
    fn absolute_targets_name_their_authority() {
        for (target, authority) in [
            ("http://a.example/x", Some("a.example")),
            ("https://a.example:8443", Some("a.example:8443")),
            ("http://user@a.example?q", Some("a.example")),
            ("/x", None),
            ("*", None),
        ] {
            assert_eq!(
                target_authority(target.as_bytes()),
                authority.map(str::as_bytes),
                "{target}"
            );
        }
    }

    #[test]
    fn requests_go_to_their_host_or_the_fallback() {
        let a = Site::dummy_at(0, SiteStats::new("a.example", 1));
        let b = Site::dummy_at(3, SiteStats::new("b.example", 1));
        let fallback = Site::dummy_at(1, SiteStats::new("_default", 1));
        let hosts = || {
            [
                (b"a.example".to_vec(), Arc::clone(&a)),
                (b"b.example".to_vec(), Arc::clone(&b)),
            ]
        };
        let sites = Sites::by_host(hosts(), Some(Arc::clone(&fallback)));
        let slot = |host: Option<&str>| sites.route(host.map(str::as_bytes)).map(|s| s.slot());
        assert_eq!(slot(Some("A.Example:80")), Some(0));
        assert_eq!(slot(Some("b.example.")), Some(3));
        assert_eq!(slot(Some("c.example")), Some(1));
        assert_eq!(slot(None), Some(1));
        assert_eq!(sites.iter().count(), 3);

        let strict = Sites::by_host(hosts(), None);
        assert_eq!(
            strict.route(Some(b"c.example")).map(|s| s.slot()),
            None,
            "no fallback: misdirected"
        );
        assert_eq!(strict.route(None).map(|s| s.slot()), None);
    }
}
