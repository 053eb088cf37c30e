//! Automatic certificates from an ACME CA (RFC 8555).
//!
//! Two processes meet here and share nothing but files:
//! - the ACME client, `kiln acme run` (a child of `kiln serve --acme`, or
//!   run on its own), which talks to the CA and writes the state folder;
//! - the server, which only reads it: certificate pairs to serve,
//!   HTTP-01 tokens and TLS-ALPN-01 certificates to answer challenges
//!   with, and each name's status for `/metrics`.
//!
//! [`args`] holds the flags both take; [`layout`] is the state folder's
//! layout, the one contract between them.

pub mod args;
pub mod layout;
