//! The look every file of a source gets once listed, before anything is
//! planned from the list: a private key (`private_key`) is left out with
//! a warning naming it, whatever the flags; in a preview, a file the user
//! building it cannot read is left out with a warning too
//! (`ReadOptions::leave_out_unreadable`), where `kiln build` stops on it.
//!
//! What it costs: one read of a file's first `HEAD_BYTES` (most files of a
//! site are smaller: that read is the whole file) searched at memory
//! speed; a file of a binary media type (an image, a video, a font, a
//! compressed archive) is looked at in that start alone, where a DER or
//! PEM key file would begin; any other file is read to its end, in
//! pieces. Files are looked at in parallel, and what is read stays in the
//! page cache for the build's own read a moment later: the build reads
//! every byte anyway, hashing and compressing it, which costs far more.

use std::fs::File;
use std::io::{self, Read};

use anyhow::bail;
use rayon::prelude::*;

use super::ignore::Why;
use super::private_key::{
    KeyFound, PIECE_OVERLAP, der_key, has_pem_key, is_putty_key, named_as_key,
};
use super::{Content, Source, SourceFile};
use crate::build::mime::content_type;

/// The start of every file that is read and searched; a DER key file is
/// never longer (an RSA key of 16,384 bits is 9 KiB).
pub const HEAD_BYTES: usize = 64 << 10;
/// The pieces the rest of a text file is searched in.
const PIECE_BYTES: usize = 1 << 20;

/// What the look found.
enum Verdict {
    Keep,
    Key(KeyFound),
    /// Opening it was refused (EACCES): the user building it cannot read it.
    Unreadable(io::Error),
}

/// Leaves out of `source` the private keys and, with
/// `leave_out_unreadable`, the files that cannot be read; each with a
/// warning and an entry in `left_out`. Any other failure to read a file
/// is an error naming it.
pub fn screen(source: &mut Source, leave_out_unreadable: bool) -> anyhow::Result<()> {
    let verdicts: Vec<anyhow::Result<Verdict>> = source.files.par_iter().map(look_at).collect();
    let files = std::mem::take(&mut source.files);
    source.files.reserve(files.len());
    for (file, verdict) in files.into_iter().zip(verdicts) {
        match verdict? {
            Verdict::Keep => source.files.push(file),
            Verdict::Key(found) => {
                source.warnings.push(format!(
                    "{}: left out: a private key ({found}), never published",
                    file.shown()
                ));
                source.left_out.push((file.path, Why::PrivateKey));
            }
            Verdict::Unreadable(e) if leave_out_unreadable => {
                source
                    .warnings
                    .push(format!("{}: left out: cannot read it ({e})", file.shown()));
                source.left_out.push((file.path, Why::Unreadable));
            }
            Verdict::Unreadable(e) => bail!("{}: cannot read: {e}", file.shown()),
        }
    }
    Ok(())
}

/// Whether only the start of a file of this name is searched: a type
/// whose bytes are compressed or encoded media, where a key's text would
/// not be kept as text.
fn start_only(path: &str) -> bool {
    let content_type = content_type(path);
    let essence = content_type.split(';').next().unwrap_or("");
    let media = ["image/", "audio/", "video/", "font/"]
        .iter()
        .any(|prefix| essence.starts_with(prefix));
    (media && !essence.ends_with("+xml"))
        || matches!(
            essence,
            "application/zip"
                | "application/gzip"
                | "application/zstd"
                | "application/x-bzip2"
                | "application/x-xz"
                | "application/x-7z-compressed"
                | "application/pdf"
                | "application/wasm"
        )
}

/// Looks at one file.
fn look_at(file: &SourceFile) -> anyhow::Result<Verdict> {
    if named_as_key(&file.path) {
        return Ok(Verdict::Key(KeyFound::Name));
    }
    let mut reader: Box<dyn Read + Send> = match &file.content {
        Content::Disk(path) | Content::Live(path) => match File::open(path) {
            Ok(f) => Box::new(f.take(file.len)),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Ok(Verdict::Unreadable(e));
            }
            Err(e) => bail!("{}: cannot read: {e}", path.display()),
        },
        Content::Staged { .. } | Content::Generated(_) => file.open()?,
    };
    let cannot_read = |e: io::Error| anyhow::anyhow!("{}: cannot read: {e}", file.shown());
    let mut head = vec![0; (file.len as usize).min(HEAD_BYTES)];
    let n = read_full(&mut reader, &mut head).map_err(cannot_read)?;
    head.truncate(n);
    if is_putty_key(&head) {
        return Ok(Verdict::Key(KeyFound::Putty));
    }
    if has_pem_key(&head) {
        return Ok(Verdict::Key(KeyFound::Pem));
    }
    if file.len <= HEAD_BYTES as u64 {
        return Ok(match der_key(&head) {
            Some(kind) => Verdict::Key(KeyFound::Der(kind)),
            None => Verdict::Keep,
        });
    }
    if start_only(&file.path) {
        return Ok(Verdict::Keep);
    }
    // The rest, each piece after the end of the one before it, so that a
    // BEGIN line cut between them is whole in one.
    let mut piece = head.split_off(head.len().saturating_sub(PIECE_OVERLAP));
    drop(head);
    piece.reserve_exact(PIECE_BYTES);
    loop {
        let kept = piece.len();
        piece.resize(kept + PIECE_BYTES, 0);
        let n = read_full(&mut reader, &mut piece[kept..]).map_err(cannot_read)?;
        piece.truncate(kept + n);
        if has_pem_key(&piece) {
            return Ok(Verdict::Key(KeyFound::Pem));
        }
        if n < PIECE_BYTES {
            return Ok(Verdict::Keep);
        }
        piece.drain(..piece.len() - PIECE_OVERLAP);
    }
}

/// Reads into `buf` until it is full or the reader ends; how much it read.
fn read_full(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
