//! Extensible priorities (RFC 9218): how urgent a response is and whether
//! the client uses it as it arrives, read from the `priority` request
//! header or a PRIORITY_UPDATE frame's Priority Field Value. Both are a
//! Structured Fields dictionary (RFC 8941 §3.2), parsed here in place: a
//! byte cursor, no allocation, values reduced to what priorities read.
//!
//! A value that is not a valid dictionary is ignored as a whole (RFC 8941
//! §4.2), which leaves the defaults. Within a valid one, unknown keys and
//! `u` or `i` with a value out of range or of another type are ignored
//! (RFC 9218 §4), as are parameters on any member. A dictionary keeps the
//! last value of a key, so `u=1, u=9` means the default urgency, not 1.

/// Urgency when a request does not say (RFC 9218 §4.1).
pub const DEFAULT_URGENCY: u8 = 3;

/// The least urgent `u` (background work); greater values are ignored.
pub const LOWEST_URGENCY: u8 = 7;

/// A response's priority (RFC 9218 §4). `Default` is what a request that
/// says nothing gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// `u`: 0 (most urgent) to 7 (background); responses go out in this
    /// order.
    pub urgency: u8,
    /// `i`: the client uses the response as it arrives, so responses of
    /// one urgency may share the connection rather than go one by one.
    pub incremental: bool,
}

impl Default for Priority {
    fn default() -> Priority {
        Priority {
            urgency: DEFAULT_URGENCY,
            incremental: false,
        }
    }
}

impl Priority {
    /// Parses one field value: a `priority` header line, or the Priority
    /// Field Value of a PRIORITY_UPDATE frame. `None` when it is not a
    /// valid dictionary: a header is then ignored, and a PRIORITY_UPDATE
    /// may be a connection error (RFC 9218 §7), the caller's choice.
    pub fn parse(field_value: &[u8]) -> Option<Priority> {
        parse_lines([field_value])
    }

    /// The priority a request's `priority` field lines ask for, read as the
    /// one value they combine into (joined by commas, RFC 8941 §4.2), with
    /// the defaults when there is none or it does not parse.
    pub fn from_field_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Priority {
        parse_lines(lines).unwrap_or_default()
    }
}

/// A value that is not a valid dictionary; the whole field is then ignored.
struct Malformed;

/// A bare item (RFC 8941 §3.3), reduced to the types priorities read.
enum BareItem {
    /// An sf-integer: what `u` takes.
    Integer(i64),
    /// An sf-boolean: what `i` takes (a key alone is `true`).
    Boolean(bool),
    /// A decimal, string, token or byte sequence: of no priority's type.
    Other,
}

/// A dictionary member's value (RFC 8941 §3.2).
enum MemberValue {
    /// An item (its parameters skipped).
    Item(BareItem),
    /// An inner list: of no priority's type.
    InnerList,
}

/// The unread rest of the input.
struct Cursor<'a> {
    /// Bytes not yet consumed.
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn advance(&mut self, n: usize) {
        self.rest = self.rest.get(n..).unwrap_or_default();
    }

    /// Consumes `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        if next {
            self.advance(1);
        }
        next
    }

    /// Consumes the longest prefix of bytes `keep` accepts, and returns it.
    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a [u8] {
        let len = self
            .rest
            .iter()
            .position(|&b| !keep(b))
            .unwrap_or(self.rest.len());
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        taken
    }

    /// Skips spaces: where RFC 8941 allows SP but not HTAB.
    fn skip_sp(&mut self) {
        self.take_while(|b| b == b' ');
    }

    /// Skips OWS (SP and HTAB): around a dictionary's commas.
    fn skip_ows(&mut self) {
        self.take_while(|b| b == b' ' || b == b'\t');
    }
}

/// Parses the dictionary that `lines` make joined by ", " (RFC 8941 §4.2),
/// one line at a time, so nothing is copied: the first line's leading
/// spaces are skipped, a later line's leading OWS belongs to the comma
/// before it, and, with more than one line, an empty one would leave a
/// comma with no member after it, which fails.
fn parse_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<Priority> {
    let mut priority = Priority::default();
    let mut lines = lines.into_iter().peekable();
    let mut first = true;
    while let Some(line) = lines.next() {
        let several = !first || lines.peek().is_some();
        let mut input = Cursor { rest: line };
        if first {
            input.skip_sp();
        } else {
            input.skip_ows();
        }
        first = false;
        if input.rest.is_empty() {
            if several {
                return None;
            }
            continue;
        }
        parse_members(&mut input, &mut priority).ok()?;
    }
    Some(priority)
}

