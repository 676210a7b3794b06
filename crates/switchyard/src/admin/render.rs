//! Text renderings of the counters: a table for people, JSON for tools,
//! Prometheus exposition for scrapers. All read the same summed values.

mod prometheus;

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::clock::now_ms;
use crate::config::snapshot::{Member, Pool, Snapshot, VServer};
use crate::stats::{quantile, MemberValues, PoolValues, VsValues, STATUS_CLASSES};

fn latency(vs: &VServer) -> (u64, u64, u64, u64) {
    let mut c = Vec::new();
    for h in vs.latency.all() {
        h.merge_into(&mut c);
    }
    (
        quantile(&c, 0.5),
        quantile(&c, 0.9),
        quantile(&c, 0.99),
        quantile(&c, 0.999),
    )
}

/// The member's condition: up, down, ejected, disabled, draining, drained.
pub fn member_state(m: &Member) -> &'static str {
    let c = m.counters.read();
    let in_use = c
        .server_connections_active
        .saturating_sub(c.server_connections_idle);
    m.state.condition(now_ms(), in_use)
}

/// The member's condition as people read it: `up (no check)` for a member
/// that is up only because nothing checks it (its pool has no
/// `[pool.health]`), as HAProxy's status column says "no check".
pub fn member_status(p: &Pool, m: &Member) -> String {
    status_text(member_state(m), p.health.is_some())
}

/// `member_status` from a condition and whether active checks run.
pub fn status_text(state: &str, checked: bool) -> String {
    if state == "up" && !checked {
        "up (no check)".to_string()
    } else {
        state.to_string()
    }
}

struct Totals {
    client_total: u64,
    server_total: u64,
}

fn totals(snap: &Snapshot) -> Totals {
    let client_total = snap
        .vservers
        .iter()
        .map(|v| v.counters.read().client_connections_total)
        .sum();
    let server_total = snap
        .pools
        .iter()
        .flat_map(|p| p.members.load_full().list.clone())
        .map(|m| m.counters.read().server_connections_total)
        .sum();
    Totals {
        client_total,
        server_total,
    }
}

fn ratio(t: &Totals) -> f64 {
    if t.server_total == 0 {
        0.0
    } else {
        t.client_total as f64 / t.server_total as f64
    }
}

pub fn text(snap: &Snapshot) -> String {
    let mut o = String::new();
    let t = totals(snap);
    let _ = writeln!(
        o,
        "switchyard: configuration generation {}",
        snap.generation
    );
    let _ = writeln!(
        o,
        "connections: {} client, {} server, multiplexing ratio {:.2}\n",
        t.client_total,
        t.server_total,
        ratio(&t)
    );
    for vs in &snap.vservers {
        let v = vs.counters.read();
        let (p50, p90, p99, _) = latency(vs);
        let listen: Vec<String> = vs.listen.iter().map(|a| a.to_string()).collect();
        let _ = writeln!(o, "vserver {} [{}]", vs.name, listen.join(", "));
        let _ = writeln!(
            o,
            "  connections active {} total {}  requests {}  bytes in {} out {}",
            v.client_connections_active,
            v.client_connections_total,
            v.requests,
            v.bytes_in,
            v.bytes_out
        );
        // None yet: no line (it would be empty).
        let responses = classes(&v.responses);
        if !responses.is_empty() {
            let _ = writeln!(o, "  responses {responses}");
        }
        let _ = writeln!(
            o,
            "  bad requests {}  header timeouts {}  local responses {}  latency p50 {}us p90 {}us p99 {}us",
            v.bad_requests, v.header_timeouts, v.local_responses, p50, p90, p99
        );
    }
    for pool in &snap.pools {
        let p = pool.counters.read();
        let _ = writeln!(
            o,
            "\npool {} ({})  requests {}  retries {}  no member available {}",
            pool.name,
            pool.algorithm.as_str(),
            p.requests,
            p.retries,
            p.no_member_available
        );
        for m in pool.members.load().iter() {
            let c = m.counters.read();
            let _ = writeln!(
                o,
                "  {} {}{}{} weight {} inflight {}  requests {}  responses {}  conns active {} idle {} total {} reused {}  connect failures {} tls handshake failures {} bad responses {} timeouts {} resets {} transitions {} ejections {}",
                m.addr,
                member_status(pool, m),
                if m.state.failing() { " FAILING" } else { "" },
                if m.backup { " backup" } else { "" },
                m.weight,
                m.state.inflight.load(Ordering::Relaxed),
                c.requests,
                match classes(&c.responses) {
                    r if r.is_empty() => "none".to_string(),
                    r => r,
                },
                c.server_connections_active,
                c.server_connections_idle,
                c.server_connections_total,
                c.connections_reused,
                c.connect_failures,
                c.tls_handshake_failures,
                c.bad_responses,
                c.response_timeouts,
                c.resets,
                c.health_transitions,
                c.ejections
            );
        }
    }
    o
}

