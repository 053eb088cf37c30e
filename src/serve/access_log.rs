//! The access log, in combined log format or as JSON lines, buffered per
//! thread and written when the buffer fills or once a second, so that
//! logging costs one `write` per many requests.

use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use super::date::format_clf;
use super::output::push_u64;
use crate::httpdate::format_rfc3339;
use crate::pack::Encoding;

/// Flush once this many bytes are buffered.
const FLUSH_AT: usize = 32 * 1024;

/// `--access-log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Apache's and nginx's combined format.
    #[default]
    Combined,
    /// One JSON object per line.
    Json,
}

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
    format: Format,
    /// Lines not yet written.
    buf: Vec<u8>,
    /// The second the stamps were formatted for.
    second: i64,
    /// `[22/Nov/2026:04:30:14 +0000]` without brackets, cached per second.
    clf: [u8; 26],
    /// `2026-11-22T04:30:14Z`, cached per second.
    rfc3339: [u8; 20],
}

/// The request fields one line records.
pub struct Entry<'a> {
    /// The client address (`-` when unknown).
    pub peer: Option<IpAddr>,
    /// Method, target and protocol (`GET /path HTTP/1.1`), or `None` for
    /// an unparsable request (`"-"`).
    pub request: Option<(&'a [u8], &'a [u8], &'static str)>,
    /// The host asked for (`Host` or `:authority`).
    pub host: Option<&'a [u8]>,
    /// The status sent.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// The content coding of the body sent from the pack, if any.
    pub encoding: Option<Encoding>,
    /// Microseconds from the loop turn that read the request's first bytes
    /// to its response being queued for the socket.
    pub duration_us: u64,
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

/// A JSON string of `value`: bytes a client sent are not always UTF-8,
/// so anything outside printable ASCII is written as `\u00XX` (the byte's
/// value), which any JSON parser reads back and which keeps the line valid.
fn push_json_string(buf: &mut Vec<u8>, value: &[u8]) {
    buf.push(b'"');
    for &c in value {
        match c {
            b'"' => buf.extend_from_slice(b"\\\""),
            b'\\' => buf.extend_from_slice(b"\\\\"),
            0x20..0x7f => buf.push(c),
            _ => {
                let hex = b"0123456789abcdef";
                buf.extend_from_slice(b"\\u00");
                buf.extend_from_slice(&[hex[(c >> 4) as usize], hex[(c & 15) as usize]]);
            }
        }
    }
    buf.push(b'"');
}

/// `"name":` and the value as a JSON string, or `null`.
fn push_json_field(buf: &mut Vec<u8>, name: &str, value: Option<&[u8]>) {
    buf.push(b',');
    push_json_string(buf, name.as_bytes());
    buf.push(b':');
    match value {
        Some(v) => push_json_string(buf, v),
        None => buf.extend_from_slice(b"null"),
    }
}

fn push_ip(b: &mut Vec<u8>, peer: Option<IpAddr>) {
    match peer {
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
}

impl AccessLog {
    pub fn new(sink: Arc<Sink>, format: Format) -> AccessLog {
        AccessLog {
            sink,
            format,
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            second: i64::MIN,
            clf: [0; 26],
            rfc3339: [0; 20],
        }
    }

    pub fn record(&mut self, now: i64, e: &Entry<'_>) {
        if now != self.second {
            self.second = now;
            format_clf(now, &mut self.clf);
            format_rfc3339(now, &mut self.rfc3339);
        }
        match self.format {
            Format::Combined => self.combined(e),
            Format::Json => self.json(e),
        }
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    fn combined(&mut self, e: &Entry<'_>) {
        let b = &mut self.buf;
        push_ip(b, e.peer);
        b.extend_from_slice(b" - - [");
        b.extend_from_slice(&self.clf);
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
    }

    fn json(&mut self, e: &Entry<'_>) {
        let b = &mut self.buf;
        b.extend_from_slice(b"{\"time\":\"");
        b.extend_from_slice(&self.rfc3339);
        b.extend_from_slice(b"\",\"remote\":");
        match e.peer {
            Some(_) => {
                b.push(b'"');
                push_ip(b, e.peer);
                b.push(b'"');
            }
            None => b.extend_from_slice(b"null"),
        }
        push_json_field(b, "host", e.host);
        let (method, target, protocol) = match e.request {
            Some((m, t, p)) => (Some(m), Some(t), Some(p.as_bytes())),
            None => (None, None, None),
        };
        push_json_field(b, "method", method);
        push_json_field(b, "path", target);
        push_json_field(b, "protocol", protocol);
        b.extend_from_slice(b",\"status\":");
        push_u64(b, u64::from(e.status));
        b.extend_from_slice(b",\"bytes\":");
        push_u64(b, e.bytes);
        // Seconds with microseconds, as nginx's $request_time has
        // milliseconds: a decimal a pipeline reads as a number.
        b.extend_from_slice(b",\"duration\":");
        push_u64(b, e.duration_us / 1_000_000);
        b.push(b'.');
        let mut digits = itoa::Buffer::new();
        let micros = digits.format(e.duration_us % 1_000_000).as_bytes();
        b.extend_from_slice(&b"000000"[micros.len()..]);
        b.extend_from_slice(micros);
        push_json_field(b, "encoding", e.encoding.map(|e| e.token().as_bytes()));
        push_json_field(b, "user_agent", e.user_agent);
        push_json_field(b, "referer", e.referer);
        b.extend_from_slice(b"}\n");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn line(format: Format, e: &Entry<'_>) -> String {
        let mut log = AccessLog::new(Arc::new(Sink::Stdout), format);
        log.record(784111777, e);
        let line = String::from_utf8(log.buf.clone()).unwrap();
        log.buf.clear();
        line
    }

    fn entry<'a>(target: &'a [u8], user_agent: &'a [u8]) -> Entry<'a> {
        Entry {
            peer: Some("192.0.2.1".parse().unwrap()),
            request: Some((b"GET", target, "HTTP/1.1")),
            host: Some(b"example.com"),
            status: 200,
            bytes: 1234,
            encoding: Some(Encoding::Br),
            duration_us: 1_234_567,
            referer: None,
            user_agent: Some(user_agent),
        }
    }

    #[test]
    fn combined_lines_are_apaches() {
        assert_eq!(
            line(Format::Combined, &entry(b"/a b", b"curl \"x\"")),
            "192.0.2.1 - - [06/Nov/1994:08:49:37 +0000] \"GET /a b HTTP/1.1\" 200 1234 \"-\" \"curl \\x22x\\x22\"\n"
        );
    }

    #[test]
    fn json_lines_parse_back_whatever_the_client_sent() {
        let target = b"/caf\xc3\xa9?q=\"1\"\\\x01";
        let agent = b"agent \xff\xfe";
        let text = line(Format::Json, &entry(target, agent));
        assert!(text.ends_with('\n') && text.lines().count() == 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["time"], "1994-11-06T08:49:37Z");
        assert_eq!(v["remote"], "192.0.2.1");
        assert_eq!(v["host"], "example.com");
        assert_eq!(v["method"], "GET");
        // Each byte outside printable ASCII comes back as the code point
        // of its value.
        assert_eq!(v["path"], "/caf\u{c3}\u{a9}?q=\"1\"\\\u{1}");
        assert_eq!(v["protocol"], "HTTP/1.1");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes"], 1234);
        assert_eq!(v["duration"], 1.234567);
        assert_eq!(v["encoding"], "br");
        assert_eq!(v["user_agent"], "agent \u{ff}\u{fe}");
        assert!(v["referer"].is_null());
    }

    #[test]
    fn json_durations_keep_six_digits_of_microseconds() {
        for (duration_us, written) in [
            (0, "\"duration\":0.000000,"),
            (7, "\"duration\":0.000007,"),
            (1_000_050, "\"duration\":1.000050,"),
            (12_999_999, "\"duration\":12.999999,"),
        ] {
            let e = Entry {
                duration_us,
                ..entry(b"/", b"a")
            };
            let text = line(Format::Json, &e);
            assert!(text.contains(written), "{duration_us}: {text}");
        }
    }
}
