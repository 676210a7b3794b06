//! Resumable TLS sessions kept in memory for a vserver (`tls.resumption`):
//! TLS 1.2 session IDs, and the single-use tickets behind QUIC's 0-RTT
//! (config/http3.rs), shared by all workers.
//!
//! rustls's `ServerSessionMemoryCache` keeps its eviction order in a list
//! of keys and finds a taken session's place in it by a linear scan. With
//! 10,000 sessions kept, each resumed QUIC connection compared about
//! 10,000 keys: `memcmp` was 4.1 % of the DUT's CPU under resumed 0-RTT
//! handshakes (perf, 6,000 connections from h3load), and the list's
//! shifting another part of `memmove`'s 2.5 %. Here a take is one hash
//! lookup. A taken session's key stays in the order list until it reaches
//! the front, where eviction skips it; the list is compacted when it
//! holds twice the sessions kept, so its length stays bounded.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Mutex;

use rustls::server::StoresServerSessions;

/// At most `max` sessions, the oldest put evicted first.
pub struct SessionCache {
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// A session by its key, with the number of the put that stored it.
    sessions: HashMap<Vec<u8>, (u64, Vec<u8>)>,
    /// Keys in the order they were put, each with its put's number: an
    /// entry whose number is no longer its key's in `sessions` was taken
    /// (or put again later) and is skipped.
    order: VecDeque<(u64, Vec<u8>)>,
    puts: u64,
}

impl SessionCache {
    pub fn new(max: usize) -> Self {
        SessionCache {
            max: max.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Sessions held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.sessions.len())
    }
}

impl Inner {
    fn is_current(&self, (put, key): &(u64, Vec<u8>)) -> bool {
        self.sessions.get(key).is_some_and(|(p, _)| p == put)
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        inner.puts += 1;
        let put = inner.puts;
        inner.order.push_back((put, key.clone()));
        inner.sessions.insert(key, (put, value));
        while inner.sessions.len() > self.max {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if inner.is_current(&oldest) {
                inner.sessions.remove(&oldest.1);
            }
        }
        if inner.order.len() > 2 * self.max {
            let mut order = std::mem::take(&mut inner.order);
            order.retain(|entry| inner.is_current(entry));
            inner.order = order;
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let inner = self.inner.lock().ok()?;
        inner.sessions.get(key).map(|(_, value)| value.clone())
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut inner = self.inner.lock().ok()?;
        inner.sessions.remove(key).map(|(_, value)| value)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

impl fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionCache")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn the_oldest_session_goes_first_when_full() {
        let c = SessionCache::new(3);
        for i in 0..4 {
            assert!(c.put(key(i), vec![i as u8]));
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&key(0)), None);
        assert_eq!(c.get(&key(1)), Some(vec![1]));
        assert_eq!(c.get(&key(3)), Some(vec![3]));
    }

    #[test]
    fn a_session_is_taken_once() {
        let c = SessionCache::new(10);
        c.put(key(7), b"s".to_vec());
        assert_eq!(c.take(&key(7)), Some(b"s".to_vec()));
        assert_eq!(c.take(&key(7)), None);
        assert_eq!(c.get(&key(7)), None);
    }

    /// A key taken and put again is as new: the old place in the order
    /// does not evict it.
    #[test]
    fn a_key_put_again_after_a_take_keeps_its_new_place() {
        let c = SessionCache::new(2);
        c.put(key(1), vec![1]);
        c.take(&key(1));
        c.put(key(2), vec![2]);
        c.put(key(1), vec![11]);
        // Full: 2 and 1. The stale entry of 1 is at the front and skipped;
        // 2 is the oldest session.
        c.put(key(3), vec![3]);
        assert_eq!(c.get(&key(2)), None);
        assert_eq!(c.get(&key(1)), Some(vec![11]));
        assert_eq!(c.get(&key(3)), Some(vec![3]));
    }

    /// Taken sessions leave entries in the order list; it is compacted so
    /// that it never holds more than twice the sessions kept.
    #[test]
    fn the_order_list_stays_bounded_when_sessions_are_taken() {
        let c = SessionCache::new(100);
        for i in 0..10_000 {
            c.put(key(i), vec![0]);
            if i % 2 == 1 {
                c.take(&key(i));
            }
            let order = c.inner.lock().map_or(0, |i| i.order.len());
            assert!(order <= 200, "{order} entries after {i} puts");
        }
        assert!(c.len() <= 100, "{}", c.len());
    }
}
