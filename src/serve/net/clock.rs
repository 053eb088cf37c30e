//! The clocks of the event loops, read once per loop turn through the vDSO
//! (no system call; `sys::clock_gettime`).

use crate::sys::{Clock, clock_gettime};

/// Monotonic milliseconds, for deadlines.
pub fn monotonic_ms() -> u64 {
    let (sec, nsec) = clock_gettime(Clock::MonotonicCoarse);
    sec as u64 * 1000 + nsec as u64 / 1_000_000
}

/// Seconds since the epoch, for `Date` and the log.
pub fn unix_seconds() -> i64 {
    clock_gettime(Clock::RealtimeCoarse).0
}

/// Microseconds of the monotonic clock, precise (a vDSO call): read only
/// when an access log wants request durations.
pub fn monotonic_us() -> u64 {
    let (sec, nsec) = clock_gettime(Clock::Monotonic);
    sec as u64 * 1_000_000 + nsec as u64 / 1_000
}
