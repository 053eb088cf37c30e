//! Writes a pack: bodies are streamed to a temporary file beside the target as
//! they arrive, the tables follow, the header is written last, and the file is
//! renamed over the target only once complete and synced. A failed or
//! interrupted build never leaves a half-written pack at the target path.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;
use xxhash_rust::xxh3::Xxh3;

use super::format::*;
use crate::hpack;

/// A prepared response header block, as the server sends it after its own
/// status line, `Date` and `Connection` lines, in two encodings of the same
/// fields: HTTP/1 lines and an HPACK block for HTTP/2.
///
/// Lines are `Name: value\r\n`. Validators and caching lines come first,
/// representation lines (`Content-Type`, `Content-Encoding`, ...) from
/// `repr_at`, and `Content-Length` is the last line, from `length_at`; so a
/// 304 sends `bytes[..repr_at]` and a 206 sends `bytes[..length_at]` plus its
/// own `Content-Range` and `Content-Length`. The HPACK block has the same
/// fields in the same order, cut at the same fields (`hpack_repr_at`,
/// `hpack_length_at`), except the connection-specific ones
/// (`hpack::CONNECTION_SPECIFIC`), which HTTP/2 forbids: `_headers` may set
/// `Proxy-Connection`, which HTTP/1 then sends and HTTP/2 does not.
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
    pub etag_len: u16,
    /// The same fields HPACK-encoded (RFC 7541) without the dynamic table,
    /// so any HTTP/2 connection sends it as is.
    pub hpack: Vec<u8>,
    /// `repr_at` in `hpack`: where the first representation field starts.
    pub hpack_repr_at: u32,
    /// `length_at` in `hpack`: where the `content-length` field starts.
    pub hpack_length_at: u32,
}

/// Composes a `HeadBlock` in the required order, both encodings at once.
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
            self.block.etag_len = value.len() as u16;
        }
        b.extend_from_slice(value.as_bytes());
        b.extend_from_slice(b"\r\n");
        if !hpack::is_connection_specific(name.as_bytes()) {
            hpack::encode_field(name.as_bytes(), value.as_bytes(), &mut self.block.hpack);
        }
        self
    }

    /// Lines after this call describe the representation and are left out of
    /// a 304.
    pub fn begin_representation(&mut self) -> &mut Self {
        self.block.repr_at = self.block.bytes.len() as u32;
        self.block.hpack_repr_at = self.block.hpack.len() as u32;
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
        let value = content_length.to_string();
        self.line("Content-Length", &value);
        self.block
    }
}

/// Where a body landed in the pack, and its content hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyRef {
    pub off: u64,
    pub len: u64,
    /// BLAKE3 of the bytes; ETags derive from it.
    pub hash: [u8; 32],
    /// False when an identical body was already stored and this is a reuse.
    pub fresh: bool,
}

/// One stored variant of a resource.
pub struct VariantIn<'a> {
    pub encoding: Encoding,
    pub head: &'a HeadBlock,
    pub body: BodyRef,
}

/// A resource's variants as stored: consecutive records, one per encoding in
/// `Encoding` order. Several routes may share one set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantSet {
    pub first: u32,
    pub encodings: u8,
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

/// Fires a pack. Bodies go to disk as they come; everything else is small
/// and kept until `finish`.
pub struct PackWriter {
    /// Where the finished pack is renamed to.
    target: PathBuf,
    /// The file being written; deleted on drop unless `finish` persists it.
    tmp: NamedTempFile,
    out: BufWriter<File>,
    /// Next write position in the file.
    pos: u64,
    /// Running checksum of the bodies section, which is written first.
    bodies_hash: Xxh3,
    /// Content hash → (offset, length), to store each distinct body once.
    bodies: HashMap<[u8; 32], (u64, u64)>,
    /// The blobs section, built in memory and written at `finish`.
    blobs: Vec<u8>,
    /// Blob bytes → blob-relative offset, to store each distinct blob once.
    blob_index: HashMap<Vec<u8>, u64>,
    /// Variant records, their blob offsets still to be filled in.
    variants: Vec<[u8; VARIANT_LEN]>,
    /// Blob-relative offsets of each variant's head and HPACK block, made
    /// absolute at `finish`.
    variant_blobs: Vec<(u64, u64)>,
    routes: Vec<PendingRoute>,
    /// (kind, key) → route index: refuses duplicates and fills the slot table.
    route_keys: HashMap<(RouteKind, Vec<u8>), u32>,
    rules: Vec<PendingRule>,
    not_found: Option<u32>,
    stats: PackStats,
}

