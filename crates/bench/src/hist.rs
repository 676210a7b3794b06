//! A log-linear histogram in the spirit of HdrHistogram: values below 2048 are
//! exact, larger ones keep 11 significant bits (under 0.1 % error), so one
//! histogram covers 1 µs to an hour in ~190 KB and merges by adding counts.
//! Written here rather than pulled in to keep the dependency tree small.

const SUB_BITS: u32 = 11;
const SUB: u64 = 1 << SUB_BITS;
const HALF: u64 = SUB / 2;
/// Values are clamped here (2^32 µs is over an hour).
const MAX_VALUE: u64 = (1 << 32) - 1;

#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

fn index_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let mag = 63 - v.leading_zeros();
    let shift = mag - SUB_BITS + 1;
    (shift as u64 * HALF + (v >> shift)) as usize
}

/// Highest value that lands in bucket `idx` (what HdrHistogram reports).
fn value_of(idx: usize) -> u64 {
    let idx = idx as u64;
    if idx < SUB {
        return idx;
    }
    let shift = idx / HALF - 1;
    let sub = idx - shift * HALF;
    ((sub + 1) << shift) - 1
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; index_of(MAX_VALUE) + 1],
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    #[inline]
    pub fn record(&mut self, v: u64) {
        let v = v.min(MAX_VALUE);
        self.counts[index_of(v)] += 1;
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v as u128;
    }

    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.total += o.total;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
    }

    pub fn count(&self) -> u64 {
        self.total
    }
    pub fn max(&self) -> u64 {
        self.max
    }
    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// Value at percentile `p` (0..=100), capped at the true maximum.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let want = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return value_of(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn buckets_are_monotonic_and_precise() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            2047,
            2048,
            2049,
            4095,
            4096,
            100_000,
            1 << 31,
            MAX_VALUE,
        ] {
            let i = index_of(v);
            assert!(i >= last);
            last = i;
            let hi = value_of(i);
            assert!(hi >= v, "{v} -> {hi}");
            assert!((hi - v) as f64 <= v as f64 / 1000.0 + 1.0, "{v} -> {hi}");
        }
        let mut h = Histogram::new();
        for v in 1..=1000 {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), 500);
        assert_eq!(h.percentile(99.0), 990);
        assert_eq!(h.percentile(100.0), 1000);
        h.record(500_000);
        assert_eq!(h.max(), 500_000);
    }
}
