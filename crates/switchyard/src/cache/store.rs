//! The objects, in memory, shared by every worker: a byte limit, least
//! recently used eviction behind a TinyLFU admission filter (a new object
//! only displaces the eviction candidate if it has been asked for at least
//! as often, so one scan of cold URLs cannot flush the hot set), and the
//! fills in progress (request coalescing).
//!
//! Keys are chosen by clients: the map keeps std's keyed hashing.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::Object;
use crate::http::message::Fields;

/// Sketch counters per row (a power of two); four rows.
const SKETCH_WIDTH: usize = 1 << 16;
/// Counters are halved after this many increments, so popularity fades.
const SKETCH_SAMPLE: u64 = 10 * SKETCH_WIDTH as u64;
/// Popular entries skipped at the eviction end before a newcomer is
/// refused.
const SECOND_CHANCES: u32 = 8;
/// Variants kept per key (Vary); the oldest goes first.
const MAX_VARIANTS: usize = 8;

struct Entry {
    variants: Vec<Arc<Object>>,
    /// Its key in the recency order.
    at: u64,
    /// When it was last used. A hit only sets this (no reordering on the
    /// request path); eviction moves an entry used since `at` to the
    /// recent end instead of evicting it.
    used: u64,
    size: usize,
}

/// Frequency estimates of keys (count-min, 4-bit saturating in u8s).
struct Sketch {
    rows: Vec<u8>,
    added: u64,
}

impl Sketch {
    fn new() -> Sketch {
        Sketch {
            rows: vec![0; 4 * SKETCH_WIDTH],
            added: 0,
        }
    }

    fn slots(h: u64) -> [usize; 4] {
        let mut out = [0; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let x = h
                .rotate_left(16 * i as u32)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            *o = i * SKETCH_WIDTH + (x >> 48) as usize % SKETCH_WIDTH;
        }
        out
    }

    fn add(&mut self, h: u64) {
        for s in Self::slots(h) {
            if self.rows[s] < 15 {
                self.rows[s] += 1;
            }
        }
        self.added += 1;
        if self.added >= SKETCH_SAMPLE {
            for c in &mut self.rows {
                *c /= 2;
            }
            self.added /= 2;
        }
    }

    fn estimate(&self, h: u64) -> u8 {
        Self::slots(h)
            .iter()
            .map(|s| self.rows[*s])
            .min()
            .unwrap_or(0)
    }
}

struct Inner {
    map: HashMap<Box<[u8]>, Entry>,
    /// Recency order: tick -> key.
    lru: BTreeMap<u64, Box<[u8]>>,
    tick: u64,
    bytes: usize,
    sketch: Sketch,
    /// Fills in progress: later misses wait for the first.
    filling: HashMap<Box<[u8]>, watch::Receiver<bool>>,
}

/// Counters of the store as a whole.
#[derive(Default)]
pub struct StoreCounters {
    pub evictions: AtomicU64,
    /// Objects the admission filter refused, or larger than the store.
    pub not_admitted: AtomicU64,
    pub purged: AtomicU64,
}

pub struct Store {
    inner: Mutex<Inner>,
    hasher: RandomState,
    max_bytes: AtomicU64,
    max_object: AtomicU64,
    pub counters: StoreCounters,
}

/// How a miss proceeds.
pub enum Fill {
    /// This request fetches; others wait until the guard drops.
    Leader(FillGuard),
    /// Another request is fetching: wait for it, then look again.
    Wait(watch::Receiver<bool>),
}

/// Held by the request that fetches an object; dropping it (stored or
/// not) wakes the requests waiting for it.
pub struct FillGuard {
    store: Arc<Store>,
    key: Box<[u8]>,
    done: watch::Sender<bool>,
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        self.store.lock().filling.remove(&self.key);
        let _ = self.done.send(true);
    }
}

/// What the store holds, for stats.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub objects: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    pub evictions: u64,
    pub not_admitted: u64,
    pub purged: u64,
}

