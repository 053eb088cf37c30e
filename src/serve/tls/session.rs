//! One connection's TLS session, sans-IO: ciphertext the loop read goes
//! in, plaintext for the protocol comes out; the protocol's output
//! segments (header bytes and slices of the pack mapping) are encrypted
//! into records appended to the loop's output buffer. Bodies are read
//! straight from the mapping into the records (the one copy encryption
//! needs); a large body is encrypted a step at a time so that the
//! ciphertext a slow client has not taken stays bounded.

use std::io::{BufRead as _, IoSlice, Write as _};
use std::sync::Arc;

use rustls::{ServerConfig, ServerConnection};

use crate::serve::net::{Backing, Output, Seg};

/// Plaintext encrypted per step: bounds the ciphertext held for a client
/// that reads slowly, while keeping one write per 64 KiB of body.
const STEP_BYTES: usize = 64 * 1024;

/// Plaintext output not yet encrypted, kept until the socket took the
/// records before it.
struct Unsent {
    /// Keeps the mapping the segments point into alive across a reload.
    backing: Arc<dyn Backing>,
    /// The bytes `Seg::Own` segments index.
    bytes: Vec<u8>,
    /// What is left, in order.
    segs: Vec<Seg>,
    /// Send close_notify once everything is encrypted.
    close: bool,
}

/// A TLS session over one connection.
pub struct TlsSession {
    /// rustls' state machine, fed and drained by the loop's buffers.
    conn: ServerConnection,
    /// Output beyond the last step, encrypted on `resume`.
    unsent: Option<Box<Unsent>>,
}

/// The session failed (bad record, handshake failure, peer's alert): the
/// alert to send, if any, is in the output; close.
#[derive(Debug)]
pub struct Failed;

impl TlsSession {
    pub fn new(config: Arc<ServerConfig>) -> Result<TlsSession, rustls::Error> {
        let mut conn = ServerConnection::new(config)?;
        // Steps bound what is queued; rustls' own limit would make writes
        // partial instead.
        conn.set_buffer_limit(None);
        Ok(TlsSession { conn, unsent: None })
    }

    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The protocol the client and server agreed on by ALPN.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// Takes ciphertext, appends the plaintext it carried to `plain`.
    /// Handshake messages rustls answers with are queued for `flush`.
    pub fn receive(&mut self, mut bytes: &[u8], plain: &mut Vec<u8>) -> Result<(), Failed> {
        while !bytes.is_empty() {
            match self.conn.read_tls(&mut bytes) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => return Err(Failed),
            }
            if self.conn.process_new_packets().is_err() {
                return Err(Failed);
            }
            self.read_plaintext(plain)?;
        }
        Ok(())
    }

    /// Appends the plaintext rustls decrypted to `plain`, chunk by chunk
    /// from rustls' own buffers (a `read` into a zeroed buffer would clear
    /// 16 KiB per call for requests of a few hundred bytes).
    fn read_plaintext(&mut self, plain: &mut Vec<u8>) -> Result<(), Failed> {
        let mut reader = self.conn.reader();
        loop {
            match reader.fill_buf() {
                // close_notify from the peer (nothing more comes), or
                // nothing left to read.
                Ok([]) => return Ok(()),
                Ok(chunk) => {
                    let n = chunk.len();
                    plain.extend_from_slice(chunk);
                    reader.consume(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(_) => return Err(Failed),
            }
        }
    }

    /// Encrypts `plain` (its segments pointing into `plain.bytes` and
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
        let (taken, partial) = self.encrypt(&plain.bytes, &plain.segs, &**backing)?;
        let more = taken < plain.segs.len();
        if more {
            let mut segs = plain.segs[taken..].to_vec();
            segs[0] = advance(segs[0], partial);
            self.unsent = Some(Box::new(Unsent {
                backing: Arc::clone(backing),
                bytes: plain.bytes.clone(),
                segs,
                close,
            }));
        } else if close {
            self.conn.send_close_notify();
        }
        self.flush(out)?;
        Ok(more)
    }

    /// Whether `send` left output for `resume`.
    pub fn has_unsent(&self) -> bool {
        self.unsent.is_some()
    }

    /// Encrypts the next step of the output `send` left. Returns whether
    /// output is still left.
    pub fn resume(&mut self, out: &mut Output) -> Result<bool, Failed> {
        let Some(mut unsent) = self.unsent.take() else {
            return Ok(false);
        };
        let (taken, partial) = self.encrypt(&unsent.bytes, &unsent.segs, &*unsent.backing)?;
        let more = taken < unsent.segs.len();
        if more {
            unsent.segs.drain(..taken);
            unsent.segs[0] = advance(unsent.segs[0], partial);
            self.unsent = Some(unsent);
        } else if unsent.close {
            self.conn.send_close_notify();
        }
        self.flush(out)?;
        Ok(more)
    }

    /// Queues close_notify and appends it (with anything else queued) to
    /// `out`.
    pub fn close_notify(&mut self, out: &mut Output) {
        self.conn.send_close_notify();
        let _ = self.flush(out);
    }

    /// Appends every record rustls has queued (handshake flights, alerts,
    /// tickets, application data) to `out`.
    pub fn flush(&mut self, out: &mut Output) -> Result<(), Failed> {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut out.bytes).is_err() {
                return Err(Failed);
            }
        }
        out.seal();
        Ok(())
    }

    /// Encrypts up to `STEP_BYTES` of `segs`; returns how many segments
    /// were taken whole and how many bytes of the next one were taken.
    fn encrypt(
        &mut self,
        bytes: &[u8],
        segs: &[Seg],
        backing: &dyn Backing,
    ) -> Result<(usize, usize), Failed> {
        let map = backing.bytes();
        let mut slices: [IoSlice<'_>; 256] = [IoSlice::new(&[]); 256];
        let mut count = 0;
        let mut total = 0;
        let mut taken = 0;
        let mut partial = 0;
        for seg in segs {
            let whole = resolve(*seg, bytes, map).ok_or(Failed)?;
            let room = STEP_BYTES - total;
            if count == slices.len() || room == 0 {
                break;
            }
            if whole.len() > room {
                slices[count] = IoSlice::new(&whole[..room]);
                count += 1;
                total += room;
                partial = room;
                break;
            }
            slices[count] = IoSlice::new(whole);
            count += 1;
            total += whole.len();
            taken += 1;
        }
        if total > 0 {
            let written = self
                .conn
                .writer()
                .write_vectored(&slices[..count])
                .map_err(|_| Failed)?;
            if written != total {
                return Err(Failed);
            }
        }
        Ok((taken, partial))
    }
}

/// The bytes a segment stands for (a file range is in the mapping too).
fn resolve<'a>(seg: Seg, bytes: &'a [u8], map: &'a [u8]) -> Option<&'a [u8]> {
    match seg {
        Seg::Own { start, end } => bytes.get(start..end),
        Seg::Mapped { off, len } => map.get(off..off.checked_add(len)?),
        Seg::File { off, len } => {
            let off = usize::try_from(off).ok()?;
            map.get(off..off.checked_add(usize::try_from(len).ok()?)?)
        }
    }
}

/// `seg` without its first `n` bytes.
fn advance(seg: Seg, n: usize) -> Seg {
    match seg {
        Seg::Own { start, end } => Seg::Own {
            start: start + n,
            end,
        },
        Seg::Mapped { off, len } => Seg::Mapped {
            off: off + n,
            len: len - n,
        },
        Seg::File { off, len } => Seg::File {
            off: off + n as u64,
            len: len - n as u64,
        },
    }
}
