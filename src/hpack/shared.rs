//! A site's shared fields: the field lines many of a pack's responses
//! carry (content types, cache policies, `vary`, `accept-ranges`, custom
//! headers), chosen by `kiln build` in a fixed order, so that a connection
//! inserts each into the client's dynamic table the first time a response
//! carries it and names it by index, a byte, afterwards.
//!
//! HPACK has no way to insert a field without sending it in the block
//! (every representation that inserts also emits, RFC 7541 §6.2.1), so the
//! shared set cannot be inserted up front by a block of its own: each
//! response inserts the shared fields it carries that are not in the
//! table yet. The indices then depend on the order the connection met them
//! in, which [`SharedState`] keeps (one byte per entry); everything else is
//! prepared: the pack stores each entry's inserting representation
//! ([`SharedTable::encode`]) and, per variant, where its stateless block
//! has shared fields ([`Span`]). Writing a block is copying the stateless
//! block's bytes between those spans and writing, for each span, either an
//! index or the entry's inserting bytes.
//!
//! The whole set takes at most [`SHARED_TABLE_BUDGET`] bytes of table
//! room, and the server checks that it fits beside its own fields and the
//! `date` before using it. The `date` is inserted once per second (a byte
//! per response within the second instead of about 24), so the table
//! fills after a minute or so and evicts its oldest entries: the
//! connection keeps a model of the client's table ([`SharedState`]: each
//! entry's size and insertion order, in a fixed ring), evicts as RFC 7541
//! §4.4 does, names an entry by index only while the model has it, and
//! inserts an evicted field again on its next use.

use std::collections::HashMap;

use super::decode::inserted_entry_size;
use super::encode::{
    FIRST_DYNAMIC_INDEX, Representation, encode_field_indexing, encode_indexed, representation,
};
use super::lines::{fields, is_connection_specific};

/// Most entries a shared set has: a connection keeps a byte per entry.
pub const MAX_SHARED_ENTRIES: usize = 64;
/// The table room (RFC 7541 §4.1: name, value and 32 bytes per entry) a
/// shared set takes at most: the default 4096 less 1024 left for the
/// server's own fields (`server`, the security headers, HSTS: about 460).
pub const SHARED_TABLE_BUDGET: usize = 3072;
/// Fields whose values differ from file to file: chosen after the others,
/// even when two variants (encodings of one file) carry the same.
/// `use-as-dictionary` names the file's own path (or its hashed family)
/// and the build, so every encoding of a file repeats it and nothing else.
const PER_FILE: [&str; 4] = [
    "etag",
    "last-modified",
    "content-length",
    "use-as-dictionary",
];
/// Size of a span record in a pack (see [`Span::encode`]).
pub const SPAN_LEN: usize = 8;
/// Bytes before the entries' end offsets in an encoded table: entry
/// count (u32) and table room (u32).
const TABLE_HEAD_LEN: usize = 8;

/// A field of a stateless block that is entry `entry` of the shared set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Where the field's representation starts in the block.
    pub at: u32,
    /// Its length.
    pub len: u16,
    /// The shared entry it is.
    pub entry: u8,
}

impl Span {
    /// The pack's record: `at` u32, `len` u16, `entry` u8, one zero byte.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.at.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&[self.entry, 0]);
    }

    fn decode(record: &[u8]) -> Span {
        Span {
            at: u32::from_le_bytes([record[0], record[1], record[2], record[3]]),
            len: u16::from_le_bytes([record[4], record[5]]),
            entry: record[6],
        }
    }
}

