//! Live samples for the dashboard: once a `PERIOD`, the counters' change
//! since the previous sample turned into rates, and the latency quantiles of
//! the requests that completed in between (the histograms' difference, so a
//! spike shows the second it happens instead of drowning in the total).
//! The last `KEEP` samples are kept, so a page that opens sees the last
//! minutes at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::api::certificates;
use crate::clock::now_ms;
use crate::config::Snapshot;
use crate::stats::quantile;

pub const PERIOD: Duration = Duration::from_secs(1);
/// Five minutes of samples.
const KEEP: usize = 300;

/// What a sample remembers of the counters to compute the next one's rates.
#[derive(Default, Clone)]
struct Totals {
    requests: u64,
    errors: u64,
    bytes_in: u64,
    bytes_out: u64,
    cache_hits: u64,
    cache_lookups: u64,
    latency: Vec<u64>,
}

#[derive(Default)]
pub struct History {
    samples: VecDeque<Arc<str>>,
    last: Option<Instant>,
    /// Per vserver name, and per "pool/member" (requests only).
    vservers: HashMap<String, Totals>,
    members: HashMap<String, u64>,
}

fn rate(now: u64, before: u64, secs: f64) -> f64 {
    let d = now.saturating_sub(before) as f64 / secs;
    (d * 10.0).round() / 10.0
}

/// Bucket-wise `now - before` (a reload that resets nothing keeps them
/// monotonic; a vserver that is new has no `before`).
fn delta(now: &[u64], before: &[u64]) -> Vec<u64> {
    now.iter()
        .enumerate()
        .map(|(i, n)| n.saturating_sub(before.get(i).copied().unwrap_or(0)))
        .collect()
}

/// Hits over lookups in the last period, to 0.001; null without lookups.
fn hit_ratio(hits: u64, lookups: u64) -> Value {
    if lookups == 0 {
        Value::Null
    } else {
        json!((hits as f64 / lookups as f64 * 1000.0).round() / 1000.0)
    }
}

fn ms(us: u64) -> f64 {
    (us as f64 / 10.0).round() / 100.0
}

impl History {
    pub fn latest(&self) -> Option<Arc<str>> {
        self.samples.back().cloned()
    }

    pub fn all(&self) -> Vec<Arc<str>> {
        self.samples.iter().cloned().collect()
    }

    /// Takes a sample of `snap` now.
    pub fn take(&mut self, snap: &Snapshot) {
        let now = Instant::now();
        let secs = self
            .last
            .map(|l| now.duration_since(l).as_secs_f64())
            .unwrap_or(PERIOD.as_secs_f64())
            .max(0.001);
        self.last = Some(now);
        let mut all = Totals::default();
        let mut all_before = Totals::default();
        let mut vservers = Vec::new();
        let mut next_vs = HashMap::new();
        for vs in &snap.vservers {
            let c = vs.counters.read();
            let mut latency = Vec::new();
            for h in vs.latency.all() {
                h.merge_into(&mut latency);
            }
            let t = Totals {
                requests: c.requests,
                errors: c.responses[4],
                bytes_in: c.bytes_in,
                bytes_out: c.bytes_out,
                cache_hits: c.cache_hits,
                cache_lookups: c.cache_hits + c.cache_misses,
                latency,
            };
            let before = self
                .vservers
                .get(&vs.name)
                .cloned()
                .unwrap_or_else(|| Totals {
                    latency: vec![0; t.latency.len()],
                    ..t.clone()
                });
            let recent = delta(&t.latency, &before.latency);
            let lookups = t.cache_lookups.saturating_sub(before.cache_lookups);
            vservers.push(json!({
                "name": vs.name,
                "requests_per_s": rate(t.requests, before.requests, secs),
                "errors_per_s": rate(t.errors, before.errors, secs),
                "bytes_in_per_s": rate(t.bytes_in, before.bytes_in, secs),
                "bytes_out_per_s": rate(t.bytes_out, before.bytes_out, secs),
                "p50_ms": ms(quantile(&recent, 0.5)),
                "p99_ms": ms(quantile(&recent, 0.99)),
                "connections_active": c.client_connections_active,
                "requests_total": c.requests,
                "cache_hit_ratio": hit_ratio(t.cache_hits.saturating_sub(before.cache_hits), lookups),
                // Failed script events since start (their 500s are in
                // errors_per_s already; this says the script caused them).
                "script_errors_total": c.script_errors,
            }));
            all.requests += t.requests;
            all.errors += t.errors;
            all.bytes_in += t.bytes_in;
            all.bytes_out += t.bytes_out;
            all_before.requests += before.requests;
            all_before.errors += before.errors;
            all_before.bytes_in += before.bytes_in;
            all_before.bytes_out += before.bytes_out;
            all.cache_hits += t.cache_hits;
            all.cache_lookups += t.cache_lookups;
            all_before.cache_hits += before.cache_hits;
            all_before.cache_lookups += before.cache_lookups;
            if all.latency.len() < recent.len() {
                all.latency.resize(recent.len(), 0);
            }
            for (i, n) in recent.iter().enumerate() {
                all.latency[i] += n;
            }
            next_vs.insert(vs.name.clone(), t);
        }
        self.vservers = next_vs;

        let t_now = now_ms();
        let mut pools = Vec::new();
        let mut next_members = HashMap::new();
        for p in &snap.pools {
            let mut members = Vec::new();
            for m in p.members.load().iter() {
                let c = m.counters.read();
                let key = format!("{}/{}", p.name, m.addr);
                let before = self.members.get(&key).copied().unwrap_or(c.requests);
                let in_use = c
                    .server_connections_active
                    .saturating_sub(c.server_connections_idle);
                let state = m.state.condition(t_now, in_use);
                members.push(json!({
                    "address": m.addr.to_string(),
                    "state": state,
                    "status": crate::admin::render::status_text(state, p.health.is_some()),
                    "failing": m.state.failing(),
                    "connect_failures": c.connect_failures,
                    "responses_5xx": c.responses[4],
                    "admin_state": m.state.admin().as_str(),
                    "weight": crate::balance::Candidate::weight(m),
                    "backup": m.backup,
                    "inflight": m.state.inflight.load(Ordering::Relaxed),
                    "connections_active": c.server_connections_active,
                    "requests_per_s": rate(c.requests, before, secs),
                    "requests_total": c.requests,
                }));
                next_members.insert(key, c.requests);
            }
            pools.push(json!({ "name": p.name, "members": members }));
        }
        self.members = next_members;

        let sample = json!({
            "time_ms": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            "generation": snap.generation,
            "totals": {
                "requests_per_s": rate(all.requests, all_before.requests, secs),
                "errors_per_s": rate(all.errors, all_before.errors, secs),
                "bytes_in_per_s": rate(all.bytes_in, all_before.bytes_in, secs),
                "bytes_out_per_s": rate(all.bytes_out, all_before.bytes_out, secs),
                "p50_ms": ms(quantile(&all.latency, 0.5)),
                "p99_ms": ms(quantile(&all.latency, 0.99)),
                "cache_hit_ratio": hit_ratio(
                    all.cache_hits.saturating_sub(all_before.cache_hits),
                    all.cache_lookups.saturating_sub(all_before.cache_lookups),
                ),
            },
            "vservers": vservers,
            "pools": pools,
            "certificates": certificates(snap),
            "cache": {
                "objects": snap.cache.usage().objects,
                "bytes": snap.cache.usage().bytes,
            },
        });
        if self.samples.len() == KEEP {
            self.samples.pop_front();
        }
        self.samples.push_back(Arc::from(sample.to_string()));
    }
}
