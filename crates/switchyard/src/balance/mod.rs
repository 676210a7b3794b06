//! Member selection: the load-balancing algorithms, backup members, slow
//! start and the member state the data path reads without locks.
//!
//! Member state (health, ejection, in-flight count) lives in atomics shared
//! by every worker and written by the health checker and by passive checks.
//! Per-algorithm cursors (round robin position, smooth weighted round robin
//! current weights) are per worker: each worker balances its own share of the
//! traffic, so nothing on the pick path is shared but the in-flight counts.

mod maglev;
pub mod persist;

use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

pub use maglev::Maglev;

use crate::clock::now_ms;
use crate::stats::Sharded;

/// How a pool picks among its members.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    #[default]
    RoundRobin,
    WeightedRoundRobin,
    LeastConnections,
    /// Power of two random choices, least outstanding requests.
    P2c,
    /// Maglev consistent hashing on the pool's hash key.
    ConsistentHash,
}

impl Algorithm {
    /// As the configuration spells it (and the API, `ctl` and `stats`).
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::RoundRobin => "round-robin",
            Algorithm::WeightedRoundRobin => "weighted-round-robin",
            Algorithm::LeastConnections => "least-connections",
            Algorithm::P2c => "p2c",
            Algorithm::ConsistentHash => "consistent-hash",
        }
    }
}

/// State of one member that outlives config reloads (keyed by pool name and
/// address) and is shared by every worker.
#[derive(Debug)]
pub struct MemberState {
    /// Result of active health checks; true when the pool has none.
    pub healthy: AtomicBool,
    /// Passive ejection: the member is out until this clock time (ms).
    pub ejected_until_ms: AtomicU64,
    pub consecutive_failures: AtomicU32,
    /// Clock time (ms) the member last came back, for slow start; 0 = always up.
    pub up_since_ms: AtomicU64,
    /// Requests in flight to this member, on all workers.
    pub inflight: AtomicU64,
    /// Consecutive active-check results, owned by the health checker.
    pub check_ok_streak: AtomicU32,
    pub check_fail_streak: AtomicU32,
    /// Connects by traffic (not checks) that failed in a row, counted with
    /// or without passive health; a connect that succeeds resets it. It
    /// takes nothing out of rotation: it makes a member that refuses every
    /// connection visible (`failing`) in a pool without checks.
    pub connect_fail_streak: AtomicU32,
    /// Run-time administration (admin API): the state an operator set, a
    /// health verdict forced over the checks, and a weight replacing the
    /// configured one. All survive a reload that keeps the member.
    admin: AtomicU8,
    forced: AtomicU8,
    /// 0: none; else the run-time weight plus one (weight 0 is allowed).
    weight_override: AtomicU32,
    /// The configured weight when the override was set: a reload that
    /// changes the member's weight in the file drops the override.
    weight_override_base: AtomicU32,
}

/// What an operator set for a member at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// Serves when healthy.
    Enabled,
    /// Maintenance: takes nothing new, its idle connections are closed.
    Disabled,
    /// Takes nothing new; requests in flight finish. Reported as drained
    /// once none is left and no connection is in use.
    Draining,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Enabled => "enabled",
            AdminState::Disabled => "disabled",
            AdminState::Draining => "draining",
        }
    }
}

/// A health verdict forced over the active and passive checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForcedHealth {
    Auto,
    Up,
    Down,
}

impl Default for MemberState {
    fn default() -> Self {
        MemberState {
            healthy: AtomicBool::new(true),
            ejected_until_ms: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            up_since_ms: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
            check_ok_streak: AtomicU32::new(0),
            check_fail_streak: AtomicU32::new(0),
            connect_fail_streak: AtomicU32::new(0),
            admin: AtomicU8::new(0),
            forced: AtomicU8::new(0),
            weight_override: AtomicU32::new(0),
            weight_override_base: AtomicU32::new(0),
        }
    }
}

impl ForcedHealth {
    pub fn as_str(self) -> &'static str {
        match self {
            ForcedHealth::Auto => "auto",
            ForcedHealth::Up => "up",
            ForcedHealth::Down => "down",
        }
    }
}

/// A member whose last this many connects all failed is reported as
/// `failing`.
pub const FAILING_AFTER: u32 = 3;