impl Store {
    pub fn new(max_bytes: u64, max_object: u64) -> Store {
        Store {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                lru: BTreeMap::new(),
                tick: 0,
                bytes: 0,
                sketch: Sketch::new(),
                filling: HashMap::new(),
            }),
            hasher: RandomState::new(),
            max_bytes: AtomicU64::new(max_bytes),
            max_object: AtomicU64::new(max_object),
            counters: StoreCounters::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves consistent data
        // (every update is completed before unlocking): keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New limits (a reload); shrinking evicts at once.
    pub fn set_limits(&self, max_bytes: u64, max_object: u64) {
        self.max_bytes.store(max_bytes, Ordering::Relaxed);
        self.max_object.store(max_object, Ordering::Relaxed);
        let mut g = self.lock();
        self.evict_to(&mut g, max_bytes as usize);
    }

    pub fn max_object(&self) -> u64 {
        self.max_object.load(Ordering::Relaxed)
    }

    /// The newest variant of `key` that suits the request's fields.
    pub fn lookup(&self, key: &[u8], req: &Fields) -> Option<Arc<Object>> {
        let h = self.hasher.hash_one(key);
        let mut g = self.lock();
        g.sketch.add(h);
        let inner = &mut *g;
        let e = inner.map.get_mut(key)?;
        let found = e.variants.iter().rev().find(|o| o.matches(req)).cloned();
        if found.is_some() {
            inner.tick += 1;
            e.used = inner.tick;
        }
        found
    }

    /// Starts a fill for `key` or joins the one in progress.
    pub fn begin_fill(self: &Arc<Self>, key: &[u8]) -> Fill {
        let mut g = self.lock();
        if let Some(rx) = g.filling.get(key) {
            return Fill::Wait(rx.clone());
        }
        let (tx, rx) = watch::channel(false);
        g.filling.insert(key.into(), rx);
        Fill::Leader(FillGuard {
            store: self.clone(),
            key: key.into(),
            done: tx,
        })
    }

