//! Writes a pack: bodies are streamed to a temporary file beside the target as
//! they arrive (unnamed while it is written: `super::temp`), the tables follow,
//! the header is written last, and the file is renamed over the target only
//! once complete and synced. A failed or interrupted build never leaves a
//! half-written pack at the target path, nor a temporary file beside it.
//!
//! A body is given whole (`add_body`), from a reader (`add_body_from`), or
//! written piece by piece by an encoder (`body_writer`), so no body has to
//! fit in memory; one that turns out to be a duplicate, or that its maker
//! drops, is cut off again. `body_reader` reads a stored body back, for
//! compressing a body that was too large to hold. A preview pack is
//! written to an anonymous in-memory file instead (`in_memory`).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use super::format::*;
use super::temp::PackTemp;
use crate::{hpack, qpack};

/// A prepared response header block, as the server sends it after its own
/// status line, `Date` and `Connection` lines, in two encodings of the same
/// fields: HTTP/1 lines, an HPACK block for HTTP/2 and a QPACK section's
/// field lines for HTTP/3.
///
/// Lines are `Name: value\r\n`. Validators and caching lines come first,
/// representation lines (`Content-Type`, `Content-Encoding`, ...) from
/// `repr_at`, and `Content-Length` is the last line, from `length_at`; so a
/// 304 sends `bytes[..repr_at]` and a 206 sends `bytes[..length_at]` plus its
/// own `Content-Range` and `Content-Length`. The HPACK block has the same
/// fields in the same order, cut at the same fields (`hpack_repr_at`,
/// `hpack_length_at`), except the connection-specific ones
/// (`hpack::CONNECTION_SPECIFIC`), which HTTP/2 forbids: `_headers` may set
/// `Proxy-Connection`, which HTTP/1 then sends and HTTP/2 does not. The
/// QPACK lines are the same fields again, as HTTP/3 forbids the same ones
/// (cut at `qpack_repr_at`, `qpack_length_at`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadBlock {
    /// The HTTP/1 lines, sent as they are after the server's own lines.
    pub bytes: Vec<u8>,
    /// Where the representation lines start: a 304 sends what is before.
    pub repr_at: u32,
    /// Where the `Content-Length` line starts: a 206 sends what is before.
    pub length_at: u32,
    /// Position and length of the `ETag` value (quotes included); 0 length
    /// when the variant has no ETag.
    pub etag_at: u32,
    /// See `etag_at`.
    pub etag_len: u32,
    /// The same fields HPACK-encoded (RFC 7541) without the dynamic table,
    /// so any HTTP/2 connection sends it as is.
    pub hpack: Vec<u8>,
    /// `repr_at` in `hpack`: where the first representation field starts.
    pub hpack_repr_at: u32,
    /// `length_at` in `hpack`: where the `content-length` field starts.
    pub hpack_length_at: u32,
    /// The same fields as QPACK field lines (RFC 9204) without the dynamic
    /// table, and without the section prefix, which goes before the
    /// server's `:status`: any HTTP/3 connection sends them as they are.
    pub qpack: Vec<u8>,
    /// `repr_at` in `qpack`.
    pub qpack_repr_at: u32,
    /// `length_at` in `qpack`.
    pub qpack_length_at: u32,
}

/// Composes a `HeadBlock` in the required order, every encoding at once.
#[derive(Default)]
pub struct HeadBlockBuilder {
    /// The block so far.
    block: HeadBlock,
    /// `begin_representation` was called: `finish` must not call it again.
    in_representation: bool,
}

impl HeadBlockBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `name: value`. An `ETag` line's value is recorded so the server
    /// compares `If-None-Match` without parsing the block. A
    /// connection-specific field goes into the HTTP/1 lines only.
    pub fn line(&mut self, name: &str, value: &str) -> &mut Self {
        let b = &mut self.block.bytes;
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(b": ");
        if name.eq_ignore_ascii_case("etag") {
            self.block.etag_at = b.len() as u32;
            self.block.etag_len = value.len() as u32;
        }
        b.extend_from_slice(value.as_bytes());
        b.extend_from_slice(b"\r\n");
        if !hpack::is_connection_specific(name.as_bytes()) {
            hpack::encode_field(name.as_bytes(), value.as_bytes(), &mut self.block.hpack);
            qpack::encode_field(name.as_bytes(), value.as_bytes(), &mut self.block.qpack);
        }
        self
    }

    /// Lines after this call describe the representation and are left out of
    /// a 304.
    pub fn begin_representation(&mut self) -> &mut Self {
        self.block.repr_at = self.block.bytes.len() as u32;
        self.block.hpack_repr_at = self.block.hpack.len() as u32;
        self.block.qpack_repr_at = self.block.qpack.len() as u32;
        self.in_representation = true;
        self
    }

    /// Appends `Content-Length` and returns the block.
    pub fn finish(mut self, content_length: u64) -> HeadBlock {
        if !self.in_representation {
            self.begin_representation();
        }
        self.block.length_at = self.block.bytes.len() as u32;
        self.block.hpack_length_at = self.block.hpack.len() as u32;
        self.block.qpack_length_at = self.block.qpack.len() as u32;
        let value = content_length.to_string();
        self.line("Content-Length", &value);
        self.block
    }
}