/// Parses a non-empty run of dictionary members to the end of `input`
/// (RFC 8941 §4.2.2), applying the priority ones to `priority`.
fn parse_members(input: &mut Cursor<'_>, priority: &mut Priority) -> Result<(), Malformed> {
    loop {
        let key = parse_key(input)?;
        let value = if input.eat(b'=') {
            parse_item_or_inner_list(input)?
        } else {
            skip_parameters(input)?;
            MemberValue::Item(BareItem::Boolean(true))
        };
        // A member replaces any earlier one of its key, even when its own
        // value is then ignored.
        match key {
            b"u" => {
                priority.urgency = match value {
                    MemberValue::Item(BareItem::Integer(u)) => u8::try_from(u)
                        .ok()
                        .filter(|&u| u <= LOWEST_URGENCY)
                        .unwrap_or(DEFAULT_URGENCY),
                    _ => DEFAULT_URGENCY,
                }
            }
            b"i" => {
                priority.incremental = matches!(value, MemberValue::Item(BareItem::Boolean(true)))
            }
            _ => {}
        }
        input.skip_ows();
        if input.rest.is_empty() {
            return Ok(());
        }
        if !input.eat(b',') {
            return Err(Malformed);
        }
        input.skip_ows();
        if input.rest.is_empty() {
            return Err(Malformed);
        }
    }
}

/// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
/// (RFC 8941 §3.1.2).
fn parse_key<'a>(input: &mut Cursor<'a>) -> Result<&'a [u8], Malformed> {
    if !matches!(input.peek(), Some(b'a'..=b'z' | b'*')) {
        return Err(Malformed);
    }
    Ok(input.take_while(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')))
}

fn parse_item_or_inner_list(input: &mut Cursor<'_>) -> Result<MemberValue, Malformed> {
    if input.peek() == Some(b'(') {
        parse_inner_list(input)?;
        Ok(MemberValue::InnerList)
    } else {
        parse_item(input).map(MemberValue::Item)
    }
}

/// An inner list (RFC 8941 §4.2.1.2): items separated by spaces in
/// parentheses, then parameters; its items are checked, not kept.
fn parse_inner_list(input: &mut Cursor<'_>) -> Result<(), Malformed> {
    input.advance(1);
    loop {
        input.skip_sp();
        match input.peek() {
            None => return Err(Malformed),
            Some(b')') => {
                input.advance(1);
                return skip_parameters(input);
            }
            Some(_) => {
                parse_item(input)?;
                if !matches!(input.peek(), Some(b' ' | b')')) {
                    return Err(Malformed);
                }
            }
        }
    }
}

/// An item: a bare item and its parameters (RFC 8941 §4.2.3).
fn parse_item(input: &mut Cursor<'_>) -> Result<BareItem, Malformed> {
    let item = parse_bare_item(input)?;
    skip_parameters(input)?;
    Ok(item)
}

/// Parameters (RFC 8941 §4.2.3.2): checked, then dropped, since no
/// priority has any.
fn skip_parameters(input: &mut Cursor<'_>) -> Result<(), Malformed> {
    while input.eat(b';') {
        input.skip_sp();
        parse_key(input)?;
        if input.eat(b'=') {
            parse_bare_item(input)?;
        }
    }
    Ok(())
}

/// A bare item (RFC 8941 §4.2.3.1), chosen by its first byte.
fn parse_bare_item(input: &mut Cursor<'_>) -> Result<BareItem, Malformed> {
    match input.peek() {
        Some(b'-' | b'0'..=b'9') => parse_number(input),
        Some(b'"') => parse_string(input).map(|()| BareItem::Other),
        Some(b'A'..=b'Z' | b'a'..=b'z' | b'*') => {
            input.take_while(is_token_byte);
            Ok(BareItem::Other)
        }
        Some(b':') => parse_byte_sequence(input).map(|()| BareItem::Other),
        Some(b'?') => parse_boolean(input).map(BareItem::Boolean),
        _ => Err(Malformed),
    }
}

/// An integer or a decimal (RFC 8941 §4.2.4): at most 15 digits; a
/// decimal has at most 12 before the point and 1 to 3 after it.
fn parse_number(input: &mut Cursor<'_>) -> Result<BareItem, Malformed> {
    let negative = input.eat(b'-');
    if !matches!(input.peek(), Some(b'0'..=b'9')) {
        return Err(Malformed);
    }
    let integer_digits = input.take_while(|b| b.is_ascii_digit());
    if input.peek() != Some(b'.') {
        if integer_digits.len() > 15 {
            return Err(Malformed);
        }
        // At most 15 digits: no overflow.
        let magnitude = integer_digits
            .iter()
            .fold(0_i64, |n, &d| n * 10 + i64::from(d - b'0'));
        return Ok(BareItem::Integer(if negative {
            -magnitude
        } else {
            magnitude
        }));
    }
    if integer_digits.len() > 12 {
        return Err(Malformed);
    }
    input.advance(1);
    let fraction_digits = input.take_while(|b| b.is_ascii_digit());
    if fraction_digits.is_empty() || fraction_digits.len() > 3 {
        return Err(Malformed);
    }
    Ok(BareItem::Other)
}

/// A string (RFC 8941 §4.2.5): printable ASCII between double quotes,
/// where a backslash may only escape `"` or `\`.
fn parse_string(input: &mut Cursor<'_>) -> Result<(), Malformed> {
    input.advance(1);
    loop {
        let byte = input.peek().ok_or(Malformed)?;
        input.advance(1);
        match byte {
            b'"' => return Ok(()),
            b'\\' => {
                if !input.eat(b'"') && !input.eat(b'\\') {
                    return Err(Malformed);
                }
            }
            b' '..=b'~' => {}
            _ => return Err(Malformed),
        }
    }
}

/// The bytes after a token's first (RFC 8941 §3.3.4): `tchar`, `:` and `/`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b)
}

