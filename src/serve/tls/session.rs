//! One connection's TLS session, sans-IO: ciphertext the loop read goes
//! in, plaintext for the protocol comes out; the protocol's output
//! segments (header bytes and slices of the pack mapping) are sealed into
//! records appended to the loop's output buffer.
//!
//! rustls' unbuffered API does the handshake, writing its flights straight
//! into the output and reading records where the loop read them. Once the
//! handshake is done, rustls hands over the traffic secrets (as it would
//! for kTLS) and keeps only its key schedule, for key updates; records are
//! then sealed and opened in place by [`RecordLayer`]. So nothing is
//! buffered per session except the start of a record that did not arrive
//! whole and the segments of an output not sealed yet (with the header
//! bytes they point to, not the bodies: in buffers the session keeps and
//! reuses), bodies are copied once (from the mapping into the record being
//! sealed), and a large body is sealed a step at a time so that the
//! ciphertext a slow client has not taken stays bounded.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};

use super::hello::{self, Verdict};
use super::record::{
    self, ALERT, APPLICATION_DATA, Alert, Exhausted, HANDSHAKE, MAX_FRAGMENT, MAX_OVERHEAD,
    RecordLayer,
};
use crate::serve::net::{Backing, Output, Seg};

/// Plaintext sealed per step: bounds the ciphertext held for a client
/// that reads slowly, while keeping one write per 64 KiB of body.
const STEP_BYTES: usize = 64 * 1024;

/// The least a step seals (when there is that much): one whole record
/// that fits `LATE_SHARE` sealed, the least worth a write of its own.
const STEP_MIN: usize = MAX_FRAGMENT - MAX_OVERHEAD;

/// Plaintext a step seals when the loop can send `room` bytes of its
/// output this turn (`Output::room`): what fits in `room` with its
/// records' overhead, between `STEP_MIN` and `STEP_BYTES`. So a response
/// to a request that arrives in a turn whose budget is spent costs that
/// turn one record's encryption; the rest is sealed by `resume`, which
/// the loop calls within a later turn's budget.
fn step_limit(room: usize) -> usize {
    let overhead = room.div_ceil(MAX_FRAGMENT).saturating_mul(MAX_OVERHEAD);
    room.saturating_sub(overhead).clamp(STEP_MIN, STEP_BYTES)
}

/// What a step seals beyond `STEP_BYTES` rather than leave it for a step
/// of its own: HTTP/2 sends 128 KiB of DATA a turn plus the frame
/// headers, whose few dozen bytes would otherwise be a third write.
const SHORT_TAIL: usize = 1024;

/// The most a client may send before its handshake messages are complete:
/// rustls takes handshake messages of up to 64 KiB, which may span
/// records.
const MAX_PARTIAL: usize = 80 * 1024;

/// The protocols kiln offers by ALPN, so that the one agreed on can be
/// kept after rustls' state is gone without an allocation.
const KNOWN_ALPN: [&[u8]; 3] = [b"h2", b"http/1.1", super::ACME_TLS_ALPN];

/// TLS 1.3 KeyUpdate (RFC 8446 §4.6.3), as a handshake message.
const KEY_UPDATE: u8 = 24;

/// KeyUpdates a peer may send between two application records: each costs
/// a key derivation (two, when it asks for ours too), so an endless stream
/// of them is a cheap way to burn the server's CPU. rustls allows 32.
const KEY_UPDATES_IN_A_ROW: u8 = 32;

/// Plaintext output not yet sealed, kept until the socket took the
/// records before it. One per session, its buffers allocated at the first
/// output larger than a step and refilled within their capacity after:
/// every large body goes through here, so a new allocation per response
/// would put one on the hot path.
#[derive(Default)]
struct Unsent {
    /// Keeps the mapping the segments point into alive across a reload;
    /// `None` when nothing is left.
    backing: Option<Arc<dyn Backing>>,
    /// The bytes `Seg::Own` segments index: those of the segments left
    /// only, as the protocol's output buffer is the thread's and is
    /// refilled by the next connection.
    bytes: Vec<u8>,
    /// What is left, in order; empty when nothing is.
    segs: Vec<Seg>,
    /// Send close_notify once everything is sealed.
    close: bool,
}

impl Unsent {
    /// Keeps `segs` (the first without its first `partial` bytes, already
    /// sealed), copying the bytes of their `Own` segments out of `bytes`.
    fn keep(
        &mut self,
        bytes: &[u8],
        segs: &[Seg],
        partial: usize,
        backing: &Arc<dyn Backing>,
        close: bool,
    ) -> Result<(), Failed> {
        self.bytes.clear();
        self.segs.clear();
        for (i, &seg) in segs.iter().enumerate() {
            let seg = if i == 0 { advance(seg, partial) } else { seg };
            let seg = match seg {
                Seg::Own { start, end } => {
                    let start_here = self.bytes.len();
                    self.bytes
                        .extend_from_slice(bytes.get(start..end).ok_or(Failed)?);
                    Seg::Own {
                        start: start_here,
                        end: self.bytes.len(),
                    }
                }
                Seg::Checked { pack, at } => {
                    self.bytes.push(*bytes.get(at).ok_or(Failed)?);
                    Seg::Checked {
                        pack,
                        at: self.bytes.len() - 1,
                    }
                }
                other => other,
            };
            self.segs.push(seg);
        }
        self.backing = Some(Arc::clone(backing));
        self.close = close;
        Ok(())
    }

