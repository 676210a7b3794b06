//! A fast per-thread pseudo-random number generator (splitmix64, seeded
//! from the kernel once per thread): access-log sampling, trace ids, the
//! Sec-WebSocket-Key of a WebSocket opened over HTTP/2. Not for secrets.
//! Its own module, below the ones that use it, so that `http` and
//! `accesslog` do not import each other for it.

use std::cell::Cell;

thread_local! {
    /// splitmix64 state, seeded once per thread from the kernel.
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid writable buffer of b.len() bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_le_bytes(b);
    }
    // No getrandom (very old kernels): the time and this thread's stack
    // address differ between threads and runs.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (&b as *const _ as u64).rotate_left(32)
}

/// A fast per-thread pseudo-random number (splitmix64): sampling and trace
/// ids, not secrets.
pub fn next_u64() -> u64 {
    RNG.with(|s| {
        let mut z = s.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        s.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}
