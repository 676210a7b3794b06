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

use serde::Serialize;
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
    samples: VecDeque<Sample>,
    last: Option<Instant>,
    /// Per vserver name, and per "pool/member" (requests only).
    vservers: HashMap<String, Totals>,
    members: HashMap<String, u64>,
}

/// A period's rates and quantiles, for one vserver or for all.
#[derive(Clone, Copy, Default, Serialize)]
struct Rates {
    requests_per_s: f64,
    errors_per_s: f64,
    bytes_in_per_s: f64,
    bytes_out_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// None without lookups in the period (null in JSON).
    cache_hit_ratio: Option<f64>,
}

impl Rates {
    fn new(now: &Totals, before: &Totals, latency: &[u64], secs: f64) -> Rates {
        Rates {
            requests_per_s: rate(now.requests, before.requests, secs),
            errors_per_s: rate(now.errors, before.errors, secs),
            bytes_in_per_s: rate(now.bytes_in, before.bytes_in, secs),
            bytes_out_per_s: rate(now.bytes_out, before.bytes_out, secs),
            p50_ms: ms(quantile(latency, 0.5)),
            p99_ms: ms(quantile(latency, 0.99)),
            cache_hit_ratio: hit_ratio(
                now.cache_hits.saturating_sub(before.cache_hits),
                now.cache_lookups.saturating_sub(before.cache_lookups),
            ),
        }
    }
}

#[derive(Serialize)]
struct VserverSample {
    name: String,
    #[serde(flatten)]
    rates: Rates,
    connections_active: u64,
    requests_total: u64,
    /// Failed script events since start (their 500s are in errors_per_s
    /// already; this says the script caused them).
    script_errors_total: u64,
}

struct MemberSample {
    address: std::net::SocketAddr,
    state: &'static str,
    failing: bool,
    connect_failures: u64,
    responses_5xx: u64,
    admin_state: &'static str,
    weight: u32,
    backup: bool,
    inflight: u64,
    connections_active: u64,
    requests_per_s: f64,
    requests_total: u64,
}

struct PoolSample {
    name: String,
    /// The pool runs active health checks ("up (no check)" otherwise).
    checked: bool,
    members: Vec<MemberSample>,
}

/// One period's figures. A sample is taken every second whoever watches;
/// its JSON is made only when a page asks for it, once (building and
/// writing it every second was about 870,000 instructions a second, the
/// most an idle Switchyard did: BENCHMARKS.md, the idle rows).
struct Sample {
    time_ms: u64,
    generation: u64,
    totals: Rates,
    vservers: Vec<VserverSample>,
    pools: Vec<PoolSample>,
    cache_objects: u64,
    cache_bytes: u64,
    json: std::cell::OnceCell<Arc<str>>,
}

impl Sample {
    /// The sample as the dashboard reads it. The certificates are those of
    /// `snap` when the JSON is first made: state, not a rate.
    fn json(&self, snap: &Snapshot) -> Arc<str> {
        self.json
            .get_or_init(|| {
                let pools: Vec<Value> = self
                    .pools
                    .iter()
                    .map(|p| {
                        let members: Vec<Value> = p
                            .members
                            .iter()
                            .map(|m| {
                                json!({
                                    "address": m.address.to_string(),
                                    "state": m.state,
                                    "status": crate::admin::render::status_text(m.state, p.checked),
                                    "failing": m.failing,
                                    "connect_failures": m.connect_failures,
                                    "responses_5xx": m.responses_5xx,
                                    "admin_state": m.admin_state,
                                    "weight": m.weight,
                                    "backup": m.backup,
                                    "inflight": m.inflight,
                                    "connections_active": m.connections_active,
                                    "requests_per_s": m.requests_per_s,
                                    "requests_total": m.requests_total,
                                })
                            })
                            .collect();
                        json!({ "name": p.name, "members": members })
                    })
                    .collect();
                let sample = json!({
                    "time_ms": self.time_ms,
                    "generation": self.generation,
                    "totals": self.totals,
                    "vservers": self.vservers,
                    "pools": pools,
                    "certificates": certificates(snap),
                    "cache": {
                        "objects": self.cache_objects,
                        "bytes": self.cache_bytes,
                    },
                });
                Arc::from(sample.to_string())
            })
            .clone()
    }
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

/// Hits over lookups in the last period, to 0.001; None without lookups.
fn hit_ratio(hits: u64, lookups: u64) -> Option<f64> {
    (lookups != 0).then(|| (hits as f64 / lookups as f64 * 1000.0).round() / 1000.0)
}

fn ms(us: u64) -> f64 {
    (us as f64 / 10.0).round() / 100.0
}

impl History {
    /// The newest sample's JSON.
    pub fn latest(&self, snap: &Snapshot) -> Option<Arc<str>> {
        self.samples.back().map(|s| s.json(snap))
    }

