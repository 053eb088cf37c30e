//! The DATA scheduler: which stream's body goes next and how much of it,
//! by RFC 9218 priorities and the flow-control windows, at most
//! `STEP_BYTES` a loop turn over all streams; a body from a pack written
//! in place without a lease is reset (`serve::in_place`).

use super::{Conn, Stream};
use crate::serve::handler::Sites;
use crate::serve::http2::frame::ErrorCode;
use crate::serve::output::Output;

/// Body bytes written per loop turn over all streams: bounds the output a
/// slow client holds, and lets the loop read in between.
const STEP_BYTES: usize = 128 * 1024;

impl Conn {
    /// Whether some stream has body left and the windows let it go.
    pub(super) fn can_send(&self) -> bool {
        self.send_window > 0
            && self
                .streams
                .iter()
                .any(|s| s.body.is_some() && s.send_window > 0)
    }

    /// Writes DATA frames, most urgent streams first (RFC 9218): within an
    /// urgency, non-incremental responses one at a time in stream order,
    /// incremental ones a frame each in turn. Returns the body bytes
    /// written.
    pub(super) fn send_data(&mut self, current: &Sites, out: &mut Output) -> usize {
        let mut sent = 0;
        while sent < STEP_BYTES && self.send_window > 0 {
            let Some(i) = self.next_stream() else {
                break;
            };
            let s = &mut self.streams[i];
            let Some(body) = s.body else {
                break;
            };
            if s.reads_a_stale_pack() {
                let id = s.id;
                self.reset_stream(id, ErrorCode::INTERNAL_ERROR, out);
                continue;
            }
            let allowed = (self.send_window.min(s.send_window) as u64)
                .min(u64::from(self.peer_max_frame))
                .min((STEP_BYTES - sent) as u64);
            let n = body.len().min(allowed);
            let last = n == body.len();
            if !s.write_data(body, n, last, current, out) {
                let id = s.id;
                self.reset_stream(id, ErrorCode::INTERNAL_ERROR, out);
                continue;
            }
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            sent += n as usize;
            self.round_robin = s.id;
            if last {
                self.stream_sent(i, out);
            }
        }
        sent
    }

    /// The stream whose DATA goes next, if any may be sent.
    fn next_stream(&self) -> Option<usize> {
        let ready = |s: &&Stream| s.body.is_some() && s.send_window > 0;
        let urgency = self
            .streams
            .iter()
            .filter(ready)
            .map(|s| s.priority.urgency)
            .min()?;
        let at = |s: &&Stream| ready(s) && s.priority.urgency == urgency;
        // Streams are kept in the order they were opened: the first
        // non-incremental one goes whole before the next.
        if let Some(i) = self
            .streams
            .iter()
            .position(|s| at(&s) && !s.priority.incremental)
        {
            return Some(i);
        }
        self.streams
            .iter()
            .position(|s| at(&s) && s.id > self.round_robin)
            .or_else(|| self.streams.iter().position(|s| at(&s)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::frame::{PREFACE, frame_type, setting};
    use super::super::test_peer::*;

    #[test]
    fn urgent_streams_go_first() {
        let mut peer = Peer::new();
        let mut bytes = PREFACE.to_vec();
        // No window until both requests are in.
        bytes.extend(header(6, frame_type::SETTINGS, 0, 0));
        bytes.extend(setting::INITIAL_WINDOW_SIZE.to_be_bytes());
        bytes.extend(0u32.to_be_bytes());
        bytes.extend(headers(1, true, &get_block("/a", &[])));
        bytes.extend(headers(3, true, &get_block("/b", &[("priority", "u=0")])));
        bytes.extend(header(6, frame_type::SETTINGS, 0, 0));
        bytes.extend(setting::INITIAL_WINDOW_SIZE.to_be_bytes());
        bytes.extend(65_535u32.to_be_bytes());
        let (_, sent) = peer.send(&bytes);
        let order: Vec<u32> = sent
            .iter()
            .filter(|f| f.frame_type == frame_type::DATA)
            .map(|f| f.stream)
            .collect();
        assert_eq!(order, [3, 1]);
    }
}
