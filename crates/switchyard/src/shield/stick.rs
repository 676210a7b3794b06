//! Per-source limits, as HAProxy's stick tables keep them: per key (the
//! client's address, or a header, a cookie, the path), the connections
//! open now, the connection rate and the request rate, shared by every
//! worker; a key over a limit is refused, tarpitted or denied for a while.
//!
//! - Rates are sliding windows estimated from two fixed periods (the
//!   current count plus the previous one weighted by how much of it is
//!   still inside the window: HAProxy's `freq_ctr`), so a burst at a
//!   period's edge is not forgiven.
//! - The table is sharded (a mutex per shard, chosen by the key's hash):
//!   workers contend only on the same shard, for a few hundred
//!   nanoseconds per connection or request.
//! - It is bounded: a full shard first drops entries nothing refers to any
//!   more (no open connection, no deny, idle for longer than the longest
//!   window), then the least recently seen of those; when every entry holds
//!   open connections, a new key is admitted untracked and counted
//!   (`table_full`), so a flood of sources cannot grow memory without
//!   bound or shut out everyone.
//! - A table belongs to a vserver's limit by name: a reload keeps it, so a
//!   reload does not reset who is over a limit.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use switchyard_fasthash::FxBuild;

use crate::cidr::Cidr;
use crate::clock::now_ms;

const SHARDS: usize = 32;

/// What a limit counts per.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    /// The client's address.
    Source,
    /// A request header's value (lower-case name).
    Header(String),
    /// A cookie's value.
    Cookie(String),
    /// The request path (without the query).
    Path,
}

impl Key {
    /// Whether connections can be counted (the key is known at accept).
    pub fn at_accept(&self) -> bool {
        *self == Key::Source
    }
}

/// `n` events per `period_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub n: u32,
    pub period_ms: u64,
}

/// What happens to a key over a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Connections: closed with a reset. Requests: answered `status`.
    Reject,
    /// Connections: closed. Requests: answered `status`, then the
    /// connection closes.
    Close,
    /// Held this long, then refused as `Reject` (slows down a client that
    /// retries at once; costs it a connection slot).
    Tarpit(u64),
    /// Refused as `Reject`, and every connection and request of the key is
    /// refused for this long.
    Deny(u64),
}

/// One `[[vserver.limit]]`.
#[derive(Debug)]
pub struct Limit {
    pub name: String,
    pub key: Key,
    pub conn_cur: Option<u32>,
    pub conn_rate: Option<Rate>,
    pub req_rate: Option<Rate>,
    /// Requests of a key in progress at once (nginx's `limit_conn`, which
    /// counts connections with a request being processed: an HTTP/2
    /// connection's streams each count here).
    pub req_cur: Option<u32>,
    pub action: Action,
    /// The status of a refused request (429 by default).
    pub status: u16,
    /// Sources never limited.
    pub allow: Vec<Cidr>,
    pub table: Arc<Table>,
    /// `scope = "policy"`: counts only the requests of the policies that
    /// name it (after routing), not every request of the vserver.
    pub per_policy: bool,
}

/// Why a key was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    ConnCur,
    ConnRate,
    ReqRate,
    /// Denied for a while (an earlier refusal with `deny`).
    Denied,
    ReqCur,
}

impl Reason {
    pub const ALL: [Reason; 5] = [
        Reason::ConnCur,
        Reason::ConnRate,
        Reason::ReqRate,
        Reason::Denied,
        Reason::ReqCur,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::ConnCur => "conn_cur",
            Reason::ConnRate => "conn_rate",
            Reason::ReqRate => "req_rate",
            Reason::Denied => "denied",
            Reason::ReqCur => "req_cur",
        }
    }
}

/// A limit's counters (they survive reloads with the table).
#[derive(Debug, Default)]
pub struct Counters {
    /// Refusals by reason, in `Reason::ALL` order.
    pub refused: [AtomicU64; 5],
    pub tarpitted: AtomicU64,
    /// Keys admitted without being tracked (every entry of a shard held
    /// open connections).
    pub table_full: AtomicU64,
}

