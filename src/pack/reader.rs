//! Reads a pack in place from its memory mapping.
//!
//! `Pack::open` checks only the header (magic, version, header checksum,
//! file length, section bounds and record counts): O(1) whatever the size of
//! the site, and nothing is allocated per route. Lookups hash the key and probe
//! the slot table in the mapping. Every access to a record's target is bounds
//! checked, so a pack that passes `open` but is corrupt further in yields
//! "not found" or an error, never a panic; `verify` finds such damage up front.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::format::*;

/// What is wrong with a pack; the message names the problem, the caller names
/// the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackError(pub String);

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PackError {}

fn bad(msg: impl Into<String>) -> PackError {
    PackError(msg.into())
}

/// An open pack. Shared read-only between threads.
pub struct Pack {
    map: Mmap,
    /// Kept open for `sendfile` of large bodies, unless the server let it
    /// go (`Pack::close_file`): a mapping needs no descriptor.
    file: Option<File>,
    /// The file as it was when it was opened.
    stamp: FileStamp,
    path: PathBuf,
    sections: [(u64, u64, u64); SECTION_COUNT],
    route_count: u64,
    slot_mask: u64,
    variant_count: u64,
    rule_count: u64,
    provenance_count: u64,
    not_found: u64,
    flags: u64,
    /// The shared HPACK fields: range in the mapping and set id (see
    /// `hpack::SharedView`), checked at open.
    shared: Option<(Range<usize>, u64)>,
}

impl fmt::Debug for Pack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pack")
            .field("path", &self.path)
            .field("routes", &self.route_count)
            .finish()
    }
}

/// A pack file's identity and what a write in place changes at once
/// (its size, and its modification time as seconds and nanoseconds), as
/// read when it was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub modified: (i64, i64),
}

impl FileStamp {
    /// The stamp of `stat`'s file.
    pub fn of(stat: &rustix::fs::Stat) -> FileStamp {
        FileStamp {
            dev: stat.st_dev,
            ino: stat.st_ino,
            size: stat.st_size as u64,
            modified: (stat.st_mtime, stat.st_mtime_nsec as i64),
        }
    }
}

/// A route record in the mapping.
#[derive(Clone, Copy)]
pub struct Route<'p> {
    pack: &'p Pack,
    index: u32,
    rec: &'p [u8],
}

/// A variant record in the mapping.
#[derive(Clone, Copy)]
pub struct Variant<'p> {
    /// The content coding of `body`, for negotiation.
    pub encoding: Encoding,
    /// The prepared HTTP/1 header block (see `HeadBlock`).
    pub head: &'p [u8],
    /// Where the representation lines start in `head`: a 304 sends what is
    /// before.
    pub repr_at: usize,
    /// Where the `Content-Length` line starts in `head`: a 206 sends what
    /// is before.
    pub length_at: usize,
    /// The same fields HPACK-encoded for HTTP/2, without the dynamic table
    /// (see `HeadBlock`).
    pub hpack: &'p [u8],
    /// `repr_at` in `hpack`.
    pub hpack_repr_at: usize,
    /// `length_at` in `hpack`.
    pub hpack_length_at: usize,
    /// Where `hpack` has fields of `Pack::shared_fields`: records of
    /// `hpack::SPAN_LEN` bytes; empty when it has none.
    pub spans: &'p [u8],
    /// The ETag value with its quotes; empty when there is none.
    pub etag: &'p [u8],
    /// The stored bytes, sent as the body.
    pub body: &'p [u8],
    /// Absolute offset of the body in the pack file, for `sendfile`.
    pub body_off: u64,
    /// Bit set over `format::SERVER_HEADERS` that `head` already sets.
    pub overrides: u8,
    /// A delta variant's dictionary: the SHA-256 of the bytes it was
    /// compressed against; zero for a plain variant.
    pub dictionary: &'p [u8; 32],
    /// See [`Variant::qpack_block`].
    qpack: &'p [u8],
    /// See [`Variant::qpack_repr_at`].
    qpack_repr_at: u16,
    /// See [`Variant::qpack_length_at`].
    qpack_length_at: u16,
}

