//! Writes a command's report to stdout. A reader that went away early
//! (`kiln inspect site.pack | head`) is not a failure and must never be a
//! panic, as `println!` would make it.

use std::io::Write;

use anyhow::Context;

/// Writes `text` to stdout in one go; a closed pipe is not an error.
pub fn to_stdout(text: &str) -> anyhow::Result<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("cannot write to stdout"),
    }
}
