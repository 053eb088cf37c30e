//! The socket syscalls of the hot path: `read`, `writev` of a batch of
//! responses (IOV_MAX aware), `sendfile` of large bodies, and resuming a
//! partially written batch.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Arc;

use rustix::io::Errno;

use super::{Backing, Output, Seg};

/// Linux's IOV_MAX.
const IOV_MAX: usize = 1024;

/// Result of a non-blocking syscall.
pub enum Outcome {
    Done(usize),
    WouldBlock,
    /// A signal interrupted the call: retry it.
    Interrupted,
    /// The peer closed (read of 0) or the socket failed.
    Closed,
}

fn classify(result: rustix::io::Result<usize>) -> Outcome {
    match result {
        Ok(n) => Outcome::Done(n),
        Err(Errno::AGAIN) => Outcome::WouldBlock,
        Err(Errno::INTR) => Outcome::Interrupted,
        Err(_) => Outcome::Closed,
    }
}

/// `fd` borrowed for one call.
fn borrowed(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: the loops pass descriptors they hold open (a connection's
    // socket until its close, a pack's file while its backing lives) for
    // the whole call; the borrow is not kept.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

pub fn read(fd: RawFd, buf: &mut [u8]) -> Outcome {
    match classify(rustix::io::read(borrowed(fd), buf)) {
        Outcome::Done(0) => Outcome::Closed,
        other => other,
    }
}

/// Output not yet accepted by the socket, owned by its connection until it
/// drains (resumed on `EPOLLOUT`), then kept in its loop's [`SparePending`].
#[derive(Default)]
pub struct Pending {
    /// Keeps the mapping the `Mapped`/`File` segments point into alive, even
    /// if a reload replaced the pack meanwhile; `None` while spare.
    pub backing: Option<Arc<dyn Backing>>,
    /// The header bytes the `Own` segments index.
    pub bytes: Vec<u8>,
    /// What is left to send, from `next`.
    pub segs: Vec<Seg>,
    /// First segment not fully sent.
    pub next: usize,
}

/// One loop's `Pending`s not in use, kept with their capacity: every
/// response larger than the socket takes at once goes through one, so a
/// new allocation per partial write would put one on the hot path. As
/// many as the loop ever had connections waiting on their socket at once.
/// Boxed as in the connections' slots, so that moving one between a slot
/// and here never allocates.
#[derive(Default)]
#[allow(clippy::vec_box)]
pub struct SparePending(Vec<Box<Pending>>);

impl SparePending {
    /// A drained (or abandoned) `Pending` back for the next partial write;
    /// the mapping it kept is let go.
    pub fn put(&mut self, mut pending: Box<Pending>) {
        pending.backing = None;
        pending.bytes.clear();
        pending.segs.clear();
        pending.next = 0;
        self.0.push(pending);
    }
}

/// What became of a flush.
pub enum Flush {
    /// Everything was sent.
    Done,
    /// The socket is full, or the budget is spent (it is then 0); resume
    /// from the returned position.
    Blocked(usize),
    Failed,
}

/// Sends `segs[from..]` (with `bytes` for `Own` and `backing` for the
/// others), advancing segments in place as they are sent, at most
/// `budget` bytes, which is lowered by what was sent: a loop bounds what
/// one connection sends in a turn so that the others, and new requests,
/// are not kept waiting behind a large body.
pub fn send(
    fd: RawFd,
    backing: &dyn Backing,
    bytes: &[u8],
    segs: &mut [Seg],
    from: usize,
    budget: &mut usize,
) -> Flush {
    let mut next = from;
    // Left uninitialised: filling 256 empty slices cost about 800
    // instructions a call (callgrind), a tenth of an HTTPS keep-alive
    // request on epoll, where a call sends one response of 2 or 3 pieces.
    let mut iov = [const { MaybeUninit::<IoSlice<'_>>::uninit() }; 256];
    while next < segs.len() {
        if *budget == 0 {
            return Flush::Blocked(next);
        }
        if let Seg::File { pack, off, len } = segs[next] {
            let Some(file) = backing.file(pack) else {
                // A pack without its descriptor (`Backing::file`): the
                // body goes out of the mapping.
                let (Ok(off), Ok(len)) = (usize::try_from(off), usize::try_from(len)) else {
                    return Flush::Failed;
                };
                segs[next] = Seg::Mapped { pack, off, len };
                continue;
            };
            let mut offset = off;
            let chunk = len.min(1 << 30).min(*budget as u64) as usize;
            let n = rustix::fs::sendfile(borrowed(fd), borrowed(file), Some(&mut offset), chunk);
            match classify(n) {
                Outcome::Done(0) => return Flush::Failed,
                Outcome::Interrupted => {}
                Outcome::Done(n) => {
                    *budget -= n;
                    let n = n as u64;
                    if n == len {
                        next += 1;
                    } else {
                        segs[next] = Seg::File {
                            pack,
                            off: off + n,
                            len: len - n,
                        };
                        if n < chunk as u64 {
                            return Flush::Blocked(next);
                        }
                    }
                }
                Outcome::WouldBlock => return Flush::Blocked(next),
                Outcome::Closed => return Flush::Failed,
            }
            continue;
        }
        let Some((count, total)) =
            gather(bytes, backing, &segs[next..], &mut iov, *budget, |slice| {
                MaybeUninit::new(IoSlice::new(slice))
            })
        else {
            return Flush::Failed;
        };
        // SAFETY: `gather` wrote the first `count` elements (it writes
        // `iov[0..count]` in order and returns that count), and
        // `MaybeUninit<T>` has the layout of `T`.
        let filled =
            unsafe { std::slice::from_raw_parts(iov.as_ptr().cast::<IoSlice<'_>>(), count) };
        let sent = match classify(rustix::io::writev(borrowed(fd), filled)) {
            Outcome::Done(n) => n,
            Outcome::Interrupted => continue,
            Outcome::WouldBlock => return Flush::Blocked(next),
            Outcome::Closed => return Flush::Failed,
        };
        *budget -= sent;
        next = advance(segs, next, sent);
        if sent != total {
            return Flush::Blocked(next);
        }
    }
    Flush::Done
}

/// Points `iov` at the segments of `segs` up to the first file segment
/// (or as many as `iov` and IOV_MAX hold, or `max` bytes: the last
/// slice cut there), with `bytes` for `Own` and
/// `backing` for `Mapped` segments, each made by `iovec` (an `IoSlice` for
/// `writev`, the io_uring crate's iovec for a ring's); a `Checked`
/// segment only first, after its check. Returns how many iovecs were
/// filled and their total length; `None` when a mapped segment lies
/// outside its pack, or a checked one's pack changed.
pub fn gather<'a, V>(
    bytes: &'a [u8],
    backing: &'a dyn Backing,
    segs: &[Seg],
    iov: &mut [V],
    max: usize,
    iovec: impl Fn(&'a [u8]) -> V,
) -> Option<(usize, usize)> {
    let mut count = 0;
    let mut total = 0usize;
    let limit = iov.len().min(IOV_MAX);
    // A batch's bodies are nearly always from one pack: it is looked up
    // once, not once per segment.
    let mut map: (u32, &'a [u8]) = (u32::MAX, &[]);
    for seg in segs {
        if count == limit || total == max {
            break;
        }
        let slice: &[u8] = match *seg {
            Seg::Own { start, end } => &bytes[start..end],
            Seg::Mapped { pack, off, len } => {
                if map.0 != pack {
                    map = (pack, backing.bytes(pack));
                }
                map.1.get(off..off.checked_add(len)?)?
            }
            Seg::File { .. } => break,
            // Only once what comes before it was read (sent, or taken by
            // a completed operation): first in a gather.
            Seg::Checked { .. } if count > 0 => break,
            Seg::Checked { pack, at } => {
                if !backing.unchanged(pack) {
                    return None;
                }
                bytes.get(at..at + 1)?
            }
        };
        let slice = &slice[..slice.len().min(max - total)];
        iov[count] = iovec(slice);
        count += 1;
        total += slice.len();
    }
    Some((count, total))
}

/// Marks `sent` bytes from `segs[next..]` as sent: whole segments are
/// passed, a partly sent one is shortened in place. Returns the first
/// segment with bytes left (empty `Own` segments skipped).
pub fn advance(segs: &mut [Seg], mut next: usize, mut sent: usize) -> usize {
    while sent > 0 && next < segs.len() {
        let seg_len = segs[next].bytes_len() as usize;
        if sent >= seg_len {
            sent -= seg_len;
            next += 1;
        } else {
            segs[next] = match segs[next] {
                Seg::Own { start, end } => Seg::Own {
                    start: start + sent,
                    end,
                },
                Seg::Mapped { pack, off, len } => Seg::Mapped {
                    pack,
                    off: off + sent,
                    len: len - sent,
                },
                Seg::File { pack, off, len } => Seg::File {
                    pack,
                    off: off + sent as u64,
                    len: len - sent as u64,
                },
                // One byte: never partly sent.
                checked @ Seg::Checked { .. } => checked,
            };
            sent = 0;
        }
    }
    while next < segs.len() && matches!(segs[next], Seg::Own { start, end } if start == end) {
        next += 1;
    }
    next
}

/// What became of a freshly assembled batch.
pub enum Sent {
    All,
    /// The socket took part of it; the rest waits for `EPOLLOUT` (or, when
    /// the budget is spent, for the connection's next share of a turn).
    Partly(Box<Pending>),
    Failed,
}

/// Sends a freshly assembled batch, at most `budget` bytes of it (see
/// `send`); what is not sent is moved into a `Pending` from `spare` (the
/// header bytes copied, the body references kept).
pub fn send_output(
    fd: RawFd,
    backing: &Arc<dyn Backing>,
    out: &mut Output,
    spare: &mut SparePending,
    budget: &mut usize,
) -> Sent {
    match send(fd, &**backing, &out.bytes, &mut out.segs, 0, budget) {
        Flush::Done => Sent::All,
        Flush::Failed => Sent::Failed,
        Flush::Blocked(next) => {
            let mut pending = spare.0.pop().unwrap_or_default();
            pending.backing = Some(Arc::clone(backing));
            pending.bytes.extend_from_slice(&out.bytes);
            pending.segs.extend_from_slice(&out.segs[next..]);
            Sent::Partly(pending)
        }
    }
}

/// Resumes a pending batch, at most `budget` bytes of it (see `send`).
pub fn resume(fd: RawFd, pending: &mut Pending, budget: &mut usize) -> Flush {
    let Pending {
        backing,
        bytes,
        segs,
        next,
    } = pending;
    let Some(backing) = backing else {
        return Flush::Failed;
    };
    let r = send(fd, &**backing, bytes, segs, *next, budget);
    if let Flush::Blocked(at) = r {
        *next = at;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pack of eight bytes, written in place or not.
    struct Pack {
        unchanged: bool,
    }

    impl Backing for Pack {
        fn bytes(&self, _pack: u32) -> &[u8] {
            b"abcdefgh"
        }

        fn file(&self, _pack: u32) -> Option<RawFd> {
            None
        }

        fn unchanged(&self, _pack: u32) -> bool {
            self.unchanged
        }
    }

    /// What one gather of `segs` sends, and its length; `None` when it
    /// fails.
    fn gathered(backing: &Pack, bytes: &[u8], segs: &[Seg]) -> Option<(Vec<u8>, usize)> {
        let mut iov = [&[][..]; 8];
        let (count, total) = gather(bytes, backing, segs, &mut iov, usize::MAX, |s| s)?;
        Some((iov[..count].concat(), total))
    }

    #[test]
    fn a_held_back_byte_goes_out_alone_after_the_rest_and_only_from_an_unchanged_pack() {
        let mut out = Output::new(64, u64::MAX);
        out.bytes.extend_from_slice(b"HEAD");
        // "cdef", its last byte read when the response was written.
        out.pack_body_from(0, 2, 4, Some(b'f'));
        let unchanged = Pack { unchanged: true };
        let (first, total) = gathered(&unchanged, &out.bytes, &out.segs).unwrap();
        assert_eq!(first, b"HEADcde", "the writev stops before the held byte");
        let rest = advance(&mut out.segs, 0, total);
        let (last, _) = gathered(&unchanged, &out.bytes, &out.segs[rest..]).unwrap();
        assert_eq!(last, b"f");
        let changed = Pack { unchanged: false };
        assert!(
            gathered(&changed, &out.bytes, &out.segs[rest..]).is_none(),
            "a changed pack fails the send before its last byte"
        );
        assert_eq!(advance(&mut out.segs, rest, 1), out.segs.len());
    }
}
