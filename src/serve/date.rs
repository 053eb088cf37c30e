//! The `Date` line and its HPACK and QPACK fields, formatted at most once
//! per second per thread, and the access log's timestamp.

use crate::httpdate::format_imf;

/// Most bytes the `date` field takes HPACK-encoded: the name's static index
/// (two bytes: 33 does not fit the 4-bit prefix), the value's length (one
/// byte) and the 29-byte value, Huffman-coded only when that is shorter.
const DATE_HPACK_MAX: usize = 2 + 1 + 29;
/// Most bytes the `date` field takes QPACK-encoded: the name's static
/// index (6, one byte), the value's length (one byte) and the value.
const DATE_QPACK_MAX: usize = 1 + 1 + 29;

/// Writes the access-log timestamp `22/Nov/2026:04:30:14 +0000`.
pub fn format_clf(unix: i64, out: &mut [u8; 26]) {
    let mut imf = [0u8; 29];
    format_imf(unix, &mut imf);
    out.copy_from_slice(b"01/Jan/1970:00:00:00 +0000");
    out[0..2].copy_from_slice(&imf[5..7]);
    out[3..6].copy_from_slice(&imf[8..11]);
    out[7..11].copy_from_slice(&imf[12..16]);
    out[12..20].copy_from_slice(&imf[17..25]);
}

/// The current `Date: ...\r\n` line, rebuilt only when the second changes.
pub struct DateCache {
    /// The second `line` was formatted for.
    second: i64,
    /// `Date: <IMF-fixdate>\r\n`, ready to copy into a response.
    line: [u8; 37],
    /// The same field HPACK-encoded for HTTP/2 (static name index 33, a
    /// literal without indexing). Its capacity is reserved at creation and
    /// never exceeded, so reformatting it allocates nothing.
    hpack: Vec<u8>,
    /// The same field as a literal with incremental indexing, which an
    /// HTTP/2 connection sends once per second and then names by index
    /// (`hpack::SharedState::write_date`). Same capacity rule.
    hpack_indexing: Vec<u8>,
    /// The same field as a QPACK field line (static name index 6), for
    /// HTTP/3. Same capacity rule.
    qpack: Vec<u8>,
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    pub fn new() -> DateCache {
        let mut cache = DateCache {
            second: i64::MIN,
            line: *b"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n",
            hpack: Vec::with_capacity(DATE_HPACK_MAX),
            hpack_indexing: Vec::with_capacity(DATE_HPACK_MAX),
            qpack: Vec::with_capacity(DATE_QPACK_MAX),
        };
        cache.update(0);
        cache
    }

    /// Reformats the line if `unix` is a new second.
    pub fn update(&mut self, unix: i64) {
        if unix != self.second {
            self.second = unix;
            let mut imf = [0u8; 29];
            format_imf(unix, &mut imf);
            self.line[6..35].copy_from_slice(&imf);
            self.hpack.clear();
            crate::hpack::encode_field(b"date", &imf, &mut self.hpack);
            self.hpack_indexing.clear();
            crate::hpack::encode_field_indexing(b"date", &imf, &mut self.hpack_indexing);
            debug_assert!(self.hpack.len().max(self.hpack_indexing.len()) <= DATE_HPACK_MAX);
            self.qpack.clear();
            crate::qpack::encode_field(b"date", &imf, &mut self.qpack);
            debug_assert!(self.qpack.len() <= DATE_QPACK_MAX);
        }
    }

    /// `Date: <IMF-fixdate>\r\n`, for HTTP/1.
    pub fn line(&self) -> &[u8] {
        &self.line
    }

    /// The same `date` field HPACK-encoded, for HTTP/2.
    pub fn hpack(&self) -> &[u8] {
        &self.hpack
    }

    /// The same `date` field as a literal with incremental indexing.
    pub fn hpack_indexing(&self) -> &[u8] {
        &self.hpack_indexing
    }

    /// The same `date` field as a QPACK field line, for HTTP/3.
    pub fn qpack(&self) -> &[u8] {
        &self.qpack
    }

    pub fn second(&self) -> i64 {
        self.second
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_timestamp() {
        let mut clf = [0u8; 26];
        format_clf(784_111_777, &mut clf);
        assert_eq!(&clf, b"06/Nov/1994:08:49:37 +0000");
    }

    #[test]
    fn the_line_follows_the_second() {
        let mut cache = DateCache::new();
        cache.update(784_111_777);
        assert_eq!(cache.line(), b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
        assert_eq!(cache.second(), 784_111_777);
    }

    /// The `date` field `cache.hpack()` decodes to.
    fn decoded(cache: &DateCache) -> Vec<u8> {
        let mut date = None;
        crate::hpack::Decoder::new(0)
            .decode(cache.hpack(), &mut Vec::new(), usize::MAX, |name, value| {
                assert_eq!(name, b"date");
                assert!(date.replace(value.to_vec()).is_none(), "one field");
                Ok::<(), ()>(())
            })
            .unwrap();
        date.unwrap()
    }

    /// The `date` field `cache.qpack()` decodes to, as a field section.
    fn decoded_qpack(cache: &DateCache) -> Vec<u8> {
        let mut section = crate::qpack::FIELD_SECTION_PREFIX.to_vec();
        section.extend_from_slice(cache.qpack());
        let mut date = None;
        crate::qpack::decode_field_section(&section, &mut Vec::new(), usize::MAX, |name, value| {
            assert_eq!(name, b"date");
            assert!(date.replace(value.to_vec()).is_none(), "one field");
            Ok::<(), ()>(())
        })
        .unwrap();
        date.unwrap()
    }

    #[test]
    fn the_hpack_and_qpack_fields_follow_the_line() {
        let mut cache = DateCache::new();
        assert_eq!(decoded(&cache), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(decoded_qpack(&cache), b"Thu, 01 Jan 1970 00:00:00 GMT");
        let capacity = cache.hpack.capacity();
        let qpack_capacity = cache.qpack.capacity();
        // Every day of the week and month, all hours, both ends of the
        // range the format expresses.
        for unix in (0..400)
            .map(|i| i * 86_400 * 27 + i * 3_607)
            .chain([784_111_777, 253_402_300_799])
        {
            cache.update(unix);
            // Static name index 33 (0x0f 0x12), literal without indexing.
            assert_eq!(cache.hpack()[..2], [0x0f, 0x12]);
            assert_eq!(decoded(&cache), cache.line()[6..35], "{unix}");
            assert_eq!(cache.hpack.capacity(), capacity, "no reallocation");
            // Static name index 6 (0x56), a literal.
            assert_eq!(cache.qpack()[0], 0x56);
            assert_eq!(decoded_qpack(&cache), cache.line()[6..35], "{unix}");
            assert_eq!(cache.qpack.capacity(), qpack_capacity, "no reallocation");
        }
    }
}
