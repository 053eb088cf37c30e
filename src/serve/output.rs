//! Responses queued for one `writev`: header bytes written into a per-thread
//! buffer, bodies as references into the pack (mapped slices for small ones,
//! file ranges for `sendfile` above a threshold). Nothing of a body is copied.

/// Appends `v` in decimal without allocating (`itoa` writes into a stack
/// buffer, without the `fmt` machinery, which costs more than the rest of
/// a response line).
#[inline]
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// One piece of output, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seg {
    /// `bytes[start..end]` of the owning buffer.
    Own { start: usize, end: usize },
    /// `len` bytes at `off` in the mapping of the backing's pack `pack`.
    Mapped { pack: u32, off: usize, len: usize },
    /// `len` bytes at `off` in the file of the backing's pack `pack`, sent
    /// with `sendfile`.
    File { pack: u32, off: u64, len: u64 },
    /// The last byte of a body from pack `pack`, copied to `bytes[at]`
    /// when the response was written, sent only once everything before it
    /// was sent (read from the pack) and the backing finds the pack
    /// unchanged (`Backing::unchanged`), else the connection fails: a pack
    /// without a read lease may be written in place under a response, and
    /// a response it changed under must never complete.
    Checked { pack: u32, at: usize },
}

impl Seg {
    /// The bytes it stands for.
    pub fn bytes_len(&self) -> u64 {
        match *self {
            Seg::Own { start, end } => (end - start) as u64,
            Seg::Mapped { len, .. } => len as u64,
            Seg::File { len, .. } => len,
            Seg::Checked { .. } => 1,
        }
    }
}

/// Default of `--sendfile-min`: bodies of at least this many bytes go out
/// with `sendfile` after their headers; smaller ones ride in the same
/// `writev` as the headers. Measured on loopback (wrk, 32 connections, one
/// core; a pack of bodies of each size): `writev` from the
/// mapping ties `sendfile` from 16 KiB to 256 KiB and beats it at 1 MiB,
/// because loopback copies either way. Off loopback `sendfile` avoids the
/// copy into the socket, and under kTLS it is the only zero-copy path, so it
/// takes over where the loopback cost was a tie (not yet measured off
/// loopback).
pub const SENDFILE_MIN: u64 = 256 * 1024;

/// The output of one batch of requests on one connection.
pub struct Output {
    /// Header bytes (and built-in bodies) of every response in the batch.
    pub bytes: Vec<u8>,
    /// What to send, in order.
    pub segs: Vec<Seg>,
    /// `bytes[..sealed]` is already covered by `segs`.
    sealed: usize,
    /// Bodies this long or longer are sent with `sendfile`.
    sendfile_min: u64,
    /// What the loop can send of this output in the current turn: a stack
    /// that makes its output in steps (a TLS session sealing a large body)
    /// makes about this much, at least a step's minimum, and leaves the
    /// rest for `resume`. Unbounded unless `clear_with_room` said.
    room: usize,
}

impl Output {
    pub fn new(bytes: usize, sendfile_min: u64) -> Output {
        Output {
            bytes: Vec::with_capacity(bytes),
            segs: Vec::with_capacity(256),
            sealed: 0,
            sendfile_min,
            room: usize::MAX,
        }
    }

    /// Empties it, for output without a bound (last words, a protocol's
    /// plaintext).
    pub fn clear(&mut self) {
        self.clear_with_room(usize::MAX);
    }

    /// Empties it for output of which the loop can send `room` bytes this
    /// turn.
    pub fn clear_with_room(&mut self, room: usize) {
        self.bytes.clear();
        self.segs.clear();
        self.sealed = 0;
        self.room = room;
    }

    /// What the loop can send of it this turn (`clear_with_room`).
    pub fn room(&self) -> usize {
        self.room
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty() && self.sealed == self.bytes.len()
    }

    /// Covers the bytes written since the last seal with an `Own` segment,
    /// merged with the previous one when adjacent (so several bodiless
    /// responses stay one iovec).
    pub fn seal(&mut self) {
        let (start, end) = (self.sealed, self.bytes.len());
        if start == end {
            return;
        }
        self.sealed = end;
        if let Some(Seg::Own { end: prev_end, .. }) = self.segs.last_mut()
            && *prev_end == start
        {
            *prev_end = end;
            return;
        }
        self.segs.push(Seg::Own { start, end });
    }

    /// Appends a body as `pack_body` does, its last byte (`held`, read
    /// from the pack) held back behind a check (`Seg::Checked`), when the
    /// site gives one (`Site::held_back_byte`).
    #[inline]
    pub fn pack_body_from(&mut self, pack: u32, off: u64, len: u64, held: Option<u8>) {
        let Some(byte) = held.filter(|_| len > 0) else {
            return self.pack_body(pack, off, len);
        };
        self.pack_body(pack, off, len - 1);
        let at = self.bytes.len();
        self.bytes.push(byte);
        self.sealed = self.bytes.len();
        self.segs.push(Seg::Checked { pack, at });
    }

    /// Appends `len` bytes at `off` of the backing's pack `pack` (a
    /// body), after sealing the headers before it.
    #[inline]
    pub fn pack_body(&mut self, pack: u32, off: u64, len: u64) {
        self.seal();
        if len == 0 {
            return;
        }
        if len >= self.sendfile_min {
            self.segs.push(Seg::File { pack, off, len });
        } else {
            self.segs.push(Seg::Mapped {
                pack,
                off: off as usize,
                len: len as usize,
            });
        }
    }
}