impl MemberState {
    /// A connect to the member failed (refused, timed out, TLS handshake).
    #[inline]
    pub fn connect_failed(&self) {
        self.connect_fail_streak.fetch_add(1, Ordering::Relaxed);
    }

    /// A connect to the member succeeded: the failure streak ends. Reads
    /// first so the common case writes nothing to the shared line.
    #[inline]
    pub fn connected(&self) {
        if self.connect_fail_streak.load(Ordering::Relaxed) != 0 {
            self.connect_fail_streak.store(0, Ordering::Relaxed);
        }
    }

    /// The last `FAILING_AFTER` connects or more all failed.
    pub fn failing(&self) -> bool {
        self.connect_fail_streak.load(Ordering::Relaxed) >= FAILING_AFTER
    }

    /// May take new requests: enabled, and healthy (or forced up).
    #[inline]
    pub fn is_up(&self, now: u64) -> bool {
        self.admin.load(Ordering::Relaxed) == 0 && self.healthy_at(now)
    }

    /// The health verdict, forced or from the checks.
    pub fn healthy_at(&self, now: u64) -> bool {
        match self.forced() {
            ForcedHealth::Up => true,
            ForcedHealth::Down => false,
            ForcedHealth::Auto => {
                self.healthy.load(Ordering::Relaxed)
                    && self.ejected_until_ms.load(Ordering::Relaxed) <= now
            }
        }
    }

    pub fn admin(&self) -> AdminState {
        match self.admin.load(Ordering::Relaxed) {
            0 => AdminState::Enabled,
            1 => AdminState::Disabled,
            _ => AdminState::Draining,
        }
    }

    /// Sets the run-time state. Enabling a member that was out starts its
    /// slow start, as a recovery from a failed health check does.
    pub fn set_admin(&self, a: AdminState) {
        let v = match a {
            AdminState::Enabled => 0,
            AdminState::Disabled => 1,
            AdminState::Draining => 2,
        };
        let was = self.admin.swap(v, Ordering::Relaxed);
        if v == 0 && was != 0 {
            self.up_since_ms.store(now_ms().max(1), Ordering::Relaxed);
        }
    }

    pub fn forced(&self) -> ForcedHealth {
        match self.forced.load(Ordering::Relaxed) {
            0 => ForcedHealth::Auto,
            1 => ForcedHealth::Up,
            _ => ForcedHealth::Down,
        }
    }

    pub fn set_forced(&self, f: ForcedHealth) {
        let v = match f {
            ForcedHealth::Auto => 0,
            ForcedHealth::Up => 1,
            ForcedHealth::Down => 2,
        };
        self.forced.store(v, Ordering::Relaxed);
    }

    /// The run-time weight, when one is set.
    pub fn weight_override(&self) -> Option<u32> {
        match self.weight_override.load(Ordering::Relaxed) {
            0 => None,
            w => Some(w - 1),
        }
    }

    /// Sets (Some) or clears (None) the run-time weight; `configured` is the
    /// member's weight in the file, remembered to spot a reload changing it.
    pub fn set_weight_override(&self, w: Option<u32>, configured: u32) {
        self.weight_override_base
            .store(configured, Ordering::Relaxed);
        self.weight_override
            .store(w.map_or(0, |w| w.saturating_add(1)), Ordering::Relaxed);
    }

    /// Called by a reload that keeps this state for a member now configured
    /// with `configured`: a changed weight in the file wins over the run-time
    /// one (the operator edited the file after the change).
    pub fn reconfigured(&self, configured: u32) {
        if self.weight_override().is_some()
            && self.weight_override_base.load(Ordering::Relaxed) != configured
        {
            self.weight_override.store(0, Ordering::Relaxed);
        }
    }

    /// What the member is doing, for people and the API. `in_use` is the
    /// number of its connections carrying a request (not idle).
    pub fn condition(&self, now: u64, in_use: u64) -> &'static str {
        match self.admin() {
            AdminState::Disabled => "disabled",
            AdminState::Draining => {
                if self.inflight.load(Ordering::Relaxed) == 0 && in_use == 0 {
                    "drained"
                } else {
                    "draining"
                }
            }
            AdminState::Enabled => {
                if self.forced() == ForcedHealth::Down
                    || !self.healthy.load(Ordering::Relaxed) && self.forced() == ForcedHealth::Auto
                {
                    "down"
                } else if self.forced() == ForcedHealth::Auto
                    && self.ejected_until_ms.load(Ordering::Relaxed) > now
                {
                    "ejected"
                } else {
                    "up"
                }
            }
        }
    }
}