    /// Everything was sealed: the buffers stay for the next response, the
    /// mapping is let go.
    fn done(&mut self) {
        self.bytes.clear();
        self.segs.clear();
        self.backing = None;
    }
}

/// Where the session is.
enum State {
    /// rustls is doing the handshake.
    Handshake(Box<UnbufferedServerConnection>),
    /// The handshake is done: records go through the record layer.
    Open(Box<Open>),
    /// Failed, or closed: nothing more goes in or out.
    Done,
}

/// A session after its handshake.
struct Open {
    /// Seals and opens records in place.
    records: RecordLayer,
    /// rustls' key schedule: the next traffic secrets on a KeyUpdate.
    keys: KernelConnection<ServerConnectionData>,
    /// The peer sent close_notify: whatever follows is ignored.
    peer_closed: bool,
    /// KeyUpdates the peer may still send before its next application
    /// record.
    key_updates_left: u8,
}

/// A TLS session over one connection.
pub struct TlsSession {
    /// The handshake, or the record layer after it.
    state: State,
    /// The protocol agreed on by ALPN, kept past the handshake.
    alpn: Option<&'static [u8]>,
    /// The start of a record (or of a handshake message) that has not
    /// arrived whole; empty, with nothing allocated, between whole records.
    partial: Vec<u8>,
    /// Output beyond the last step, sealed on `resume`.
    unsent: Unsent,
    /// The ClientHello was looked at (`hello::check`) and handed on.
    hello_checked: bool,
}

/// The session failed (bad record, handshake failure, peer's alert): the
/// alert to send, if any, is in the output; close.
#[derive(Debug)]
pub struct Failed;

impl TlsSession {
    pub fn new(config: Arc<ServerConfig>) -> Result<TlsSession, rustls::Error> {
        Ok(TlsSession {
            state: State::Handshake(Box::new(UnbufferedServerConnection::new(config)?)),
            alpn: None,
            partial: Vec::new(),
            unsent: Unsent::default(),
            hello_checked: false,
        })
    }

    pub fn is_handshaking(&self) -> bool {
        matches!(self.state, State::Handshake(_))
    }