/// The shared set of a pack, as chosen at build time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedTable {
    /// (lowercase name, value), in insertion order.
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl SharedTable {
    /// Chooses the shared set from the HTTP/1 lines of every variant, as
    /// long as the entries fit [`SHARED_TABLE_BUDGET`] and
    /// [`MAX_SHARED_ENTRIES`]: first the fields at least two variants
    /// carry, the most frequent first, then the others (a small site's
    /// `etag` and `last-modified` too: a connection that asks for a file
    /// again gets them by index). Ties by name and value, so the choice is
    /// reproducible; never a field the static table has whole.
    pub fn choose<'a>(heads: impl IntoIterator<Item = &'a [u8]>) -> SharedTable {
        let mut counts: HashMap<(Vec<u8>, Vec<u8>), usize> = HashMap::new();
        for head in heads {
            for (name, value) in fields(head) {
                let name = name.to_ascii_lowercase();
                if is_connection_specific(&name)
                    || matches!(representation(&name, value), Representation::Indexed(_))
                {
                    continue;
                }
                *counts.entry((name, value.to_vec())).or_default() += 1;
            }
        }
        let mut candidates: Vec<_> = counts.into_iter().collect();
        let rank = |((name, _), count): &((Vec<u8>, Vec<u8>), usize)| {
            let shared = *count >= 2 && !PER_FILE.iter().any(|p| p.as_bytes() == name);
            (!shared, std::cmp::Reverse(*count))
        };
        candidates.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.0.cmp(&b.0)));
        let mut room = 0;
        let mut entries = Vec::new();
        for ((name, value), _) in candidates {
            let size = entry_size(&name, &value);
            if entries.len() == MAX_SHARED_ENTRIES || room + size > SHARED_TABLE_BUDGET {
                continue;
            }
            room += size;
            entries.push((name, value));
        }
        SharedTable { entries }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The pack's form: entry count (u32), table room (u32), each entry's
    /// end offset (u32) in the representations after them, then each
    /// entry's literal with incremental indexing (§6.2.1). Empty for an
    /// empty set.
    pub fn encode(&self) -> Vec<u8> {
        if self.entries.is_empty() {
            return Vec::new();
        }
        let mut reprs = Vec::new();
        let mut ends = Vec::new();
        let mut room = 0;
        for (name, value) in &self.entries {
            encode_field_indexing(name, value, &mut reprs);
            ends.extend_from_slice(&(reprs.len() as u32).to_le_bytes());
            room += entry_size(name, value);
        }
        let mut out = Vec::with_capacity(TABLE_HEAD_LEN + ends.len() + reprs.len());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&(room as u32).to_le_bytes());
        out.extend_from_slice(&ends);
        out.extend_from_slice(&reprs);
        out
    }

    /// Where the stateless block of `head` (as `encode_lines` writes it:
    /// the same fields, connection-specific ones left out) has shared
    /// fields.
    pub fn spans(&self, head: &[u8]) -> Vec<Span> {
        let mut spans = Vec::new();
        let mut at = 0;
        for (name, value) in fields(head).filter(|(name, _)| !is_connection_specific(name)) {
            let len = super::encoded_field_len(name, value);
            let entry = self
                .entries
                .iter()
                .position(|(n, v)| n.eq_ignore_ascii_case(name) && v == value);
            if let Some(entry) = entry {
                spans.push(Span {
                    at: at as u32,
                    len: len as u16,
                    entry: entry as u8,
                });
            }
            at += len;
        }
        spans
    }
}

/// The length of a block of `block_len` bytes with its `spans` (records)
/// all named by index: an index is one byte, as no set has more than
/// [`MAX_SHARED_ENTRIES`] (62 + 63 < 127, §5.1's one-byte prefix).
pub fn indexed_len(block_len: usize, spans: &[u8]) -> usize {
    spans
        .chunks_exact(SPAN_LEN)
        .map(Span::decode)
        .fold(block_len, |len, span| len - usize::from(span.len) + 1)
}

/// The room an entry takes in a dynamic table (§4.1).
fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + 32
}

/// A pack's encoded shared set, read in place.
#[derive(Clone, Copy, Debug)]
pub struct SharedView<'a> {
    /// What tells shared sets apart on a connection: XXH3 of the encoded
    /// set, so packs (sites, generations) with equal sets share indices.
    pub id: u64,
    /// The room all entries take in a dynamic table.
    pub room: usize,
    ends: &'a [u8],
    reprs: &'a [u8],
}

