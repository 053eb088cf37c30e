//! The `Date` line, formatted at most once per second per thread, and the
//! access log's timestamp.

use crate::httpdate::format_imf;

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
        }
    }

    pub fn line(&self) -> &[u8] {
        &self.line
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
}