    /// The protocol the client and server agreed on by ALPN.
    pub fn alpn_protocol(&self) -> Option<&'static [u8]> {
        self.alpn
    }

    /// Takes ciphertext (decrypted in place), appends the plaintext it
    /// carried to `plain` and any records the session answers with
    /// (handshake flights, a KeyUpdate, an alert) to `out`.
    pub fn receive(
        &mut self,
        input: &mut [u8],
        plain: &mut Vec<u8>,
        out: &mut Output,
    ) -> Result<(), Failed> {
        let result = if self.partial.is_empty() {
            let used = self.receive_records(input, plain, &mut out.bytes);
            if let Ok(used) = used {
                self.partial.extend_from_slice(&input[used..]);
            }
            used
        } else {
            let mut buffer = std::mem::take(&mut self.partial);
            buffer.extend_from_slice(input);
            let used = self.receive_records(&mut buffer, plain, &mut out.bytes);
            if let Ok(used) = used
                && used < buffer.len()
            {
                buffer.drain(..used);
                self.partial = buffer;
            }
            used
        };
        out.seal();
        match result {
            Ok(_) if self.partial.len() <= MAX_PARTIAL => Ok(()),
            _ => {
                self.state = State::Done;
                Err(Failed)
            }
        }
    }

    /// Processes the records at the start of `input`; returns how many
    /// bytes were used (the rest is the start of a record).
    fn receive_records(
        &mut self,
        input: &mut [u8],
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<usize, Failed> {
        if !self.hello_checked {
            match hello::check(input) {
                Verdict::NeedMore => return Ok(0),
                Verdict::TooOld { record_version } => {
                    hello::refuse(record_version, out);
                    return Err(Failed);
                }
                Verdict::ToRustls => self.hello_checked = true,
            }
        }
        let mut used = 0;
        if let State::Handshake(conn) = &mut self.state {
            used = match handshake(conn, input, plain, out)? {
                Handshake::Blocked(used) => return Ok(used),
                Handshake::Done(used) => used,
            };
            self.finish_handshake()?;
        }
        match &mut self.state {
            State::Open(open) => Ok(used + open.receive(&mut input[used..], plain, out)?),
            _ => Err(Failed),
        }
    }

    /// Takes the traffic secrets from rustls and opens the record layer.
    fn finish_handshake(&mut self) -> Result<(), Failed> {
        let State::Handshake(conn) = std::mem::replace(&mut self.state, State::Done) else {
            return Err(Failed);
        };
        let conn = *conn;
        self.alpn = conn
            .alpn_protocol()
            .and_then(|agreed| KNOWN_ALPN.into_iter().find(|known| *known == agreed));
        let version = conn.protocol_version().ok_or(Failed)?;
        let (secrets, keys) = conn
            .dangerous_into_kernel_connection()
            .map_err(|_| Failed)?;
        let records = RecordLayer::new(
            version,
            (secrets.tx.0, &secrets.tx.1),
            (secrets.rx.0, &secrets.rx.1),
        )
        .map_err(|_| Failed)?;
        self.state = State::Open(Box::new(Open {
            records,
            keys,
            peer_closed: false,
            key_updates_left: KEY_UPDATES_IN_A_ROW,
        }));
        Ok(())
    }

    /// Seals `plain` (its segments pointing into `plain.bytes` and
    /// `backing`) into records appended to `out`, one step's worth; the
    /// rest waits for `resume`. With `close`, close_notify follows the
    /// last record. Returns whether output is left for `resume`.
    pub fn send(
        &mut self,
        plain: &Output,
        backing: &Arc<dyn Backing>,
        close: bool,
        out: &mut Output,
    ) -> Result<bool, Failed> {
        let State::Open(open) = &mut self.state else {
            return Err(Failed);
        };
        let limit = step_limit(out.room());
        let sealed = open.seal_step(&plain.bytes, &plain.segs, &**backing, limit, &mut out.bytes);
        let (taken, partial) = self.check(sealed, out)?;
        let more = taken < plain.segs.len();
        if more {
            let kept =
                self.unsent
                    .keep(&plain.bytes, &plain.segs[taken..], partial, backing, close);
            self.check(kept.map(|()| (taken, partial)), out)?;
        } else if close {
            self.close_notify(out);
        }
        out.seal();
        Ok(more)
    }

    /// Whether `send` left output for `resume`.
    pub fn has_unsent(&self) -> bool {
        !self.unsent.segs.is_empty()
    }

    /// Seals the next step of the output `send` left. Returns whether
    /// output is still left.
    pub fn resume(&mut self, out: &mut Output) -> Result<bool, Failed> {
        let Unsent {
            backing: Some(backing),
            bytes,
            segs,
            ..
        } = &mut self.unsent
        else {
            return Ok(false);
        };
        let State::Open(open) = &mut self.state else {
            return Err(Failed);
        };
        let limit = step_limit(out.room());
        let sealed = open.seal_step(bytes, segs, &**backing, limit, &mut out.bytes);
        let (taken, partial) = self.check(sealed, out)?;
        let segs = &mut self.unsent.segs;
        let more = taken < segs.len();
        if more {
            segs.drain(..taken);
            segs[0] = advance(segs[0], partial);
        } else {
            self.unsent.done();
            if self.unsent.close {
                self.close_notify(out);
            }
        }
        out.seal();
        Ok(more)
    }

    /// A failed seal ends the session.
    fn check(
        &mut self,
        sealed: Result<(usize, usize), Failed>,
        out: &mut Output,
    ) -> Result<(usize, usize), Failed> {
        if sealed.is_err() {
            self.state = State::Done;
            out.seal();
        }
        sealed
    }

    /// Appends close_notify to `out` (nothing before the handshake is done:
    /// there is no key to send it under yet, and the peer expects none).
    pub fn close_notify(&mut self, out: &mut Output) {
        if let State::Open(open) = &mut self.state {
            let _ = open.seal_alert(record::CLOSE_NOTIFY, 1, &mut out.bytes);
            out.seal();
        }
    }
}

/// Where the handshake got to with the input it was given.
enum Handshake {
    /// It needs more input; the bytes used so far.
    Blocked(usize),
    /// It is done; the bytes it used (the rest are application records).
    Done(usize),
}

/// Drives rustls' handshake over `input`: its flights go to `out`, any
/// application data that came with the client's last flight to `plain`.
fn handshake(
    conn: &mut UnbufferedServerConnection,
    input: &mut [u8],
    plain: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<Handshake, Failed> {
    let mut used = 0;
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut input[used..]);
        let Ok(state) = state else {
            // rustls queued the alert it answers with: send it.
            send_alert(conn, &mut input[used + discard..], out);
            return Err(Failed);
        };
        match state {
            ConnectionState::EncodeTlsData(mut data) => encode(&mut data, out)?,
            ConnectionState::TransmitTlsData(data) => data.done(),
            ConnectionState::ReadTraffic(mut data) => {
                while let Some(record) = data.next_record() {
                    plain.extend_from_slice(record.map_err(|_| Failed)?.payload);
                }
            }
            ConnectionState::BlockedHandshake => return Ok(Handshake::Blocked(used + discard)),
            // rustls lets a TLS 1.3 server send data once its own Finished
            // is out, before the client's: the handshake is done only when
            // that has arrived too.
            ConnectionState::WriteTraffic(_) => {
                drop(state);
                return Ok(if conn.is_handshaking() {
                    Handshake::Blocked(used + discard)
                } else {
                    Handshake::Done(used + discard)
                });
            }
            // A peer that closes mid-handshake, or early data (refused by
            // the configuration).
            _ => return Err(Failed),
        }
        used += discard;
    }
}

