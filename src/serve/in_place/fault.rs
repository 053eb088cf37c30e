//! The bus-error path: a read of a pack's mapping past the end of a file
//! that shrank under it (written in place without a lease). The faulting
//! page is replaced by a zero page so that the read completes, and the
//! pack is marked stale, in the faulting thread before it goes on: what
//! it read is never sent (the backing gives no bytes for a stale pack,
//! and a TLS record sealed from it is checked after the copy).

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use rustix::mm::{MapFlags, ProtFlags};

use super::MAPPINGS;
use crate::sys;

/// The page size, read once before any fault.
static PAGE: OnceLock<usize> = OnceLock::new();

/// Installs the handler; before the sandbox (its `sigaction` is not on
/// the filter's list), once.
pub fn install_fault_handler() -> std::io::Result<()> {
    PAGE.get_or_init(rustix::param::page_size);
    sys::on_bus_error(on_fault)
}

/// A bus error at `address`: when it lies in a tracked pack, marks the
/// pack stale and maps a zero page over the faulting one. Async-signal-
/// safe: atomics and one mmap, no lock, no allocation.
fn on_fault(address: usize) -> bool {
    let Some(&page) = PAGE.get() else {
        return false;
    };
    // Chunks are allocated in order and never freed: the first null one
    // ends the table.
    let chunks = MAPPINGS
        .iter()
        .map(|chunk| chunk.load(Ordering::Acquire))
        .take_while(|chunk| !chunk.is_null());
    // SAFETY: a chunk, once published, lives as long as the process.
    for mapping in chunks.flat_map(|chunk| unsafe { &*chunk }.iter()) {
        let len = mapping.len.load(Ordering::Acquire);
        let start = mapping.start.load(Ordering::Acquire);
        if len == 0 || address < start || address - start >= len {
            continue;
        }
        // Stale first: a thread that reads the zero page finds the mark
        // when it checks after reading.
        mapping.stale.store(true, Ordering::SeqCst);
        let at = address & !(page - 1);
        // SAFETY: the page lies in our own mapping of the pack (a page
        // of it faulted), which keeps its size: the pack's munmap
        // unmaps this page with the rest.
        let mapped = unsafe {
            rustix::mm::mmap_anonymous(
                at as *mut std::ffi::c_void,
                page,
                ProtFlags::READ,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        };
        return mapped.is_ok();
    }
    false
}
