//! Setting a ring up: its sizes, its restriction to the operations kiln
//! uses, and the probe `--io auto` decides by.

use io_uring::register::Restriction;
use io_uring::{IoUring, Probe, opcode, squeue};

use super::buf_ring::Buffers;

/// Submission queue entries; a full queue is flushed with an extra enter.
pub(super) const SQ_ENTRIES: u32 = 2048;
/// Completion queue entries: every connection has a multishot receive
/// armed, so a turn can complete one per connection and more.
pub(super) const CQ_ENTRIES: u32 = 16384;

/// The operations the ring is restricted to.
const OPS: [u8; 7] = [
    opcode::AcceptMulti::CODE,
    opcode::RecvMulti::CODE,
    opcode::Writev::CODE,
    opcode::Splice::CODE,
    opcode::PollAdd::CODE,
    opcode::AsyncCancel::CODE,
    opcode::Close::CODE,
];

/// Creates a ring with the receive buffers registered and restricted to
/// `OPS`, still disabled: the thread that will submit enables it
/// (`IORING_SETUP_SINGLE_ISSUER` makes that thread its owner, which
/// `IORING_SETUP_DEFER_TASKRUN` needs: completions are then processed only
/// when the loop enters the ring, in one batch, instead of interrupting it).
/// Fails where the kernel lacks any of it (or forbids io_uring), which
/// `--io auto` takes as the answer to use epoll.
pub(super) fn new_ring(buffers: &mut Buffers) -> std::io::Result<IoUring> {
    let ring = IoUring::builder()
        .setup_r_disabled()
        .setup_cqsize(CQ_ENTRIES)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_submit_all()
        .build(SQ_ENTRIES)?;
    let submitter = ring.submitter();
    let mut probe = Probe::new();
    submitter.register_probe(&mut probe)?;
    if let Some(op) = OPS.iter().find(|&&op| !probe.is_supported(op)) {
        return Err(std::io::Error::other(format!(
            "the kernel lacks io_uring operation {op}"
        )));
    }
    buffers.register(&submitter)?;
    let mut restrictions: Vec<Restriction> =
        OPS.iter().map(|&op| Restriction::sqe_op(op)).collect();
    restrictions.push(Restriction::sqe_flags_allowed(
        squeue::Flags::BUFFER_SELECT.bits(),
    ));
    submitter.register_restrictions(&mut restrictions)?;
    Ok(ring)
}

/// Whether this kernel (and whatever confines the process) lets kiln use
/// io_uring the way it does: sets up one ring, as every thread will.
/// Returns how receive buffers are used, for the log.
pub fn probe() -> std::io::Result<String> {
    let mut buffers = Buffers::new()?;
    new_ring(&mut buffers)?
        .submitter()
        .register_enable_rings()?;
    Ok(format!(
        "receive buffers: {} × {} KiB per thread{}",
        buffers.count,
        buffers.size >> 10,
        if buffers.incremental {
            ", consumed incrementally"
        } else {
            ""
        }
    ))
}

#[cfg(test)]
mod tests {
    use io_uring::{IoUring, types};
    use rustix::io::Errno;

    use super::super::POLL_IN;
    use super::*;
    use crate::serve::net::Waker;

    /// The ring runs only the operations kiln uses: anything else (here a
    /// no-op) is refused by the kernel, as an attacker's would be.
    #[test]
    fn the_ring_refuses_operations_outside_its_list() {
        if IoUring::new(8).is_err() {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"skipped: this kernel offers no io_uring\n",
            );
            return;
        }
        let mut buffers = Buffers::new().unwrap();
        let mut ring = new_ring(&mut buffers).unwrap();
        ring.submitter().register_enable_rings().unwrap();
        let nop = opcode::Nop::new().build().user_data(1);
        let waker = Waker::new().unwrap();
        let poll = opcode::PollAdd::new(types::Fd(waker.raw()), POLL_IN)
            .build()
            .user_data(2);
        // SAFETY: neither entry points to memory.
        unsafe {
            ring.submission().push(&nop).unwrap();
            ring.submission().push(&poll).unwrap();
        }
        waker.wake();
        ring.submit_and_wait(2).unwrap();
        let mut results: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        results.sort();
        let denied = -Errno::ACCESS.raw_os_error();
        assert_eq!(results, [(1, denied), (2, POLL_IN as i32)]);
    }
}