/// Appends a handshake record rustls has ready to `out`.
fn encode(
    data: &mut rustls::unbuffered::EncodeTlsData<'_, ServerConnectionData>,
    out: &mut Vec<u8>,
) -> Result<(), Failed> {
    let start = out.len();
    let mut room = 4096;
    loop {
        out.resize(start + room, 0);
        match data.encode(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(need)) => room = need.required_size,
            Err(EncodeError::AlreadyEncoded) => {
                out.truncate(start);
                return Err(Failed);
            }
        }
    }
}

/// After a handshake error, appends the alert rustls queued (if any).
/// rustls hands out what it queued before it reads more input, so one
/// call gets the alert without rustls going over the bad input again
/// (which would make it try to send a second fatal alert). `input` is what
/// is left of the input all the same: rustls keeps offsets into it (a
/// handshake message it has begun to join).
fn send_alert(conn: &mut UnbufferedServerConnection, input: &mut [u8], out: &mut Vec<u8>) {
    if let Ok(ConnectionState::EncodeTlsData(mut data)) = conn.process_tls_records(input).state {
        let _ = encode(&mut data, out);
    }
}

impl Open {
    /// Opens the whole records at the start of `input`; returns how many
    /// bytes were used.
    fn receive(
        &mut self,
        input: &mut [u8],
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<usize, Failed> {
        let mut used = 0;
        while !self.peer_closed {
            let len = match self.records.whole_record(&input[used..]) {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(alert) => return Err(self.fail(alert, out)),
            };
            let record = &mut input[used..used + len];
            used += len;
            let (content_type, payload) = match self.records.open(record) {
                Ok(opened) => opened,
                Err(alert) => return Err(self.fail(alert, out)),
            };
            match content_type {
                APPLICATION_DATA => {
                    self.key_updates_left = KEY_UPDATES_IN_A_ROW;
                    plain.extend_from_slice(payload);
                }
                ALERT => match payload {
                    [_, record::CLOSE_NOTIFY] => self.peer_closed = true,
                    // RFC 8446 §6.1: followed by close_notify.
                    [1, record::USER_CANCELED] => {}
                    // Any other alert is fatal, and answered with none.
                    _ => return Err(Failed),
                },
                HANDSHAKE => self.post_handshake(payload, out)?,
                _ => return Err(self.fail(Alert(record::UNEXPECTED_MESSAGE), out)),
            }
        }
        if self.peer_closed {
            // Nothing after close_notify counts.
            used = input.len();
        }
        Ok(used)
    }

    /// A handshake message after the handshake: a TLS 1.3 KeyUpdate is
    /// answered; a TLS 1.2 renegotiation is refused (RFC 5746 §4.2's
    /// warning, as rustls does); anything else is unexpected. A message
    /// split over records is refused too: KeyUpdate is five bytes and must
    /// end its record (RFC 8446 §5.1).
    fn post_handshake(&mut self, message: &[u8], out: &mut Vec<u8>) -> Result<(), Failed> {
        if !self.records.is_tls13() {
            return match self.seal_alert(record::NO_RENEGOTIATION, 1, out) {
                Ok(()) => Ok(()),
                Err(_) => Err(Failed),
            };
        }
        let request = match message {
            [KEY_UPDATE, 0, 0, 1, request @ (0 | 1)] => *request == 1,
            [KEY_UPDATE, 0, 0, 1, _] => {
                return Err(self.fail(Alert(record::DECODE_ERROR), out));
            }
            _ => return Err(self.fail(Alert(record::UNEXPECTED_MESSAGE), out)),
        };
        let Some(left) = self.key_updates_left.checked_sub(1) else {
            return Err(self.fail(Alert(record::UNEXPECTED_MESSAGE), out));
        };
        self.key_updates_left = left;
        let (seq, secrets) = self.keys.update_rx_secret().map_err(|_| Failed)?;
        self.records
            .set_open_keys(seq, &secrets)
            .map_err(|alert| self.fail(alert, out))?;
        if request {
            self.update_seal_keys(out)?;
        }
        Ok(())
    }

    /// Sends a KeyUpdate (not requesting one back) under the current keys,
    /// then seals under the next ones.
    fn update_seal_keys(&mut self, out: &mut Vec<u8>) -> Result<(), Failed> {
        // `seal_exhausted` keeps the last record the limit allows for this.
        self.records
            .seal(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], out)
            .map_err(|Exhausted| Failed)?;
        let (seq, secrets) = self.keys.update_tx_secret().map_err(|_| Failed)?;
        self.records
            .set_seal_keys(seq, &secrets)
            .map_err(|_| Failed)
    }