impl<'p> Variant<'p> {
    /// The same fields as `head` as QPACK field lines for HTTP/3 (RFC
    /// 9204), static references and literals only, without the section
    /// prefix: a HEADERS frame is `qpack::FIELD_SECTION_PREFIX`, `:status`,
    /// the date and the server's fields, then these (see `HeadBlock`).
    pub fn qpack_block(&self) -> &'p [u8] {
        self.qpack
    }

    /// `repr_at` in [`Variant::qpack_block`]: a 304 sends what is before.
    pub fn qpack_repr_at(&self) -> usize {
        usize::from(self.qpack_repr_at)
    }

    /// `length_at` in [`Variant::qpack_block`]: a 206 sends what is
    /// before.
    pub fn qpack_length_at(&self) -> usize {
        usize::from(self.qpack_length_at)
    }
}

/// How an encoded body was made (a provenance record): which source content,
/// encoding and settings, and what came of it.
#[derive(Clone, Copy, Debug)]
pub struct Provenance<'p> {
    /// BLAKE3 of the source (identity) bytes.
    pub source_hash: &'p [u8; 32],
    /// The encoding tried; never identity.
    pub encoding: Encoding,
    /// Fingerprint of the encoder and its settings (`build::compress::settings_id`).
    pub settings: u64,
    /// The stored body, when it was worth keeping: its absolute offset,
    /// length and BLAKE3.
    pub body: Option<(u64, u64, &'p [u8; 32])>,
}

/// A `_redirects` pattern rule.
#[derive(Clone, Copy, Debug)]
pub struct Rule<'p> {
    pub from: &'p [u8],
    pub to: &'p [u8],
    pub status: u16,
    pub force: bool,
}

impl Pack {
    /// Maps `path` and checks its header.
    pub fn open(path: &Path) -> Result<Pack, PackError> {
        let file = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
        Pack::from_file(file, path)
    }