/// What the balancer needs to know about one member.
pub trait Candidate {
    fn state(&self) -> &MemberState;
    fn weight(&self) -> u32;
    /// 0 is unlimited.
    fn max_connections(&self) -> u32;
    fn backup(&self) -> bool;
}

/// Per-worker cursors of one pool.
pub struct Cursor {
    rr: AtomicUsize,
    swrr: Box<[AtomicI64]>,
}

pub struct Balancer {
    pub algorithm: Algorithm,
    pub slow_start_ms: u64,
    cursors: Sharded<Cursor>,
    /// The consistent-hash table, built at the first pick with a hash
    /// (`hash_key`, source-IP persistence): most pools never hash, and
    /// building it for each was the node's largest cost in applying a
    /// revision (Maglev::build 10.4% of the node's samples, and most of
    /// the index/max/extend_with below it, in `perf record` of a debug
    /// node through a 1,000-route propagation run; 4,099 slots filled
    /// per one-member pool), besides 8 KB per pool.
    maglev: std::sync::OnceLock<Maglev>,
    /// What the table is built from: primaries' keys, weights and
    /// indices.
    primaries: Box<(Vec<String>, Vec<u32>, Vec<usize>)>,
}

/// Most members in one pool; the configuration refuses more. It sizes
/// `Tried`, and keeps the Maglev table (65,537 slots) over 64 slots per
/// member.
pub const MAX_POOL_MEMBERS: usize = 1024;

/// Members already tried for this request (retries never reuse one): one bit
/// per member index, exact for every pool size up to `MAX_POOL_MEMBERS`.
/// 128 bytes, `Copy`, on the stack: nothing is allocated per request.
#[derive(Default, Clone, Copy)]
pub struct Tried([u64; MAX_POOL_MEMBERS / 64]);

impl Tried {
    /// `i` < `MAX_POOL_MEMBERS` (member indices of a validated pool).
    pub fn add(&mut self, i: usize) {
        self.0[i / 64] |= 1u64 << (i % 64);
    }
    pub fn remove(&mut self, i: usize) {
        self.0[i / 64] &= !(1u64 << (i % 64));
    }
    pub fn has(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }
}

impl Balancer {
    /// `keys` are stable member identities (for the consistent-hash table).
    pub fn new(
        algorithm: Algorithm,
        slow_start_ms: u64,
        keys: &[String],
        weights: &[u32],
        backups: &[bool],
    ) -> Self {
        let n = keys.len();
        // Consistent hashing only spreads over primaries; backups are picked
        // from the hash directly when every primary is down.
        let (pk, pw): (Vec<String>, Vec<u32>) = keys
            .iter()
            .zip(weights)
            .zip(backups)
            .filter(|(_, b)| !**b)
            .map(|((k, w), _)| (k.clone(), *w))
            .unzip();
        let primary_index: Vec<usize> = (0..n).filter(|i| !backups[*i]).collect();
        Balancer {
            algorithm,
            slow_start_ms,
            cursors: Sharded::from_fn(|| Cursor {
                rr: AtomicUsize::new(0),
                swrr: (0..n).map(|_| AtomicI64::new(0)).collect(),
            }),
            maglev: std::sync::OnceLock::new(),
            primaries: Box::new((pk, pw, primary_index)),
        }
    }

    fn maglev(&self) -> &Maglev {
        self.maglev.get_or_init(|| {
            let (keys, weights, index) = &*self.primaries;
            let mut maglev = Maglev::build(keys, weights);
            maglev.remap(index);
            maglev
        })
    }

    /// Weight scaled by slow start, in thousandths.
    fn effective_weight(&self, c: &impl Candidate, now: u64) -> u64 {
        let full = c.weight().max(1) as u64 * 1000;
        let since = c.state().up_since_ms.load(Ordering::Relaxed);
        if self.slow_start_ms == 0 || since == 0 || now >= since + self.slow_start_ms {
            return full;
        }
        let elapsed = now.saturating_sub(since);
        (full * elapsed / self.slow_start_ms).max(full / 20).max(1)
    }

