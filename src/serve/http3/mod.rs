//! HTTP/3 (RFC 9114), sans-IO like `http1` and `http2`: fed the bytes of
//! QUIC streams, writing to them through the [`conn::Streams`] trait,
//! never touching a socket or QUIC's state itself (`serve::quic` drives
//! it).
//!
//! - `frame.rs` — variable-length integers, frame and stream types,
//!   error codes, and the reader that cuts a stream into frames.
//! - `conn.rs` — one connection: control and QPACK streams, SETTINGS,
//!   request streams into `handler::answer`, GOAWAY, errors.
//! - `taken.rs` — which request streams were taken, in any order, in a
//!   fixed-size window.
//!
//! Field sections are QPACK-coded (RFC 9204) by `crate::qpack`, with a
//! dynamic table of capacity 0.

pub mod conn;
pub mod frame;
mod taken;

pub use conn::{Answering, Bodies, Conn, Scratch, Streams};