    /// Maps an already open pack file; `path` is only for messages.
    pub fn from_file(file: File, path: &Path) -> Result<Pack, PackError> {
        let stat = rustix::fs::fstat(&file).map_err(|e| bad(format!("cannot stat: {e}")))?;
        // Mapping a directory fails with a puzzling "No such device".
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory {
            return Err(bad("is a directory, not a pack file"));
        }
        let stamp = FileStamp::of(&stat);
        // SAFETY: packs are replaced by rename, never modified in place, so the
        // mapping stays valid; a file truncated behind our back is outside the
        // contract (docs/pack-format.md), which `kiln serve` survives all the
        // same (`serve::in_place`: a copy mapped over it, or a bus-error
        // handler that maps a zero page and stops serving from it).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| bad(format!("cannot map: {e}")))?;
        let b = &map[..];
        if b.len() < HEADER_LEN {
            return Err(bad(format!(
                "not a kiln pack: {} bytes is shorter than the header",
                b.len()
            )));
        }
        if b[H_MAGIC..H_MAGIC + 8] != MAGIC {
            return Err(bad("not a kiln pack: bad magic"));
        }
        let version = get_u32(b, H_VERSION);
        if version != VERSION {
            return Err(bad(format!(
                "built by another kiln version (pack format {version}, this kiln reads format \
                 {VERSION}); rebuild it with `kiln build`"
            )));
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..HEADER_CHECKSUM_AT]);
        if sum != get_u64(b, HEADER_CHECKSUM_AT) {
            return Err(bad("header checksum mismatch"));
        }
        if get_u32(b, H_HEADER_LEN) as usize != HEADER_LEN {
            return Err(bad("bad header length"));
        }
        let file_len = get_u64(b, H_FILE_LEN);
        if file_len != b.len() as u64 {
            return Err(bad(format!(
                "truncated or extended: header says {file_len} bytes, file has {}",
                b.len()
            )));
        }
        let mut sections = [(0, 0, 0); SECTION_COUNT];
        for (i, s) in SECTIONS.iter().enumerate() {
            let at = H_SECTIONS + i * SECTION_ENTRY_LEN;
            let (off, len) = (get_u64(b, at), get_u64(b, at + 8));
            let end = off.checked_add(len);
            if off < HEADER_LEN as u64 || end.is_none_or(|e| e > file_len) {
                return Err(bad(format!("{} section out of bounds", s.name())));
            }
            sections[i] = (off, len, get_u64(b, at + 16));
        }
        let route_count = get_u64(b, H_ROUTE_COUNT);
        let slot_count = get_u64(b, H_SLOT_COUNT);
        let variant_count = get_u64(b, H_VARIANT_COUNT);
        let rule_count = get_u64(b, H_RULE_COUNT);
        let provenance_count = get_u64(b, H_PROVENANCE_COUNT);
        let expect = |s: Section, n: u64, each: usize| -> Result<(), PackError> {
            let len = sections[s as usize].1;
            if n.checked_mul(each as u64) != Some(len) {
                return Err(bad(format!(
                    "{} section is {len} bytes, expected {n} records of {each}",
                    s.name()
                )));
            }
            Ok(())
        };
        expect(Section::Routes, route_count, ROUTE_LEN)?;
        expect(Section::Slots, slot_count, 8)?;
        expect(Section::Variants, variant_count, VARIANT_LEN)?;
        expect(Section::Rules, rule_count, RULE_LEN)?;
        expect(Section::Provenance, provenance_count, PROVENANCE_LEN)?;
        if !slot_count.is_power_of_two() || route_count >= u32::MAX as u64 {
            return Err(bad("bad slot or route count"));
        }
        let not_found = get_u64(b, H_NOT_FOUND);
        if not_found != NO_ROUTE && not_found >= route_count {
            return Err(bad("not-found route out of range"));
        }
        let flags = get_u64(b, H_FLAGS);
        let shared = match (get_u64(b, H_SHARED_OFF), get_u32(b, H_SHARED_LEN) as u64) {
            (_, 0) => None,
            (off, len) => {
                let (blobs_off, blobs_len, _) = sections[Section::Blobs as usize];
                if off < blobs_off
                    || off
                        .checked_add(len)
                        .is_none_or(|e| e > blobs_off + blobs_len)
                {
                    return Err(bad("shared HPACK fields outside the blobs section"));
                }
                let range = off as usize..(off + len) as usize;
                let set = crate::hpack::SharedView::parse(&b[range.clone()])
                    .ok_or_else(|| bad("malformed shared HPACK fields"))?;
                Some((range, set.id))
            }
        };
        Ok(Pack {
            map,
            file: Some(file),
            stamp,
            path: path.to_path_buf(),
            sections,
            route_count,
            slot_mask: slot_count - 1,
            variant_count,
            rule_count,
            provenance_count,
            not_found,
            flags,
            shared,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole mapping.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The pack file, for `sendfile`; `None` once closed.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Closes the pack's descriptor; the mapping stays, and everything
    /// but `file` works as before. A server holding more packs than it
    /// may hold descriptors serves the rest this way.
    pub fn close_file(&mut self) {
        self.file = None;
    }

    /// The file as it was when it was opened.
    pub fn stamp(&self) -> FileStamp {
        self.stamp
    }

    pub fn route_count(&self) -> u64 {
        self.route_count
    }

    pub fn variant_count(&self) -> u64 {
        self.variant_count
    }

    pub fn rule_count(&self) -> u64 {
        self.rule_count
    }

    pub fn provenance_count(&self) -> u64 {
        self.provenance_count
    }

    /// True when forced pattern rules must run before the exact lookup.
    pub fn has_forced_rules(&self) -> bool {
        self.flags & FLAG_FORCED_RULES != 0
    }

    /// Offset, length and stored checksum of a section.
    pub fn section(&self, s: Section) -> (u64, u64, u64) {
        self.sections[s as usize]
    }

    /// The shared HPACK fields that variants' `spans` name, if any.
    pub fn shared_fields(&self) -> Option<crate::hpack::SharedView<'_>> {
        let (range, id) = self.shared.as_ref()?;
        crate::hpack::SharedView::checked(&self.map[range.clone()], *id)
    }

    fn section_bytes(&self, s: Section) -> &[u8] {
        let (off, len, _) = self.sections[s as usize];
        &self.map[off as usize..(off + len) as usize]
    }

    fn slice(&self, off: u64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.map.get(start..end)
    }

    /// The route at `index`, if in range.
    pub fn route(&self, index: u32) -> Option<Route<'_>> {
        if index as u64 >= self.route_count {
            return None;
        }
        let at = index as usize * ROUTE_LEN;
        let rec = &self.section_bytes(Section::Routes)[at..at + ROUTE_LEN];
        Some(Route {
            pack: self,
            index,
            rec,
        })
    }

