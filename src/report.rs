//! Writes a command's report to stdout, and sets up its log on stderr. A
//! reader that went away early (`kiln inspect site.pack | head`) is not a
//! failure and must never be a panic, as `println!` would make it.

use std::io::Write;

use anyhow::Context;

/// Writes `text` to stdout in one go; a closed pipe is not an error.
pub fn to_stdout(text: &str) -> anyhow::Result<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("cannot write to stdout"),
    }
}

/// Writes `line` and its newline to stderr in one `write`, so that a line
/// is never cut by another writer on the same stderr: `writeln!` writes
/// the text and the newline apart, and a child kiln started (`--acme`) or
/// a log line from another thread could land between them, as a test
/// reading the start-up line once saw. A line that cannot be written is
/// dropped (`eprintln!` would panic on a closed or full stderr).
pub fn to_stderr(line: &str) {
    let mut whole = String::with_capacity(line.len() + 1);
    whole.push_str(line);
    whole.push('\n');
    let _ = std::io::stderr().lock().write_all(whole.as_bytes());
}

/// Logs to stderr, one line per event. A log line that cannot be written
/// is dropped: by default the subscriber reports the failure by printing
/// to stderr, which panics when stderr is a closed pipe or a full device,
/// and the thread logging dies.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
