//! The inotify event parser shared by the control thread (packs, a folder
//! of sites, certificates) and the live preview: events are read in place
//! from the buffer `read(2)` filled, without allocation.

use std::mem::size_of;

/// One inotify event: the watch it came from, what happened, and the name
/// in the watched directory (empty for the directory itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    pub wd: libc::c_int,
    pub mask: u32,
    pub name: &'a [u8],
}

impl Event<'_> {
    /// The kernel's queue was full and events were dropped: whatever they
    /// said is unknown, so everything watched may have changed.
    pub fn overflowed(&self) -> bool {
        self.mask & libc::IN_Q_OVERFLOW != 0
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
        let header = size_of::<libc::inotify_event>();
        if self.rest.len() < header {
            self.rest = &[];
            return None;
        }
        // SAFETY: `header` bytes are there; read unaligned, as the buffer
        // need not be aligned for the struct.
        let ev: libc::inotify_event =
            unsafe { std::ptr::read_unaligned(self.rest.as_ptr().cast()) };
        let end = header.saturating_add(ev.len as usize).min(self.rest.len());
        let padded = &self.rest[header..end];
        // The name is NUL-terminated and padded with NULs to an alignment.
        let name = &padded[..padded.iter().position(|&c| c == 0).unwrap_or(padded.len())];
        self.rest = &self.rest[end..];
        Some(Event {
            wd: ev.wd,
            mask: ev.mask,
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut buf = event(1, libc::IN_MOVED_TO, b"a.example.pack", 16);
        buf.extend(event(2, libc::IN_CLOSE_WRITE, b"index.html", 32));
        buf.extend(event(1, libc::IN_DELETE_SELF, b"", 0));
        let got: Vec<Event<'_>> = events(&buf).collect();
        assert_eq!(
            got,
            [
                Event {
                    wd: 1,
                    mask: libc::IN_MOVED_TO,
                    name: b"a.example.pack"
                },
                Event {
                    wd: 2,
                    mask: libc::IN_CLOSE_WRITE,
                    name: b"index.html"
                },
                Event {
                    wd: 1,
                    mask: libc::IN_DELETE_SELF,
                    name: b""
                },
            ]
        );
        assert!(got.iter().all(|e| !e.overflowed()));
    }

    #[test]
    fn an_overflow_is_flagged() {
        let buf = event(-1, libc::IN_Q_OVERFLOW, b"", 0);
        let got: Vec<Event<'_>> = events(&buf).collect();
        assert_eq!(got.len(), 1);
        assert!(got[0].overflowed());
    }

    #[test]
    fn a_truncated_tail_ends_the_events() {
        let mut buf = event(1, libc::IN_CREATE, b"kept", 16);
        let second = event(1, libc::IN_CREATE, b"cut-short-name", 16);
        // A name cut short is taken up to the end of the buffer.
        let mut cut_name = buf.clone();
        cut_name.extend_from_slice(&second[..size_of::<libc::inotify_event>() + 3]);
        let names: Vec<&[u8]> = events(&cut_name).map(|e| e.name).collect();
        assert_eq!(names, [&b"kept"[..], b"cut"]);
        // A header cut short is no event.
        buf.extend_from_slice(&second[..7]);
        let names: Vec<&[u8]> = events(&buf).map(|e| e.name).collect();
        assert_eq!(names, [b"kept"]);
        assert_eq!(events(&[]).count(), 0);
    }
}