    /// All routes in stored order.
    pub fn routes(&self) -> impl Iterator<Item = Route<'_>> {
        (0..self.route_count as u32).filter_map(|i| self.route(i))
    }

    /// Looks `key` up in the table of `kind`. No allocation.
    pub fn lookup(&self, kind: RouteKind, key: &[u8]) -> Option<Route<'_>> {
        let hash = key_hash(kind, key);
        let slots = self.section_bytes(Section::Slots);
        let mut i = hash & self.slot_mask;
        // Bounded so that a corrupt, full table cannot loop forever.
        for _ in 0..=self.slot_mask {
            let slot = get_u64(slots, i as usize * 8);
            if slot == 0 {
                return None;
            }
            if slot & 0xFFFF_FFFF_0000_0000 == hash & 0xFFFF_FFFF_0000_0000 {
                let route = self.route((slot as u32).wrapping_sub(1))?;
                if route.kind() == Some(kind) && route.key() == Some(key) {
                    return Some(route);
                }
            }
            i = (i + 1) & self.slot_mask;
        }
        None
    }

    /// The not-found page, if the site has one.
    pub fn not_found(&self) -> Option<Route<'_>> {
        if self.not_found == NO_ROUTE {
            return None;
        }
        self.route(self.not_found as u32)
    }

    /// The pattern rules in file order.
    pub fn rules(&self) -> impl Iterator<Item = Rule<'_>> {
        let recs = self.section_bytes(Section::Rules);
        recs.chunks_exact(RULE_LEN).filter_map(move |r| {
            Some(Rule {
                from: self.slice(get_u64(r, U_FROM_OFF), get_u32(r, U_FROM_LEN) as u64)?,
                to: self.slice(get_u64(r, U_TO_OFF), get_u32(r, U_TO_LEN) as u64)?,
                status: get_u16(r, U_STATUS),
                force: r[U_FORCE] != 0,
            })
        })
    }

    /// The provenance records in stored order: sorted by (source hash,
    /// encoding). A record that does not decode is left out (`verify`
    /// reports it).
    pub fn provenance_records(&self) -> impl Iterator<Item = Provenance<'_>> {
        self.section_bytes(Section::Provenance)
            .chunks_exact(PROVENANCE_LEN)
            .filter_map(|r| self.checked_provenance(r))
    }

    /// How `encoding` of the source content whose BLAKE3 is `source_hash`
    /// was made, if this pack tried it: a binary search, no allocation.
    pub fn provenance(&self, source_hash: &[u8; 32], encoding: Encoding) -> Option<Provenance<'_>> {
        let recs = self.section_bytes(Section::Provenance);
        let wanted = (&source_hash[..], encoding as u8);
        let (mut lo, mut hi) = (0, recs.len() / PROVENANCE_LEN);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let rec = &recs[mid * PROVENANCE_LEN..(mid + 1) * PROVENANCE_LEN];
            let key = (&rec[P_SOURCE_HASH..P_SOURCE_HASH + 32], rec[P_ENCODING]);
            match key.cmp(&wanted) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return self.checked_provenance(rec),
            }
        }
        None
    }

    /// A provenance record, if it decodes and its body lies in the bodies
    /// section.
    fn checked_provenance<'a>(&self, rec: &'a [u8]) -> Option<Provenance<'a>> {
        let p = provenance_record(rec)?;
        let bodies = self.section_range(Section::Bodies);
        match p.body {
            Some((off, len, _))
                if off
                    .checked_add(len)
                    .is_none_or(|end| off < bodies.start as u64 || end > bodies.end as u64) =>
            {
                None
            }
            _ => Some(p),
        }
    }

    /// The record of variant `index`, if in range.
    fn variant_record(&self, index: u64) -> Option<&[u8]> {
        if index >= self.variant_count {
            return None;
        }
        let at = index as usize * VARIANT_LEN;
        Some(&self.section_bytes(Section::Variants)[at..at + VARIANT_LEN])
    }

    fn variant(&self, index: u64) -> Option<Variant<'_>> {
        let r = self.variant_record(index)?;
        let head = self.slice(get_u64(r, V_HEAD_OFF), get_u32(r, V_HEAD_LEN) as u64)?;
        let repr_at = get_u32(r, V_REPR_AT) as usize;
        let length_at = get_u32(r, V_LENGTH_AT) as usize;
        let etag_at = get_u32(r, V_ETAG_AT) as usize;
        let etag = head.get(etag_at..etag_at + get_u16(r, V_ETAG_LEN) as usize)?;
        if repr_at > length_at || length_at > head.len() {
            return None;
        }
        let hpack = self.slice(get_u64(r, V_HPACK_OFF), get_u32(r, V_HPACK_LEN) as u64)?;
        let hpack_repr_at = get_u32(r, V_HPACK_REPR_AT) as usize;
        let hpack_length_at = get_u32(r, V_HPACK_LENGTH_AT) as usize;
        if hpack_repr_at > hpack_length_at || hpack_length_at > hpack.len() {
            return None;
        }
        let qpack = self.slice(get_u64(r, V_QPACK_OFF), get_u32(r, V_QPACK_LEN) as u64)?;
        let qpack_repr_at = get_u16(r, V_QPACK_REPR_AT);
        let qpack_length_at = get_u16(r, V_QPACK_LENGTH_AT);
        if qpack_repr_at > qpack_length_at || usize::from(qpack_length_at) > qpack.len() {
            return None;
        }
        let spans = match get_u32(r, V_SPANS_COUNT) as u64 {
            0 => &[][..],
            count => self.slice(
                get_u64(r, V_SPANS_OFF),
                count * crate::hpack::SPAN_LEN as u64,
            )?,
        };
        let body_off = get_u64(r, V_BODY_OFF);
        Some(Variant {
            encoding: Encoding::from_u8(r[V_ENCODING])?,
            head,
            repr_at,
            length_at,
            hpack,
            hpack_repr_at,
            hpack_length_at,
            spans,
            etag,
            body: self.slice(body_off, get_u64(r, V_BODY_LEN))?,
            body_off,
            overrides: r[V_OVERRIDES],
            dictionary: r[V_DICTIONARY..V_DICTIONARY + 32]
                .try_into()
                .expect("32 bytes"),
            qpack,
            qpack_repr_at,
            qpack_length_at,
        })
    }

    /// Byte range of a section, for `verify`.
    pub(crate) fn section_range(&self, s: Section) -> Range<usize> {
        let (off, len, _) = self.sections[s as usize];
        off as usize..(off + len) as usize
    }
}

