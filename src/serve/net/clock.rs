//! The clocks of the event loops, read once per loop turn through the vDSO
//! (no syscall; rustix calls the vDSO as glibc does).

use rustix::time::{ClockId, clock_gettime};

/// Monotonic milliseconds, for deadlines.
pub fn monotonic_ms() -> u64 {
    let ts = clock_gettime(ClockId::MonotonicCoarse);
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Seconds since the epoch, for `Date` and the log.
pub fn unix_seconds() -> i64 {
    clock_gettime(ClockId::RealtimeCoarse).tv_sec
}

/// Microseconds of the monotonic clock, precise (a vDSO call): read only
/// when an access log wants request durations.
pub fn monotonic_us() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}