    /// Seals up to `step` bytes of `segs` (all of them if at most
    /// `SHORT_TAIL` more are left) into records of at most `MAX_FRAGMENT`
    /// bytes each; returns how many segments were taken whole and how many
    /// bytes of the next one were taken.
    fn seal_step(
        &mut self,
        bytes: &[u8],
        segs: &[Seg],
        backing: &dyn Backing,
        step: usize,
        out: &mut Vec<u8>,
    ) -> Result<(usize, usize), Failed> {
        let mut left = 0;
        for &seg in segs {
            left = seg_len(seg).saturating_add(left);
            if left > step + SHORT_TAIL {
                break;
            }
        }
        let limit = if left > step + SHORT_TAIL {
            step
        } else {
            step + SHORT_TAIL
        };
        let mut total = 0;
        let mut taken = 0;
        let mut offset = 0;
        while taken < segs.len() && total < limit {
            if self.records.seal_exhausted() {
                if !self.records.is_tls13() {
                    return Err(Failed);
                }
                self.update_seal_keys(out)?;
            }
            let begun = self.records.begin(out);
            let mut room = MAX_FRAGMENT.min(limit - total);
            while room > 0 && taken < segs.len() {
                let Some(whole) = resolve(segs[taken], bytes, backing) else {
                    // Never the plaintext begun in the clear.
                    self.records.abandon(begun, out);
                    return Err(Failed);
                };
                let piece = &whole[offset..whole.len().min(offset + room)];
                out.extend_from_slice(piece);
                // A pack written in place without a lease (`in_place`)
                // may have faulted in that copy, a zero page read in: the
                // backing gives nothing for it from then on. (A checked
                // byte was checked after what came before it: once.)
                if !matches!(segs[taken], Seg::Checked { .. })
                    && resolve(segs[taken], bytes, backing).is_none()
                {
                    self.records.abandon(begun, out);
                    return Err(Failed);
                }
                room -= piece.len();
                total += piece.len();
                offset += piece.len();
                if offset == whole.len() {
                    taken += 1;
                    offset = 0;
                }
            }
            self.records
                .end(begun, APPLICATION_DATA, out)
                .map_err(|Exhausted| Failed)?;
        }
        Ok((taken, offset))
    }

    /// Appends an alert record.
    fn seal_alert(
        &mut self,
        description: u8,
        level: u8,
        out: &mut Vec<u8>,
    ) -> Result<(), Exhausted> {
        self.records.seal(ALERT, &[level, description], out)
    }

    /// Sends a fatal alert; the session is over.
    fn fail(&mut self, alert: Alert, out: &mut Vec<u8>) -> Failed {
        let _ = self.seal_alert(alert.0, 2, out);
        Failed
    }
}

/// The bytes a segment stands for (a file range is in the mapping too);
/// a checked byte only when its pack is unchanged, which is asked when
/// everything before it was copied into records.
fn resolve<'a>(seg: Seg, bytes: &'a [u8], backing: &'a dyn Backing) -> Option<&'a [u8]> {
    match seg {
        Seg::Own { start, end } => bytes.get(start..end),
        Seg::Checked { pack, at } => backing
            .unchanged(pack)
            .then(|| bytes.get(at..at + 1))
            .flatten(),
        Seg::Mapped { pack, off, len } => backing.bytes(pack).get(off..off.checked_add(len)?),
        Seg::File { pack, off, len } => {
            let off = usize::try_from(off).ok()?;
            backing
                .bytes(pack)
                .get(off..off.checked_add(usize::try_from(len).ok()?)?)
        }
    }
}

/// The bytes `seg` stands for.
fn seg_len(seg: Seg) -> usize {
    match seg {
        Seg::Own { start, end } => end.saturating_sub(start),
        other => usize::try_from(other.bytes_len()).unwrap_or(usize::MAX),
    }
}