fn classes(r: &[u64; 6]) -> String {
    STATUS_CLASSES
        .iter()
        .zip(r)
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| format!("{c}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn fields_json(fields: Vec<(&'static str, u64)>, responses: &[u64; 6]) -> String {
    let mut parts: Vec<String> = fields
        .into_iter()
        .map(|(k, v)| format!("\"{k}\":{v}"))
        .collect();
    let r: Vec<String> = STATUS_CLASSES
        .iter()
        .zip(responses)
        .map(|(c, n)| format!("\"{c}\":{n}"))
        .collect();
    parts.push(format!("\"responses\":{{{}}}", r.join(",")));
    parts.join(",")
}

pub fn json(snap: &Snapshot) -> String {
    let t = totals(snap);
    let vss: Vec<String> = snap
        .vservers
        .iter()
        .map(|vs| {
            let v: VsValues = vs.counters.read();
            let (p50, p90, p99, p999) = latency(vs);
            // HTTP/3 connections by worker (slot 0 is the control
            // thread): whether QUIC's steering spreads them.
            let by_worker: Vec<String> = vs
                .counters
                .all()
                .skip(1)
                .map(|s| s.h3_connections.load(Ordering::Relaxed).to_string())
                .collect();
            format!(
                "{{\"name\":{},{},\"h3_connections_by_worker\":[{}],\"latency_us\":{{\"p50\":{p50},\"p90\":{p90},\"p99\":{p99},\"p999\":{p999}}}}}",
                esc(&vs.name),
                fields_json(v.fields(), &v.responses),
                by_worker.join(",")
            )
        })
        .collect();
    let pools: Vec<String> = snap
        .pools
        .iter()
        .map(|pool| {
            let p: PoolValues = pool.counters.read();
            let members: Vec<String> = pool
                .members
                .load()
                .iter()
                .map(|m| {
                    let c: MemberValues = m.counters.read();
                    format!(
                        "{{\"address\":{},\"state\":{},\"status\":{},\"failing\":{},\"backup\":{},\"weight\":{},\"inflight\":{},{}}}",
                        esc(&m.addr.to_string()),
                        esc(member_state(m)),
                        esc(&member_status(pool, m)),
                        m.state.failing(),
                        m.backup,
                        m.weight,
                        m.state.inflight.load(Ordering::Relaxed),
                        fields_json(c.fields(), &c.responses)
                    )
                })
                .collect();
            format!("{{\"name\":{},{},\"members\":[{}]}}", esc(&pool.name), fields_json(p.fields(), &p.responses), members.join(","))
        })
        .collect();
    let c = snap.cache.usage();
    let cache = format!(
        "{{\"objects\":{},\"bytes\":{},\"max_bytes\":{},\"evictions\":{},\"not_admitted\":{},\"purged\":{}}}",
        c.objects, c.bytes, c.max_bytes, c.evictions, c.not_admitted, c.purged
    );
    format!(
        "{{\"generation\":{},\"client_connections_total\":{},\"client_connections_parked\":{},\"server_connections_total\":{},\"multiplexing_ratio\":{:.4},\"cache\":{cache},\"vservers\":[{}],\"pools\":[{}]}}\n",
        snap.generation,
        t.client_total,
        crate::stats::CLIENTS_PARKED.load(Ordering::Relaxed),
        t.server_total,
        ratio(&t),
        vss.join(","),
        pools.join(",")
    )
}

/// The Prometheus exposition of `/metrics` (see `prometheus.rs`).
pub fn prometheus(snap: &Snapshot) -> String {
    prometheus::render(snap)
}
