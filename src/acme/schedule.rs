//! When to renew and when to try again: the rules, apart from the clock
//! and the network so that they can be tested as they are.

use std::time::Duration;

/// The first wait after a failure; each further failure doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(60);
/// The longest wait after failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 60 * 60);

/// The wait after the `failures`-th failure in a row (from 1): a minute,
/// doubling up to a day; longer when the CA said so (`Retry-After`, also
/// on a 429), however long.
pub fn backoff(failures: u32, retry_after: Option<Duration>) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    doubled
        .min(MAX_BACKOFF)
        .max(retry_after.unwrap_or_default())
}

/// When a certificate valid from `not_before` to `not_after` (Unix
/// seconds) is renewed without renewal information: when a third of its
/// lifetime is left.
pub fn one_third_left(not_before: i64, not_after: i64) -> i64 {
    not_after - (not_after - not_before).max(0) / 3
}

/// The latest moment a renewal starts, whatever window a CA suggests:
/// with a tenth of the lifetime left, time for a failed order to be tried
/// again (and for the `replaces` of the next to name a live certificate).
pub fn latest_renewal(not_before: i64, not_after: i64) -> i64 {
    not_after - ((not_after - not_before).max(0) + 9) / 10
}

/// The moment to renew within a suggested window (RFC 9773 §4.2): chosen
/// uniformly (from `random`) in the part of `[start, end]` not yet past;
/// now when the whole window is past.
pub fn in_window(start: i64, end: i64, now: i64, random: u64) -> i64 {
    let from = start.max(now);
    if end <= from {
        return now;
    }
    let span = (end - from) as u64 + 1;
    from + (random % span) as i64
}

/// A random number from the system's generator (for the renewal moment
/// and lock owner names).
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // The system generator failing leaves zeros: a window's start, still a
    // valid moment.
    let _ = aws_lc_rs::rand::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_a_minute_to_a_day_and_honours_retry_after() {
        let secs = |f, ra: Option<u64>| backoff(f, ra.map(Duration::from_secs)).as_secs();
        assert_eq!(
            (1..=12).map(|f| secs(f, None)).collect::<Vec<_>>(),
            [
                60, 120, 240, 480, 960, 1920, 3840, 7680, 15360, 30720, 61440, 86400
            ]
        );
        assert_eq!(secs(1000, None), 86400);
        assert_eq!(secs(1, Some(3600)), 3600);
        assert_eq!(secs(3, Some(10)), 240);
        assert_eq!(secs(20, Some(3 * 86400)), 3 * 86400);
    }

    #[test]
    fn without_renewal_information_a_third_of_the_lifetime_is_left() {
        assert_eq!(one_third_left(0, 90 * 86400), 60 * 86400);
        assert_eq!(one_third_left(1000, 1030), 1020);
        assert_eq!(one_third_left(1000, 900), 900);
        assert_eq!(latest_renewal(0, 90 * 86400), 81 * 86400);
        assert_eq!(latest_renewal(1000, 1030), 1027);
        // A lifetime of seconds still leaves one.
        assert_eq!(latest_renewal(1000, 1009), 1008);
    }

    #[test]
    fn the_moment_is_in_the_part_of_the_window_not_past() {
        for random in [0, 1, 7, u64::MAX, 123_456_789] {
            let t = in_window(100, 200, 50, random);
            assert!((100..=200).contains(&t), "{t}");
            let t = in_window(100, 200, 150, random);
            assert!((150..=200).contains(&t), "{t}");
            assert_eq!(in_window(100, 200, 250, random), 250);
            assert_eq!(in_window(100, 200, 200, random), 200);
        }
        assert_eq!(in_window(100, 200, 50, 0), 100);
        assert_eq!(in_window(100, 200, 50, 100), 200);
    }
}