    /// Picks a member. `prefer` is a persistence target, taken when it may
    /// serve; `hash` is the consistent-hash or affinity key when the request
    /// has one. Returns None when no member may take the request.
    pub fn pick<C: Candidate>(
        &self,
        members: &[C],
        prefer: Option<usize>,
        hash: Option<u64>,
        tried: Tried,
    ) -> Option<usize> {
        let now = now_ms();
        // Backups serve only when every primary is down.
        let any_primary_up = members.iter().any(|m| !m.backup() && m.state().is_up(now));
        let eligible = |i: usize| -> bool {
            let m = &members[i];
            m.backup() != any_primary_up
                && !tried.has(i)
                && m.state().is_up(now)
                && (m.max_connections() == 0
                    || m.state().inflight.load(Ordering::Relaxed) < m.max_connections() as u64)
        };
        let n = members.len();
        if n == 0 {
            return None;
        }
        if let Some(p) = prefer.filter(|p| *p < n && eligible(*p)) {
            return Some(p);
        }
        if let Some(h) = hash {
            if any_primary_up {
                if let Some(i) = self.maglev().lookup(h).filter(|i| eligible(*i)) {
                    return Some(i);
                }
                // The owner is down or busy: walk a deterministic sequence so
                // the same key keeps landing on the same fallback member.
                for k in 1..8u64 {
                    if let Some(i) = self.maglev().lookup(mix(h ^ k)).filter(|i| eligible(*i)) {
                        return Some(i);
                    }
                }
            }
            let start = (h % n as u64) as usize;
            return (0..n).map(|k| (start + k) % n).find(|i| eligible(*i));
        }
        let cursor = self.cursors.local();
        match self.algorithm {
            Algorithm::RoundRobin | Algorithm::ConsistentHash => {
                // The cursor moves past every member skipped, so the turn
                // rotates over the members that may serve: a down or backup
                // member does not double the share of the one after it.
                (0..n)
                    .map(|_| cursor.rr.fetch_add(1, Ordering::Relaxed) % n)
                    .find(|i| eligible(*i))
            }
            Algorithm::WeightedRoundRobin => {
                // Smooth weighted round robin (as nginx): every eligible member
                // gains its weight, the richest is picked and pays the total.
                let mut total = 0i64;
                let mut best: Option<(usize, i64)> = None;
                for (i, m) in members.iter().enumerate() {
                    if !eligible(i) {
                        continue;
                    }
                    let w = self.effective_weight(m, now) as i64;
                    total += w;
                    let cur = cursor.swrr[i].fetch_add(w, Ordering::Relaxed) + w;
                    if best.is_none_or(|(_, b)| cur > b) {
                        best = Some((i, cur));
                    }
                }
                let (i, _) = best?;
                cursor.swrr[i].fetch_sub(total, Ordering::Relaxed);
                Some(i)
            }
            Algorithm::LeastConnections => {
                // The lowest load per weight wins. Ties take turns among the
                // tied members themselves: starting a scan at a rotating
                // position and keeping the first tie would hand the member
                // after a busy one the busy one's turns too (with a slow
                // member first of three, its neighbour took 51 of 71 fast
                // requests and the third 20).
                let ratio_below = |(l, w): (u64, u64), (bl, bw): (u64, u64)| {
                    (l as u128) * (bw as u128) < (bl as u128) * (w as u128)
                };
                let cost = |i: usize| {
                    let load = members[i].state().inflight.load(Ordering::Relaxed);
                    (load, self.effective_weight(&members[i], now))
                };
                let mut best: Option<(usize, (u64, u64))> = None;
                let mut tied = 0usize;
                for i in (0..n).filter(|i| eligible(*i)) {
                    let c = cost(i);
                    match best {
                        Some((_, b)) if ratio_below(b, c) => {}
                        Some((_, b)) if !ratio_below(c, b) => tied += 1,
                        _ => (best, tied) = (Some((i, c)), 1),
                    }
                }
                let (first, lowest) = best?;
                let turn = cursor.rr.fetch_add(1, Ordering::Relaxed) % tied;
                // Other workers' requests move the loads between the two
                // scans: when fewer ties are left, the first one found.
                (0..n)
                    .filter(|i| eligible(*i) && !ratio_below(lowest, cost(*i)))
                    .nth(turn)
                    .or(Some(first))
            }
            Algorithm::P2c => {
                let a = probe(n, rand_u64(), &eligible)?;
                let b = probe(n, rand_u64(), &eligible).unwrap_or(a);
                let b = if b == a {
                    probe(n, a as u64 + 1, &eligible).unwrap_or(a)
                } else {
                    b
                };
                let cost = |i: usize| {
                    let load = members[i].state().inflight.load(Ordering::Relaxed) as u128 + 1;
                    (load, self.effective_weight(&members[i], now) as u128)
                };
                let ((la, wa), (lb, wb)) = (cost(a), cost(b));
                Some(if la * wb <= lb * wa { a } else { b })
            }
        }
    }
}