    /// Every sample's JSON, oldest first.
    pub fn all(&self, snap: &Snapshot) -> Vec<Arc<str>> {
        self.samples.iter().map(|s| s.json(snap)).collect()
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
        let mut vservers = Vec::with_capacity(snap.vservers.len());
        let mut next_vs = HashMap::with_capacity(snap.vservers.len());
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
            vservers.push(VserverSample {
                name: vs.name.clone(),
                rates: Rates::new(&t, &before, &recent, secs),
                connections_active: c.client_connections_active,
                requests_total: c.requests,
                script_errors_total: c.script_errors,
            });
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
        let mut pools = Vec::with_capacity(snap.pools.len());
        let mut next_members = HashMap::with_capacity(self.members.len());
        for p in &snap.pools {
            let list = p.members.load();
            let mut members = Vec::with_capacity(list.len());
            for m in list.iter() {
                let c = m.counters.read();
                let key = format!("{}/{}", p.name, m.addr);
                let before = self.members.get(&key).copied().unwrap_or(c.requests);
                let in_use = c
                    .server_connections_active
                    .saturating_sub(c.server_connections_idle);
                members.push(MemberSample {
                    address: m.addr,
                    state: m.state.condition(t_now, in_use),
                    failing: m.state.failing(),
                    connect_failures: c.connect_failures,
                    responses_5xx: c.responses[4],
                    admin_state: m.state.admin().as_str(),
                    weight: crate::balance::Candidate::weight(m),
                    backup: m.backup,
                    inflight: m.state.inflight.load(Ordering::Relaxed),
                    connections_active: c.server_connections_active,
                    requests_per_s: rate(c.requests, before, secs),
                    requests_total: c.requests,
                });
                next_members.insert(key, c.requests);
            }
            pools.push(PoolSample {
                name: p.name.clone(),
                checked: p.health.is_some(),
                members,
            });
        }
        self.members = next_members;

        let usage = snap.cache.usage();
        if self.samples.len() == KEEP {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            time_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            generation: snap.generation,
            totals: Rates::new(&all, &all_before, &all.latency, secs),
            vservers,
            pools,
            cache_objects: usage.objects,
            cache_bytes: usage.bytes,
            json: std::cell::OnceCell::new(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        let text =
            "[[vserver]]\nname = \"web\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n\
                    [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n";
        crate::config::parse("t.toml", text, None).expect("config")
    }

    #[test]
    fn a_sample_becomes_json_once_and_only_when_asked() {
        let snap = snapshot();
        let mut h = History::default();
        h.take(&snap);
        assert!(
            h.samples.back().is_some_and(|s| s.json.get().is_none()),
            "taking a sample wrote no JSON"
        );
        let first = h.latest(&snap).expect("a sample");
        let again = h.latest(&snap).expect("a sample");
        assert!(Arc::ptr_eq(&first, &again), "made once, then shared");
        let v: Value = serde_json::from_str(&first).expect("JSON");
        assert_eq!(v["vservers"][0]["name"], "web");
        assert_eq!(v["vservers"][0]["requests_per_s"], 0.0);
        assert_eq!(v["totals"]["cache_hit_ratio"], Value::Null);
        assert_eq!(v["pools"][0]["members"][0]["address"], "127.0.0.1:2");
        assert_eq!(v["pools"][0]["members"][0]["status"], "up (no check)");
        assert!(v["certificates"].is_array(), "{v}");
    }

    #[test]
    fn rates_are_the_change_since_the_last_sample() {
        let snap = snapshot();
        let mut h = History::default();
        h.take(&snap);
        let vs = &snap.vservers[0];
        crate::stats::add(&vs.counters.local().requests, 10);
        std::thread::sleep(Duration::from_millis(100));
        h.take(&snap);
        let v: Value = serde_json::from_str(&h.latest(&snap).expect("a sample")).expect("JSON");
        let rate = v["vservers"][0]["requests_per_s"].as_f64().expect("a rate");
        // 10 requests in about 0.1 s.
        assert!((50.0..=101.0).contains(&rate), "{rate}");
        assert_eq!(v["vservers"][0]["requests_total"], 10);
        assert_eq!(h.all(&snap).len(), 2);
    }
}