    /// Stores `o` under `key`, replacing the variant it supersedes (same
    /// Vary values). False when it is not admitted.
    pub fn insert(&self, key: &[u8], o: Object) -> bool {
        let max = self.max_bytes.load(Ordering::Relaxed) as usize;
        if o.size as u64 > self.max_object() || o.size > max {
            self.counters.not_admitted.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let h = self.hasher.hash_one(key);
        let mut g = self.lock();
        let size = o.size;
        // Room: evict from the least recently used end. An entry asked
        // for more often than the newcomer gets a second chance (moved to
        // the recent end); after a few of those the newcomer is refused.
        let wanted = g.sketch.estimate(h);
        let mut chances = SECOND_CHANCES;
        while g.bytes + size > max {
            let Some((_, victim)) = g.lru.pop_first() else {
                break;
            };
            let inner = &mut *g;
            let Some(e) = inner.map.get_mut(&victim) else {
                continue;
            };
            if e.used > e.at {
                // Used since it was placed: recent after all.
                e.at = e.used;
                inner.lru.insert(e.at, victim);
                continue;
            }
            if &*victim != key && inner.sketch.estimate(self.hasher.hash_one(&victim)) > wanted {
                inner.tick += 1;
                e.at = inner.tick;
                e.used = inner.tick;
                inner.lru.insert(inner.tick, victim);
                if chances == 0 {
                    self.counters.not_admitted.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                chances -= 1;
                continue;
            }
            if let Some(e) = inner.map.remove(&victim) {
                inner.bytes -= e.size;
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        let inner = &mut *g;
        inner.tick += 1;
        let tick = inner.tick;
        let o = Arc::new(o);
        match inner.map.get_mut(key) {
            Some(e) => {
                let before = e.size;
                e.variants.retain(|v| !v.same_variant(&o));
                if e.variants.len() >= MAX_VARIANTS {
                    e.variants.remove(0);
                }
                e.variants.push(o);
                e.size = e.variants.iter().map(|v| v.size).sum();
                inner.bytes = inner.bytes + e.size - before;
                if let Some(k) = inner.lru.remove(&e.at) {
                    inner.lru.insert(tick, k);
                }
                e.at = tick;
                e.used = tick;
            }
            None => {
                inner.map.insert(
                    key.into(),
                    Entry {
                        variants: vec![o],
                        at: tick,
                        used: tick,
                        size,
                    },
                );
                inner.lru.insert(tick, key.into());
                inner.bytes += size;
            }
        }
        true
    }

    /// Replaces one stored variant by its freshened copy (a 304).
    pub fn replace(&self, key: &[u8], old: &Arc<Object>, new: Arc<Object>) {
        let mut g = self.lock();
        let inner = &mut *g;
        if let Some(e) = inner.map.get_mut(key) {
            if let Some(slot) = e.variants.iter_mut().find(|v| Arc::ptr_eq(v, old)) {
                let before = slot.size;
                let after = new.size;
                *slot = new;
                e.size = e.size + after - before;
                inner.bytes = inner.bytes + after - before;
            }
        }
    }

    /// Removes every variant of `key`; true if there was one.
    pub fn invalidate(&self, key: &[u8]) -> bool {
        let mut g = self.lock();
        let Some(e) = g.map.remove(key) else {
            return false;
        };
        g.lru.remove(&e.at);
        g.bytes -= e.size;
        self.counters.purged.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Removes every key starting with `prefix`; how many.
    pub fn purge_prefix(&self, prefix: &[u8]) -> usize {
        let mut g = self.lock();
        let keys: Vec<Box<[u8]>> = g
            .map
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        for k in &keys {
            if let Some(e) = g.map.remove(k) {
                g.lru.remove(&e.at);
                g.bytes -= e.size;
            }
        }
        self.counters
            .purged
            .fetch_add(keys.len() as u64, Ordering::Relaxed);
        keys.len()
    }

    fn evict_to(&self, g: &mut Inner, max: usize) {
        while g.bytes > max {
            let Some((_, victim)) = g.lru.pop_first() else {
                break;
            };
            if let Some(e) = g.map.remove(&victim) {
                g.bytes -= e.size;
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn usage(&self) -> Usage {
        let g = self.lock();
        Usage {
            objects: g.map.values().map(|e| e.variants.len() as u64).sum(),
            bytes: g.bytes as u64,
            max_bytes: self.max_bytes.load(Ordering::Relaxed),
            evictions: self.counters.evictions.load(Ordering::Relaxed),
            not_admitted: self.counters.not_admitted.load(Ordering::Relaxed),
            purged: self.counters.purged.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Settings;
    use crate::http::message::{Framing, Response};
    use bytes::Bytes;

    fn object(n: usize) -> Object {
        let raw = Bytes::from_static(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let req = crate::http::head::parse_request(raw, 100).expect("request");
        let mut r = Response::new(200, Framing::Length(n as u64));
        r.head.fields.append(b"cache-control", b"max-age=60");
        Object::new(
            &req,
            &r,
            Bytes::from(vec![b'x'; n]),
            0,
            &Settings::default(),
        )
    }

    #[test]
    fn the_byte_limit_holds_and_hot_objects_survive_a_scan() {
        let s = Store::new(100_000, 50_000);
        let none = Fields::default();
        assert!(s.insert(b"hot", object(10_000)));
        for _ in 0..5 {
            assert!(s.lookup(b"hot", &none).is_some());
        }
        // A scan of 200 cold objects, each asked for once.
        for i in 0..200 {
            let k = format!("cold{i}");
            let _ = s.lookup(k.as_bytes(), &none);
            s.insert(k.as_bytes(), object(10_000));
            assert!(s.usage().bytes <= 100_000);
        }
        assert!(
            s.lookup(b"hot", &none).is_some(),
            "the hot object survived the scan"
        );
        assert!(s.usage().evictions > 0);
        assert!(!s.insert(b"big", object(60_000)), "over max_object");
        let objects = s.usage().objects as usize;
        assert_eq!(s.purge_prefix(b"cold"), objects - 1);
        assert!(s.invalidate(b"hot"));
        assert_eq!(s.usage().bytes, 0);
    }

    #[test]
    fn one_fill_at_a_time_per_key() {
        let s = Arc::new(Store::new(1 << 20, 1 << 20));
        let Fill::Leader(guard) = s.begin_fill(b"k") else {
            panic!("first is the leader");
        };
        let Fill::Wait(mut rx) = s.begin_fill(b"k") else {
            panic!("second waits");
        };
        assert!(!*rx.borrow());
        drop(guard);
        assert!(*rx.borrow_and_update());
        assert!(matches!(s.begin_fill(b"k"), Fill::Leader(_)));
    }
}
