//! A log-linear latency histogram in microseconds: exact below 16 µs, then
//! eight sub-buckets per power of two (at most 12.5 % error), lock-free.

use std::sync::atomic::{AtomicU64, Ordering};

const BUCKETS: usize = 16 + 36 * 8;

pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn index(us: u64) -> usize {
    if us < 16 {
        return us as usize;
    }
    let b = 63 - us.leading_zeros() as usize; // b >= 4
    let sub = ((us >> (b - 3)) & 7) as usize;
    (16 + (b - 4) * 8 + sub).min(BUCKETS - 1)
}

/// Lower bound of a bucket in microseconds.
fn lower(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let b = (i - 16) / 8 + 4;
    let sub = ((i - 16) % 8) as u64;
    (1u64 << b) + (sub << (b - 3))
}

impl Histogram {
    #[inline]
    pub fn record(&self, us: u64) {
        self.buckets[index(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds this histogram's counts into `into` (bucket-wise).
    pub fn merge_into(&self, into: &mut Vec<u64>) {
        into.resize(BUCKETS, 0);
        for (i, b) in self.buckets.iter().enumerate() {
            into[i] += b.load(Ordering::Relaxed);
        }
    }
}

/// Quantile `q` (0..=1) of merged bucket counts, in microseconds.
pub fn quantile(counts: &[u64], q: f64) -> u64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return lower(i);
        }
    }
    lower(counts.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for us in [0u64, 1, 15, 16, 17, 100, 1000, 12345, 1_000_000, 60_000_000] {
            let i = index(us);
            assert!(i >= last);
            last = i;
            let lo = lower(i);
            assert!(lo <= us, "{us} {lo}");
            assert!(us - lo <= us / 8 + 1, "{us} {lo}");
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        for us in 1..=1000 {
            h.record(us);
        }
        let mut c = Vec::new();
        h.merge_into(&mut c);
        let p50 = quantile(&c, 0.5);
        assert!((440..=500).contains(&p50), "{p50}");
        let p99 = quantile(&c, 0.99);
        assert!((870..=990).contains(&p99), "{p99}");
    }
}