/// A blob-relative offset and a length (or a count of records).
type BlobRange = (u64, u32);

/// Blob-relative offsets of a variant's three encodings of its fields.
struct VariantBlobs {
    /// The HTTP/1 lines.
    head: u64,
    /// The HPACK block.
    hpack: u64,
    /// The QPACK field lines.
    qpack: u64,
}

/// Where a body landed in the pack, and its content hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyRef {
    /// Absolute offset in the pack.
    pub off: u64,
    /// Length in bytes.
    pub len: u64,
    /// BLAKE3 of the bytes; ETags derive from it.
    pub hash: [u8; 32],
    /// False when an identical body was already stored and this is a reuse.
    pub fresh: bool,
}

/// A provenance record to store: how one encoding of one source content
/// was made (see `Section::Provenance`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProvenanceIn {
    /// BLAKE3 of the source (identity) bytes.
    pub source_hash: [u8; 32],
    /// The encoding tried; never identity.
    pub encoding: Encoding,
    /// Fingerprint of the encoder and its settings.
    pub settings: u64,
    /// The stored body, or `None` when it was not worth keeping.
    pub body: Option<BodyRef>,
}

/// One stored variant of a resource.
pub struct VariantIn<'a> {
    pub encoding: Encoding,
    pub head: &'a HeadBlock,
    pub body: BodyRef,
}

/// One delta variant of a resource (RFC 9842): its body compressed against
/// the dictionary whose SHA-256 is `dictionary`.
pub struct DeltaIn<'a> {
    /// `Encoding::Dcb` or `Encoding::Dcz`.
    pub encoding: Encoding,
    pub dictionary: [u8; 32],
    pub head: &'a HeadBlock,
    pub body: BodyRef,
}

/// A resource's variants as stored: consecutive records, one per plain
/// encoding in `Encoding` order, then the deltas sorted by (dictionary,
/// encoding). Several routes may share one set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantSet {
    pub first: u32,
    pub encodings: u8,
    pub deltas: u16,
    /// The deltas' blocks let any origin read them (`RF_CORS_READABLE`).
    pub cors_readable: bool,
}

/// A route to add.
pub struct RouteIn<'a> {
    pub kind: RouteKind,
    pub key: &'a [u8],
    pub status: u16,
    pub last_modified: i64,
    pub variants: VariantSet,
    /// Conditional requests and ranges apply (stored 200 resources).
    pub validators: bool,
}

/// A `_redirects` rule with a pattern, evaluated by the server at run time.
pub struct RuleIn<'a> {
    pub from: &'a [u8],
    pub to: &'a [u8],
    pub status: u16,
    pub force: bool,
}

/// What a finished pack holds, for the build summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackStats {
    pub file_len: u64,
    pub routes: u64,
    pub variants: u64,
    pub bodies: u64,
    pub body_bytes: u64,
    /// Bytes not written because an identical body was already stored.
    pub dedup_saved: u64,
    pub blob_bytes: u64,
}

/// A route as kept until `finish`, its key already in the blob area.
struct PendingRoute {
    kind: RouteKind,
    /// Blob-relative offset of the key.
    key_blob: u64,
    key_len: u32,
    status: u16,
    last_modified: i64,
    variants: VariantSet,
    validators: bool,
}

/// A `_redirects` rule as kept until `finish`.
struct PendingRule {
    /// Blob-relative offsets and lengths of the two patterns.
    from: (u64, u32),
    to: (u64, u32),
    status: u16,
    force: bool,
}

/// Bytes written between two starts of the disk writeback of a pack on disk.
const WRITEBACK_STEP: u64 = 8 << 20;

/// Where a pack is written.
enum Destination {
    /// A temporary file beside the target, renamed over it by `finish`;
    /// gone on drop unless `finish` persists it.
    Disk(PackTemp),
    /// An anonymous in-memory file (memfd), handed out by
    /// `finish_in_memory`.
    Memory,
}

/// An anonymous in-memory file (Linux memfd) named `name` (for
/// /proc/PID/fd): gone with its last handle or mapping.
pub fn memory_file(name: &str) -> io::Result<File> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(File::from(fd))
}

