//! HTTP/2 (RFC 9113), sans-IO like `http1`: fed bytes, handing back what
//! to write, never touching a socket.
//!
//! Layout, bottom up:
//! - `frame.rs` — frames in and out: the 9-octet header, every frame type
//!   read in place from the read buffer and checked against RFC 9113
//!   §4–§6 (each failure a connection or a stream error with its code),
//!   and the writers for what a server sends, allocation-free.
//! - `priority.rs` — RFC 9218 priorities: the `priority` request header
//!   and the PRIORITY_UPDATE payload, the same Structured Fields
//!   dictionary.
//! - `request.rs` — a request's header section: fields checked as HPACK
//!   hands them out (RFC 9113 §8.2, §8.3), those the handler reads kept.
//! - `conn.rs` — the connection: preface, SETTINGS exchange, stream
//!   states, flow control, field blocks across CONTINUATION frames,
//!   requests handed to `handler::answer` like HTTP/1's, GOAWAY, and the
//!   limits that keep a client honest. Its parts: `conn/respond.rs`, a
//!   response as HEADERS, CONTINUATION and DATA frames; `conn/schedule.rs`,
//!   which stream's DATA goes next (RFC 9218 priorities).
//!
//! Field blocks are HPACK-coded (RFC 7541); the codec lives in
//! `crate::hpack`, apart from this module: the frame layer only carries a
//! block's bytes, and HPACK knows nothing of frames.

pub mod conn;
pub mod frame;
pub mod priority;

pub use conn::{Conn, Scratch};
