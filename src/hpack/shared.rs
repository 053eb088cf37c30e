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
//! room, and the server checks that it fits beside its own fields before
//! using it: nothing is ever evicted, so an index stays valid for the
//! connection's life (until a table size change, which starts over).

use std::collections::HashMap;

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
const PER_FILE: [&str; 3] = ["etag", "last-modified", "content-length"];
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

/// What a connection inserted of one shared set: which set, and in what
/// order its entries were inserted. Fixed size: kept in the connection,
/// no allocation.
#[derive(Clone, Debug)]
pub struct SharedState {
    /// `SharedView::id` of the set inserted from, if any.
    set: Option<u64>,
    /// How many entries were inserted.
    inserted: u8,
    /// Per entry, its place in the insertion order counted from 1; 0 when
    /// not inserted.
    order: [u8; MAX_SHARED_ENTRIES],
}

impl Default for SharedState {
    fn default() -> Self {
        SharedState {
            set: None,
            inserted: 0,
            order: [0; MAX_SHARED_ENTRIES],
        }
    }
}

impl SharedState {
    /// Forgets everything: the client's table was emptied.
    pub fn reset(&mut self) {
        *self = SharedState::default();
    }

    /// How many entries this connection inserted: the server's own
    /// entries, inserted before, are that many indices further.
    pub fn inserted(&self) -> usize {
        usize::from(self.inserted)
    }

    /// True until a block used a set: until then other entries may go into
    /// the table first (the server's own), their room counted when a set
    /// is accepted.
    pub fn is_unused(&self) -> bool {
        self.set.is_none()
    }

    /// True when blocks of `set` may use the table: nothing of another set
    /// was inserted, and `set` fits in `room_left` bytes of table room.
    pub fn accepts(&self, set: &SharedView<'_>, room_left: usize) -> bool {
        match self.set {
            Some(id) => id == set.id,
            None => set.room <= room_left,
        }
    }