fn probe(n: usize, start: u64, eligible: &impl Fn(usize) -> bool) -> Option<usize> {
    let s = (start % n as u64) as usize;
    (0..n).map(|k| (s + k) % n).find(|i| eligible(*i))
}

impl Maglev {
    /// Rewrites table entries from positions among primaries to pool indices.
    fn remap(&mut self, primary_index: &[usize]) {
        self.map_entries(|e| primary_index[e]);
    }
}

/// FNV-1a followed by a splitmix finalizer: fast and well spread.
pub fn hash64(data: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    mix(h)
}

pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(mix(std::process::id() as u64 ^ now_ms().rotate_left(17) ^ (&RNG as *const _ as u64)));
}

/// Per-thread xorshift; good enough to spread P2C choices.
pub fn rand_u64() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        x
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states(n: usize) -> Vec<MemberState> {
        (0..n).map(|_| MemberState::default()).collect()
    }

    struct C<'a> {
        state: &'a MemberState,
        weight: u32,
        backup: bool,
    }

    impl Candidate for C<'_> {
        fn state(&self) -> &MemberState {
            self.state
        }
        fn weight(&self) -> u32 {
            self.weight
        }
        fn max_connections(&self) -> u32 {
            0
        }
        fn backup(&self) -> bool {
            self.backup
        }
    }

    fn cands<'a>(s: &'a [MemberState], w: &[u32], backup: &[bool]) -> Vec<C<'a>> {
        s.iter()
            .enumerate()
            .map(|(i, st)| C {
                state: st,
                weight: w[i],
                backup: backup[i],
            })
            .collect()
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn smooth_weighted_is_exact_and_interleaved() {
        let s = states(3);
        let w = [5, 1, 1];
        let b = Balancer::new(Algorithm::WeightedRoundRobin, 0, &keys(3), &w, &[false; 3]);
        let c = cands(&s, &w, &[false; 3]);
        let picks: Vec<usize> = (0..7)
            .map(|_| b.pick(&c, None, None, Tried::default()).unwrap())
            .collect();
        assert_eq!(picks.iter().filter(|p| **p == 0).count(), 5);
        // Smoothness: member 0 never gets more than 3 in a row in a 7-cycle.
        assert_ne!(&picks[..4], &[0, 0, 0, 0]);
    }

    #[test]
    fn backups_only_when_primaries_down() {
        let s = states(3);
        let w = [1, 1, 1];
        let bk = [false, false, true];
        let b = Balancer::new(Algorithm::RoundRobin, 0, &keys(3), &w, &bk);
        let c = cands(&s, &w, &bk);
        for _ in 0..10 {
            assert_ne!(b.pick(&c, None, None, Tried::default()), Some(2));
        }
        s[0].healthy.store(false, Ordering::Relaxed);
        s[1].ejected_until_ms
            .store(now_ms() + 60_000, Ordering::Relaxed);
        assert_eq!(b.pick(&c, None, None, Tried::default()), Some(2));
    }

    #[test]
    fn round_robin_is_even_over_members_that_may_serve() {
        let s = states(3);
        let w = [1, 1, 1];
        let bk = [false, false, true];
        let b = Balancer::new(Algorithm::RoundRobin, 0, &keys(3), &w, &bk);
        let c = cands(&s, &w, &bk);
        let n0 = (0..100)
            .filter(|_| b.pick(&c, None, None, Tried::default()) == Some(0))
            .count();
        assert_eq!(n0, 50);
    }

    #[test]
    fn least_connections_prefers_idle() {
        let s = states(3);
        let w = [1, 1, 1];
        s[0].inflight.store(5, Ordering::Relaxed);
        s[2].inflight.store(3, Ordering::Relaxed);
        let b = Balancer::new(Algorithm::LeastConnections, 0, &keys(3), &w, &[false; 3]);
        assert_eq!(
            b.pick(&cands(&s, &w, &[false; 3]), None, None, Tried::default()),
            Some(1)
        );
    }

    #[test]
    fn least_connections_ties_take_turns() {
        // A busy member first: the two idle ones after it share evenly.
        let s = states(3);
        let w = [1, 1, 1];
        s[0].inflight.store(1, Ordering::Relaxed);
        let b = Balancer::new(Algorithm::LeastConnections, 0, &keys(3), &w, &[false; 3]);
        let c = cands(&s, &w, &[false; 3]);
        let mut count = [0usize; 3];
        for _ in 0..300 {
            let i = b.pick(&c, None, None, Tried::default()).expect("a member");
            count[i] += 1;
        }
        assert_eq!(count, [0, 150, 150]);
    }

    #[test]
    fn slow_start_ramps() {
        let s = states(2);
        let w = [1, 1];
        s[1].up_since_ms.store(now_ms(), Ordering::Relaxed);
        let b = Balancer::new(Algorithm::WeightedRoundRobin, 0, &keys(2), &w, &[false; 2]);
        let b = Balancer {
            slow_start_ms: 60_000,
            ..b
        };
        let c = cands(&s, &w, &[false; 2]);
        let n1 = (0..1000)
            .filter(|_| b.pick(&c, None, None, Tried::default()) == Some(1))
            .count();
        assert!(n1 < 100, "recovering member got {n1} of 1000");
    }

    #[test]
    fn tried_members_are_skipped() {
        let s = states(2);
        let w = [1, 1];
        let b = Balancer::new(Algorithm::P2c, 0, &keys(2), &w, &[false; 2]);
        let c = cands(&s, &w, &[false; 2]);
        let mut t = Tried::default();
        t.add(0);
        for _ in 0..20 {
            assert_eq!(b.pick(&c, None, None, t), Some(1));
        }
        t.add(1);
        assert_eq!(b.pick(&c, None, None, t), None);
    }

    #[test]
    fn tried_is_exact_past_64_members() {
        let mut t = Tried::default();
        t.add(0);
        assert!(t.has(0));
        assert!(
            !t.has(64) && !t.has(128),
            "members 64 and 128 are not member 0"
        );
        t.add(64);
        t.add(128);
        t.add(MAX_POOL_MEMBERS - 1);
        assert!(t.has(0) && t.has(64) && t.has(128) && t.has(MAX_POOL_MEMBERS - 1));
        t.remove(64);
        assert!(t.has(0) && !t.has(64) && t.has(128));
        assert_eq!((0..MAX_POOL_MEMBERS).filter(|i| t.has(*i)).count(), 3);

        // In a pool of 130, trying member 0 skips it and only it.
        let n = 130;
        let s = states(n);
        let w = vec![1; n];
        let bk = vec![false; n];
        let b = Balancer::new(Algorithm::RoundRobin, 0, &keys(n), &w, &bk);
        let c = cands(&s, &w, &bk);
        let mut t = Tried::default();
        t.add(0);
        let picked: std::collections::HashSet<usize> = (0..2 * n)
            .filter_map(|_| b.pick(&c, None, None, t))
            .collect();
        assert_eq!(picked.len(), n - 1);
        assert!(!picked.contains(&0) && picked.contains(&64) && picked.contains(&128));
        // Every member tried: none left, whatever the index.
        let mut all = Tried::default();
        for i in 0..n {
            all.add(i);
        }
        assert_eq!(b.pick(&c, None, None, all), None);
        all.remove(128);
        assert_eq!(b.pick(&c, None, None, all), Some(128));
    }

    #[test]
    fn hashing_is_sticky() {
        let s = states(4);
        let w = [1; 4];
        let b = Balancer::new(Algorithm::ConsistentHash, 0, &keys(4), &w, &[false; 4]);
        let c = cands(&s, &w, &[false; 4]);
        let h = hash64(b"client-1", 0);
        let first = b.pick(&c, None, Some(h), Tried::default()).unwrap();
        for _ in 0..10 {
            assert_eq!(b.pick(&c, None, Some(h), Tried::default()), Some(first));
        }
    }
}
