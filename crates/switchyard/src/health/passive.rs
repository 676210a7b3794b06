//! Passive health: what the data path learns about a member from real
//! requests (connect failures, resets, 5xx when configured) ejects it for
//! a while after enough consecutive failures. Runs on any worker; the
//! state is the member's shared atomics.

use std::sync::atomic::Ordering;

use crate::clock::now_ms;
use crate::config::snapshot::{Member, Pool};
use crate::log;
use crate::stats;

/// Records one result for `m`: a failure counts toward ejection, a
/// success resets the count.
pub fn record(pool: &Pool, m: &Member, failed: bool) {
    let Some(p) = &pool.passive else { return };
    let s = &m.state;
    if !failed {
        if s.consecutive_failures.load(Ordering::Relaxed) != 0 {
            s.consecutive_failures.store(0, Ordering::Relaxed);
        }
        return;
    }
    let n = s.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
    if n >= p.consecutive_failures {
        s.consecutive_failures.store(0, Ordering::Relaxed);
        let until = now_ms() + p.ejection_ms;
        s.ejected_until_ms.store(until, Ordering::Relaxed);
        // Slow start runs from the moment the ejection ends.
        s.up_since_ms.store(until, Ordering::Relaxed);
        let mc = m.counters.local();
        stats::inc(&mc.ejections);
        stats::inc(&mc.health_transitions);
        log::warn(format_args!(
            "member {} ejected for {} ms after {n} consecutive failures",
            m.label(&pool.name),
            p.ejection_ms
        ));
    }
}

/// A response status, judged: a 5xx is a failure when the pool says so.
pub fn record_status(pool: &Pool, m: &Member, status: u16) {
    record(
        pool,
        m,
        status >= 500 && pool.passive.as_ref().is_some_and(|p| p.on_5xx),
    );
}