/// Fires a pack. Bodies go to disk as they come; everything else is small
/// and kept until `finish`.
pub struct PackWriter {
    /// Where the pack goes.
    destination: Destination,
    /// The file, buffered; bodies that are cut off again are overwritten
    /// and the file is cut to its length at the end.
    out: BufWriter<File>,
    /// The same file, for reading stored bodies back (positioned reads).
    reread: Arc<File>,
    /// Next write position in the file.
    pos: u64,
    /// Up to where the kernel was asked to start writing the file to disk
    /// (a pack on disk only): the final sync then has little left to wait
    /// for.
    written_back: u64,
    /// Running checksum of the bodies section, which is written first.
    bodies_hash: Xxh3,
    /// Content hash → (offset, length), to store each distinct body once.
    bodies: HashMap<[u8; 32], (u64, u64)>,
    /// The blobs section, built in memory and written at `finish`.
    blobs: Vec<u8>,
    /// XXH3 of a blob → its blob-relative offset and length, to store each
    /// distinct blob once without keeping a second copy of the bytes. A
    /// hash already taken by other bytes (a collision) is probed onward,
    /// hash + 1, + 2, …
    blob_index: HashMap<u64, (u64, u32)>,
    /// Variant records, their blob offsets still to be filled in.
    variants: Vec<[u8; VARIANT_LEN]>,
    /// Where each variant's blocks are in the blobs, made absolute at
    /// `finish`.
    variant_blobs: Vec<VariantBlobs>,
    routes: Vec<PendingRoute>,
    /// Key hash (`key_hash`) → route index, probed onward like
    /// `blob_index`: refuses a second route with the same kind and key.
    route_keys: HashMap<u64, u32>,
    rules: Vec<PendingRule>,
    /// Provenance records, sorted at `finish`.
    provenance: Vec<ProvenanceIn>,
    not_found: Option<u32>,
    stats: PackStats,
    /// See `removed_strays`.
    removed_strays: Vec<PathBuf>,
}

