//! kiln fires a static site once into a single read-only **pack** file and
//! serves it from that file with near-zero work per request.
//!
//! Layout (see `ARCHITECTURE.md` for the full code map and invariants):
//! - [`acme`]: automatic certificates — the ACME client process and the
//!   state folder it shares with the server.
//! - [`pack`]: the pack format — writer, memory-mapped reader, verifier.
//! - [`build`]: `kiln build` — reads a directory or tar, decides routes,
//!   compresses and prepares every response's headers, writes the pack.
//! - [`hpack`]: HPACK (RFC 7541) — the HTTP/2 request header decoder and
//!   the stateless response header encoder.
//! - [`qpack`]: QPACK (RFC 9204) without a dynamic table — the HTTP/3
//!   request field section decoder and the stateless response encoder.
//! - [`inspect`]: `kiln inspect` — lists a pack's routes.
//! - [`diff`]: `kiln diff` — what a new pack changes against an old one.
//! - [`serve`]: `kiln serve` — connection layer, protocols and the handler
//!   that maps a request to prepared pack bytes.
//! - [`confine`]: giving up rights — the user switch, capabilities and the
//!   Landlock basics the server's sandbox and the ACME worker's share.

pub mod acme;
pub mod build;
pub mod confine;
pub mod dictionary;
pub mod diff;
pub mod hpack;
pub mod httpdate;
pub mod inspect;
pub mod pack;
pub mod qpack;
pub mod report;
pub mod serve;
pub mod store;
pub mod sys;
