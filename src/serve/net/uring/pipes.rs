//! The pipes large bodies are spliced through, from the pack file to the
//! socket (io_uring's `sendfile`): made at start, pooled, emptied when a
//! body was left in one.

use std::os::fd::OwnedFd;

/// Pipes for splicing, made at start (the sandbox allows no new ones), as
/// many as descriptors allow up to this: as many large bodies go out at
/// once by splice, more by `writev` from the mapping.
pub const PIPES: usize = 8;
/// The pipe size asked for (the kernel may give less): one splice moves
/// at most this much of a body.
pub(super) const PIPE_SIZE: usize = 1 << 20;

/// A pipe a large body is spliced through, from the pack file to the
/// socket.
pub(super) struct Pipe {
    /// The read end (spliced into the socket).
    pub(super) read: OwnedFd,
    /// The write end (spliced into from the pack file).
    pub(super) write: OwnedFd,
    /// Its capacity: the most one splice moves.
    pub(super) size: usize,
}

impl Pipe {
    pub(super) fn new() -> std::io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // A larger pipe means fewer splices per body; the kernel may refuse
        // (pipe-max-size), and then the default size does.
        let size = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))
            .unwrap_or(0)
            .max(4096);
        Ok(Pipe { read, write, size })
    }

    /// Empties a pipe a body was left in (its connection closed, or a
    /// splice was cancelled, mid-body) so that it can serve the next one.
    /// False if that failed: the pipe is then dropped.
    pub(super) fn empty(&self) -> bool {
        let mut scratch = [0u8; 16 * 1024];
        loop {
            let Ok(queued) = rustix::io::ioctl_fionread(&self.read) else {
                return false;
            };
            if queued == 0 {
                return true;
            }
            let want = scratch.len().min(queued as usize);
            // The pipe holds at least `want` bytes: the read does not block.
            if !matches!(rustix::io::read(&self.read, &mut scratch[..want]), Ok(1..)) {
                return false;
            }
        }
    }
}