    /// Appends `block`, the bytes `base..base + block.len()` of a variant's
    /// stateless block whose shared fields `spans` (the pack's records)
    /// lists, with each shared field an index if inserted, else inserted.
    /// The caller checked [`SharedState::accepts`]. A span that does not
    /// lie inside the block, or names no entry, is copied as it is: the
    /// block stays right, only longer.
    pub fn write_block(
        &mut self,
        set: &SharedView<'_>,
        block: &[u8],
        base: usize,
        spans: &[u8],
        out: &mut Vec<u8>,
    ) {
        self.set = Some(set.id);
        let mut copied = 0;
        for span in spans.chunks_exact(SPAN_LEN).map(Span::decode) {
            let Some(start) = (span.at as usize).checked_sub(base) else {
                continue;
            };
            let end = start + usize::from(span.len);
            let entry = usize::from(span.entry);
            if start < copied || end > block.len() {
                continue;
            }
            let Some(inserting) = set.entry(entry) else {
                continue;
            };
            out.extend_from_slice(&block[copied..start]);
            match self.order[entry] {
                0 => {
                    out.extend_from_slice(inserting);
                    self.inserted += 1;
                    self.order[entry] = self.inserted;
                }
                place => {
                    let index = FIRST_DYNAMIC_INDEX + usize::from(self.inserted - place);
                    encode_indexed(index, out);
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

    /// What a connection sends: a variant's block, or a table size change
    /// the client asked for (`SETTINGS_HEADER_TABLE_SIZE`).
    #[derive(Clone, Copy)]
    enum Step {
        Respond(usize),
        TableSize(usize),
    }

    /// The blocks a connection writes for `steps`, with the fields each
    /// must decode to, and the sizes the client's decoder is given.
    fn connection(steps: &[Step]) -> (Vec<Vec<u8>>, Vec<Fields>) {
        let table = SharedTable::choose(HEADS.iter().map(|h| h.as_bytes()));
        let encoded = table.encode();
        let set = SharedView::parse(&encoded).expect("a shared set");
        let mut state = SharedState::default();
        let mut table_max = 4096;
        let mut resize = false;
        let (mut blocks, mut expected) = (Vec::new(), Vec::new());
        for &step in steps {
            match step {
                Step::TableSize(size) => {
                    table_max = size;
                    resize = true;
                    state.reset();
                }
                Step::Respond(page) => {
                    let head = HEADS[page].as_bytes();
                    let mut stateless = Vec::new();
                    encode_lines(head, &mut stateless);
                    let mut spans = Vec::new();
                    table.spans(head).iter().for_each(|s| s.encode(&mut spans));
                    let mut block = Vec::new();
                    if std::mem::take(&mut resize) {
                        encode_table_size_update(0, &mut block);
                        encode_table_size_update(table_max, &mut block);
                    }
                    if state.accepts(&set, table_max) {
                        state.write_block(&set, &stateless, 0, &spans, &mut block);
                    } else {
                        block.extend_from_slice(&stateless);
                    }
                    blocks.push(block);
                    expected.push(
                        fields(head)
                            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
                            .collect(),
                    );
                }
            }
        }
        (blocks, expected)
    }

    fn decode_all(blocks: &[Vec<u8>]) -> Vec<Fields> {
        let mut decoder = Decoder::new(4096);
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
        // The second response of a page: its six fields, a byte each.
        assert_eq!(lens[1], 6, "{lens:?}");
        // The third page inserts only its own `etag` and length, and
        // names the four fields it shares with the first.
        assert!(lens[3] < lens[0] / 4, "{lens:?}");
        // 128 bytes of table do not hold the set: stateless blocks, the
        // same after the size updates' bytes (0, then 128: 1 + 2).
        assert_eq!(lens[4] - 3, lens[5], "{lens:?}");
        assert_eq!(blocks[4][3..], blocks[5][..]);
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
        let mut state = SharedState::default();
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
        assert_eq!(state.inserted(), 1);
        // From after the first shared field: the others are inserted.
        let from = (all[0].at + u32::from(all[0].len)) as usize;
        block.clear();
        state.write_block(&set, &stateless[from..], from, &spans, &mut block);
        assert_eq!(decode(&block), stateless_fields(&stateless[from..]));
        assert_eq!(state.inserted(), all.len());
    }

    /// Another site's set, or a reload's with other fields, on the same
    /// connection: its indices would name this set's entries, so its
    /// blocks go stateless; an equal set (a reload that changed no shared
    /// field) keeps the indices.
    #[test]
    fn only_the_set_in_use_is_accepted() {
        let first = SharedTable::choose(HEADS.iter().map(|h| h.as_bytes())).encode();
        let reloaded = first.clone();
        let other = SharedTable::choose(HEADS[1..].iter().map(|h| h.as_bytes())).encode();
        let (first, same, other) = (
            SharedView::parse(&first).unwrap(),
            SharedView::parse(&reloaded).unwrap(),
            SharedView::parse(&other).unwrap(),
        );
        let mut state = SharedState::default();
        assert!(state.accepts(&other, 4096) && state.accepts(&first, 4096));
        assert!(!state.accepts(&first, first.room - 1), "it must fit");
        let mut block = Vec::new();
        state.write_block(&first, &[], 0, &[], &mut block);
        assert!(!state.is_unused());
        assert!(state.accepts(&same, 0));
        assert!(!state.accepts(&other, 4096));
        state.reset();
        assert!(state.accepts(&other, 4096));
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

    /// The same connection decoded by the Python `hpack` package, an
    /// independent decoder; skipped, saying so, where it is missing.
    #[test]
    fn python_hpack_decodes_the_connection() {
        const SCRIPT: &str = r#"
import sys, json
try:
    import hpack
except ImportError:
    print("missing"); sys.exit(0)
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
        let (blocks, expected) = connection(&STEPS);
        let mut input = String::new();
        let mut blocks_iter = blocks.iter();
        for step in STEPS {
            match step {
                Step::TableSize(size) => input.push_str(&format!("size {size}\n")),
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
        let child = std::process::Command::new("python3")
            .args(["-c", SCRIPT])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("skipped: no python3");
            return;
        };
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "python hpack failed");
        let stdout = String::from_utf8(output.stdout).unwrap();
        if stdout.trim() == "missing" {
            eprintln!("skipped: the Python hpack package is not installed (pip install hpack)");
            return;
        }
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