/// A two-period rate counter.
#[derive(Clone, Copy, Debug, Default)]
struct Freq {
    start_ms: u64,
    cur: u32,
    prev: u32,
}

impl Freq {
    fn roll(&mut self, now: u64, period: u64) {
        let period = period.max(1);
        let elapsed = now.saturating_sub(self.start_ms);
        if elapsed >= 2 * period {
            self.prev = 0;
            self.cur = 0;
            self.start_ms = now;
        } else if elapsed >= period {
            self.prev = self.cur;
            self.cur = 0;
            self.start_ms += period;
        }
    }

    /// Events in the last `period`, this one not counted.
    fn estimate(&mut self, now: u64, period: u64) -> u64 {
        self.roll(now, period);
        let period = period.max(1);
        let into = now.saturating_sub(self.start_ms).min(period);
        self.cur as u64 + (self.prev as u64 * (period - into)) / period
    }

    fn add(&mut self) {
        self.cur = self.cur.saturating_add(1);
    }
}

#[derive(Debug, Default)]
struct Entry {
    conn_cur: u32,
    req_cur: u32,
    conn: Freq,
    req: Freq,
    deny_until_ms: u64,
    seen_ms: u64,
}

impl Entry {
    /// It holds connections or requests: forgetting it would lose them.
    fn in_use(&self) -> bool {
        self.conn_cur > 0 || self.req_cur > 0
    }
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<Vec<u8>, Entry, FxBuild>,
}

/// One limit's table: keys and their counts.
#[derive(Debug)]
pub struct Table {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    /// Entries idle longer than this are forgotten first.
    idle_ms: u64,
    pub counters: Counters,
}

/// Holds a connection's place in `conn_cur`; gives it back on drop.
#[derive(Debug)]
pub struct Lease {
    table: Arc<Table>,
    key: SourceKey,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.table.release(&self.key);
    }
}

/// Holds a request's place in `req_cur`; gives it back on drop (when the
/// request's exchange ends: its answer sent, or it failed).
#[derive(Debug)]
pub struct RequestLease {
    table: Arc<Table>,
    key: Vec<u8>,
}

impl Drop for RequestLease {
    fn drop(&mut self) {
        self.table.release_request(&self.key);
    }
}

/// The decision on a connection or a request.
#[derive(Debug)]
pub enum Decision {
    Admit,
    Refuse(Reason),
}

fn shard_of(key: &[u8]) -> usize {
    (FxBuild::default().hash_one(key) >> 32) as usize % SHARDS
}

/// An address as a key, on the stack (no allocation per connection or
/// request): 4 bytes for IPv4 (and IPv4-mapped IPv6), 16 for IPv6.
#[derive(Clone, Copy, Debug)]
pub struct SourceKey {
    bytes: [u8; 16],
    len: u8,
}

impl std::ops::Deref for SourceKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

pub fn source_key(ip: IpAddr) -> SourceKey {
    let v4 = |a: std::net::Ipv4Addr| {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&a.octets());
        (bytes, 4)
    };
    let (bytes, len) = match ip {
        IpAddr::V4(a) => v4(a),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(m) => v4(m),
            None => (a.octets(), 16),
        },
    };
    SourceKey { bytes, len }
}