/// A byte sequence (RFC 8941 §4.2.7): base64 between colons. Only the
/// alphabet is checked: RFC 8941 asks parsers not to fail on missing `=`
/// padding or non-zero pad bits, and the bytes themselves are not needed.
fn parse_byte_sequence(input: &mut Cursor<'_>) -> Result<(), Malformed> {
    input.advance(1);
    input.take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if input.eat(b':') {
        Ok(())
    } else {
        Err(Malformed)
    }
}

/// A boolean (RFC 8941 §4.2.8): `?1` or `?0`.
fn parse_boolean(input: &mut Cursor<'_>) -> Result<bool, Malformed> {
    input.advance(1);
    if input.eat(b'1') {
        Ok(true)
    } else if input.eat(b'0') {
        Ok(false)
    } else {
        Err(Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priority(urgency: u8, incremental: bool) -> Priority {
        Priority {
            urgency,
            incremental,
        }
    }

    fn parse(value: &str) -> Option<Priority> {
        Priority::parse(value.as_bytes())
    }

    #[test]
    fn the_defaults_are_urgency_3_not_incremental() {
        assert_eq!(Priority::default(), priority(3, false));
        assert_eq!(parse(""), Some(Priority::default()));
        assert_eq!(parse("   "), Some(Priority::default()));
        assert_eq!(Priority::from_field_lines([]), Priority::default());
    }

    #[test]
    fn the_examples_of_rfc_9218() {
        // §4.1, a CSS file; §4.2, a JPEG; §8, a server's response.
        assert_eq!(parse("u=0"), Some(priority(0, false)));
        assert_eq!(parse("u=5, i"), Some(priority(5, true)));
        assert_eq!(parse("u=1"), Some(priority(1, false)));
        // §4.1: 7 is the background level.
        assert_eq!(parse("u=7"), Some(priority(7, false)));
    }

    #[test]
    fn booleans_and_urgencies_in_every_form() {
        assert_eq!(parse("i"), Some(priority(3, true)));
        assert_eq!(parse("i=?1"), Some(priority(3, true)));
        assert_eq!(parse("i=?0"), Some(priority(3, false)));
        assert_eq!(parse("i;p=1"), Some(priority(3, true)));
        assert_eq!(parse("i=?1;p"), Some(priority(3, true)));
        assert_eq!(parse("i, u=2"), Some(priority(2, true)));
        assert_eq!(parse("u=-0"), Some(priority(0, false)));
        assert_eq!(parse("u=000000000000004"), Some(priority(4, false)));
        assert_eq!(parse("u=6;x=\"y\""), Some(priority(6, false)));
    }

    #[test]
    fn values_out_of_range_or_of_another_type_are_ignored() {
        for value in [
            "u=8",
            "u=-1",
            "u=999999999999999",
            "u=-999999999999999",
            "u=2.0",
            "u=\"1\"",
            "u=one",
            "u=*",
            "u=:AQ==:",
            "u=?1",
            "u",
            "u=(1)",
            "u=()",
        ] {
            assert_eq!(parse(value), Some(priority(3, false)), "{value}");
            let with_i = format!("{value}, i");
            assert_eq!(parse(&with_i), Some(priority(3, true)), "{with_i}");
        }
        for value in [
            "i=1", "i=0", "i=\"?1\"", "i=true", "i=(?1)", "i=1.5", "i=:AA==:",
        ] {
            assert_eq!(parse(value), Some(priority(3, false)), "{value}");
            let with_u = format!("u=1, {value}");
            assert_eq!(parse(&with_u), Some(priority(1, false)), "{with_u}");
        }
    }

    #[test]
    fn the_last_value_of_a_key_counts() {
        assert_eq!(parse("u=1, u=2"), Some(priority(2, false)));
        // The dictionary holds u=9, which is ignored: not u=1.
        assert_eq!(parse("u=1, u=9"), Some(priority(3, false)));
        assert_eq!(parse("i, i=?0"), Some(priority(3, false)));
        assert_eq!(parse("i=?0, i"), Some(priority(3, true)));
        assert_eq!(parse("i, i=5"), Some(priority(3, false)));
    }

    #[test]
    fn unknown_keys_and_parameters_are_ignored() {
        assert_eq!(
            parse("x=1, u=2, visible, *y=(a \"b\" 3.5);q=?0, z.z_z-9=:cGFkZGVk:, i"),
            Some(priority(2, true))
        );
        assert_eq!(parse("u=4;i=?1;u=0"), Some(priority(4, false)));
        assert_eq!(
            parse("a=\"quoted \\\" and \\\\ \", b=tok/en:with*stuff, c=-12.345, d=?0"),
            Some(priority(3, false))
        );
        assert_eq!(parse("l=( 1  2 ), u=5"), Some(priority(5, false)));
        assert_eq!(parse("b=::, u=1"), Some(priority(1, false)));
    }

    #[test]
    fn whitespace_where_rfc_8941_allows_it() {
        assert_eq!(parse("u=1,i"), Some(priority(1, true)));
        assert_eq!(parse("u=1 ,\t i"), Some(priority(1, true)));
        assert_eq!(parse("  u=1"), Some(priority(1, false)));
        assert_eq!(parse("u=1  "), Some(priority(1, false)));
        assert_eq!(parse("u=1\t"), Some(priority(1, false)));
        assert_eq!(parse("u=1;  p"), Some(priority(1, false)));
    }

    #[test]
    fn a_value_that_fails_to_parse_is_ignored_whole() {
        for value in [
            "\tu=1",
            "u = 1",
            "u =1",
            "u= 1",
            "u=1,",
            "u=1, ",
            ",u=1",
            "u=1,,i",
            "u=1 i",
            "u=1;",
            "u=1;P",
            "U=1",
            "1=1",
            "u=",
            "u=-",
            "u=1.",
            "u=1.2345",
            "u=1234567890123456",
            "u=1234567890123.1",
            "u=1a",
            "u=?2",
            "u=?",
            "u=\"unterminated",
            "u=\"bad \\n escape\"",
            "u=\"tab\tinside\"",
            "u=:unterminated",
            "u=:b@d:",
            "u=(1",
            "u=(1,2)",
            "u=(1)2",
            "u=#",
            "u=1, é=1",
            "u=\"é\"",
            "i=?1 ,",
            "u=1\u{b}",
        ] {
            assert_eq!(parse(value), None, "{value:?}");
            assert_eq!(
                Priority::from_field_lines([value.as_bytes()]),
                Priority::default(),
                "{value:?}"
            );
        }
        // A PRIORITY_UPDATE payload is bytes, not necessarily text.
        assert_eq!(Priority::parse(b"u=1, \xff"), None);
    }

    #[test]
    fn several_field_lines_are_one_dictionary() {
        let lines = |lines: &[&'static str]| {
            Priority::from_field_lines(lines.iter().map(|line| line.as_bytes()))
        };
        assert_eq!(lines(&["u=1", "i"]), priority(1, true));
        assert_eq!(lines(&["u=1", "u=5"]), priority(5, false));
        assert_eq!(lines(&["u=1, i", "i=?0"]), priority(1, false));
        // Joined by ", ", a later line may start with OWS.
        assert_eq!(lines(&["u=2", "\ti"]), priority(2, true));
        // An empty line leaves a comma with nothing after it: malformed.
        assert_eq!(lines(&["u=1", ""]), Priority::default());
        assert_eq!(lines(&["", "u=1"]), Priority::default());
        // One bad line spoils them all.
        assert_eq!(lines(&["u=1", "u=="]), Priority::default());
        assert_eq!(lines(&["u=1,", "i"]), Priority::default());
    }
}
