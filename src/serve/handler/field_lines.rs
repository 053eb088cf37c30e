//! A list-valued header field that may arrive on several lines (RFC 9110
//! §5.3): the lines are kept as borrowed slices and read as one
//! comma-separated list, so combining them copies and allocates nothing.
//! Any protocol fills it the same way: one `push` per field line received
//! (an HTTP/1 header line, an HTTP/2 header field).

/// Most lines of one list field a request may carry. Clients send one; a
/// request with more is refused (HTTP/1: 431) rather than acted on in part,
/// since dropping a line changes what the list means.
pub const MAX_FIELD_LINES: usize = 4;

/// A request carried more than `MAX_FIELD_LINES` lines of one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyLines;

/// The values of every line of one field, in the order received.
#[derive(Clone, Copy, Debug, Default)]
pub struct FieldLines<'r> {
    lines: [&'r [u8]; MAX_FIELD_LINES],
    count: usize,
}

impl<'r> FieldLines<'r> {
    /// Adds the value of one more line of the field.
    pub fn push(&mut self, value: &'r [u8]) -> Result<(), TooManyLines> {
        let slot = self.lines.get_mut(self.count).ok_or(TooManyLines)?;
        *slot = value;
        self.count += 1;
        Ok(())
    }

    /// True when the request did not carry the field at all (a line with an
    /// empty value still counts as sent).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The list's elements across all lines, in order, trimmed, with empty
    /// elements skipped (RFC 9110 §5.6.1).
    pub fn elements(&self) -> impl Iterator<Item = &'r [u8]> {
        self.lines[..self.count]
            .iter()
            .flat_map(|&line| ListElements { rest: line })
    }
}

/// The elements of one line. A comma between double quotes does not split:
/// an entity tag may contain one. Backslash escapes are not honoured, since
/// entity tags have none (`"a\"` is a whole tag); the quoted-string
/// parameters that could carry one are not used by any field kiln reads.
struct ListElements<'r> {
    rest: &'r [u8],
}

impl<'r> Iterator for ListElements<'r> {
    type Item = &'r [u8];

    fn next(&mut self) -> Option<&'r [u8]> {
        while !self.rest.is_empty() {
            let mut quoted = false;
            let end = self
                .rest
                .iter()
                .position(|&c| {
                    quoted ^= c == b'"';
                    c == b',' && !quoted
                })
                .unwrap_or(self.rest.len());
            let element = self.rest[..end].trim_ascii();
            self.rest = self.rest.get(end + 1..).unwrap_or_default();
            if !element.is_empty() {
                return Some(element);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elements<'r>(lines: &[&'r str]) -> Vec<&'r str> {
        let mut field = FieldLines::default();
        for line in lines {
            field.push(line.as_bytes()).unwrap();
        }
        field
            .elements()
            .map(|e| std::str::from_utf8(e).unwrap())
            .collect()
    }

    #[test]
    fn lines_read_as_one_list() {
        let none: [&str; 0] = [];
        assert_eq!(elements(&[]), none);
        assert_eq!(elements(&[""]), none);
        assert_eq!(elements(&[" , ,"]), none);
        assert_eq!(elements(&["gzip"]), ["gzip"]);
        assert_eq!(
            elements(&["gzip, br;q=0.5 ", "", " zstd ,, identity"]),
            ["gzip", "br;q=0.5", "zstd", "identity"]
        );
        assert_eq!(
            elements(&["\"a,b\", W/\"c\"", "\"d"]),
            ["\"a,b\"", "W/\"c\"", "\"d"]
        );
        assert_eq!(elements(&["\"a\\\", \"b\""]), ["\"a\\\"", "\"b\""]);
    }

    #[test]
    fn presence_and_capacity() {
        let mut field = FieldLines::default();
        assert!(field.is_empty());
        assert_eq!(field.push(b""), Ok(()));
        assert!(!field.is_empty());
        for _ in 1..MAX_FIELD_LINES {
            assert_eq!(field.push(b"x"), Ok(()));
        }
        assert_eq!(field.push(b"y"), Err(TooManyLines));
        assert_eq!(field.elements().count(), MAX_FIELD_LINES - 1);
    }
}
