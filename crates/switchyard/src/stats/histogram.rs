//! Latency histograms in microseconds, lock-free, one per worker slot.
//!
//! `Histogram` is log-linear (exact below 16 µs, then eight sub-buckets per
//! power of two, at most 12.5 % error): the quantiles of `/stats`. It also
//! keeps `Buckets`, the fixed buckets a Prometheus histogram is rendered
//! from, whose bounds do not fall on log-linear bucket edges. Recording in
//! both is three relaxed atomic adds on the worker's own slot.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Sharded;

const BUCKETS: usize = 16 + 36 * 8;

/// Upper bounds (µs, inclusive) of the fixed buckets, from 0.5 ms to 10 s;
/// one more bucket past the last takes the rest (`+Inf`).
pub const BOUNDS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];
const FIXED: usize = BOUNDS_US.len() + 1;

/// Fixed-bucket latency counts and their sum, for Prometheus histograms.
#[derive(Default)]
pub struct Buckets {
    counts: [AtomicU64; FIXED],
    sum_us: AtomicU64,
}

impl Buckets {
    #[inline]
    pub fn record(&self, us: u64) {
        let i = BOUNDS_US.partition_point(|&b| b < us);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub(super) fn merge_into(&self, into: &mut BucketValues) {
        for (i, c) in self.counts.iter().enumerate() {
            into.counts[i] = into.counts[i].wrapping_add(c.load(Ordering::Relaxed));
        }
        into.sum_us = into
            .sum_us
            .wrapping_add(self.sum_us.load(Ordering::Relaxed));
    }
}

/// `Buckets` summed over the worker slots.
#[derive(Default, Debug, Clone, Copy)]
pub struct BucketValues {
    /// Per bucket, not cumulative: `counts[i]` holds the values in
    /// (`BOUNDS_US[i-1]`, `BOUNDS_US[i]`], the last one those above 10 s.
    pub counts: [u64; FIXED],
    pub sum_us: u64,
}

impl BucketValues {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// (upper bound in seconds, `None` for `+Inf`; cumulative count) per bucket.
    pub fn cumulative(&self) -> impl Iterator<Item = (Option<f64>, u64)> + '_ {
        let mut seen = 0u64;
        self.counts.iter().enumerate().map(move |(i, c)| {
            seen += c;
            (BOUNDS_US.get(i).map(|&b| b as f64 / 1e6), seen)
        })
    }

    /// Sum of the recorded values in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_us as f64 / 1e6
    }
}

pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    fixed: Buckets,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            fixed: Buckets::default(),
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
        self.fixed.record(us);
    }

    /// Adds this histogram's counts into `into` (bucket-wise).
    pub fn merge_into(&self, into: &mut Vec<u64>) {
        into.resize(BUCKETS, 0);
        for (i, b) in self.buckets.iter().enumerate() {
            into[i] += b.load(Ordering::Relaxed);
        }
    }
}

impl Sharded<Histogram> {
    /// The fixed buckets summed over the slots.
    pub fn read_buckets(&self) -> BucketValues {
        let mut v = BucketValues::default();
        for h in self.all() {
            h.fixed.merge_into(&mut v);
        }
        v
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

    #[test]
    fn fixed_buckets_are_inclusive_upper_bounds() {
        let b = Buckets::default();
        for us in [
            0,
            500,
            501,
            1_000,
            9_999_999,
            10_000_000,
            10_000_001,
            u64::MAX / 2,
        ] {
            b.record(us);
        }
        let mut v = BucketValues::default();
        b.merge_into(&mut v);
        assert_eq!(v.counts[0], 2); // 0 and 500: le 0.0005
        assert_eq!(v.counts[1], 2); // 501 and 1000: le 0.001
        assert_eq!(v.counts[13], 2); // le 10
        assert_eq!(v.counts[14], 2); // +Inf
        assert_eq!(v.count(), 8);
        let cum: Vec<_> = v.cumulative().collect();
        assert_eq!(cum.len(), 15);
        assert_eq!(cum[0], (Some(0.0005), 2));
        assert_eq!(cum[14], (None, 8));
        assert!(cum.windows(2).all(|w| w[0].1 <= w[1].1));
    }
}