impl<'a> SharedView<'a> {
    /// Reads an encoded set; `None` if it is malformed (or empty).
    pub fn parse(bytes: &'a [u8]) -> Option<SharedView<'a>> {
        let count = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let room = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
        if count == 0 || count > MAX_SHARED_ENTRIES {
            return None;
        }
        let ends = bytes.get(TABLE_HEAD_LEN..TABLE_HEAD_LEN + 4 * count)?;
        let reprs = &bytes[TABLE_HEAD_LEN + 4 * count..];
        let mut previous = 0;
        for end in ends.chunks_exact(4) {
            let end = u32::from_le_bytes(end.try_into().ok()?) as usize;
            if end <= previous || end > reprs.len() {
                return None;
            }
            previous = end;
        }
        Some(SharedView {
            id: xxhash_rust::xxh3::xxh3_64(bytes),
            room,
            ends,
            reprs,
        })
    }

    /// A set `parse` accepted before, whose id it gave: read without
    /// checking or hashing again (on every response).
    pub fn checked(bytes: &'a [u8], id: u64) -> Option<SharedView<'a>> {
        let count = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let room = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
        let reprs_at = TABLE_HEAD_LEN + 4 * count;
        Some(SharedView {
            id,
            room,
            ends: bytes.get(TABLE_HEAD_LEN..reprs_at)?,
            reprs: bytes.get(reprs_at..)?,
        })
    }

    pub fn len(&self) -> usize {
        self.ends.len() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// True when `spans` (a variant's records) are in order, each inside a
    /// block of `block_len` bytes and naming an entry of this set.
    pub fn spans_fit(&self, spans: &[u8], block_len: usize) -> bool {
        let mut end = 0;
        spans.chunks_exact(SPAN_LEN).map(Span::decode).all(|span| {
            let fits = span.at as usize >= end
                && span.at as usize + usize::from(span.len) <= block_len
                && usize::from(span.entry) < self.len();
            end = span.at as usize + usize::from(span.len);
            fits
        }) && spans.len().is_multiple_of(SPAN_LEN)
    }

    /// Entry `entry`'s inserting representation; `None` past the end.
    fn entry(&self, entry: usize) -> Option<&'a [u8]> {
        let end_at = |i: usize| {
            u32::from_le_bytes(self.ends[4 * i..4 * i + 4].try_into().expect("4 bytes")) as usize
        };
        if entry >= self.len() {
            return None;
        }
        let start = if entry == 0 { 0 } else { end_at(entry - 1) };
        self.reprs.get(start..end_at(entry))
    }
}

/// The largest dynamic table a connection models: kiln's decoder
/// advertises no more (SETTINGS_HEADER_TABLE_SIZE 4096, the default), and
/// the client's setting only lowers what kiln may fill.
pub const MAX_TABLE_SIZE: usize = 4096;
/// Most entries a table of [`MAX_TABLE_SIZE`] holds: each takes at least
/// 32 bytes (§4.1).
const MAX_TABLE_ENTRIES: usize = MAX_TABLE_SIZE / 32;
/// The room of a `date` entry: name (4), IMF-fixdate value (29), 32.
pub const DATE_ENTRY_SIZE: usize = 4 + 29 + 32;
/// An insertion number no entry ever has: what was never inserted.
const NEVER: u64 = u64::MAX;

/// The client's dynamic table as this connection's blocks filled it
/// (RFC 7541 §4): insertions are numbered from 0 in order, and evicted
/// oldest first when the next would not fit, as the decoder does. Only
/// the sizes are kept, in a ring: fixed size, no allocation.
#[derive(Clone, Debug)]
struct TableModel {
    /// The table's maximum size (the client's setting, at most
    /// [`MAX_TABLE_SIZE`]).
    max: usize,
    /// The room the entries in the table take.
    size: usize,
    /// Insertions so far; the newest has number `inserted - 1`.
    inserted: u64,
    /// Insertions evicted so far: the entries numbered `evicted..inserted`
    /// are in the table.
    evicted: u64,
    /// The size of entry `n` at `n % MAX_TABLE_ENTRIES`, for the entries
    /// in the table (never more than `max / 32` of them).
    sizes: [u16; MAX_TABLE_ENTRIES],
}

impl TableModel {
    fn new(max: usize) -> TableModel {
        TableModel {
            max: max.min(MAX_TABLE_SIZE),
            size: 0,
            inserted: 0,
            evicted: 0,
            sizes: [0; MAX_TABLE_ENTRIES],
        }
    }

    /// What the decoder does with an entry of `size` (§4.4): evict the
    /// oldest entries until it fits, then add it. An entry larger than the
    /// table empties it and is not added: `None`.
    fn insert(&mut self, size: usize) -> Option<u64> {
        while self.evicted < self.inserted && self.size + size > self.max {
            self.size -= usize::from(self.sizes[self.evicted as usize % MAX_TABLE_ENTRIES]);
            self.evicted += 1;
        }
        if size > self.max {
            return None;
        }
        self.sizes[self.inserted as usize % MAX_TABLE_ENTRIES] = size as u16;
        self.size += size;
        self.inserted += 1;
        Some(self.inserted - 1)
    }

    /// The index (§2.3.3) of insertion `number`, if it is still in the
    /// table.
    fn index(&self, number: u64) -> Option<usize> {
        (number >= self.evicted && number < self.inserted)
            .then(|| FIRST_DYNAMIC_INDEX + (self.inserted - 1 - number) as usize)
    }
}

/// What a connection's blocks put into the client's dynamic table: the
/// server's own fields, the `date` of the current second and the shared
/// fields of one set, each by its insertion number in a [`TableModel`].
/// The table evicts as RFC 7541 does, so a field is named by index while
/// it is in the table and inserted again on its next use once evicted:
/// the `date` inserted every second pushes the oldest entries out after a
/// minute or so. Fixed size: kept in the connection, no allocation.
#[derive(Clone, Debug)]
pub struct SharedState {
    table: TableModel,
    /// `SharedView::id` of the set `entries` are of, if any.
    set: Option<u64>,
    /// Per entry of that set, the insertion number of its newest copy
    /// ([`NEVER`] if none).
    entries: [u64; MAX_SHARED_ENTRIES],
    /// The server's fields inserted: their set (`ServerHeaders::key`) and
    /// the first one's insertion number.
    server: Option<(u8, u64)>,
    /// The `date` inserted last: its second and insertion number.
    date: Option<(i64, u64)>,
}

impl SharedState {
    /// An empty table of `max` bytes (the client's
    /// SETTINGS_HEADER_TABLE_SIZE, at most [`MAX_TABLE_SIZE`]).
    pub fn new(max: usize) -> SharedState {
        SharedState {
            table: TableModel::new(max),
            set: None,
            entries: [NEVER; MAX_SHARED_ENTRIES],
            server: None,
            date: None,
        }
    }

    /// Forgets everything: the client's table was emptied and now takes
    /// `max` bytes.
    pub fn reset(&mut self, max: usize) {
        *self = SharedState::new(max);
    }

    /// The table's maximum size.
    pub fn table_max(&self) -> usize {
        self.table.max
    }

    /// When the server's fields of set `key` (`count` entries, the ones
    /// `ServerHeaders::hpack_indexing` inserts) are all in the table: how
    /// many entries were inserted after them.
    pub fn server_fields(&self, key: u8, count: usize) -> Option<usize> {
        let (inserted_key, first) = self.server?;
        self.table.index(first)?;
        (inserted_key == key).then(|| (self.table.inserted - first) as usize - count)
    }

    /// True when the server's fields, taking `room` bytes, may be
    /// inserted: none are in the table (another set of them, from a
    /// response that overrides some, stays until evicted rather than being
    /// replaced back and forth) and they fit beside the `date`.
    pub fn may_insert_server(&self, room: usize) -> bool {
        self.server
            .is_none_or(|(_, first)| self.table.index(first).is_none())
            && room + DATE_ENTRY_SIZE <= self.table.max
    }

    /// Records the insertion of the server's fields of set `key`, of these
    /// sizes, in order (their block was written).
    pub fn insert_server(&mut self, key: u8, sizes: impl IntoIterator<Item = usize>) {
        let first = self.table.inserted;
        for size in sizes {
            self.table.insert(size);
        }
        self.server = Some((key, first));
    }

    /// Appends the `date` of `second`: an index while the entry inserted
    /// for that second is in the table, else `indexing` (its literal with
    /// incremental indexing), or `literal` (without indexing) when it
    /// cannot fit.
    pub fn write_date(&mut self, second: i64, literal: &[u8], indexing: &[u8], out: &mut Vec<u8>) {
        if let Some((inserted, number)) = self.date
            && inserted == second
            && let Some(index) = self.table.index(number)
        {
            encode_indexed(index, out);
        } else if DATE_ENTRY_SIZE <= self.table.max {
            out.extend_from_slice(indexing);
            self.date = self
                .table
                .insert(DATE_ENTRY_SIZE)
                .map(|number| (second, number));
        } else {
            out.extend_from_slice(literal);
        }
    }

    /// True when blocks of `set` may use the table: it fits beside the
    /// `date` and `server_room` bytes of the server's fields. A set whose
    /// entries would evict each other on every response goes stateless.
    pub fn accepts(&self, set: &SharedView<'_>, server_room: usize) -> bool {
        set.room + server_room + DATE_ENTRY_SIZE <= self.table.max
    }

    /// Appends `block`, the bytes `base..base + block.len()` of a variant's
    /// stateless block whose shared fields `spans` (the pack's records)
    /// lists, with each shared field an index if in the table, else
    /// inserted (again, once evicted). A set other than the last one used
    /// (another site on this connection, or a reload that changed the set)
    /// starts over: the old set's entries age out of the table. The caller
    /// checked [`SharedState::accepts`]. A span that does not lie inside
    /// the block, or names no entry, is copied as it is: the block stays
    /// right, only longer.
    pub fn write_block(
        &mut self,
        set: &SharedView<'_>,
        block: &[u8],
        base: usize,
        spans: &[u8],
        out: &mut Vec<u8>,
    ) {
        if self.set != Some(set.id) {
            self.set = Some(set.id);
            self.entries = [NEVER; MAX_SHARED_ENTRIES];
        }
        let mut copied = 0;
        for span in spans.chunks_exact(SPAN_LEN).map(Span::decode) {
            let Some(start) = (span.at as usize).checked_sub(base) else {
                continue;
            };
            let end = start + usize::from(span.len);
            let entry = usize::from(span.entry);
            if start < copied || end > block.len() || entry >= set.len() {
                continue;
            }
            // Spans mostly follow each other: nothing to copy between.
            if start > copied {
                out.extend_from_slice(&block[copied..start]);
            }
            if let Some(index) = self.table.index(self.entries[entry]) {
                encode_indexed(index, out);
            } else {
                // Read only to insert: once per entry and connection.
                match set.entry(entry).and_then(|inserting| {
                    let size = inserted_entry_size(inserting)?;
                    (size <= self.table.max).then_some((inserting, size))
                }) {
                    Some((inserting, size)) => {
                        out.extend_from_slice(inserting);
                        self.entries[entry] = self.table.insert(size).unwrap_or(NEVER);
                    }
                    None => out.extend_from_slice(&block[start..end]),
                }
            }
            copied = end;
        }
        out.extend_from_slice(&block[copied..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::{Decoder, encode_lines, encode_table_size_update};

    /// Three pages of one site: the lines `kiln build` writes.
    const HEADS: [&str; 3] = [
        "ETag: \"a\"\r\nCache-Control: public, max-age=0, must-revalidate\r\nVary: Accept-Encoding\r\nContent-Type: text/html; charset=utf-8\r\nAccept-Ranges: bytes\r\nContent-Length: 10\r\n",
        "ETag: \"b\"\r\nCache-Control: public, max-age=3600\r\nVary: Accept-Encoding\r\nContent-Type: text/css; charset=utf-8\r\nAccept-Ranges: bytes\r\nContent-Length: 20\r\n",
        "ETag: \"c\"\r\nCache-Control: public, max-age=0, must-revalidate\r\nVary: Accept-Encoding\r\nContent-Type: text/html; charset=utf-8\r\nAccept-Ranges: bytes\r\nContent-Length: 30\r\n",
    ];

    /// A block's fields, (name, value).
    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    /// What a connection sends: a variant's block, a table size change
    /// the client asked for (`SETTINGS_HEADER_TABLE_SIZE`), or nothing but
    /// the clock moving to another second (another `date`).
    #[derive(Clone, Copy)]
    enum Step {
        Respond(usize),
        TableSize(usize),
        Second(i64),
    }

    /// The `date` field of `second`: its value, and its literal without
    /// and with indexing, as `DateCache` prepares them.
    fn date(second: i64) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let mut imf = [0u8; 29];
        crate::httpdate::format_imf(second, &mut imf);
        let (mut literal, mut indexing) = (Vec::new(), Vec::new());
        crate::hpack::encode_field(b"date", &imf, &mut literal);
        encode_field_indexing(b"date", &imf, &mut indexing);
        (imf.to_vec(), literal, indexing)
    }

    /// The blocks a connection writes for `steps` (each response: the
    /// `date`, then the page's fields), with the fields each must decode
    /// to.
    fn connection(steps: &[Step]) -> (Vec<Vec<u8>>, Vec<Fields>) {
        let table = SharedTable::choose(HEADS.iter().map(|h| h.as_bytes()));
        let encoded = table.encode();
        let set = SharedView::parse(&encoded).expect("a shared set");
        let mut state = SharedState::new(MAX_TABLE_SIZE);
        let mut second = 1_700_000_000;
        let mut resize = false;
        let (mut blocks, mut expected) = (Vec::new(), Vec::new());
        for &step in steps {
            match step {
                Step::TableSize(size) => {
                    resize = true;
                    state.reset(size);
                }
                Step::Second(now) => second = now,
                Step::Respond(page) => {
                    let head = HEADS[page].as_bytes();
                    let mut stateless = Vec::new();
                    encode_lines(head, &mut stateless);
                    let mut spans = Vec::new();
                    table.spans(head).iter().for_each(|s| s.encode(&mut spans));
                    let mut block = Vec::new();
                    if std::mem::take(&mut resize) {
                        encode_table_size_update(0, &mut block);
                        encode_table_size_update(state.table_max(), &mut block);
                    }
                    let (value, literal, indexing) = date(second);
                    state.write_date(second, &literal, &indexing, &mut block);
                    if state.accepts(&set, 0) {
                        state.write_block(&set, &stateless, 0, &spans, &mut block);
                    } else {
                        block.extend_from_slice(&stateless);
                    }
                    blocks.push(block);
                    let page_fields =
                        fields(head).map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()));
                    expected.push(
                        std::iter::once((b"date".to_vec(), value))
                            .chain(page_fields)
                            .collect(),
                    );
                }
            }
        }
        (blocks, expected)
    }

    /// Decodes `steps`' blocks on one decoder, as the client does.
    fn decode_all(blocks: &[Vec<u8>]) -> Vec<Fields> {
        let mut decoder = Decoder::new(MAX_TABLE_SIZE);
        blocks
            .iter()
            .map(|block| {
                let mut got = Vec::new();
                decoder
                    .decode(block, &mut Vec::new(), usize::MAX, |n, v| {
                        got.push((n.to_vec(), v.to_vec()));
                        Ok::<(), ()>(())
                    })
                    .expect("a valid block");
                got
            })
            .collect()
    }

    const STEPS: [Step; 8] = [
        Step::Respond(0),
        Step::Respond(0),
        Step::Respond(1),
        Step::Respond(2),
        Step::TableSize(128),
        Step::Respond(1),
        Step::Respond(1),
        Step::Respond(0),
    ];

    /// A long-lived connection: a new `date` every second fills the table
    /// and evicts the oldest entries, shared ones included, which the next
    /// response inserts again; then a smaller table (one where the set no
    /// longer fits, and one where a single `date` does not), and a larger
    /// one again.
    fn eviction_steps() -> Vec<Step> {
        let mut steps = Vec::new();
        for (size, seconds) in [(4096, 80), (600, 30), (64, 3), (4096, 3)] {
            if size != 4096 || !steps.is_empty() {
                steps.push(Step::TableSize(size));
            }
            for second in 0..seconds {
                steps.push(Step::Second(1_700_000_000 + second));
                for page in [0, 1, 2, 0] {
                    steps.push(Step::Respond(page));
                }
            }
        }
        steps
    }

    #[test]
    fn the_shared_set_is_what_pages_have_in_common() {
        let table = SharedTable::choose(HEADS.iter().map(|h| h.as_bytes()));
        let names: Vec<&[u8]> = table.entries.iter().map(|(n, _)| &n[..]).collect();
        // Carried by all three first, then by two, ties by name; then the
        // rest: per-file values and the fields one page has, by name.
        assert_eq!(
            names[..4],
            [
                b"accept-ranges",
                &b"vary"[..],
                b"cache-control",
                b"content-type"
            ],
            "{table:?}"
        );
        let rest: Vec<&[u8]> = vec![
            b"cache-control",
            b"content-length",
            b"content-length",
            b"content-length",
            b"content-type",
            b"etag",
            b"etag",
            b"etag",
        ];
        assert_eq!(names[4..], rest, "{table:?}");
        assert_eq!(SharedTable::choose([HEADS[0].as_bytes()]).entries.len(), 6);
        // A file's `Use-As-Dictionary`, on each of its encodings, comes
        // after a field two files share (`x-team`, last by name), as its
        // `etag` does.
        let file = |path: &str, encoding: &str| {
            format!(
                "Content-Type: text/javascript\r\nContent-Encoding: {encoding}\r\n\
                 Use-As-Dictionary: match=\"{path}\", id=\"kiln-1\"\r\n\
                 X-Team: {}\r\n",
                if encoding == "br" { "web" } else { path }
            )
        };
        let heads = [
            file("/a.js", "br"),
            file("/a.js", "gzip"),
            file("/b.js", "br"),
        ];
        let table = SharedTable::choose(heads.iter().map(|h| h.as_bytes()));
        let names: Vec<&[u8]> = table.entries.iter().map(|(n, _)| &n[..]).collect();
        assert_eq!(
            names[..4],
            [
                &b"content-type"[..],
                b"content-encoding",
                b"x-team",
                b"use-as-dictionary"
            ],
            "{table:?}"
        );
        // Within the budget, however many files.
        let many: Vec<String> = (0..200)
            .map(|i| format!("ETag: \"{i:032}\"\r\nContent-Type: text/html\r\n"))
            .collect();
        let table = SharedTable::choose(many.iter().map(|h| h.as_bytes()));
        assert_eq!(table.entries[0].0, b"content-type");
        assert!(table.entries.len() <= MAX_SHARED_ENTRIES);
        let room: usize = table.entries.iter().map(|(n, v)| entry_size(n, v)).sum();
        assert!(room <= SHARED_TABLE_BUDGET, "{room}");
    }

    #[test]
    fn later_responses_name_the_shared_fields_by_index() {
        let (blocks, expected) = connection(&STEPS);
        assert_eq!(decode_all(&blocks), expected);
        let lens: Vec<usize> = blocks.iter().map(Vec::len).collect();
        // The second response of a page: the date and its six fields, a
        // byte each.
        assert_eq!(lens[1], 7, "{lens:?}");
        // The third page inserts only its own `etag` and length, and
        // names the date and the four fields it shares with the first.
        assert!(lens[3] < lens[0] / 4, "{lens:?}");
        // 128 bytes of table do not hold the set: stateless blocks after
        // the date, which fits (65 bytes): after the size updates (0, then
        // 128: 1 + 2 bytes) inserted, then a one-byte index.
        let stateless = &blocks[5][1..];
        assert_eq!(blocks[5][0], 0x80 | 62, "{:?}", blocks[5]);
        assert!(blocks[4][..3] == [0x20, 0x3f, 0x61] && blocks[4].ends_with(stateless));
        assert_eq!(lens[4] - 3 - stateless.len(), date(0).2.len(), "{lens:?}");
    }

    /// The date of each second is inserted once and named by index; the
    /// dates fill the table, evict the oldest entries as a decoder does,
    /// and the shared fields evicted are inserted again: every block
    /// decodes to its fields, and most are indices only.
    #[test]
    fn dates_evict_and_evicted_fields_come_back() {
        let steps = eviction_steps();
        let (blocks, expected) = connection(&steps);
        let responses = steps
            .iter()
            .filter(|s| matches!(s, Step::Respond(_)))
            .count();
        assert_eq!(decode_all(&blocks), expected);
        assert_eq!(blocks.len(), responses);
        // At 4096 bytes, the 80 seconds' dates (65 bytes each) pass the
        // table's size: the first page's block after that (a second's
        // third response) is indices again, a byte per field.
        let late = 4 * 79 + 3;
        assert_eq!(
            blocks[late].len(),
            expected[late].len(),
            "{:?}",
            blocks[late]
        );
        // In 64 bytes not even a date fits: stateless blocks, the same
        // each time but for the date.
        let tiny = 4 * 110 + 1;
        assert_eq!(blocks[tiny].len(), blocks[tiny + 4].len());
    }

    #[test]
    fn a_block_cut_before_a_shared_field_leaves_it_out() {
        let table = SharedTable::choose(HEADS.iter().map(|h| h.as_bytes()));
        let encoded = table.encode();
        let set = SharedView::parse(&encoded).unwrap();
        let head = HEADS[0].as_bytes();
        let mut stateless = Vec::new();
        encode_lines(head, &mut stateless);
        let mut spans = Vec::new();
        let all = table.spans(head);
        all.iter().for_each(|s| s.encode(&mut spans));
        // Up to the second shared field: the first only is inserted.
        let cut = all[1].at as usize;
        let mut state = SharedState::new(MAX_TABLE_SIZE);
        let mut decoder = Decoder::new(4096);
        let mut decode = |block: &[u8]| {
            let mut got = Vec::new();
            decoder
                .decode(block, &mut Vec::new(), usize::MAX, |n, v| {
                    got.push((n.to_vec(), v.to_vec()));
                    Ok::<(), ()>(())
                })
                .unwrap();
            got
        };
        let stateless_fields = |block: &[u8]| {
            let mut got = Vec::new();
            Decoder::new(0)
                .decode(block, &mut Vec::new(), usize::MAX, |n, v| {
                    got.push((n.to_vec(), v.to_vec()));
                    Ok::<(), ()>(())
                })
                .unwrap();
            got
        };
        let mut block = Vec::new();
        state.write_block(&set, &stateless[..cut], 0, &spans, &mut block);
        assert_eq!(decode(&block), stateless_fields(&stateless[..cut]));
        assert_eq!(state.table.inserted, 1);
        // From after the first shared field: the others are inserted.
        let from = (all[0].at + u32::from(all[0].len)) as usize;
        block.clear();
        state.write_block(&set, &stateless[from..], from, &spans, &mut block);
        assert_eq!(decode(&block), stateless_fields(&stateless[from..]));
        assert_eq!(state.table.inserted, all.len() as u64);
    }

    /// Another site's set, or a reload's with other fields, on the same
    /// connection: its entries are not the first set's, so it starts over
    /// (inserting, never naming the first set's entries); an equal set (a
    /// reload that changed no shared field) keeps the indices. A set that
    /// does not fit beside the date and the server's fields is refused.
    #[test]
    fn another_set_starts_over() {
        let first = SharedTable::choose(HEADS.iter().map(|h| h.as_bytes())).encode();
        let reloaded = first.clone();
        let other = SharedTable::choose(HEADS[1..].iter().map(|h| h.as_bytes())).encode();
        let (first, same, other) = (
            SharedView::parse(&first).unwrap(),
            SharedView::parse(&reloaded).unwrap(),
            SharedView::parse(&other).unwrap(),
        );
        let mut state = SharedState::new(MAX_TABLE_SIZE);
        assert!(state.accepts(&first, MAX_TABLE_SIZE - first.room - DATE_ENTRY_SIZE));
        assert!(!state.accepts(&first, MAX_TABLE_SIZE - first.room - DATE_ENTRY_SIZE + 1));
        let head = HEADS[1].as_bytes();
        let mut stateless = Vec::new();
        encode_lines(head, &mut stateless);
        let spans = |table: &SharedTable| {
            let mut spans = Vec::new();
            table.spans(head).iter().for_each(|s| s.encode(&mut spans));
            spans
        };
        let first_spans = spans(&SharedTable::choose(HEADS.iter().map(|h| h.as_bytes())));
        let other_spans = spans(&SharedTable::choose(
            HEADS[1..].iter().map(|h| h.as_bytes()),
        ));
        let mut decoder = Decoder::new(MAX_TABLE_SIZE);
        let expected: Fields = fields(head)
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
            .collect();
        for (set, spans, all_indices) in [
            (&first, &first_spans, false),
            (&same, &first_spans, true),
            (&other, &other_spans, false),
            (&other, &other_spans, true),
            (&first, &first_spans, false),
        ] {
            let mut block = Vec::new();
            state.write_block(set, &stateless, 0, spans, &mut block);
            let mut got = Vec::new();
            decoder
                .decode(&block, &mut Vec::new(), usize::MAX, |n, v| {
                    got.push((n.to_vec(), v.to_vec()));
                    Ok::<(), ()>(())
                })
                .unwrap();
            assert_eq!(got, expected);
            assert_eq!(block.len() == expected.len(), all_indices, "{block:?}");
        }
    }

    #[test]
    fn malformed_sets_are_refused() {
        let encoded = SharedTable::choose(HEADS.iter().map(|h| h.as_bytes())).encode();
        assert!(SharedView::parse(&encoded).is_some());
        assert!(SharedView::parse(&encoded[..encoded.len() - 1]).is_none());
        assert!(SharedView::parse(&encoded[..10]).is_none());
        assert!(SharedView::parse(&[]).is_none());
        let mut zero = encoded.clone();
        zero[..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(SharedView::parse(&zero).is_none());
    }

    /// The same connections (table size changes, dates, eviction) decoded
    /// by the Python `hpack` package, an independent decoder; skipped,
    /// saying so, where it is missing.
    #[test]
    fn python_hpack_decodes_the_connection() {
        const SCRIPT: &str = r#"
d = hpack.Decoder()
out = []
for line in sys.stdin:
    kind, arg = line.split()
    if kind == "size":
        d.max_allowed_table_size = int(arg)
    else:
        out.append([[n.decode(), v.decode()] for n, v in d.decode(bytes.fromhex(arg), raw=True)])
print(json.dumps(out))
"#;
        let mut steps = STEPS.to_vec();
        steps.extend(eviction_steps());
        let (blocks, expected) = connection(&steps);
        let mut input = String::new();
        let mut blocks_iter = blocks.iter();
        for step in &steps {
            match step {
                Step::TableSize(size) => input.push_str(&format!("size {size}\n")),
                Step::Second(_) => {}
                Step::Respond(_) => {
                    let hex: String = blocks_iter
                        .next()
                        .unwrap()
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect();
                    input.push_str(&format!("block {hex}\n"));
                }
            }
        }
        let Some(stdout) =
            crate::hpack::tests::run_python("hpack", "pip install hpack", SCRIPT, &input)
        else {
            return;
        };
        let decoded: Vec<Vec<(String, String)>> = serde_json::from_str(&stdout).unwrap();
        let expected: Vec<Vec<(String, String)>> = expected
            .into_iter()
            .map(|fields| {
                fields
                    .into_iter()
                    .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
                    .collect()
            })
            .collect();
        assert_eq!(decoded, expected);
    }
}
