//! The protocol stack of kiln's connections, as the event loop sees it
//! through [`net::Stack`]: per thread, the site being served, the handler's
//! buffers, the `Date` line and the access log; per connection, the
//! protocol's state. The loop knows none of this; the protocols know
//! nothing of sockets.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::access_log::{AccessLog, Sink};
use super::date::DateCache;
use super::handler::{Scratch, Site};
use super::http1;
use super::net::{self, Backing, Output, Step};
use super::server_headers::ServerHeaders;

/// The site new requests are answered from, replaced by reloads.
pub struct CurrentSite {
    /// Bumped after `site` is replaced; threads compare it once per loop
    /// turn and take the lock only when it changed.
    generation: AtomicU64,
    /// The site itself.
    site: Mutex<Arc<Site>>,
}

impl CurrentSite {
    pub fn new(site: Arc<Site>) -> CurrentSite {
        CurrentSite {
            generation: AtomicU64::new(0),
            site: Mutex::new(site),
        }
    }

    /// Publishes a new site; responses in flight keep their Arc.
    pub fn publish(&self, site: Arc<Site>) {
        *self.site.lock().unwrap_or_else(|e| e.into_inner()) = site;
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn get(&self) -> (u64, Arc<Site>) {
        let generation = self.generation.load(Ordering::Acquire);
        let site = Arc::clone(&self.site.lock().unwrap_or_else(|e| e.into_inner()));
        (generation, site)
    }
}

impl Backing for Site {
    fn bytes(&self) -> &[u8] {
        self.pack().map_or(&[], |p| p.bytes())
    }

    fn file(&self) -> Option<RawFd> {
        self.pack().map(|p| p.file().as_raw_fd())
    }
}

/// What every thread's stack shares, set at start.
pub struct StackConfig {
    /// The server's own header lines (security headers, HSTS).
    pub server_headers: ServerHeaders,
    /// Where access log lines go, if anywhere.
    pub access_log: Option<Arc<Sink>>,
}

/// One thread's protocol stack.
pub struct Protocols {
    /// Where reloads publish the site.
    current: Arc<CurrentSite>,
    /// The `CurrentSite` generation `site` was taken at.
    generation: u64,
    /// The site this thread answers from.
    site: Arc<Site>,
    /// `site` again, as what output segments point into.
    backing: Arc<dyn Backing>,
    /// The handler's reusable buffers.
    scratch: Scratch,
    /// The `Date` line, reformatted once a second.
    date: DateCache,
    /// Shutdown began: answer what was asked, then close.
    draining: bool,
    /// Prepared header lines and the log sink.
    config: Arc<StackConfig>,
    /// This thread's access log buffer, when enabled.
    log: Option<AccessLog>,
}

/// One connection's protocol state.
pub struct Session {
    /// For the access log.
    peer: Option<IpAddr>,
    /// The HTTP/1 state between reads.
    http1: http1::Conn,
}

impl Protocols {
    pub fn new(current: Arc<CurrentSite>, config: Arc<StackConfig>) -> Protocols {
        let (generation, site) = current.get();
        let backing: Arc<dyn Backing> = site.clone();
        let log = config.access_log.clone().map(AccessLog::new);
        Protocols {
            current,
            generation,
            site,
            backing,
            scratch: Scratch::default(),
            date: DateCache::new(),
            draining: false,
            config,
            log,
        }
    }

    /// What the HTTP/1 code needs besides the connection's own state.
    fn context(&mut self, peer: Option<IpAddr>) -> http1::Context<'_> {
        http1::Context {
            site: &self.site,
            scratch: &mut self.scratch,
            date: &self.date,
            server_headers: &self.config.server_headers,
            log: self.log.as_mut(),
            peer,
            draining: self.draining,
        }
    }
}

impl net::Stack for Protocols {
    type Session = Session;

    fn begin_turn(&mut self, unix_seconds: i64, draining: bool) {
        self.date.update(unix_seconds);
        self.draining = draining;
        if self.current.generation.load(Ordering::Acquire) != self.generation {
            (self.generation, self.site) = self.current.get();
            self.backing = self.site.clone();
        }
    }

    fn open(&mut self, _listener: u32, peer: Option<IpAddr>) -> Session {
        Session {
            peer,
            http1: http1::Conn::default(),
        }
    }

    fn input(&mut self, session: &mut Session, bytes: &[u8], out: &mut Output) -> Step {
        let mut ctx = self.context(session.peer);
        session.http1.input(bytes, &mut ctx, out)
    }

    fn resume(&mut self, session: &mut Session, out: &mut Output) -> Step {
        let mut ctx = self.context(session.peer);
        session.http1.resume(&mut ctx, out)
    }

    fn timeout(&mut self, session: &mut Session, out: &mut Output) {
        let mut ctx = self.context(session.peer);
        ctx.draining = true;
        session.http1.timeout(&mut ctx, out);
    }

    fn goodbye(&mut self, _session: &mut Session, _out: &mut Output) {}

    fn backing(&self) -> &Arc<dyn Backing> {
        &self.backing
    }

    fn tick(&mut self) {
        if let Some(log) = self.log.as_mut() {
            log.flush();
        }
    }

    fn finish(&mut self) {
        self.tick();
    }
}