fn io_err(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl PackWriter {
    /// Starts a pack that will replace `target` when `finish` succeeds.
    /// Stray temporary files of earlier builds of `target` are removed
    /// first (`removed_strays` lists them).
    pub fn create(target: &Path) -> io::Result<PackWriter> {
        let (temp, removed) = PackTemp::create(target)?;
        let file = temp.file().try_clone()?;
        let mut writer = PackWriter::start(Destination::Disk(temp), file)?;
        writer.removed_strays = removed;
        Ok(writer)
    }

    /// The stray temporary files of interrupted builds that `create`
    /// removed.
    pub fn removed_strays(&self) -> &[PathBuf] {
        &self.removed_strays
    }

    /// Starts a pack in an anonymous in-memory file (Linux memfd): a
    /// preview that never touches the disk and disappears with its last
    /// mapping.
    pub fn in_memory() -> io::Result<PackWriter> {
        PackWriter::start(Destination::Memory, memory_file("kiln-preview.pack")?)
    }

    fn start(destination: Destination, file: File) -> io::Result<PackWriter> {
        let reread = Arc::new(file.try_clone()?);
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&[0u8; HEADER_LEN])?;
        Ok(PackWriter {
            destination,
            out,
            reread,
            pos: HEADER_LEN as u64,
            written_back: 0,
            bodies_hash: Xxh3::new(),
            bodies: HashMap::new(),
            blobs: Vec::new(),
            blob_index: HashMap::new(),
            variants: Vec::new(),
            variant_blobs: Vec::new(),
            routes: Vec::new(),
            route_keys: HashMap::new(),
            rules: Vec::new(),
            provenance: Vec::new(),
            not_found: None,
            stats: PackStats::default(),
            removed_strays: Vec::new(),
        })
    }

    /// Stores a body once per distinct content.
    pub fn add_body(&mut self, bytes: &[u8]) -> io::Result<BodyRef> {
        self.add_hashed_body(bytes, *blake3::hash(bytes).as_bytes())
    }

    /// `add_body` for a body whose BLAKE3 the caller already computed:
    /// `hash` must be that of `bytes`.
    pub fn add_hashed_body(&mut self, bytes: &[u8], hash: [u8; 32]) -> io::Result<BodyRef> {
        if let Some(stored) = self.stored_body(&hash) {
            return Ok(stored);
        }
        let off = self.pos;
        self.out.write_all(bytes)?;
        self.bodies_hash.update(bytes);
        self.pos += bytes.len() as u64;
        self.start_writeback()?;
        Ok(self.record_body(hash, off, bytes.len() as u64))
    }

    /// Every `WRITEBACK_STEP` bytes, asks the kernel to start writing what
    /// came since to disk, without waiting: the disk works while the build
    /// computes, instead of all at the final sync.
    fn start_writeback(&mut self) -> io::Result<()> {
        if !matches!(self.destination, Destination::Disk(_))
            || self.pos < self.written_back + WRITEBACK_STEP
        {
            return Ok(());
        }
        self.out.flush()?;
        let (from, len) = (self.written_back, self.pos - self.written_back);
        crate::sys::start_writeback(self.reread.as_fd(), from, len);
        self.written_back = self.pos;
        Ok(())
    }

    /// Stores the body `reader` yields, read in pieces: it need not fit in
    /// memory. A duplicate is written, recognised at its end and cut off.
    pub fn add_body_from(&mut self, reader: &mut dyn Read) -> io::Result<BodyRef> {
        let mut body = self.body_writer();
        io::copy(reader, &mut body)?;
        body.finish()
    }

    /// Starts a body written piece by piece (by an encoder): it ends with
    /// `BodyWriter::finish`, which stores it once per distinct content, or
    /// `BodyWriter::discard` (or a drop), which cuts it off.
    pub fn body_writer(&mut self) -> BodyWriter<'_> {
        BodyWriter {
            start: self.pos,
            checksum_before: self.bodies_hash.clone(),
            hasher: blake3::Hasher::new(),
            done: false,
            writer: self,
        }
    }

    /// Reads a stored body back, in pieces, from the file being written.
    pub fn body_reader(&mut self, body: &BodyRef) -> io::Result<RangeReader> {
        self.out.flush()?;
        Ok(RangeReader::new(
            Arc::clone(&self.reread),
            body.off,
            body.len,
        ))
    }

    /// The file being written, flushed, for positioned reads of the bodies
    /// stored so far (from several threads at once).
    pub fn stored_file(&mut self) -> io::Result<Arc<File>> {
        self.out.flush()?;
        Ok(Arc::clone(&self.reread))
    }

    /// A file for a body made beside the one being written, before it is
    /// stored: unnamed, in the pack's folder (in memory for a pack in
    /// memory), so that it neither outlives the build nor fills a `/tmp`
    /// held in memory.
    pub fn scratch_file(&self) -> io::Result<File> {
        match &self.destination {
            Destination::Disk(temp) => tempfile::tempfile_in(temp.dir()),
            Destination::Memory => memory_file("kiln-scratch"),
        }
    }

    /// The stored body with BLAKE3 `hash`, counted as de-duplicated.
    fn stored_body(&mut self, hash: &[u8; 32]) -> Option<BodyRef> {
        let &(off, len) = self.bodies.get(hash)?;
        self.stats.dedup_saved += len;
        Some(BodyRef {
            off,
            len,
            hash: *hash,
            fresh: false,
        })
    }

    /// Registers a body just written at `off`.
    fn record_body(&mut self, hash: [u8; 32], off: u64, len: u64) -> BodyRef {
        self.bodies.insert(hash, (off, len));
        self.stats.bodies += 1;
        self.stats.body_bytes += len;
        BodyRef {
            off,
            len,
            hash,
            fresh: true,
        }
    }

    /// Records how one encoding of a source content was made. Adding the
    /// same (content, encoding) twice is an error unless both say the same.
    pub fn add_provenance(&mut self, record: ProvenanceIn) {
        self.provenance.push(record);
    }

    fn add_blob(&mut self, bytes: &[u8]) -> u64 {
        let mut hash = xxhash_rust::xxh3::xxh3_64(bytes);
        while let Some(&(off, len)) = self.blob_index.get(&hash) {
            if self.blob(off, len) == bytes {
                return off;
            }
            hash = hash.wrapping_add(1);
        }
        let off = self.blobs.len() as u64;
        self.blobs.extend_from_slice(bytes);
        self.blob_index.insert(hash, (off, bytes.len() as u32));
        off
    }

    /// Blob bytes at a blob-relative offset.
    fn blob(&self, off: u64, len: u32) -> &[u8] {
        &self.blobs[off as usize..off as usize + len as usize]
    }

    /// Stores a resource's variants; `variants` must hold at most one per
    /// encoding, and always identity.
    pub fn add_variant_set(&mut self, variants: &[VariantIn<'_>]) -> io::Result<VariantSet> {
        self.add_variant_set_with_deltas(variants, &[])
    }

    /// Stores a resource's plain variants (as `add_variant_set`) and its
    /// delta variants, at most one per (dictionary, encoding).
    pub fn add_variant_set_with_deltas(
        &mut self,
        variants: &[VariantIn<'_>],
        deltas: &[DeltaIn<'_>],
    ) -> io::Result<VariantSet> {
        let mut sorted: Vec<&VariantIn<'_>> = variants.iter().collect();
        sorted.sort_by_key(|v| v.encoding);
        let mut sorted_deltas: Vec<&DeltaIn<'_>> = deltas.iter().collect();
        sorted_deltas.sort_by_key(|d| (d.dictionary, d.encoding));
        let delta_count = u16::try_from(deltas.len())
            .map_err(|_| io_err("more than 2^16 delta variants".into()))?;
        if let Some(d) = deltas.iter().find(|d| !d.encoding.is_delta()) {
            return Err(io_err(format!("a {} delta variant", d.encoding.token())));
        }
        if sorted_deltas
            .windows(2)
            .any(|w| (w[0].dictionary, w[0].encoding) == (w[1].dictionary, w[1].encoding))
        {
            return Err(io_err("two delta variants for one dictionary".into()));
        }
        let mut encodings = 0u8;
        for v in &sorted {
            if v.encoding.is_delta() {
                return Err(io_err(format!(
                    "a {} variant without its dictionary",
                    v.encoding.token()
                )));
            }
            if encodings & v.encoding.bit() != 0 {
                return Err(io_err(format!("two {} variants", v.encoding.token())));
            }
            encodings |= v.encoding.bit();
        }
        if encodings & Encoding::Identity.bit() == 0 {
            return Err(io_err("a resource without an identity variant".into()));
        }
        let first = u32::try_from(self.variants.len())
            .map_err(|_| io_err("more than 2^32 variants".into()))?;
        let plain = sorted.iter().map(|v| (v.encoding, None, v.head, v.body));
        let delta = sorted_deltas
            .iter()
            .map(|d| (d.encoding, Some(d.dictionary), d.head, d.body));
        for (encoding, dictionary, head, body) in plain.chain(delta) {
            let head_blob = self.add_blob(&head.bytes);
            let hpack_blob = self.add_blob(&head.hpack);
            let qpack_blob = self.add_blob(&head.qpack);
            let (Ok(qpack_repr_at), Ok(qpack_length_at)) = (
                u16::try_from(head.qpack_repr_at),
                u16::try_from(head.qpack_length_at),
            ) else {
                return Err(io_err(format!(
                    "a response's headers take {} bytes in QPACK before Content-Length, \
                     more than the 65535 a pack records",
                    head.qpack_length_at
                )));
            };
            let Ok(etag_len) = u16::try_from(head.etag_len) else {
                return Err(io_err(format!(
                    "an ETag of {} bytes, more than the 65535 a pack records",
                    head.etag_len
                )));
            };
            let mut rec = [0u8; VARIANT_LEN];
            put_u64(&mut rec, V_BODY_OFF, body.off);
            put_u64(&mut rec, V_BODY_LEN, body.len);
            put_u32(&mut rec, V_HEAD_LEN, head.bytes.len() as u32);
            put_u32(&mut rec, V_REPR_AT, head.repr_at);
            put_u32(&mut rec, V_LENGTH_AT, head.length_at);
            put_u32(&mut rec, V_ETAG_AT, head.etag_at);
            put_u16(&mut rec, V_ETAG_LEN, etag_len);
            rec[V_ENCODING] = encoding as u8;
            rec[V_OVERRIDES] = server_header_overrides(&head.bytes);
            put_u32(&mut rec, V_HPACK_LEN, head.hpack.len() as u32);
            put_u32(&mut rec, V_HPACK_REPR_AT, head.hpack_repr_at);
            put_u32(&mut rec, V_HPACK_LENGTH_AT, head.hpack_length_at);
            put_u32(&mut rec, V_QPACK_LEN, head.qpack.len() as u32);
            put_u16(&mut rec, V_QPACK_REPR_AT, qpack_repr_at);
            put_u16(&mut rec, V_QPACK_LENGTH_AT, qpack_length_at);
            if let Some(dictionary) = dictionary {
                rec[V_DICTIONARY..V_DICTIONARY + 32].copy_from_slice(&dictionary);
            }
            self.variants.push(rec);
            self.variant_blobs.push(VariantBlobs {
                head: head_blob,
                hpack: hpack_blob,
                qpack: qpack_blob,
            });
        }
        Ok(VariantSet {
            first,
            encodings,
            deltas: delta_count,
            cors_readable: !deltas.is_empty()
                && deltas.iter().all(|d| allows_any_origin(&d.head.bytes)),
        })
    }

    /// Adds a route. A key may appear once per kind; the not-found route
    /// once per pack.
    pub fn add_route(&mut self, route: RouteIn<'_>) -> io::Result<u32> {
        let index = u32::try_from(self.routes.len())
            .ok()
            .filter(|&i| i < u32::MAX - 1)
            .ok_or_else(|| io_err("more than 2^32 routes".into()))?;
        match route.kind {
            RouteKind::NotFound => {
                if self.not_found.replace(index).is_some() {
                    return Err(io_err("two not-found routes".into()));
                }
            }
            kind => {
                let mut hash = key_hash(kind, route.key);
                while let Some(&other) = self.route_keys.get(&hash) {
                    let other = &self.routes[other as usize];
                    if other.kind == kind && self.blob(other.key_blob, other.key_len) == route.key {
                        return Err(io_err(format!(
                            "duplicate {} route {}",
                            kind.name(),
                            String::from_utf8_lossy(route.key)
                        )));
                    }
                    hash = hash.wrapping_add(1);
                }
                self.route_keys.insert(hash, index);
            }
        }
        let key_blob = self.add_blob(route.key);
        self.routes.push(PendingRoute {
            kind: route.kind,
            key_blob,
            key_len: route.key.len() as u32,
            status: route.status,
            last_modified: route.last_modified,
            variants: route.variants,
            validators: route.validators,
        });
        Ok(index)
    }

    pub fn add_rule(&mut self, rule: RuleIn<'_>) {
        let from = self.add_blob(rule.from);
        let to = self.add_blob(rule.to);
        self.rules.push(PendingRule {
            from: (from, rule.from.len() as u32),
            to: (to, rule.to.len() as u32),
            status: rule.status,
            force: rule.force,
        });
    }

    fn write_section(&mut self, bytes: &[u8]) -> io::Result<(u64, u64, u64)> {
        let pad = (8 - (self.pos % 8)) % 8;
        self.out.write_all(&[0u8; 8][..pad as usize])?;
        self.pos += pad;
        let off = self.pos;
        self.out.write_all(bytes)?;
        self.pos += bytes.len() as u64;
        Ok((off, bytes.len() as u64, xxhash_rust::xxh3::xxh3_64(bytes)))
    }

    /// Writes the tables and header, syncs, and renames over the target.
    pub fn finish(mut self) -> io::Result<PackStats> {
        let file = self.write_tables()?;
        let Destination::Disk(temp) = self.destination else {
            return Err(io_err(
                "an in-memory pack ends with finish_in_memory".into(),
            ));
        };
        file.sync_all()?;
        drop(file);
        temp.persist()?;
        Ok(self.stats)
    }

    /// Writes the tables and header of an in-memory pack and returns its
    /// file (nothing to sync: it never reaches a disk).
    pub fn finish_in_memory(mut self) -> io::Result<(File, PackStats)> {
        let file = self.write_tables()?;
        if !matches!(self.destination, Destination::Memory) {
            return Err(io_err("a pack on disk ends with finish".into()));
        }
        Ok((file, self.stats))
    }

    /// Chooses the shared HPACK fields from every variant's lines and adds
    /// the set and each variant's spans to the blobs: the set's blob
    /// (offset, length), if any, and per variant its spans' (blob offset,
    /// count). A variant whose stored HPACK block is not what its lines
    /// encode to (never, as `HeadBlockBuilder` writes both) gets none.
    fn add_shared_fields(&mut self) -> (Option<BlobRange>, Vec<BlobRange>) {
        let heads: Vec<(&[u8], &[u8])> = self
            .variants
            .iter()
            .zip(&self.variant_blobs)
            .map(|(rec, blobs)| {
                let head = &self.blobs[blobs.head as usize..][..get_u32(rec, V_HEAD_LEN) as usize];
                let block =
                    &self.blobs[blobs.hpack as usize..][..get_u32(rec, V_HPACK_LEN) as usize];
                (head, block)
            })
            .collect();
        let table = hpack::SharedTable::choose(heads.iter().map(|(head, _)| *head));
        if table.is_empty() {
            return (None, vec![(0, 0); self.variants.len()]);
        }
        let spans: Vec<Vec<u8>> = heads
            .iter()
            .map(|&(head, block)| {
                let mut stateless = Vec::new();
                hpack::encode_lines(head, &mut stateless);
                let mut records = Vec::new();
                if stateless == block {
                    for span in table.spans(head) {
                        span.encode(&mut records);
                    }
                }
                records
            })
            .collect();
        let encoded = table.encode();
        let shared = (self.add_blob(&encoded), encoded.len() as u32);
        let spans = spans
            .iter()
            .map(|records| match records.len() / hpack::SPAN_LEN {
                0 => (0, 0),
                count => (self.add_blob(records), count as u32),
            })
            .collect();
        (Some(shared), spans)
    }

    /// Writes everything after the bodies, then the header; the file, cut
    /// to the pack's length.
    fn write_tables(&mut self) -> io::Result<File> {
        let mut table = [(0u64, 0u64, 0u64); SECTION_COUNT];
        let bodies_len = self.pos - HEADER_LEN as u64;
        table[Section::Bodies as usize] =
            (HEADER_LEN as u64, bodies_len, self.bodies_hash.digest());

        let (shared_blob, spans) = self.add_shared_fields();

        let blobs = std::mem::take(&mut self.blobs);
        let blobs_entry = self.write_section(&blobs)?;
        let blobs_off = blobs_entry.0;
        table[Section::Blobs as usize] = blobs_entry;

        let mut variants = Vec::with_capacity(self.variants.len() * VARIANT_LEN);
        for ((rec, blobs), (spans_blob, span_count)) in
            self.variants.iter().zip(&self.variant_blobs).zip(spans)
        {
            let mut rec = *rec;
            put_u64(&mut rec, V_HEAD_OFF, blobs_off + blobs.head);
            put_u64(&mut rec, V_HPACK_OFF, blobs_off + blobs.hpack);
            put_u64(&mut rec, V_QPACK_OFF, blobs_off + blobs.qpack);
            if span_count > 0 {
                put_u64(&mut rec, V_SPANS_OFF, blobs_off + spans_blob);
                put_u32(&mut rec, V_SPANS_COUNT, span_count);
            }
            variants.extend_from_slice(&rec);
        }
        table[Section::Variants as usize] = self.write_section(&variants)?;

        let mut routes = Vec::with_capacity(self.routes.len() * ROUTE_LEN);
        for r in &self.routes {
            let mut rec = [0u8; ROUTE_LEN];
            put_u64(&mut rec, R_KEY_OFF, blobs_off + r.key_blob);
            put_u32(&mut rec, R_KEY_LEN, r.key_len);
            put_u32(&mut rec, R_VARIANT_FIRST, r.variants.first);
            put_u64(&mut rec, R_LAST_MODIFIED, r.last_modified as u64);
            put_u16(&mut rec, R_STATUS, r.status);
            rec[R_ENCODINGS] = r.variants.encodings;
            rec[R_KIND] = r.kind as u8;
            let mut flags = 0;
            if r.validators {
                flags |= RF_VALIDATORS;
            }
            if r.variants.cors_readable {
                flags |= RF_CORS_READABLE;
            }
            put_u16(&mut rec, R_FLAGS, flags);
            put_u16(&mut rec, R_DELTA_COUNT, r.variants.deltas);
            routes.extend_from_slice(&rec);
        }
        table[Section::Routes as usize] = self.write_section(&routes)?;

        // Keys are inserted in sorted order so the table is reproducible.
        let mut keyed: Vec<(RouteKind, &[u8], u32)> = self
            .routes
            .iter()
            .enumerate()
            .filter(|(_, r)| r.kind != RouteKind::NotFound)
            .map(|(i, r)| {
                (
                    r.kind,
                    &blobs[r.key_blob as usize..][..r.key_len as usize],
                    i as u32,
                )
            })
            .collect();
        keyed.sort_unstable();
        let slot_count = slot_count_for(keyed.len());
        let mask = slot_count - 1;
        let mut slots = vec![0u64; slot_count];
        for (kind, key, route) in keyed {
            let hash = key_hash(kind, key);
            let mut i = (hash as usize) & mask;
            while slots[i] != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = slot_value(hash, route);
        }
        let slot_bytes: Vec<u8> = slots.iter().flat_map(|s| s.to_le_bytes()).collect();
        table[Section::Slots as usize] = self.write_section(&slot_bytes)?;

        let mut rules = Vec::with_capacity(self.rules.len() * RULE_LEN);
        let mut forced = false;
        for rule in &self.rules {
            let mut rec = [0u8; RULE_LEN];
            put_u64(&mut rec, U_FROM_OFF, blobs_off + rule.from.0);
            put_u32(&mut rec, U_FROM_LEN, rule.from.1);
            put_u64(&mut rec, U_TO_OFF, blobs_off + rule.to.0);
            put_u32(&mut rec, U_TO_LEN, rule.to.1);
            put_u16(&mut rec, U_STATUS, rule.status);
            rec[U_FORCE] = rule.force as u8;
            forced |= rule.force;
            rules.extend_from_slice(&rec);
        }
        table[Section::Rules as usize] = self.write_section(&rules)?;

        let provenance = self.provenance_section()?;
        table[Section::Provenance as usize] = self.write_section(&provenance)?;

        let file_len = self.pos;
        let mut header = [0u8; HEADER_LEN];
        header[H_MAGIC..H_MAGIC + 8].copy_from_slice(&MAGIC);
        put_u32(&mut header, H_VERSION, VERSION);
        put_u32(&mut header, H_HEADER_LEN, HEADER_LEN as u32);
        put_u64(&mut header, H_FILE_LEN, file_len);
        put_u64(&mut header, H_ROUTE_COUNT, self.routes.len() as u64);
        put_u64(&mut header, H_SLOT_COUNT, slot_count as u64);
        put_u64(&mut header, H_VARIANT_COUNT, self.variants.len() as u64);
        put_u64(&mut header, H_RULE_COUNT, self.rules.len() as u64);
        put_u64(
            &mut header,
            H_PROVENANCE_COUNT,
            (provenance.len() / PROVENANCE_LEN) as u64,
        );
        put_u64(
            &mut header,
            H_NOT_FOUND,
            self.not_found.map_or(NO_ROUTE, |r| r as u64),
        );
        put_u64(
            &mut header,
            H_FLAGS,
            if forced { FLAG_FORCED_RULES } else { 0 },
        );
        if let Some((off, len)) = shared_blob {
            put_u64(&mut header, H_SHARED_OFF, blobs_off + off);
            put_u32(&mut header, H_SHARED_LEN, len);
        }
        for (i, (off, len, sum)) in table.iter().enumerate() {
            let at = H_SECTIONS + i * SECTION_ENTRY_LEN;
            put_u64(&mut header, at, *off);
            put_u64(&mut header, at + 8, *len);
            put_u64(&mut header, at + 16, *sum);
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&header[..HEADER_CHECKSUM_AT]);
        put_u64(&mut header, HEADER_CHECKSUM_AT, sum);

        self.out.flush()?;
        let file = self.reread.try_clone()?;
        // Bodies cut off at the end may have left bytes past the tables.
        file.set_len(file_len)?;
        file.write_all_at(&header, 0)?;

        self.stats.file_len = file_len;
        self.stats.routes = self.routes.len() as u64;
        self.stats.variants = self.variants.len() as u64;
        self.stats.blob_bytes = blobs.len() as u64;
        Ok(file)
    }

    /// The provenance records, sorted by (source hash, encoding), each
    /// pair once.
    fn provenance_section(&mut self) -> io::Result<Vec<u8>> {
        let mut records = std::mem::take(&mut self.provenance);
        records.sort_by_key(|r| (r.source_hash, r.encoding));
        records.dedup();
        let mut bytes = Vec::with_capacity(records.len() * PROVENANCE_LEN);
        for (i, r) in records.iter().enumerate() {
            if r.encoding == Encoding::Identity {
                return Err(io_err("a provenance record for identity".into()));
            }
            if i > 0
                && (records[i - 1].source_hash, records[i - 1].encoding)
                    == (r.source_hash, r.encoding)
            {
                return Err(io_err(format!(
                    "two different provenance records for one {} body",
                    r.encoding.token()
                )));
            }
            let mut rec = [0u8; PROVENANCE_LEN];
            rec[P_SOURCE_HASH..P_SOURCE_HASH + 32].copy_from_slice(&r.source_hash);
            if let Some(body) = &r.body {
                rec[P_BODY_HASH..P_BODY_HASH + 32].copy_from_slice(&body.hash);
                put_u64(&mut rec, P_BODY_OFF, body.off);
                put_u64(&mut rec, P_BODY_LEN, body.len);
                rec[P_KEPT] = 1;
            }
            put_u64(&mut rec, P_SETTINGS, r.settings);
            rec[P_ENCODING] = r.encoding as u8;
            bytes.extend_from_slice(&rec);
        }
        Ok(bytes)
    }
}

/// True when an HTTP/1 header block lets any origin read the response
/// (`Access-Control-Allow-Origin: *`).
fn allows_any_origin(block: &[u8]) -> bool {
    block.split(|&b| b == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.iter().position(|&b| b == b':').is_some_and(|colon| {
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            name.eq_ignore_ascii_case(b"access-control-allow-origin") && value.trim_ascii() == b"*"
        })
    })
}

/// A body being written piece by piece (see `PackWriter::body_writer`).
pub struct BodyWriter<'w> {
    /// The pack the body goes into.
    writer: &'w mut PackWriter,
    /// Where the body starts.
    start: u64,
    /// The bodies section's running checksum before this body, restored
    /// when the body is cut off.
    checksum_before: Xxh3,
    /// BLAKE3 of what was written so far.
    hasher: blake3::Hasher,
    /// `finish` or `discard` ran: nothing is left to cut off on drop.
    done: bool,
}

