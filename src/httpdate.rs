//! HTTP dates (RFC 9110 §5.6.7): the IMF-fixdate that `Last-Modified` (at
//! build time) and `Date` (at run time) carry, and parsing of the three
//! formats a request may use. No allocation: the server formats and parses
//! on its hot path.

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const WEEKDAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];

fn two(out: &mut [u8], v: i64) {
    out[0] = b'0' + (v / 10) as u8;
    out[1] = b'0' + (v % 10) as u8;
}

/// Writes the 29-byte IMF-fixdate of `unix` (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn format_imf(unix: i64, out: &mut [u8; 29]) {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    out.copy_from_slice(b"Thu, 01 Jan 1970 00:00:00 GMT");
    out[0..3].copy_from_slice(WEEKDAYS[days.rem_euclid(7) as usize]);
    two(&mut out[5..7], day);
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    let y = year.clamp(0, 9999);
    two(&mut out[12..14], y / 100);
    two(&mut out[14..16], y % 100);
    two(&mut out[17..19], secs / 3600);
    two(&mut out[20..22], secs / 60 % 60);
    two(&mut out[23..25], secs % 60);
}

/// Writes the 20-byte RFC 3339 UTC time of `unix` (`1994-11-06T08:49:37Z`),
/// as log pipelines parse it.
pub fn format_rfc3339(unix: i64, out: &mut [u8; 20]) {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    out.copy_from_slice(b"1970-01-01T00:00:00Z");
    let y = year.clamp(0, 9999);
    two(&mut out[0..2], y / 100);
    two(&mut out[2..4], y % 100);
    two(&mut out[5..7], month);
    two(&mut out[8..10], day);
    two(&mut out[11..13], secs / 3600);
    two(&mut out[14..16], secs / 60 % 60);
    two(&mut out[17..19], secs % 60);
}

fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 4 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |acc, d| acc * 10 + i64::from(d - b'0')))
}

fn month_index(b: &[u8]) -> Option<i64> {
    MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(b))
        .map(|i| i as i64 + 1)
}

fn time_of_day(b: &[u8]) -> Option<i64> {
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (digits(&b[0..2])?, digits(&b[3..5])?, digits(&b[6..8])?);
    (h < 24 && m < 60 && s < 61).then_some(h * 3600 + m * 60 + s)
}

fn assemble(year: i64, month: i64, day: i64, tod: i64) -> Option<i64> {
    (1..=31)
        .contains(&day)
        .then(|| days_from_civil(year, month, day) * 86_400 + tod)
}

/// Parses an HTTP-date in any of the three formats of RFC 9110 §5.6.7 into
/// unix seconds; `None` when it is not a valid date (the header is then
/// ignored, as the RFC requires).
pub fn parse_http_date(value: &[u8]) -> Option<i64> {
    let v = value.trim_ascii();
    let mut parts = v.split(|&c| c == b' ').filter(|p| !p.is_empty());
    let first = parts.next()?;
    if first.len() == 4 && first[3] == b',' {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        let day = digits(parts.next()?)?;
        let month = month_index(parts.next()?)?;
        let year = digits(parts.next()?)?;
        let tod = time_of_day(parts.next()?)?;
        (parts.next()? == b"GMT" && parts.next().is_none())
            .then(|| assemble(year, month, day, tod))?
    } else if first.last() == Some(&b',') {
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        let date = parts.next()?;
        let mut dmy = date.split(|&c| c == b'-');
        let day = digits(dmy.next()?)?;
        let month = month_index(dmy.next()?)?;
        let yy = dmy.next()?;
        if yy.len() != 2 || dmy.next().is_some() {
            return None;
        }
        // Two-digit years: RFC 9110 says interpret a year more than 50 years
        // in the future as the past century; 70..99 → 19xx is that rule for
        // any date this server will meet.
        let y = digits(yy)?;
        let year = if y >= 70 { 1900 + y } else { 2000 + y };
        let tod = time_of_day(parts.next()?)?;
        (parts.next()? == b"GMT" && parts.next().is_none())
            .then(|| assemble(year, month, day, tod))?
    } else {
        // asctime: Sun Nov  6 08:49:37 1994
        let month = month_index(parts.next()?)?;
        let day = digits(parts.next()?)?;
        let tod = time_of_day(parts.next()?)?;
        let year = digits(parts.next()?)?;
        parts
            .next()
            .is_none()
            .then(|| assemble(year, month, day, tod))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        let mut out = [0u8; 20];
        format_rfc3339(784111777, &mut out);
        assert_eq!(&out, b"1994-11-06T08:49:37Z");
        format_rfc3339(0, &mut out);
        assert_eq!(&out, b"1970-01-01T00:00:00Z");
    }

    #[test]
    fn formats_and_parses_all_three_forms() {
        let mut out = [0u8; 29];
        format_imf(784_111_777, &mut out);
        assert_eq!(&out, b"Sun, 06 Nov 1994 08:49:37 GMT");
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(s.as_bytes()), Some(784_111_777), "{s}");
        }
        assert_eq!(parse_http_date(b"yesterday"), None);
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 25:49:37 GMT"), None);
    }

    #[test]
    fn round_trips_many_days() {
        let mut out = [0u8; 29];
        for unix in (0..4_000_000_000i64).step_by(86_399 * 37) {
            format_imf(unix, &mut out);
            assert_eq!(parse_http_date(&out), Some(unix));
        }
    }
}
