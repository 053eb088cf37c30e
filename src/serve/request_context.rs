//! The request context: what the handler and every protocol (HTTP/1,
//! HTTP/2) need to answer and account for a request besides the
//! connection's own state: the sites, the handler's per-thread buffers, the
//! `Date` line, the server's headers, the access log, the metrics block and
//! the connection's scheme. Built per turn by the stack (`stack.rs`), which
//! alone knows whether the connection speaks TLS.

use std::net::IpAddr;
use std::sync::Arc;

use super::access_log::{AccessLog, Entry};
use super::date::DateCache;
use super::handler::live::EventStreams;
use super::handler::{Http01, Scratch, Sites};
use super::metrics::{Answered, Metrics, Protocol, Scheme};
use super::net::clock::monotonic_us;
use super::server_headers::ServerHeaders;
use crate::pack::Encoding;

/// Everything answering a request needs besides the connection's own
/// state; borrowed from the thread by the stack, for any protocol.
pub struct RequestContext<'w> {
    /// What requests are answered from.
    pub sites: &'w Arc<Sites>,
    /// The handler's reusable buffers.
    pub scratch: &'w mut Scratch,
    /// This second's `Date` line.
    pub date: &'w DateCache,
    /// The server's own header lines, per set of lines a response overrides.
    pub server_headers: &'w ServerHeaders,
    /// This thread's access log, when enabled.
    pub log: Option<&'w mut AccessLog>,
    /// The client address, for the access log.
    pub peer: Option<IpAddr>,
    /// The server is shutting down: answer what was asked, then close.
    pub draining: bool,
    /// `--acme` on a cleartext connection: the HTTP-01 challenges to
    /// answer.
    pub http01: Option<&'w Http01>,
    /// `--redirect-https` on a cleartext connection: the HTTPS port to
    /// send requests to.
    pub https_redirect: Option<u16>,
    /// The connection's scheme, as the session layer below the protocol
    /// knows it (counted in the metrics).
    pub scheme: Scheme,
    /// Where responses are counted, and this thread's index there.
    pub metrics: &'w Metrics,
    pub thread: usize,
    /// With an access log: when the requests being answered began
    /// (monotonic microseconds; see `Entry::duration_us`); else 0.
    pub started_us: u64,
    /// The live preview's event streams the thread holds open, which a
    /// protocol holds one more of, or refuses.
    pub events: &'w EventStreams,
}

impl RequestContext<'_> {
    /// Counts an answered request in the metrics, by the site it went to
    /// (`site`: its slot, if one answered).
    #[inline]
    pub fn count(
        &self,
        protocol: Protocol,
        site: Option<u32>,
        status: u16,
        body_bytes: u64,
        encoding: Option<Encoding>,
    ) {
        let site = site.and_then(|slot| self.sites.site(slot));
        let stats = site.map_or(self.metrics.unrouted(), |s| s.stats());
        stats.thread(self.thread).count(&Answered {
            protocol,
            scheme: self.scheme,
            status,
            body_bytes,
            encoding: encoding.filter(|_| body_bytes > 0),
        });
    }

    /// Whether requests are logged: an entry is built only then.
    #[inline]
    pub fn logs(&self) -> bool {
        self.log.is_some()
    }

    /// Writes the access-log line of `entry` (its peer and duration are
    /// filled in here).
    pub fn log(&mut self, entry: Entry<'_>) {
        if let Some(log) = self.log.as_deref_mut() {
            let duration_us = monotonic_us().saturating_sub(self.started_us);
            log.record(
                self.date.second(),
                &Entry {
                    peer: self.peer,
                    duration_us,
                    ..entry
                },
            );
        }
    }
}