/// Decodes a provenance record; `None` for an unknown encoding or flag.
fn provenance_record(r: &[u8]) -> Option<Provenance<'_>> {
    let hash = |at: usize| -> &[u8; 32] { r[at..at + 32].try_into().expect("32 bytes") };
    let encoding = Encoding::from_u8(r[P_ENCODING]).filter(|e| *e != Encoding::Identity)?;
    let body = match r[P_KEPT] {
        0 => None,
        1 => Some((
            get_u64(r, P_BODY_OFF),
            get_u64(r, P_BODY_LEN),
            hash(P_BODY_HASH),
        )),
        _ => return None,
    };
    Some(Provenance {
        source_hash: hash(P_SOURCE_HASH),
        encoding,
        settings: get_u64(r, P_SETTINGS),
        body,
    })
}

impl<'p> Route<'p> {
    /// The pack the route is in.
    pub fn pack(&self) -> &'p Pack {
        self.pack
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    /// The key; `None` if the record points outside the pack.
    pub fn key(&self) -> Option<&'p [u8]> {
        self.pack.slice(
            get_u64(self.rec, R_KEY_OFF),
            get_u32(self.rec, R_KEY_LEN) as u64,
        )
    }

    pub fn kind(&self) -> Option<RouteKind> {
        RouteKind::from_u8(self.rec[R_KIND])
    }

    /// The response status: 200, 3xx for redirects, 404 for not-found pages.
    pub fn status(&self) -> u16 {
        get_u16(self.rec, R_STATUS)
    }

    /// Source modification time, unix seconds.
    pub fn last_modified(&self) -> i64 {
        get_u64(self.rec, R_LAST_MODIFIED) as i64
    }

    /// Bit set of stored encodings (`Encoding::bit`).
    pub fn encodings(&self) -> u8 {
        self.rec[R_ENCODINGS]
    }

    /// True when conditional requests and ranges apply.
    pub fn has_validators(&self) -> bool {
        get_u16(self.rec, R_FLAGS) & RF_VALIDATORS != 0
    }

    /// The index of the stored variant in `encoding`, if any.
    fn variant_index(&self, encoding: Encoding) -> Option<u64> {
        let set = self.encodings();
        if set & encoding.bit() == 0 {
            return None;
        }
        let below = (set & (encoding.bit() - 1)).count_ones() as u64;
        Some(get_u32(self.rec, R_VARIANT_FIRST) as u64 + below)
    }

    /// The stored variant in `encoding`, if any.
    pub fn variant(&self, encoding: Encoding) -> Option<Variant<'p>> {
        let v = self.pack.variant(self.variant_index(encoding)?)?;
        (v.encoding == encoding).then_some(v)
    }

    /// The body length of each stored plain variant, in `Encoding` order,
    /// read from its record alone: what negotiation compares, so that only
    /// the variant it picks has its slices read and checked
    /// ([`Route::variant`]), not every stored one on every request.
    pub fn variant_lengths(&self) -> impl Iterator<Item = (Encoding, u64)> + 'p {
        let route = *self;
        ENCODINGS.into_iter().filter_map(move |e| {
            let r = route.pack.variant_record(route.variant_index(e)?)?;
            (r[V_ENCODING] == e as u8).then(|| (e, get_u64(r, V_BODY_LEN)))
        })
    }

    /// All stored plain variants in `Encoding` order.
    pub fn variants(&self) -> impl Iterator<Item = Variant<'p>> + 'p {
        let route = *self;
        ENCODINGS.into_iter().filter_map(move |e| route.variant(e))
    }

    /// True when a delta may answer a cross-origin no-cors request
    /// (`RF_CORS_READABLE`).
    pub fn deltas_readable_cross_origin(&self) -> bool {
        get_u16(self.rec, R_FLAGS) & RF_CORS_READABLE != 0
    }

    /// How many delta variants the route has.
    pub fn delta_count(&self) -> u16 {
        get_u16(self.rec, R_DELTA_COUNT)
    }

    /// The delta variant at `i` (of `delta_count`), if well-formed.
    pub fn delta(&self, i: u16) -> Option<Variant<'p>> {
        if i >= self.delta_count() {
            return None;
        }
        let first = get_u32(self.rec, R_VARIANT_FIRST) as u64;
        let plain = self.encodings().count_ones() as u64;
        let v = self.pack.variant(first + plain + u64::from(i))?;
        v.encoding.is_delta().then_some(v)
    }

    /// The delta variants, sorted by (dictionary, encoding).
    pub fn deltas(&self) -> impl Iterator<Item = Variant<'p>> + 'p {
        let route = *self;
        (0..route.delta_count()).filter_map(move |i| route.delta(i))
    }
}