/// `seg` without its first `n` bytes.
fn advance(seg: Seg, n: usize) -> Seg {
    match seg {
        Seg::Own { start, end } => Seg::Own {
            start: start + n,
            end,
        },
        Seg::Mapped { pack, off, len } => Seg::Mapped {
            pack,
            off: off + n,
            len: len - n,
        },
        Seg::File { pack, off, len } => Seg::File {
            pack,
            off: off + n as u64,
            len: len - n as u64,
        },
        // One byte: never partly sealed.
        checked @ Seg::Checked { .. } => checked,
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use rustls::crypto::aws_lc_rs::cipher_suite;
    use rustls::{ClientConfig, ClientConnection, RootCertStore, SupportedCipherSuite};

    use super::super::certs;
    use super::*;

    /// A pack mapping stand-in: bytes `Seg::Mapped` points into.
    struct Bytes(Vec<u8>);

    impl Backing for Bytes {
        fn bytes(&self, _pack: u32) -> &[u8] {
            &self.0
        }

        fn file(&self, _pack: u32) -> Option<std::os::fd::RawFd> {
            None
        }

        fn unchanged(&self, _pack: u32) -> bool {
            true
        }
    }

    /// A server session and a rustls client, connected in memory.
    struct Pair {
        server: TlsSession,
        client: ClientConnection,
    }

    /// The suites worth telling apart: each AEAD, in each version.
    const SUITES: [SupportedCipherSuite; 5] = [
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS13_AES_256_GCM_SHA384,
        cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ];

    impl Pair {
        fn new(suite: SupportedCipherSuite) -> Pair {
            let source = certs::Source::SelfSigned(vec!["localhost".into()]);
            let resolver = certs::load(&source, 0).unwrap();
            let mut roots = RootCertStore::empty();
            roots
                .add(certs::first_certificate(&resolver).clone())
                .unwrap();
            let server_config =
                super::super::server_config(Arc::new(resolver), &[b"http/1.1"]).unwrap();
            let mut provider = super::super::provider();
            provider.cipher_suites = vec![suite];
            let versions: &[&rustls::SupportedProtocolVersion] = match suite {
                SupportedCipherSuite::Tls13(_) => &[&rustls::version::TLS13],
                SupportedCipherSuite::Tls12(_) => &[&rustls::version::TLS12],
            };
            let mut client_config = ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(versions)
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            client_config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let client =
                ClientConnection::new(Arc::new(client_config), "localhost".try_into().unwrap())
                    .unwrap();
            Pair {
                server: TlsSession::new(server_config).unwrap(),
                client,
            }
        }

        /// Everything the client has to send.
        fn client_wire(&mut self) -> Vec<u8> {
            let mut wire = Vec::new();
            while self.client.wants_write() {
                self.client.write_tls(&mut wire).unwrap();
            }
            wire
        }

        /// Feeds `wire` to the server `chunk` bytes at a time; returns the
        /// plaintext and the server's output.
        fn deliver_to_server(
            &mut self,
            wire: &[u8],
            chunk: usize,
        ) -> Result<(Vec<u8>, Vec<u8>), Failed> {
            let mut plain = Vec::new();
            let mut out = Output::new(0, u64::MAX);
            for piece in wire.chunks(chunk) {
                let mut piece = piece.to_vec();
                self.server.receive(&mut piece, &mut plain, &mut out)?;
            }
            Ok((plain, flatten(&out)))
        }

        /// Gives the server's output to the client; returns the plaintext.
        fn deliver_to_client(&mut self, mut wire: &[u8]) -> Result<Vec<u8>, rustls::Error> {
            let mut plain = Vec::new();
            while !wire.is_empty() {
                self.client.read_tls(&mut wire).unwrap();
                self.client.process_new_packets()?;
                match self.client.reader().read_to_end(&mut plain) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("client read: {e}"),
                }
            }
            Ok(plain)
        }

        /// Runs the handshake, the server taking its input `chunk` bytes at
        /// a time.
        fn handshake(&mut self, chunk: usize) {
            while self.server.is_handshaking() {
                let wire = self.client_wire();
                let (plain, out) = self.deliver_to_server(&wire, chunk).unwrap();
                assert!(plain.is_empty());
                self.deliver_to_client(&out).unwrap();
            }
            // The client's view completes with the server's last flight.
            let wire = self.client_wire();
            let (_, out) = self.deliver_to_server(&wire, chunk).unwrap();
            self.deliver_to_client(&out).unwrap();
            assert!(!self.client.is_handshaking());
        }

        /// The client sends `message`; the server's plaintext.
        fn request(&mut self, message: &[u8], chunk: usize) -> Vec<u8> {
            self.client.writer().write_all(message).unwrap();
            let wire = self.client_wire();
            let (plain, out) = self.deliver_to_server(&wire, chunk).unwrap();
            self.deliver_to_client(&out).unwrap();
            plain
        }

        /// The server sends a head and `body_len` bytes of mapped body
        /// (then close_notify with `close`); what the client read.
        fn response(&mut self, body_len: usize, close: bool) -> (Vec<u8>, Vec<u8>) {
            let body: Vec<u8> = (0..body_len).map(|i| (i % 251) as u8).collect();
            let backing: Arc<dyn Backing> = Arc::new(Bytes(body.clone()));
            let mut plain = Output::new(0, u64::MAX);
            plain.bytes.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
            plain.pack_body(0, 0, body_len as u64);
            let mut expected = plain.bytes.clone();
            expected.extend_from_slice(&body);
            let mut out = Output::new(0, u64::MAX);
            let mut more = self.server.send(&plain, &backing, close, &mut out).unwrap();
            let mut received = self.deliver_to_client(&flatten(&out)).unwrap();
            while more {
                out.clear();
                more = self.server.resume(&mut out).unwrap();
                received.extend(self.deliver_to_client(&flatten(&out)).unwrap());
            }
            (expected, received)
        }
    }

    /// An output's bytes in order (the tests' segments are all `Own`).
    fn flatten(out: &Output) -> Vec<u8> {
        let mut bytes = Vec::new();
        for seg in &out.segs {
            match *seg {
                Seg::Own { start, end } => bytes.extend_from_slice(&out.bytes[start..end]),
                other => panic!("TLS output is sealed bytes, not {other:?}"),
            }
        }
        bytes
    }

    #[test]
    fn every_suite_carries_requests_and_large_bodies() {
        for suite in SUITES {
            for chunk in [1, 7, usize::MAX] {
                let mut pair = Pair::new(suite);
                pair.handshake(chunk);
                assert_eq!(pair.server.alpn_protocol(), Some(&b"http/1.1"[..]));
                let request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
                assert_eq!(pair.request(request, chunk), request, "{suite:?}, {chunk}");
                for body_len in [0, 10, MAX_FRAGMENT, STEP_BYTES * 3 + 5] {
                    let (expected, received) = pair.response(body_len, false);
                    assert!(expected == received, "{suite:?}: a {body_len}-byte body");
                }
                let (expected, received) = pair.response(100, true);
                assert_eq!(expected, received);
                assert!(pair.client.process_new_packets().unwrap().peer_has_closed());
            }
        }
    }

    /// HTTP/2's turn (128 KiB of DATA and its frame headers) is two
    /// writes, not three; a tail one byte longer than `SHORT_TAIL` gets a
    /// step of its own.
    #[test]
    fn a_short_tail_is_sealed_with_the_step_before_it() {
        for (len, steps) in [
            (2 * STEP_BYTES + 72, 2),
            (STEP_BYTES + SHORT_TAIL, 1),
            (STEP_BYTES + SHORT_TAIL + 1, 2),
        ] {
            let mut pair = Pair::new(SUITES[0]);
            pair.handshake(usize::MAX);
            let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let backing: Arc<dyn Backing> = Arc::new(Bytes(body.clone()));
            let mut plain = Output::new(0, u64::MAX);
            plain.pack_body(0, 0, len as u64);
            let mut out = Output::new(0, u64::MAX);
            let mut more = pair.server.send(&plain, &backing, false, &mut out).unwrap();
            let mut received = pair.deliver_to_client(&flatten(&out)).unwrap();
            let mut taken = 1;
            while more {
                out.clear();
                more = pair.server.resume(&mut out).unwrap();
                received.extend(pair.deliver_to_client(&flatten(&out)).unwrap());
                taken += 1;
            }
            assert!(received == body, "{len}");
            assert_eq!(taken, steps, "{len}");
        }
    }

    /// A large response to a request that arrives in a turn whose budget
    /// is spent has no more sealed in that turn than the loop can send of
    /// it (`LATE_SHARE`), nor does one in a turn with budget left seal
    /// more than the connection's share; `resume` seals the rest, each
    /// step within the room it is given. A small response goes whole.
    #[test]
    fn a_step_seals_no_more_than_the_room_the_loop_gives() {
        use crate::serve::net::{LATE_SHARE, TURN_SHARE};
        for suite in SUITES {
            for first_room in [LATE_SHARE, TURN_SHARE] {
                let mut pair = Pair::new(suite);
                pair.handshake(usize::MAX);
                let len = 1 << 20;
                let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                let backing: Arc<dyn Backing> = Arc::new(Bytes(body.clone()));
                let mut plain = Output::new(0, u64::MAX);
                plain.bytes.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
                plain.pack_body(0, 0, len as u64);
                let mut expected = plain.bytes.clone();
                expected.extend_from_slice(&body);
                let mut out = Output::new(0, u64::MAX);
                out.clear_with_room(first_room);
                let mut more = pair.server.send(&plain, &backing, false, &mut out).unwrap();
                let first = flatten(&out);
                assert!(more, "{suite:?}: all of {len} bytes sealed at once");
                assert!(
                    first.len() <= first_room.min(STEP_BYTES + 4 * MAX_OVERHEAD),
                    "{suite:?}: {} bytes sealed with room for {first_room}",
                    first.len()
                );
                let mut received = pair.deliver_to_client(&first).unwrap();
                while more {
                    out.clear_with_room(TURN_SHARE);
                    more = pair.server.resume(&mut out).unwrap();
                    let step = flatten(&out);
                    assert!(
                        step.len() <= TURN_SHARE,
                        "{suite:?}: a step of {}",
                        step.len()
                    );
                    received.extend(pair.deliver_to_client(&step).unwrap());
                }
                assert!(received == expected, "{suite:?}: the body as sent");
                let small = 100;
                let small_body = vec![7u8; small];
                let backing: Arc<dyn Backing> = Arc::new(Bytes(small_body.clone()));
                let mut plain = Output::new(0, u64::MAX);
                plain.pack_body(0, 0, small as u64);
                out.clear_with_room(LATE_SHARE);
                let more = pair.server.send(&plain, &backing, false, &mut out).unwrap();
                assert!(!more, "{suite:?}: a small response left for a later turn");
                assert_eq!(pair.deliver_to_client(&flatten(&out)).unwrap(), small_body);
            }
        }
    }

    #[test]
    fn the_first_request_may_come_with_the_clients_finished() {
        let mut pair = Pair::new(SUITES[0]);
        // Client hello, server flight.
        let hello = pair.client_wire();
        let (_, flight) = pair.deliver_to_server(&hello, usize::MAX).unwrap();
        pair.deliver_to_client(&flight).unwrap();
        // Finished and the request in one read, as browsers send them.
        pair.client.writer().write_all(b"GET /").unwrap();
        let wire = pair.client_wire();
        let (plain, _) = pair.deliver_to_server(&wire, usize::MAX).unwrap();
        assert_eq!(plain, b"GET /");
        assert!(!pair.server.is_handshaking());
    }

    #[test]
    fn key_updates_from_the_client_are_followed() {
        let mut pair = Pair::new(SUITES[0]);
        pair.handshake(usize::MAX);
        for round in 0..3 {
            pair.client.refresh_traffic_keys().unwrap();
            let message = format!("after key update {round}");
            assert_eq!(pair.request(message.as_bytes(), 3), message.as_bytes());
            let (expected, received) = pair.response(40_000, false);
            assert!(expected == received, "round {round}");
        }
    }

    #[test]
    fn the_server_updates_its_keys_at_the_limit() {
        let mut pair = Pair::new(SUITES[0]);
        pair.handshake(usize::MAX);
        let State::Open(open) = &mut pair.server.state else {
            panic!("handshake done");
        };
        open.records.set_seal_limit_for_test(3);
        // Many records: several key updates on the way.
        let (expected, received) = pair.response(MAX_FRAGMENT * 20, false);
        assert!(expected == received);
        let State::Open(open) = &pair.server.state else {
            panic!("still open");
        };
        // The first key sealed the session ticket and one record of the 21,
        // each next key two (and the KeyUpdate that ends it): the eleventh
        // key sealed the last two.
        assert_eq!(open.records.seal_seq_for_test(), 2);
        assert_eq!(pair.request(b"still talking", 1), b"still talking");
    }

    #[test]
    fn too_many_key_updates_in_a_row_end_the_session() {
        for updates in [KEY_UPDATES_IN_A_ROW, KEY_UPDATES_IN_A_ROW + 1] {
            let mut pair = Pair::new(SUITES[0]);
            pair.handshake(usize::MAX);
            for _ in 0..updates {
                pair.client.refresh_traffic_keys().unwrap();
            }
            let wire = pair.client_wire();
            let received = pair.deliver_to_server(&wire, usize::MAX);
            assert_eq!(
                received.is_ok(),
                updates == KEY_UPDATES_IN_A_ROW,
                "{updates}"
            );
        }
    }

    #[test]
    fn a_damaged_record_is_answered_with_bad_record_mac() {
        let mut pair = Pair::new(SUITES[0]);
        pair.handshake(usize::MAX);
        pair.client
            .writer()
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .unwrap();
        let mut wire = pair.client_wire();
        let last = wire.len() - 1;
        wire[last] ^= 0x80;
        let mut plain = Vec::new();
        let mut out = Output::new(0, u64::MAX);
        assert!(
            pair.server
                .receive(&mut wire, &mut plain, &mut out)
                .is_err()
        );
        let error = pair.deliver_to_client(&flatten(&out)).unwrap_err();
        assert_eq!(
            error,
            rustls::Error::AlertReceived(rustls::AlertDescription::BadRecordMac)
        );
    }

    #[test]
    fn nothing_after_close_notify_counts() {
        let mut pair = Pair::new(SUITES[0]);
        pair.handshake(usize::MAX);
        pair.client.send_close_notify();
        let mut wire = pair.client_wire();
        wire.extend_from_slice(b"garbage that is no record at all");
        let (plain, out) = pair.deliver_to_server(&wire, 5).unwrap();
        assert!(plain.is_empty() && out.is_empty());
    }

    #[test]
    fn a_broken_hello_gets_an_alert() {
        let mut pair = Pair::new(SUITES[0]);
        let mut wire = pair.client_wire();
        // The handshake message type: no such message.
        wire[5] = 0x63;
        let mut plain = Vec::new();
        let mut out = Output::new(0, u64::MAX);
        assert!(
            pair.server
                .receive(&mut wire, &mut plain, &mut out)
                .is_err()
        );
        let out = flatten(&out);
        assert_eq!(out.first(), Some(&ALERT), "a plaintext alert: {out:02x?}");
    }
}
