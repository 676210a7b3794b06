//! A monotonic millisecond clock shared by every thread (health state,
//! ejection deadlines, slow start and request deadlines are stored as these
//! numbers in atomics and registries).
//!
//! It reads CLOCK_MONOTONIC_COARSE: the kernel's last tick (1-4 ms
//! resolution), which the vDSO returns without reading the TSC. Every use is
//! a timeout or a ramp measured in tens of milliseconds or more, and the
//! request path reads it several times per request (it was 1.5 % of a
//! worker's CPU with the precise clock). Latency histograms use `Instant`.

/// Milliseconds on the coarse monotonic clock; never 0 so 0 can mean "never".
pub fn now_ms() -> u64 {
    coarse_ms(libc::CLOCK_MONOTONIC_COARSE) as u64 + 1
}

/// Milliseconds since the Unix epoch from the kernel's last tick (1-4 ms
/// resolution, no TSC read): for ages counted in seconds on the request
/// path (the cache).
pub fn unix_ms_coarse() -> i64 {
    coarse_ms(libc::CLOCK_REALTIME_COARSE)
}

fn coarse_ms(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the coarse clocks are
    // always available on Linux, and on failure `ts` stays zeroed.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// (year, month, day) of a day number counted from 1970-01-01, proleptic
/// Gregorian (H. Hinnant's civil_from_days): certificate expiry in
/// messages, HTTP dates.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Microseconds since the Unix epoch (wall clock): when a logged
/// connection or request began.
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Seconds since the Unix epoch (wall clock, for dates people read).
pub fn unix_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
