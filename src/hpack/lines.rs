//! HTTP/1 header lines (`Name: value\r\n`) as HPACK fields. kiln decides a
//! response's fields once, as HTTP/1 lines (in the pack, in the server's
//! own blocks); these helpers give the same fields to HTTP/2, so the two
//! protocols cannot drift apart.

use super::encode_field;

/// Fields that describe an HTTP/1.1 connection, not the message: an HTTP/2
/// message carrying one is malformed (RFC 9113 §8.2.2), so they are left
/// out of every HPACK block kiln prepares. `te` is not here: it is a
/// request field, and kiln never sends it.
pub const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// True when `name` (any case) is one of [`CONNECTION_SPECIFIC`].
pub fn is_connection_specific(name: &[u8]) -> bool {
    CONNECTION_SPECIFIC
        .iter()
        .any(|known| name.eq_ignore_ascii_case(known.as_bytes()))
}

/// The fields of a block of lines, in order, as `(name, value)` slices of
/// it: the name as written, the value without the whitespace around it.
/// Lines end with `\n` (a `\r` before it is dropped); an empty line or one
/// without a colon is no field and is skipped.
pub fn fields(lines: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    lines.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    })
}

/// Appends the fields of `lines` (see [`fields`]) HPACK-encoded with
/// [`encode_field`]: names lowercased, static indices and literals without
/// indexing, never the dynamic table. Connection-specific fields are left
/// out.
pub fn encode_lines(lines: &[u8], out: &mut Vec<u8>) {
    for (name, value) in fields(lines) {
        if !is_connection_specific(name) {
            encode_field(name, value, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::Decoder;

    fn decode(block: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        Decoder::new(0)
            .decode(block, &mut Vec::new(), usize::MAX, |n, v| {
                out.push((
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                ));
                Ok::<(), ()>(())
            })
            .unwrap();
        out
    }

    #[test]
    fn lines_become_lowercase_fields_in_order() {
        let lines = b"ETag: \"abc\"\r\nCache-Control: public, max-age=60\r\nX-Custom: Mixed Case \r\nContent-Length: 12\r\n";
        let mut block = Vec::new();
        encode_lines(lines, &mut block);
        assert_eq!(
            decode(&block),
            [
                ("etag", "\"abc\""),
                ("cache-control", "public, max-age=60"),
                ("x-custom", "Mixed Case"),
                ("content-length", "12"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn connection_specific_fields_are_left_out() {
        let lines = b"Connection: close\r\nKeep-Alive: timeout=5\r\nProxy-Connection: x\r\nTransfer-Encoding: chunked\r\nUpgrade: h2c\r\nX-A: b\r\n";
        let mut block = Vec::new();
        encode_lines(lines, &mut block);
        assert_eq!(decode(&block), [("x-a".to_owned(), "b".to_owned())]);
        assert!(is_connection_specific(b"PROXY-CONNECTION"));
        assert!(!is_connection_specific(b"te"));
    }

    #[test]
    fn non_lines_are_skipped() {
        let got: Vec<_> = fields(b"\r\nno colon\r\nA:b\nC:  \r\n").collect();
        assert_eq!(got, [(&b"A"[..], &b"b"[..]), (b"C", b"")]);
        let mut block = Vec::new();
        encode_lines(b"", &mut block);
        assert!(block.is_empty());
    }
}
