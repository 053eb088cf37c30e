//! The ring of provided buffers every connection's multishot receive
//! fills: its memory, its registration (incremental where the kernel has
//! it), and handing buffers back once the stack took their bytes.

use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;

/// Memory for receive buffers per thread, shared by all its connections.
pub(super) const BUF_MEMORY: usize = 4 << 20;
/// Buffer size where the kernel consumes buffers incrementally (Linux
/// 6.12, `IOU_PBUF_RING_INC`): each receive takes only the bytes it got
/// from the current buffer, so 64 buffers of 64 KiB hold thousands of
/// request heads in one turn.
pub(super) const BUF_SIZE_INCREMENTAL: usize = 64 << 10;
/// Buffer size where each receive takes a whole buffer: a request head
/// fits one, a TLS record two; 512 of them.
pub(super) const BUF_SIZE_WHOLE: usize = 8 << 10;
/// Ring entries: enough for the smaller buffers (a power of two).
pub(super) const RING_ENTRIES: u16 = (BUF_MEMORY / BUF_SIZE_WHOLE) as u16;
/// `IOU_PBUF_RING_INC` and `IORING_CQE_F_BUF_MORE` (linux/io_uring.h;
/// not exported by the `io-uring` crate): the registration flag, and the
/// completion flag saying the kernel keeps filling the same buffer.
pub(super) const IOU_PBUF_RING_INC: u16 = 2;
pub(super) const IORING_CQE_F_BUF_MORE: u32 = 1 << 4;
/// The buffer group of the receive buffers.
pub(super) const BGID: u16 = 0;

/// The ring of provided buffers multishot receives fill: memory the
/// kernel picks a buffer from for each receive, handed back to it as soon
/// as the stack has taken the bytes.
pub(super) struct Buffers {
    /// The ring entries the kernel takes buffers from (page-aligned, as
    /// the kernel requires).
    ring: *mut BufRingEntry,
    /// The buffers themselves: `BUF_MEMORY` bytes, `count` × `size`.
    memory: *mut u8,
    /// Buffers in the ring (a power of two).
    pub(super) count: u16,
    /// Bytes per buffer.
    pub(super) size: usize,
    /// The kernel consumes buffers incrementally: a receive's bytes start
    /// where the previous receive into the same buffer ended.
    pub(super) incremental: bool,
    /// With `incremental`: where the next receive's bytes start in each
    /// buffer.
    filled: Vec<u32>,
    /// The next entry to fill; published to the kernel once per turn.
    tail: u16,
}

// SAFETY: the mappings belong to this value alone; it moves to the loop's
// thread once, before any use.
unsafe impl std::marker::Send for Buffers {}

impl Buffers {
    pub(super) fn new() -> std::io::Result<Buffers> {
        let ring = map_anonymous(Self::ring_bytes())?;
        let memory = match map_anonymous(BUF_MEMORY) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: `ring` was mapped just above with this length.
                let _ = unsafe { rustix::mm::munmap(ring.cast(), Self::ring_bytes()) };
                return Err(e);
            }
        };
        Ok(Buffers {
            ring: ring.cast(),
            memory,
            count: RING_ENTRIES,
            size: BUF_SIZE_WHOLE,
            incremental: false,
            filled: Vec::new(),
            tail: 0,
        })
    }

    pub(super) fn ring_bytes() -> usize {
        usize::from(RING_ENTRIES) * std::mem::size_of::<BufRingEntry>()
    }

    /// Registers the ring as buffer group `BGID`, incremental where the
    /// kernel offers it, and hands every buffer to the kernel.
    pub(super) fn register(&mut self, submitter: &io_uring::Submitter<'_>) -> std::io::Result<()> {
        let incremental_count = (BUF_MEMORY / BUF_SIZE_INCREMENTAL) as u16;
        // SAFETY: the ring memory outlives the ring (see `Drop`).
        let incremental = unsafe {
            submitter.register_buf_ring_with_flags(
                self.ring as u64,
                incremental_count,
                BGID,
                IOU_PBUF_RING_INC,
            )
        };
        if incremental.is_ok() {
            self.incremental = true;
            self.count = incremental_count;
            self.size = BUF_SIZE_INCREMENTAL;
            self.filled = vec![0; usize::from(incremental_count)];
        } else {
            // SAFETY: as above.
            unsafe {
                submitter.register_buf_ring_with_flags(self.ring as u64, RING_ENTRIES, BGID, 0)?
            };
        }
        for bid in 0..self.count {
            self.recycle(bid);
        }
        self.publish();
        Ok(())
    }

    /// Hands buffer `bid` back to the kernel (seen at the next publish).
    pub(super) fn recycle(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (self.count - 1));
        let bid = bid % self.count;
        if let Some(filled) = self.filled.get_mut(usize::from(bid)) {
            *filled = 0;
        }
        // SAFETY: `slot` < count ≤ RING_ENTRIES entries; the buffer lies
        // inside the BUF_MEMORY mapping.
        unsafe {
            let entry = &mut *self.ring.add(slot);
            entry.set_addr(self.memory.add(usize::from(bid) * self.size) as u64);
            entry.set_len(self.size as u32);
            entry.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the recycled buffers visible to the kernel.
    pub(super) fn publish(&self) {
        // SAFETY: the tail field lives in the first entry of our mapping;
        // the kernel reads it concurrently, hence the atomic release store.
        unsafe {
            let tail = BufRingEntry::tail(self.ring) as *mut u16;
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }

    /// Where the `len` bytes a receive completion put in buffer `bid`
    /// start, and how many of them lie in the buffer; with incremental
    /// consumption, the next receive into it starts after them.
    pub(super) fn locate(&mut self, bid: u16, len: usize) -> (usize, usize) {
        let start = match self.filled.get_mut(usize::from(bid % self.count)) {
            Some(filled) => {
                let start = *filled as usize;
                *filled = (start + len).min(self.size) as u32;
                start
            }
            None => 0,
        };
        (start, len.min(self.size - start))
    }

    /// The bytes `locate` found.
    pub(super) fn slice(&mut self, bid: u16, start: usize, len: usize) -> &mut [u8] {
        let bid = usize::from(bid % self.count);
        let len = len.min(self.size.saturating_sub(start));
        // SAFETY: inside buffer `bid`, which is ours until `done`.
        unsafe { std::slice::from_raw_parts_mut(self.memory.add(bid * self.size + start), len) }
    }

    /// A receive completion with buffer `bid` was handled: the buffer goes
    /// back to the kernel unless the kernel keeps filling it.
    pub(super) fn done(&mut self, bid: u16, flags: u32) {
        if !(self.incremental && flags & IORING_CQE_F_BUF_MORE != 0) {
            self.recycle(bid);
        }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: both were mapped by `new` with these lengths; the ring
        // that used them is dropped first (field order of `UringWorker`).
        unsafe {
            let _ = rustix::mm::munmap(self.ring.cast(), Self::ring_bytes());
            let _ = rustix::mm::munmap(self.memory.cast(), BUF_MEMORY);
        }
    }
}

pub(super) fn map_anonymous(len: usize) -> std::io::Result<*mut u8> {
    use rustix::mm::{MapFlags, ProtFlags};
    let prot = ProtFlags::READ | ProtFlags::WRITE;
    // SAFETY: a fresh private anonymous mapping, aliasing nothing.
    let p =
        unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, prot, MapFlags::PRIVATE) }?;
    Ok(p.cast())
}