impl BodyWriter<'_> {
    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.writer.pos - self.start
    }

    /// Stores the body, or cuts it off and refers to the identical body
    /// stored before.
    pub fn finish(mut self) -> io::Result<BodyRef> {
        self.done = true;
        let hash = *self.hasher.finalize().as_bytes();
        let len = self.written();
        if let Some(stored) = self.writer.stored_body(&hash) {
            self.cut_off()?;
            return Ok(stored);
        }
        Ok(self.writer.record_body(hash, self.start, len))
    }

    /// Cuts the body off: it was not worth keeping.
    pub fn discard(mut self) -> io::Result<()> {
        self.done = true;
        self.cut_off()
    }

    fn cut_off(&mut self) -> io::Result<()> {
        self.writer.out.seek(SeekFrom::Start(self.start))?;
        self.writer.pos = self.start;
        self.writer.written_back = self.writer.written_back.min(self.start);
        self.writer.bodies_hash = self.checksum_before.clone();
        Ok(())
    }
}

impl Write for BodyWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.writer.out.write(buf)?;
        self.writer.bodies_hash.update(&buf[..n]);
        self.hasher.update(&buf[..n]);
        self.writer.pos += n as u64;
        self.writer.start_writeback()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for BodyWriter<'_> {
    /// A body abandoned half-way (its maker failed) is cut off, so the
    /// writer stays consistent.
    fn drop(&mut self) {
        if !self.done {
            let _ = self.cut_off();
        }
    }
}

/// Reads a byte range of a file in pieces, with positioned reads (so that
/// several readers may share one file): a body being written or of another
/// pack, a file staged from an archive.
pub struct RangeReader {
    /// The file.
    file: Arc<File>,
    /// Next offset to read.
    pos: u64,
    /// Where the range ends.
    end: u64,
}

impl RangeReader {
    /// Reads `len` bytes of `file` from `off`.
    pub fn new(file: Arc<File>, off: u64, len: u64) -> RangeReader {
        RangeReader {
            file,
            pos: off,
            end: off.saturating_add(len),
        }
    }
}

impl Read for RangeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min((self.end - self.pos) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file ends before the recorded range",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}
