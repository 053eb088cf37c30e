//! The static table (RFC 7541 Appendix A) and the decoder's dynamic table
//! (§2.3.2, §4).

/// The static table: index 1 is `STATIC_TABLE[0]`.
pub(super) const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// What every entry adds to a table's size besides its name and value
/// (§4.1): an estimate of an implementation's per-entry overhead.
pub(super) const ENTRY_OVERHEAD: usize = 32;

/// Largest `SETTINGS_HEADER_TABLE_SIZE` a decoder takes (16 MiB); offsets
/// then fit in a `u32`. kiln advertises 4096.
pub(super) const MAX_SETTINGS_TABLE_SIZE: usize = 1 << 24;

/// Where one entry's bytes are in [`DynamicTable::bytes`]: the name at
/// `offset`, the value right after it.
#[derive(Clone, Copy, Default, Debug)]
struct Slot {
    /// Start of the name in the byte ring.
    offset: u32,
    /// Length of the name.
    name_len: u32,
    /// Length of the value.
    value_len: u32,
}

/// Where the name of an entry to insert comes from.
#[derive(Clone, Copy, Debug)]
pub(super) enum NameSource<'a> {
    /// Bytes outside the table: the block, the scratch buffer, the static
    /// table.
    Bytes(&'a [u8]),
    /// An entry's name in the byte ring (`offset`, `len`), which the
    /// insertion may overwrite: RFC 7541 §4.4 lets a new entry take the
    /// name of the entry its insertion evicts.
    Ring(usize, usize),
}

/// The dynamic table, without an allocation per entry: names and values
/// live back to back in one byte ring, and a ring of [`Slot`]s says where.
///
/// An entry is stored contiguously, so that a field is handed out as two
/// plain slices. An entry that does not fit before the end of the byte
/// ring starts again at offset 0, leaving the tail unused until the next
/// wrap. The ring is `2 × settings_max − 32` bytes, room for a full table
/// plus the longest possible entry, which is what makes this safe: the
/// write position wraps when it passes `settings_max`, while the live
/// entries from before the wrap need at most `settings_max − 32` bytes
/// in all, so they start beyond anything written after it. No entry is
/// ever evicted for lack of room in the ring: eviction follows the RFC's
/// sizes alone.
///
/// Both rings are allocated on the first insertion (an idle connection,
/// or a peer that never indexes, owns none) and never grow.
#[derive(Debug)]
pub(super) struct DynamicTable {
    /// Names and values of the entries, in insertion order, each entry's
    /// bytes contiguous; empty until the first insertion.
    bytes: Box<[u8]>,
    /// One slot per entry, a ring from `oldest`; `settings_max / 32` long,
    /// as every entry counts at least 32; empty until the first insertion.
    slots: Box<[Slot]>,
    /// Ring position in `slots` of the oldest entry (the next evicted).
    oldest: usize,
    /// Number of entries.
    len: usize,
    /// Offset in `bytes` where the next entry's bytes go.
    write: usize,
    /// The table's size in the RFC's terms: name + value + 32 per entry.
    size: usize,
    /// The maximum size in force, set by the peer's size updates (§6.3),
    /// never above `settings_max`.
    max_size: usize,
    /// The `SETTINGS_HEADER_TABLE_SIZE` this side advertised: the most a
    /// size update may ask for, and what sizes the rings.
    settings_max: usize,
}

