//! HTTP/3 frames (RFC 9114 §7): QUIC variable-length integers, frame and
//! stream types, error codes, and a reader that cuts a stream's bytes into
//! frames, keeping whole only the frames that are read whole and skipping
//! the payload of the others (DATA, unknown types) as it arrives.

/// Frame types (§7.2) and the HTTP/2 types HTTP/3 reserves (§11.2.1).
pub const DATA: u64 = 0x00;
pub const HEADERS: u64 = 0x01;
pub const CANCEL_PUSH: u64 = 0x03;
pub const SETTINGS: u64 = 0x04;
pub const PUSH_PROMISE: u64 = 0x05;
pub const GOAWAY: u64 = 0x07;
pub const MAX_PUSH_ID: u64 = 0x0d;
/// HTTP/2's PRIORITY, PING, WINDOW_UPDATE and CONTINUATION: an error on
/// any HTTP/3 stream (§7.2.8).
pub const HTTP2_ONLY: [u64; 4] = [0x02, 0x06, 0x08, 0x09];

/// Unidirectional stream types (§6.2, RFC 9204 §4.2).
pub const CONTROL_STREAM: u64 = 0x00;
pub const PUSH_STREAM: u64 = 0x01;
pub const QPACK_ENCODER_STREAM: u64 = 0x02;
pub const QPACK_DECODER_STREAM: u64 = 0x03;

/// Settings (§7.2.4.1, RFC 9204 §5).
pub const SETTINGS_QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
pub const SETTINGS_MAX_FIELD_SECTION_SIZE: u64 = 0x06;
pub const SETTINGS_QPACK_BLOCKED_STREAMS: u64 = 0x07;
/// HTTP/2's settings HTTP/3 reserves (§7.2.4.1): an error if received.
pub const HTTP2_SETTINGS: [u64; 4] = [0x02, 0x03, 0x04, 0x05];

/// Error codes (§8.1, RFC 9204 §6).
pub const H3_NO_ERROR: u64 = 0x100;
pub const H3_GENERAL_PROTOCOL_ERROR: u64 = 0x101;
pub const H3_STREAM_CREATION_ERROR: u64 = 0x103;
pub const H3_CLOSED_CRITICAL_STREAM: u64 = 0x104;
pub const H3_FRAME_UNEXPECTED: u64 = 0x105;
pub const H3_FRAME_ERROR: u64 = 0x106;
pub const H3_EXCESSIVE_LOAD: u64 = 0x107;
pub const H3_ID_ERROR: u64 = 0x108;
pub const H3_SETTINGS_ERROR: u64 = 0x109;
pub const H3_MISSING_SETTINGS: u64 = 0x10a;
pub const H3_REQUEST_REJECTED: u64 = 0x10b;
pub const H3_REQUEST_CANCELLED: u64 = 0x10c;
pub const H3_REQUEST_INCOMPLETE: u64 = 0x10d;
pub const H3_MESSAGE_ERROR: u64 = 0x10e;
pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
pub const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;

/// The largest frame read whole (a request's field section, SETTINGS,
/// GOAWAY): a larger one is `H3_EXCESSIVE_LOAD`.
pub const MAX_WHOLE_FRAME: u64 = 16 * 1024;

/// Reads a variable-length integer (RFC 9000 §16) from the front of
/// `bytes`: the value and its length, `None` when `bytes` is too short.
pub fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let first = *bytes.first()?;
    let len = 1usize << (first >> 6);
    let raw = bytes.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for &b in &raw[1..] {
        value = (value << 8) | u64::from(b);
    }
    Some((value, len))
}