fn io_err(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl PackWriter {
    /// Starts a pack that will replace `target` when `finish` succeeds.
    pub fn create(target: &Path) -> io::Result<PackWriter> {
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "pack".into());
        // A pack is public content: a server running as another user must
        // be able to read it from the moment it is renamed into place.
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(0o644))
            .tempfile_in(&dir)?;
        let mut out = BufWriter::with_capacity(1 << 20, tmp.reopen()?);
        out.write_all(&[0u8; HEADER_LEN])?;
        Ok(PackWriter {
            target: target.to_path_buf(),
            tmp,
            out,
            pos: HEADER_LEN as u64,
            bodies_hash: Xxh3::new(),
            bodies: HashMap::new(),
            blobs: Vec::new(),
            blob_index: HashMap::new(),
            variants: Vec::new(),
            variant_blobs: Vec::new(),
            routes: Vec::new(),
            route_keys: HashMap::new(),
            rules: Vec::new(),
            not_found: None,
            stats: PackStats::default(),
        })
    }

    /// Stores a body once per distinct content.
    pub fn add_body(&mut self, bytes: &[u8]) -> io::Result<BodyRef> {
        let hash = *blake3::hash(bytes).as_bytes();
        if let Some(&(off, len)) = self.bodies.get(&hash) {
            self.stats.dedup_saved += len;
            return Ok(BodyRef {
                off,
                len,
                hash,
                fresh: false,
            });
        }
        let off = self.pos;
        self.out.write_all(bytes)?;
        self.bodies_hash.update(bytes);
        self.pos += bytes.len() as u64;
        self.bodies.insert(hash, (off, bytes.len() as u64));
        self.stats.bodies += 1;
        self.stats.body_bytes += bytes.len() as u64;
        Ok(BodyRef {
            off,
            len: bytes.len() as u64,
            hash,
            fresh: true,
        })
    }

    fn add_blob(&mut self, bytes: &[u8]) -> u64 {
        if let Some(&off) = self.blob_index.get(bytes) {
            return off;
        }
        let off = self.blobs.len() as u64;
        self.blobs.extend_from_slice(bytes);
        self.blob_index.insert(bytes.to_vec(), off);
        off
    }

    /// Stores a resource's variants; `variants` must hold at most one per
    /// encoding, and always identity.
    pub fn add_variant_set(&mut self, variants: &[VariantIn<'_>]) -> io::Result<VariantSet> {
        let mut sorted: Vec<&VariantIn<'_>> = variants.iter().collect();
        sorted.sort_by_key(|v| v.encoding);
        let mut encodings = 0u8;
        for v in &sorted {
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
        for v in sorted {
            let head_blob = self.add_blob(&v.head.bytes);
            let hpack_blob = self.add_blob(&v.head.hpack);
            let mut rec = [0u8; VARIANT_LEN];
            put_u64(&mut rec, V_BODY_OFF, v.body.off);
            put_u64(&mut rec, V_BODY_LEN, v.body.len);
            put_u32(&mut rec, V_HEAD_LEN, v.head.bytes.len() as u32);
            put_u32(&mut rec, V_REPR_AT, v.head.repr_at);
            put_u32(&mut rec, V_LENGTH_AT, v.head.length_at);
            put_u32(&mut rec, V_ETAG_AT, v.head.etag_at);
            put_u16(&mut rec, V_ETAG_LEN, v.head.etag_len);
            rec[V_ENCODING] = v.encoding as u8;
            rec[V_OVERRIDES] = server_header_overrides(&v.head.bytes);
            put_u32(&mut rec, V_HPACK_LEN, v.head.hpack.len() as u32);
            put_u32(&mut rec, V_HPACK_REPR_AT, v.head.hpack_repr_at);
            put_u32(&mut rec, V_HPACK_LENGTH_AT, v.head.hpack_length_at);
            self.variants.push(rec);
            self.variant_blobs.push((head_blob, hpack_blob));
        }
        Ok(VariantSet { first, encodings })
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
                if self
                    .route_keys
                    .insert((kind, route.key.to_vec()), index)
                    .is_some()
                {
                    return Err(io_err(format!(
                        "duplicate {} route {}",
                        kind.name(),
                        String::from_utf8_lossy(route.key)
                    )));
                }
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

    /// True when a route with this kind and key was added.
    pub fn has_route(&self, kind: RouteKind, key: &[u8]) -> bool {
        self.route_keys.contains_key(&(kind, key.to_vec()))
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
        let mut table = [(0u64, 0u64, 0u64); SECTION_COUNT];
        let bodies_len = self.pos - HEADER_LEN as u64;
        table[Section::Bodies as usize] =
            (HEADER_LEN as u64, bodies_len, self.bodies_hash.digest());

        let blobs = std::mem::take(&mut self.blobs);
        let blobs_entry = self.write_section(&blobs)?;
        let blobs_off = blobs_entry.0;
        table[Section::Blobs as usize] = blobs_entry;

        let mut variants = Vec::with_capacity(self.variants.len() * VARIANT_LEN);
        for (rec, (head_blob, hpack_blob)) in self.variants.iter().zip(&self.variant_blobs) {
            let mut rec = *rec;
            put_u64(&mut rec, V_HEAD_OFF, blobs_off + head_blob);
            put_u64(&mut rec, V_HPACK_OFF, blobs_off + hpack_blob);
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
            put_u32(
                &mut rec,
                R_FLAGS,
                if r.validators { RF_VALIDATORS } else { 0 },
            );
            routes.extend_from_slice(&rec);
        }
        table[Section::Routes as usize] = self.write_section(&routes)?;

        // Keys are inserted in sorted order so the table is reproducible.
        let mut keyed: Vec<(&(RouteKind, Vec<u8>), &u32)> = self.route_keys.iter().collect();
        keyed.sort();
        let slot_count = slot_count_for(keyed.len());
        let mask = slot_count - 1;
        let mut slots = vec![0u64; slot_count];
        for ((kind, key), &route) in keyed {
            let hash = key_hash(*kind, key);
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
            H_NOT_FOUND,
            self.not_found.map_or(NO_ROUTE, |r| r as u64),
        );
        put_u64(
            &mut header,
            H_FLAGS,
            if forced { FLAG_FORCED_RULES } else { 0 },
        );
        for (i, (off, len, sum)) in table.iter().enumerate() {
            let at = H_SECTIONS + i * SECTION_ENTRY_LEN;
            put_u64(&mut header, at, *off);
            put_u64(&mut header, at + 8, *len);
            put_u64(&mut header, at + 16, *sum);
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&header[..HEADER_CHECKSUM_AT]);
        put_u64(&mut header, HEADER_CHECKSUM_AT, sum);

        let mut file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header)?;
        file.sync_all()?;
        drop(file);
        self.tmp
            .persist(&self.target)
            .map_err(|e| io::Error::new(e.error.kind(), e.error))?;
        if let Some(dir) = self.target.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Make the rename itself durable; not all filesystems allow it.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }

        self.stats.file_len = file_len;
        self.stats.routes = self.routes.len() as u64;
        self.stats.variants = self.variants.len() as u64;
        self.stats.blob_bytes = blobs.len() as u64;
        Ok(self.stats)
    }
}