impl DynamicTable {
    /// An empty table of maximum size `settings_max` (at most
    /// [`MAX_SETTINGS_TABLE_SIZE`], the caller clamps); allocates nothing.
    pub(super) fn new(settings_max: usize) -> Self {
        debug_assert!(settings_max <= MAX_SETTINGS_TABLE_SIZE);
        DynamicTable {
            bytes: Box::default(),
            slots: Box::default(),
            oldest: 0,
            len: 0,
            write: 0,
            size: 0,
            max_size: settings_max,
            settings_max,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The size in force: a new entry larger than this empties the table.
    pub(super) fn max_size(&self) -> usize {
        self.max_size
    }

    /// The most a size update may ask for.
    pub(super) fn settings_max(&self) -> usize {
        self.settings_max
    }

    #[cfg(test)]
    pub(super) fn size(&self) -> usize {
        self.size
    }

    fn slot(&self, index: usize) -> Option<Slot> {
        if index == 0 || index > self.len {
            return None;
        }
        // Index 1 is the newest entry (§2.3.3).
        Some(self.slots[self.wrap(self.oldest + self.len - index)])
    }

    /// `position`, below twice the ring's length (`oldest` and `len` are
    /// each at most that length), as a place in the ring: a subtraction
    /// rather than a division on every field a client names by index.
    fn wrap(&self, position: usize) -> usize {
        if position >= self.slots.len() {
            position - self.slots.len()
        } else {
            position
        }
    }

    /// Name and value of entry `index` (1 = newest).
    pub(super) fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        let slot = self.slot(index)?;
        let name_start = slot.offset as usize;
        let value_start = name_start + slot.name_len as usize;
        let value_end = value_start + slot.value_len as usize;
        Some((
            &self.bytes[name_start..value_start],
            &self.bytes[value_start..value_end],
        ))
    }

    /// The bytes at `offset` in the byte ring, as [`Self::name_position`]
    /// gave them.
    pub(super) fn ring(&self, offset: usize, len: usize) -> &[u8] {
        &self.bytes[offset..offset + len]
    }

    /// Where entry `index`'s name is in the byte ring, for
    /// [`NameSource::Ring`].
    pub(super) fn name_position(&self, index: usize) -> Option<(usize, usize)> {
        let slot = self.slot(index)?;
        Some((slot.offset as usize, slot.name_len as usize))
    }

    fn evict_oldest(&mut self) {
        let slot = self.slots[self.oldest];
        self.size -= slot.name_len as usize + slot.value_len as usize + ENTRY_OVERHEAD;
        self.oldest = self.wrap(self.oldest + 1);
        self.len -= 1;
    }

    fn evict_to(&mut self, max_size: usize) {
        while self.size > max_size {
            self.evict_oldest();
        }
        if self.len == 0 {
            self.oldest = 0;
            self.write = 0;
        }
    }

    /// Applies a dynamic table size update (§4.3), evicting as needed; the
    /// caller has checked `max_size <= settings_max`.
    pub(super) fn set_max_size(&mut self, max_size: usize) {
        debug_assert!(max_size <= self.settings_max);
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// Empties the table: what inserting an entry larger than the maximum
    /// size does (§4.4).
    pub(super) fn clear(&mut self) {
        self.evict_to(0);
    }

    /// Inserts an entry at the front, evicting from the back until it fits
    /// (§4.4); an entry larger than the maximum size empties the table.
    pub(super) fn insert(&mut self, name: NameSource<'_>, value: &[u8]) {
        let name_len = match name {
            NameSource::Bytes(bytes) => bytes.len(),
            NameSource::Ring(_, len) => len,
        };
        let len = name_len + value.len();
        let entry_size = len + ENTRY_OVERHEAD;
        if entry_size > self.max_size {
            self.clear();
            return;
        }
        // Eviction only moves bookkeeping: a `Ring` name's bytes stay in
        // place until copied below.
        self.evict_to(self.max_size - entry_size);
        if self.bytes.is_empty() {
            // `settings_max >= entry_size >= 32` here.
            self.bytes = vec![0; 2 * self.settings_max - ENTRY_OVERHEAD].into_boxed_slice();
            self.slots =
                vec![Slot::default(); self.settings_max / ENTRY_OVERHEAD].into_boxed_slice();
        }
        let start = if self.write + len <= self.bytes.len() {
            self.write
        } else {
            0
        };
        match name {
            NameSource::Bytes(bytes) => self.bytes[start..start + name_len].copy_from_slice(bytes),
            // The source may overlap the destination when the name's entry
            // was just evicted: `copy_within` is a memmove.
            NameSource::Ring(offset, _) => self.bytes.copy_within(offset..offset + name_len, start),
        }
        self.bytes[start + name_len..start + len].copy_from_slice(value);
        self.write = start + len;
        let position = self.wrap(self.oldest + self.len);
        self.slots[position] = Slot {
            offset: start as u32,
            name_len: name_len as u32,
            value_len: value.len() as u32,
        };
        self.len += 1;
        self.size += entry_size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// The table as the RFC describes it, one allocation per entry.
    struct Model {
        entries: VecDeque<(Vec<u8>, Vec<u8>)>,
        max_size: usize,
    }

    impl Model {
        fn size(&self) -> usize {
            self.entries
                .iter()
                .map(|(n, v)| n.len() + v.len() + 32)
                .sum()
        }

        fn evict_to(&mut self, max: usize) {
            while self.size() > max {
                self.entries.pop_back();
            }
        }

        fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
            let entry = name.len() + value.len() + 32;
            if entry > self.max_size {
                self.entries.clear();
                return;
            }
            self.evict_to(self.max_size - entry);
            self.entries.push_front((name, value));
        }
    }

    fn assert_same(table: &DynamicTable, model: &Model) {
        assert_eq!(table.len(), model.entries.len());
        assert_eq!(table.size(), model.size());
        for (i, (name, value)) in model.entries.iter().enumerate() {
            assert_eq!(
                table.get(i + 1),
                Some((&name[..], &value[..])),
                "entry {}",
                i + 1
            );
        }
        assert_eq!(table.get(0), None);
        assert_eq!(table.get(model.entries.len() + 1), None);
    }

    #[test]
    fn a_new_table_owns_nothing() {
        let mut table = DynamicTable::new(4096);
        assert!(table.bytes.is_empty() && table.slots.is_empty());
        table.set_max_size(100);
        table.clear();
        // Too large to insert: still nothing allocated.
        table.insert(NameSource::Bytes(&[b'n'; 100]), b"v");
        assert!(table.bytes.is_empty() && table.slots.is_empty());
        assert_eq!(table.get(1), None);
    }

    /// Random insertions (names from outside and from the table itself,
    /// including the entry about to be evicted), size updates and entries
    /// from empty to the largest, against the model: wrapping never
    /// corrupts an entry.
    #[test]
    fn matches_the_model_under_random_operations() {
        let mut rng = 0x2545_f491_4f6c_dd1d;
        for settings_max in [0, 31, 32, 33, 64, 100, 256, 4096] {
            let mut table = DynamicTable::new(settings_max);
            let mut model = Model {
                entries: VecDeque::new(),
                max_size: settings_max,
            };
            for step in 0..5000u32 {
                let r = xorshift(&mut rng);
                match r % 16 {
                    0 => {
                        let max = (xorshift(&mut rng) as usize) % (settings_max + 1);
                        table.set_max_size(max);
                        model.max_size = max;
                        model.evict_to(max);
                    }
                    1..=5 if !model.entries.is_empty() => {
                        // A name from the table, often the oldest entry's.
                        let index = if r.is_multiple_of(2) {
                            model.entries.len()
                        } else {
                            1 + (xorshift(&mut rng) as usize) % model.entries.len()
                        };
                        let (offset, len) = table.name_position(index).unwrap();
                        let name = model.entries[index - 1].0.clone();
                        let value_len = (xorshift(&mut rng) as usize) % (settings_max / 2 + 2);
                        let value = vec![step as u8; value_len];
                        table.insert(NameSource::Ring(offset, len), &value);
                        model.insert(name, value);
                    }
                    _ => {
                        let spread = settings_max + 2;
                        let name_len = (xorshift(&mut rng) as usize) % spread.min(40);
                        let value_len = if r.is_multiple_of(5) {
                            0
                        } else {
                            (xorshift(&mut rng) as usize) % spread
                        };
                        let name: Vec<u8> =
                            (0..name_len).map(|i| (step as u8) ^ (i as u8)).collect();
                        let value = vec![!(step as u8); value_len];
                        table.insert(NameSource::Bytes(&name), &value);
                        model.insert(name, value);
                    }
                }
                assert_same(&table, &model);
            }
            assert!(table.bytes.len() <= (2 * settings_max).saturating_sub(32));
        }
    }

    #[test]
    fn an_entry_may_take_the_name_of_the_entry_it_evicts() {
        // §4.4: room for one entry only; the new one names the old one.
        let mut table = DynamicTable::new(64);
        table.insert(NameSource::Bytes(b"name-of-old"), b"old-value");
        let (offset, len) = table.name_position(1).unwrap();
        table.insert(NameSource::Ring(offset, len), b"new-value-longer");
        assert_eq!(table.len(), 1);
        assert_eq!(
            table.get(1),
            Some((&b"name-of-old"[..], &b"new-value-longer"[..]))
        );
    }

    #[test]
    fn an_entry_larger_than_the_table_empties_it() {
        let mut table = DynamicTable::new(100);
        table.insert(NameSource::Bytes(b"a"), b"b");
        assert_eq!(table.len(), 1);
        table.insert(NameSource::Bytes(&[b'x'; 60]), &[b'y'; 9]);
        assert_eq!((table.len(), table.size()), (0, 0));
        // Exactly the maximum fits.
        table.insert(NameSource::Bytes(&[b'x'; 60]), &[b'y'; 8]);
        assert_eq!((table.len(), table.size()), (1, 100));
    }
}
