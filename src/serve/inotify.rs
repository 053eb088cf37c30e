//! The inotify event parser shared by the control thread (packs, a folder
//! of sites, certificates) and the live preview: events are read in place
//! from the buffer `read(2)` filled, without allocation.

use rustix::fs::inotify::ReadFlags;

/// The fixed part of an event (`struct inotify_event`): watch descriptor,
/// mask, cookie, name length, four 32-bit fields; the name follows.
const HEADER_BYTES: usize = 16;

/// One inotify event: the watch it came from, what happened, and the name
/// in the watched directory (empty for the directory itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    pub wd: i32,
    pub mask: u32,
    pub name: &'a [u8],
}

impl Event<'_> {
    /// The kernel's queue was full and events were dropped: whatever they
    /// said is unknown, so everything watched may have changed.
    pub fn overflowed(&self) -> bool {
        self.mask & ReadFlags::QUEUE_OVERFLOW.bits() != 0
    }
}

/// The events in `buf`, as `read(2)` on an inotify descriptor left them.
pub fn events(buf: &[u8]) -> Events<'_> {
    Events { rest: buf }
}

/// Iterator over the events of a read buffer; a header cut short ends it
/// (the kernel writes whole events, so only a short buffer given by
/// mistake has one) and a name cut short is taken up to the end.
pub struct Events<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Events<'a> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        let Some(header) = self.rest.first_chunk::<HEADER_BYTES>() else {
            self.rest = &[];
            return None;
        };
        let field = |at: usize| u32::from_ne_bytes(header[at..at + 4].try_into().expect("4 bytes"));
        let (wd, mask, len) = (field(0) as i32, field(4), field(12));
        let end = HEADER_BYTES
            .saturating_add(len as usize)
            .min(self.rest.len());
        let padded = &self.rest[HEADER_BYTES..end];
        // The name is NUL-terminated and padded with NULs to an alignment.
        let name = &padded[..padded.iter().position(|&c| c == 0).unwrap_or(padded.len())];
        self.rest = &self.rest[end..];
        Some(Event { wd, mask, name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOVED_TO: u32 = ReadFlags::MOVED_TO.bits();
    const CLOSE_WRITE: u32 = ReadFlags::CLOSE_WRITE.bits();
    const DELETE_SELF: u32 = ReadFlags::DELETE_SELF.bits();
    const CREATE: u32 = ReadFlags::CREATE.bits();

    /// An event as the kernel lays it out, its name padded with NULs to
    /// `padded` bytes.
    fn event(wd: i32, mask: u32, name: &[u8], padded: usize) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&wd.to_ne_bytes());
        out.extend_from_slice(&mask.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&(padded as u32).to_ne_bytes());
        out.extend_from_slice(name);
        out.resize(out.len() + padded - name.len(), 0);
        out
    }

    #[test]
    fn several_events_yield_their_watch_mask_and_name_without_padding() {
        let mut buf = event(1, MOVED_TO, b"a.example.pack", 16);
        buf.extend(event(2, CLOSE_WRITE, b"index.html", 32));
        buf.extend(event(1, DELETE_SELF, b"", 0));
        let got: Vec<Event<'_>> = events(&buf).collect();
        assert_eq!(
            got,
            [
                Event {
                    wd: 1,
                    mask: MOVED_TO,
                    name: b"a.example.pack"
                },
                Event {
                    wd: 2,
                    mask: CLOSE_WRITE,
                    name: b"index.html"
                },
                Event {
                    wd: 1,
                    mask: DELETE_SELF,
                    name: b""
                },
            ]
        );
        assert!(got.iter().all(|e| !e.overflowed()));
    }

    #[test]
    fn an_overflow_is_flagged() {
        let buf = event(-1, ReadFlags::QUEUE_OVERFLOW.bits(), b"", 0);
        let got: Vec<Event<'_>> = events(&buf).collect();
        assert_eq!(got.len(), 1);
        assert!(got[0].overflowed());
    }

    #[test]
    fn a_truncated_tail_ends_the_events() {
        let mut buf = event(1, CREATE, b"kept", 16);
        let second = event(1, CREATE, b"cut-short-name", 16);
        // A name cut short is taken up to the end of the buffer.
        let mut cut_name = buf.clone();
        cut_name.extend_from_slice(&second[..HEADER_BYTES + 3]);
        let names: Vec<&[u8]> = events(&cut_name).map(|e| e.name).collect();
        assert_eq!(names, [&b"kept"[..], b"cut"]);
        // A header cut short is no event.
        buf.extend_from_slice(&second[..7]);
        let names: Vec<&[u8]> = events(&buf).map(|e| e.name).collect();
        assert_eq!(names, [b"kept"]);
        assert_eq!(events(&[]).count(), 0);
    }
}
