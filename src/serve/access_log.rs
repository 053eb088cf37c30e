//! The access log in combined log format, buffered per thread and written
//! when the buffer fills or once a second, so that logging costs one
//! `write` per many requests.

use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use super::date::format_clf;
use super::output::push_u64;

/// Flush once this many bytes are buffered.
const FLUSH_AT: usize = 32 * 1024;

/// Where the lines go; shared by every thread (each write is one append).
pub enum Sink {
    /// `--access-log -`.
    Stdout,
    /// An append-mode file.
    File(File),
}

/// One thread's log buffer.
pub struct AccessLog {
    /// Shared destination.
    sink: Arc<Sink>,
    /// Lines not yet written.
    buf: Vec<u8>,
    /// The second `stamp` was formatted for.
    second: i64,
    /// `[22/Nov/2026:04:30:14 +0000]` without brackets, cached per second.
    stamp: [u8; 26],
}

/// The request fields one line records.
pub struct Entry<'a> {
    /// The client address (`-` when unknown).
    pub peer: Option<IpAddr>,
    /// Method, target and protocol (`GET /path HTTP/1.1`), or `None` for
    /// an unparsable request (`"-"`).
    pub request: Option<(&'a [u8], &'a [u8], &'static str)>,
    /// The status sent.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// The `Referer` header.
    pub referer: Option<&'a [u8]>,
    /// The `User-Agent` header.
    pub user_agent: Option<&'a [u8]>,
}

fn push_escaped(buf: &mut Vec<u8>, value: &[u8]) {
    for &c in value {
        if !(0x20..0x7f).contains(&c) || c == b'"' || c == b'\\' {
            let hex = b"0123456789abcdef";
            buf.extend_from_slice(&[b'\\', b'x', hex[(c >> 4) as usize], hex[(c & 15) as usize]]);
        } else {
            buf.push(c);
        }
    }
}

fn push_quoted(buf: &mut Vec<u8>, value: Option<&[u8]>) {
    buf.push(b'"');
    match value {
        Some(v) => push_escaped(buf, v),
        None => buf.push(b'-'),
    }
    buf.push(b'"');
}

impl AccessLog {
    pub fn new(sink: Arc<Sink>) -> AccessLog {
        AccessLog {
            sink,
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            second: i64::MIN,
            stamp: [0; 26],
        }
    }

    pub fn record(&mut self, now: i64, e: &Entry<'_>) {
        if now != self.second {
            self.second = now;
            format_clf(now, &mut self.stamp);
        }
        let b = &mut self.buf;
        match e.peer {
            Some(IpAddr::V4(ip)) => {
                for (i, octet) in ip.octets().into_iter().enumerate() {
                    if i > 0 {
                        b.push(b'.');
                    }
                    push_u64(b, u64::from(octet));
                }
            }
            Some(ip) => {
                let _ = write!(b, "{ip}");
            }
            None => b.push(b'-'),
        }
        b.extend_from_slice(b" - - [");
        b.extend_from_slice(&self.stamp);
        b.extend_from_slice(b"] \"");
        match e.request {
            Some((method, target, protocol)) => {
                push_escaped(b, method);
                b.push(b' ');
                push_escaped(b, target);
                b.push(b' ');
                b.extend_from_slice(protocol.as_bytes());
            }
            None => b.push(b'-'),
        }
        b.extend_from_slice(b"\" ");
        push_u64(b, u64::from(e.status));
        b.push(b' ');
        push_u64(b, e.bytes);
        b.push(b' ');
        push_quoted(b, e.referer);
        b.push(b' ');
        push_quoted(b, e.user_agent);
        b.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Writes what is buffered; a failing log never stops serving.
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let result = match &*self.sink {
            Sink::Stdout => std::io::stdout().lock().write_all(&self.buf),
            Sink::File(f) => (&*f).write_all(&self.buf),
        };
        if let Err(e) = result {
            tracing::warn!("access log write failed: {e}");
        }
        self.buf.clear();
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.flush();
    }
}