/// Appends `value` (below 2^62) as a variable-length integer, in the
/// shortest form.
pub fn write_varint(value: u64, out: &mut Vec<u8>) {
    match value {
        0..=0x3f => out.push(value as u8),
        0x40..=0x3fff => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
        0x4000..=0x3fff_ffff => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// Appends a frame header: type and payload length.
pub fn write_frame_header(frame_type: u64, len: u64, out: &mut Vec<u8>) {
    write_varint(frame_type, out);
    write_varint(len, out);
}

/// Whether `frame_type` is read whole (its payload handed over at once)
/// rather than skipped as it arrives.
fn read_whole(frame_type: u64) -> bool {
    matches!(
        frame_type,
        HEADERS | CANCEL_PUSH | SETTINGS | PUSH_PROMISE | GOAWAY | MAX_PUSH_ID
    ) || HTTP2_ONLY.contains(&frame_type)
}

/// One frame as the reader hands it over.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A frame read whole.
    Whole { frame_type: u64, payload: &'a [u8] },
    /// The header of a frame whose payload (`len` bytes) is skipped: DATA,
    /// or a type this server does not know (ignored, §9).
    Skipped { frame_type: u64, len: u64 },
}

/// Why a stream's bytes are not frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError<E> {
    /// A frame read whole is beyond `MAX_WHOLE_FRAME`.
    TooLarge,
    /// The callback's error.
    Frame(E),
}

/// Cuts one stream's bytes into frames across reads: a frame split
/// between reads is kept until whole; skipped payloads are never kept.
#[derive(Debug, Default)]
pub struct FrameReader {
    /// The start of a frame that is not whole yet.
    partial: Vec<u8>,
    /// Bytes of a skipped payload still to come.
    skip: u64,
}

impl FrameReader {
    /// Whether the stream ended in the middle of a frame if it ended now.
    pub fn mid_frame(&self) -> bool {
        self.skip > 0 || !self.partial.is_empty()
    }

    /// Reads `input`, calling `on_frame` for each frame that becomes
    /// whole (or whose skipped header arrived). Stops at the first error.
    pub fn read<E>(
        &mut self,
        input: &[u8],
        mut on_frame: impl FnMut(Frame<'_>) -> Result<(), E>,
    ) -> Result<(), ReadError<E>> {
        let mut input = input;
        let skipped = self.skip.min(input.len() as u64) as usize;
        self.skip -= skipped as u64;
        input = &input[skipped..];
        if input.is_empty() {
            return Ok(());
        }
        if self.partial.is_empty() {
            let used = Self::frames(input, &mut self.skip, &mut on_frame)?;
            self.partial.extend_from_slice(&input[used..]);
        } else {
            self.partial.extend_from_slice(input);
            let partial = std::mem::take(&mut self.partial);
            let result = Self::frames(&partial, &mut self.skip, &mut on_frame);
            self.partial = partial;
            let used = result?;
            self.partial.drain(..used);
        }
        Ok(())
    }

    /// The frames at the front of `bytes`: how many bytes they took (a
    /// skipped payload's start included; what it lacks goes to `skip`).
    fn frames<E>(
        bytes: &[u8],
        skip: &mut u64,
        on_frame: &mut impl FnMut(Frame<'_>) -> Result<(), E>,
    ) -> Result<usize, ReadError<E>> {
        let mut at = 0;
        while at < bytes.len() {
            let Some((frame_type, n)) = read_varint(&bytes[at..]) else {
                break;
            };
            let Some((len, m)) = read_varint(&bytes[at + n..]) else {
                break;
            };
            let body = at + n + m;
            if read_whole(frame_type) {
                if len > MAX_WHOLE_FRAME {
                    return Err(ReadError::TooLarge);
                }
                let Some(payload) = bytes.get(body..body + len as usize) else {
                    break;
                };
                on_frame(Frame::Whole {
                    frame_type,
                    payload,
                })
                .map_err(ReadError::Frame)?;
                at = body + len as usize;
            } else {
                on_frame(Frame::Skipped { frame_type, len }).map_err(ReadError::Frame)?;
                let here = (len.min((bytes.len() - body) as u64)) as usize;
                *skip = len - here as u64;
                at = body + here;
            }
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_in_their_shortest_form() {
        for (value, len) in [
            (0, 1),
            (63, 1),
            (64, 2),
            (16383, 2),
            (16384, 4),
            (1 << 30, 8),
        ] {
            let mut out = Vec::new();
            write_varint(value, &mut out);
            assert_eq!(out.len(), len);
            assert_eq!(read_varint(&out), Some((value, len)));
            assert_eq!(read_varint(&out[..len - 1]), None.filter(|_| len > 1));
        }
        // RFC 9000 §A.1's examples.
        assert_eq!(
            read_varint(&[0x9d, 0x7f, 0x3e, 0x7d]),
            Some((494_878_333, 4))
        );
        assert_eq!(read_varint(&[0x7b, 0xbd]), Some((15_293, 2)));
    }

    fn frames_of(pieces: &[&[u8]]) -> Vec<(u64, Vec<u8>, u64)> {
        let mut reader = FrameReader::default();
        let mut seen = Vec::new();
        for piece in pieces {
            reader
                .read::<()>(piece, |f| {
                    seen.push(match f {
                        Frame::Whole {
                            frame_type,
                            payload,
                        } => (frame_type, payload.to_vec(), 0),
                        Frame::Skipped { frame_type, len } => (frame_type, Vec::new(), len),
                    });
                    Ok(())
                })
                .unwrap();
        }
        seen
    }

    #[test]
    fn frames_whole_or_skipped_across_any_cut() {
        let mut stream = Vec::new();
        write_frame_header(HEADERS, 3, &mut stream);
        stream.extend_from_slice(b"abc");
        write_frame_header(DATA, 5, &mut stream);
        stream.extend_from_slice(b"01234");
        write_frame_header(0x21, 2, &mut stream);
        stream.extend_from_slice(b"zz");
        write_frame_header(HEADERS, 1, &mut stream);
        stream.push(b'x');
        let want = vec![
            (HEADERS, b"abc".to_vec(), 0),
            (DATA, Vec::new(), 5),
            (0x21, Vec::new(), 2),
            (HEADERS, b"x".to_vec(), 0),
        ];
        assert_eq!(frames_of(&[&stream]), want);
        for cut in 0..stream.len() {
            assert_eq!(
                frames_of(&[&stream[..cut], &stream[cut..]]),
                want,
                "cut {cut}"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(frames_of(&bytes), want);
    }

    #[test]
    fn a_whole_frame_beyond_the_limit_is_refused() {
        let mut stream = Vec::new();
        write_frame_header(HEADERS, MAX_WHOLE_FRAME + 1, &mut stream);
        let mut reader = FrameReader::default();
        assert_eq!(
            reader.read::<()>(&stream, |_| Ok(())),
            Err(ReadError::TooLarge)
        );
    }
}