impl Table {
    /// A table of at most `size` keys; entries idle for `idle_ms` go first.
    pub fn new(size: usize, idle_ms: u64) -> Table {
        Table {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: size.div_ceil(SHARDS).max(1),
            idle_ms,
            counters: Counters::default(),
        }
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn count(&self, r: Reason) {
        self.counters.refused[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `f` on the key's entry (made if new). None: the shard is full
    /// of entries in use, and the key is not tracked.
    fn with<T>(&self, key: &[u8], now: u64, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let mut s = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !s.map.contains_key(key) && s.map.len() >= self.per_shard {
            let idle = self.idle_ms;
            s.map.retain(|_, e| {
                e.in_use() || e.deny_until_ms > now || now.saturating_sub(e.seen_ms) < idle
            });
            if s.map.len() >= self.per_shard {
                // The least recently seen entry that holds no connection.
                let victim = s
                    .map
                    .iter()
                    .filter(|(_, e)| !e.in_use())
                    .min_by_key(|(_, e)| e.seen_ms)
                    .map(|(k, _)| k.clone());
                match victim {
                    Some(k) => {
                        s.map.remove(&k);
                    }
                    None => {
                        self.counters.table_full.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                }
            }
        }
        // Known keys are found without building an owned key.
        if let Some(e) = s.map.get_mut(key) {
            e.seen_ms = now;
            return Some(f(e));
        }
        let e = s.map.entry(key.to_vec()).or_default();
        e.seen_ms = now;
        Some(f(e))
    }

    fn release_request(&self, key: &[u8]) {
        let mut s = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(e) = s.map.get_mut(key) {
            e.req_cur = e.req_cur.saturating_sub(1);
        }
    }

    fn release(&self, key: &[u8]) {
        let mut s = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(e) = s.map.get_mut(key) {
            e.conn_cur = e.conn_cur.saturating_sub(1);
        }
    }
}

impl Limit {
    fn allowed(&self, ip: IpAddr) -> bool {
        self.allow.iter().any(|c| c.contains(ip))
    }

    fn deny_ms(&self) -> Option<u64> {
        match self.action {
            Action::Deny(ms) => Some(ms),
            _ => None,
        }
    }

    /// A new connection from `ip`. On admit, the lease (when connections
    /// are counted) keeps its place until the connection ends.
    pub fn on_connection(&self, ip: IpAddr) -> Result<Option<Lease>, Reason> {
        if !self.key.at_accept() || self.allowed(ip) {
            return Ok(None);
        }
        let key = source_key(ip);
        let now = now_ms();
        let counted = self.conn_cur.is_some();
        let deny = self.deny_ms();
        let d = self.table.with(&key, now, |e| {
            if e.deny_until_ms > now {
                return Decision::Refuse(Reason::Denied);
            }
            if let Some(r) = self.conn_rate {
                if e.conn.estimate(now, r.period_ms) >= r.n as u64 {
                    if let Some(ms) = deny {
                        e.deny_until_ms = now + ms;
                    }
                    return Decision::Refuse(Reason::ConnRate);
                }
                e.conn.add();
            }
            if let Some(max) = self.conn_cur {
                if e.conn_cur >= max {
                    if let Some(ms) = deny {
                        e.deny_until_ms = now + ms;
                    }
                    return Decision::Refuse(Reason::ConnCur);
                }
                e.conn_cur += 1;
            }
            Decision::Admit
        });
        match d {
            // Untracked (a full table): admitted without a count.
            None => Ok(None),
            Some(Decision::Admit) => Ok(counted.then(|| Lease {
                table: self.table.clone(),
                key,
            })),
            Some(Decision::Refuse(r)) => {
                self.table.count(r);
                Err(r)
            }
        }
    }

    /// A request whose key value is `value` (the source's address bytes for
    /// `Key::Source`), from `ip`. On admit, the lease (when requests in
    /// progress are counted) keeps its place until the request ends.
    pub fn on_request(&self, ip: IpAddr, value: &[u8]) -> Result<Option<RequestLease>, Reason> {
        if self.allowed(ip) {
            return Ok(None);
        }
        let now = now_ms();
        let deny = self.deny_ms();
        let d = self.table.with(value, now, |e| {
            if e.deny_until_ms > now {
                return Decision::Refuse(Reason::Denied);
            }
            let refuse = |e: &mut Entry, r: Reason| {
                if let Some(ms) = deny {
                    e.deny_until_ms = now + ms;
                }
                Decision::Refuse(r)
            };
            if self.req_cur.is_some_and(|max| e.req_cur >= max) {
                return refuse(e, Reason::ReqCur);
            }
            if let Some(r) = self.req_rate {
                if e.req.estimate(now, r.period_ms) >= r.n as u64 {
                    return refuse(e, Reason::ReqRate);
                }
                e.req.add();
            }
            if self.req_cur.is_some() {
                e.req_cur += 1;
            }
            Decision::Admit
        });
        match d {
            // Untracked (a full table): admitted without a count.
            None => Ok(None),
            Some(Decision::Admit) => Ok(self.req_cur.is_some().then(|| RequestLease {
                table: self.table.clone(),
                key: value.to_vec(),
            })),
            Some(Decision::Refuse(r)) => {
                self.table.count(r);
                Err(r)
            }
        }
    }

    /// A refusal held first (action tarpit), at accept or per request.
    pub fn count_tarpit(&self) {
        self.table
            .counters
            .tarpitted
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals by reason, tarpits, and keys untracked for a full table.
    pub fn counters(&self) -> &Counters {
        &self.table.counters
    }
}

/// What a script keeps in a shared table (`sy.table`, docs/scripting.md):
/// a number, a string, or a sliding-window rate.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    Int(i64),
    Text(Vec<u8>),
}

type KeptMap = HashMap<Vec<u8>, Kept, FxBuild>;

#[derive(Debug)]
struct Kept {
    value: Option<Stored>,
    /// A sliding-window rate (`rate`), with its period.
    rate: Freq,
    rate_period_ms: u64,
    /// 0: no expiry.
    expires_ms: u64,
    seen_ms: u64,
}

/// A script's shared table (`sy.table(name)`): the per-source tables'
/// design (32 shards each behind a mutex, chosen by the key's hash;
/// shared by every worker; bounded) holding what a script keeps: values
/// and counters with an expiry (iRules' `table`, HAProxy's stick table
/// `gpc` and `http_req_rate`). A full shard drops its expired entries,
/// then the least recently used one: a flood of keys costs the oldest
/// entries, never memory without bound. Tables live as long as the
/// process, by name (a reload keeps what they hold).
#[derive(Debug)]
pub struct Store {
    shards: Box<[Mutex<KeptMap>]>,
    per_shard: usize,
    pub evicted: AtomicU64,
}

impl Store {
    pub fn new(size: usize) -> Store {
        Store {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            per_shard: size.div_ceil(SHARDS).max(1),
            evicted: AtomicU64::new(0),
        }
    }

    /// The most entries the table holds.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    pub fn len(&self) -> usize {
        let now = now_ms();
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                s.values()
                    .filter(|k| k.expires_ms == 0 || k.expires_ms > now)
                    .count()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` on the live entry of `key` (made when `make`), at `now`.
    fn with<T>(
        &self,
        key: &[u8],
        make: bool,
        f: impl FnOnce(&mut Option<&mut Kept>, u64) -> T,
    ) -> T {
        let now = now_ms();
        let mut s = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let live = |k: &Kept| k.expires_ms == 0 || k.expires_ms > now;
        if s.get(key).is_some_and(|k| !live(k)) {
            s.remove(key);
        }
        if make && !s.contains_key(key) {
            if s.len() >= self.per_shard {
                s.retain(|_, k| live(k));
            }
            if s.len() >= self.per_shard {
                let victim = s
                    .iter()
                    .min_by_key(|(_, k)| k.seen_ms)
                    .map(|(k, _)| k.clone());
                if let Some(v) = victim {
                    s.remove(&v);
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
            }
            s.insert(
                key.to_vec(),
                Kept {
                    value: None,
                    rate: Freq::default(),
                    rate_period_ms: 0,
                    expires_ms: 0,
                    seen_ms: now,
                },
            );
        }
        let mut e = s.get_mut(key);
        if let Some(k) = e.as_deref_mut() {
            k.seen_ms = now;
        }
        f(&mut e, now)
    }

    pub fn get(&self, key: &[u8]) -> Option<Stored> {
        self.with(key, false, |e, _| e.as_ref().and_then(|k| k.value.clone()))
    }

    /// Sets `key` to `value` for `ttl_ms` (0: no expiry).
    pub fn set(&self, key: &[u8], value: Stored, ttl_ms: u64) {
        self.with(key, true, |e, now| {
            if let Some(k) = e {
                k.value = Some(value);
                k.expires_ms = if ttl_ms == 0 { 0 } else { now + ttl_ms };
            }
        })
    }

    /// Adds `by` to the number at `key` (a missing or text value counts
    /// as 0) and gives the sum. A new entry lives `ttl_ms` (0: no expiry);
    /// an existing one keeps its expiry (a fixed window).
    pub fn incr(&self, key: &[u8], by: i64, ttl_ms: u64) -> i64 {
        self.with(key, true, |e, now| match e {
            Some(k) => {
                let n = match k.value {
                    Some(Stored::Int(n)) => n,
                    _ => {
                        k.expires_ms = if ttl_ms == 0 { 0 } else { now + ttl_ms };
                        0
                    }
                }
                .saturating_add(by);
                k.value = Some(Stored::Int(n));
                n
            }
            None => by,
        })
    }

    /// Counts one event at `key` and gives the events of the last
    /// `period_ms`, this one included (a sliding window, as the per-source
    /// limits' `req_rate`). The entry lives two periods past its last event.
    pub fn rate(&self, key: &[u8], period_ms: u64) -> u64 {
        let period_ms = period_ms.max(1);
        self.with(key, true, |e, now| match e {
            Some(k) => {
                if k.rate_period_ms != period_ms {
                    k.rate = Freq {
                        start_ms: now,
                        ..Freq::default()
                    };
                    k.rate_period_ms = period_ms;
                }
                let before = k.rate.estimate(now, period_ms);
                k.rate.add();
                if k.value.is_none() {
                    k.expires_ms = now + 2 * period_ms;
                }
                before + 1
            }
            None => 1,
        })
    }

    /// Removes `key`; whether it was there.
    pub fn delete(&self, key: &[u8]) -> bool {
        let mut s = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.remove(key).is_some()
    }
}

/// The process's script tables by name: `sy.table(name)` in any worker's
/// state, of any configuration generation, finds the same one.
pub fn store(name: &str, size: usize) -> Arc<Store> {
    static ALL: Mutex<Option<HashMap<String, Arc<Store>>>> = Mutex::new(None);
    let mut all = ALL.lock().unwrap_or_else(|e| e.into_inner());
    all.get_or_insert_with(HashMap::new)
        .entry(name.to_string())
        .or_insert_with(|| Arc::new(Store::new(size)))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_expires_counts_and_stays_bounded() {
        let s = Store::new(64);
        assert_eq!(s.incr(b"u", 1, 0), 1);
        assert_eq!(s.incr(b"u", 2, 0), 3);
        s.set(b"k", Stored::Text(b"v".to_vec()), 1);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(s.get(b"k"), None);
        assert_eq!(s.get(b"u"), Some(Stored::Int(3)));
        assert_eq!(s.rate(b"r", 60_000), 1);
        assert_eq!(s.rate(b"r", 60_000), 2);
        for i in 0..10_000u32 {
            s.incr(&i.to_be_bytes(), 1, 0);
        }
        assert!(s.len() <= s.capacity(), "{}", s.len());
        assert!(s.evicted.load(Ordering::Relaxed) > 0);
        assert!(s.delete(&9_999u32.to_be_bytes()));
    }

    fn limit(conn_cur: Option<u32>, conn_rate: Option<Rate>, req_rate: Option<Rate>) -> Limit {
        Limit {
            name: "t".into(),
            key: Key::Source,
            conn_cur,
            conn_rate,
            req_rate,
            req_cur: None,
            action: Action::Reject,
            status: 429,
            allow: vec![Cidr::parse("10.0.0.0/8").expect("cidr")],
            table: Arc::new(Table::new(1000, 60_000)),
            per_policy: false,
        }
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn requests_in_progress_are_counted_per_key_and_given_back() {
        let l = Limit {
            key: Key::Header("x-api-key".into()),
            req_cur: Some(2),
            ..limit(None, None, None)
        };
        let (k1, k2) = (b"alice".as_slice(), b"bob".as_slice());
        let r1 = l.on_request(A, k1).expect("first").expect("a lease");
        let r2 = l.on_request(B, k1).expect("second").expect("a lease");
        // The key's third at once is refused, whatever its source; another
        // key is not.
        assert_eq!(l.on_request(A, k1).err(), Some(Reason::ReqCur));
        assert!(l.on_request(A, k2).is_ok());
        assert_eq!(
            l.counters().refused[Reason::ReqCur as usize].load(Ordering::Relaxed),
            1
        );
        // One ends: one more may start.
        drop(r1);
        let r3 = l.on_request(A, k1).expect("after one ended");
        assert_eq!(l.on_request(A, k1).err(), Some(Reason::ReqCur));
        drop((r2, r3));
        assert!(l.on_request(A, k1).is_ok());
        // An allowed source is not counted.
        let inside = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 2, 3));
        assert!(l.on_request(inside, k1).expect("allowed").is_none());
    }

    #[test]
    fn concurrent_connections_are_counted_and_given_back() {
        let l = limit(Some(2), None, None);
        let a1 = l.on_connection(A).expect("first");
        let a2 = l.on_connection(A).expect("second");
        assert!(a1.is_some() && a2.is_some());
        assert_eq!(l.on_connection(A).err(), Some(Reason::ConnCur));
        // Another source has its own count.
        let _b = l.on_connection(B).expect("other source");
        drop(a1);
        assert!(l.on_connection(A).is_ok());
        assert_eq!(
            l.counters().refused[Reason::ConnCur as usize].load(Ordering::Relaxed),
            1
        );
        // An allowed source is never counted.
        let ten: IpAddr = "10.1.2.3".parse().expect("ip");
        for _ in 0..10 {
            assert!(matches!(l.on_connection(ten), Ok(None)));
        }
    }

    #[test]
    fn rates_slide_over_two_periods() {
        let mut f = Freq {
            start_ms: 1000,
            ..Freq::default()
        };
        for _ in 0..10 {
            f.add();
        }
        // Half-way through the next period, half of the previous counts.
        assert_eq!(f.estimate(2500, 1000), 5);
        // Two periods later, nothing.
        assert_eq!(f.estimate(4100, 1000), 0);

        let l = limit(
            None,
            None,
            Some(Rate {
                n: 3,
                period_ms: 60_000,
            }),
        );
        let k = source_key(A);
        for _ in 0..3 {
            assert!(l.on_request(A, &k).is_ok());
        }
        assert_eq!(l.on_request(A, &k).err(), Some(Reason::ReqRate));
        assert!(l.on_request(B, &source_key(B)).is_ok());
    }

    #[test]
    fn deny_refuses_the_key_for_a_while() {
        let mut l = limit(
            None,
            Some(Rate {
                n: 1,
                period_ms: 60_000,
            }),
            None,
        );
        l.action = Action::Deny(60_000);
        assert!(l.on_connection(A).is_ok());
        assert_eq!(l.on_connection(A).err(), Some(Reason::ConnRate));
        assert_eq!(l.on_connection(A).err(), Some(Reason::Denied));
        assert_eq!(l.on_request(A, &source_key(A)).err(), Some(Reason::Denied));
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_keys_with_connections() {
        let t = Arc::new(Table::new(SHARDS, 0));
        let l = Limit {
            table: t.clone(),
            ..limit(Some(1), None, None)
        };
        let mut leases = Vec::new();
        for i in 0..5000u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0xC000_0000 + i));
            match l.on_connection(ip) {
                Ok(Some(lease)) if leases.len() < 4 => leases.push(lease),
                _ => {}
            }
        }
        // One entry per shard at most, whatever the number of sources.
        assert!(t.len() <= SHARDS, "{} entries", t.len());
        assert!(t.counters.table_full.load(Ordering::Relaxed) > 0);
    }
}
