//! Maglev consistent hashing (Eisenbud et al., NSDI 2016), weighted.
//!
//! Each member walks its own permutation of the table and claims free slots;
//! a member's turn comes round in proportion to its weight. Removing a member
//! only moves the keys that member owned, which is what makes it suitable for
//! persistence without a shared table.

use super::hash64;

pub struct Maglev {
    table: Box<[u16]>,
}

impl Maglev {
    /// `keys` identify the members (stable across reloads); `weights` > 0.
    pub fn build(keys: &[String], weights: &[u32]) -> Maglev {
        let n = keys.len();
        if n == 0 {
            return Maglev {
                table: Box::new([]),
            };
        }
        let m: u64 = if n <= 40 { 4099 } else { 65537 };
        let offsets: Vec<u64> = keys
            .iter()
            .map(|k| hash64(k.as_bytes(), 0xA5) % m)
            .collect();
        let skips: Vec<u64> = keys
            .iter()
            .map(|k| hash64(k.as_bytes(), 0x5A) % (m - 1) + 1)
            .collect();
        let max_w = weights.iter().copied().max().unwrap_or(1).max(1) as u64;
        let mut next = vec![0u64; n];
        let mut credit = vec![0u64; n];
        let mut table = vec![u16::MAX; m as usize];
        let mut filled = 0u64;
        'outer: loop {
            for i in 0..n {
                credit[i] += weights[i].max(1) as u64;
                if credit[i] < max_w {
                    continue;
                }
                credit[i] -= max_w;
                loop {
                    let slot = (offsets[i] + next[i] * skips[i]) % m;
                    next[i] += 1;
                    if table[slot as usize] == u16::MAX {
                        table[slot as usize] = i as u16;
                        filled += 1;
                        break;
                    }
                }
                if filled == m {
                    break 'outer;
                }
            }
        }
        Maglev {
            table: table.into_boxed_slice(),
        }
    }

    /// Rewrites every table entry through `f`.
    pub fn map_entries(&mut self, f: impl Fn(usize) -> usize) {
        for e in self.table.iter_mut() {
            *e = f(*e as usize) as u16;
        }
    }

    /// The member index owning `hash`, or None for an empty table.
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        Some(self.table[(hash % self.table.len() as u64) as usize] as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    #[test]
    fn weighted_share() {
        let k = keys(3);
        let t = Maglev::build(&k, &[1, 1, 2]);
        let mut c = [0usize; 3];
        for h in 0..100_000u64 {
            c[t.lookup(hash64(&h.to_le_bytes(), 1)).unwrap()] += 1;
        }
        assert!(c[2] > c[0] * 17 / 10 && c[2] < c[0] * 23 / 10, "{c:?}");
    }

    #[test]
    fn removing_a_member_moves_few_keys() {
        let k = keys(5);
        let a = Maglev::build(&k, &[1; 5]);
        let b = Maglev::build(&k[..4], &[1; 4]);
        let mut moved = 0;
        for h in 0..10_000u64 {
            let h = hash64(&h.to_le_bytes(), 1);
            let (x, y) = (a.lookup(h).unwrap(), b.lookup(h).unwrap());
            if x != 4 && x != y {
                moved += 1;
            }
        }
        // Keys that were not on the removed member should mostly stay.
        assert!(moved < 10_000 / 20, "moved {moved}");
    }
}
