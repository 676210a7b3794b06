//! A monotonic millisecond clock shared by every thread (health state,
//! ejection deadlines and slow start are stored as these numbers in atomics).

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Instant> = OnceLock::new();

/// Milliseconds since the process started; never 0 so 0 can mean "never".
pub fn now_ms() -> u64 {
    let start = START.get_or_init(Instant::now);
    start.elapsed().as_millis() as u64 + 1
}
