//! `[[pool]]`: members, balancing, persistence, health checks, upstream
//! TLS and the PROXY header, validated into a snapshot `Pool`.

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Ctx;
use crate::balance::{hash64, Balancer, MAX_POOL_MEMBERS};
use crate::config::model::{self, Algorithm, HealthKind, PersistenceKind};
use crate::config::snapshot::*;
use crate::config::types::is_token;

/// Idle member connections kept per member and worker when the pool does
/// not say: enough to follow demand, a cap only against memory. What a
/// burst opened stays while it is in use and leaves by the purge
/// (`proxy::upstream::PURGE_PERIOD`: half of the connections no request
/// took for 5 s, HAProxy's `pool-purge-delay`). A fixed 64 made HTTP/2
/// clients with 200 streams in flight to one member open and close member
/// connections all the time: 49 µs of CPU per request against HAProxy's
/// 30 (issue 33). Past the first 64 an idle connection keeps no buffer,
/// so each costs its socket and a few words.
pub const IDLE_PER_MEMBER: usize = 1024;

pub(super) fn build_pool(cx: &mut Ctx, p: &model::Pool, old: Option<&Arc<Pool>>) -> Option<Pool> {
    let name = p.name.get_ref().clone();
    let span = p.name.span();
    let from_cluster = p.cluster_members.as_ref().is_some_and(|c| *c.get_ref());
    if let (true, Some(first)) = (from_cluster, p.member.first()) {
        cx.err(
            first.address.span(),
            format!("pool {name:?} takes its members from the cluster (cluster_members = true): it lists no [[pool.member]]"),
        );
    }
    if p.member.is_empty() && !from_cluster {
        cx.err(
            span.clone(),
            format!(
                "pool {name:?} has no member; add at least one [[pool.member]] with an address"
            ),
        );
    }
    let hash_key = match &p.hash_key {
        None => None,
        Some(k) => {
            let key = match k.get_ref().as_str() {
                "source-ip" => Some(HashKey::SourceIp),
                "uri" => Some(HashKey::Uri),
                s => match s.split_once(':') {
                    Some(("header", h)) if is_token(h) => {
                        Some(HashKey::Header(h.to_ascii_lowercase()))
                    }
                    Some(("cookie", c)) if is_token(c) => Some(HashKey::Cookie(c.to_string())),
                    _ => None,
                },
            };
            if key.is_none() {
                cx.err(k.span(), format!("pool {name:?}: invalid hash_key {:?}; allowed: source-ip, uri, header:NAME, cookie:NAME", k.get_ref()));
            }
            if p.algorithm != Algorithm::ConsistentHash {
                cx.err(
                    k.span(),
                    format!(
                        "pool {name:?}: hash_key only applies to algorithm = \"consistent-hash\""
                    ),
                );
            }
            key
        }
    };
    if p.algorithm == Algorithm::ConsistentHash && p.hash_key.is_none() {
        cx.err(span.clone(), format!("pool {name:?}: algorithm \"consistent-hash\" needs a hash_key (source-ip, uri, header:NAME or cookie:NAME)"));
    }
    let persistence = p.persistence.as_ref().map(|per| match per.kind {
        PersistenceKind::Cookie => {
            let c = per.cookie.clone().unwrap_or_else(|| "SYSRV".to_string());
            if !is_token(&c) {
                cx.err(
                    span.clone(),
                    format!(
                        "pool {name:?}: persistence cookie name {c:?} is not a valid cookie name"
                    ),
                );
            }
            Persist::Cookie(c)
        }
        PersistenceKind::SourceIp => Persist::SourceIp,
    });

    let protocol = p
        .protocol
        .as_ref()
        .map(|s| *s.get_ref())
        .unwrap_or_default();
    if let (Some(h), Some(proto)) = (&p.health, &p.protocol) {
        if h.kind == HealthKind::Http && *proto.get_ref() == UpstreamProtocol::H2 {
            cx.err(
                proto.span(),
                format!("pool {name:?}: HTTP health checks speak HTTP/1.1, which an h2 member may not; use health type = \"tcp\""),
            );
        }
    }
    let health = p.health.as_ref().map(|h| {
        let path = h.path.clone().unwrap_or_else(|| "/".to_string());
        if h.kind == HealthKind::Http && !path.starts_with('/') {
            cx.err(
                span.clone(),
                format!("pool {name:?}: health path {path:?} must start with '/'"),
            );
        }
        let method = h
            .method
            .clone()
            .unwrap_or_else(|| "GET".to_string())
            .to_ascii_uppercase();
        if !is_token(&method) {
            cx.err(
                span.clone(),
                format!("pool {name:?}: health method {method:?} is not a valid method"),
            );
        }
        let expect_status = h
            .expect_status
            .as_ref()
            .map(|s| s.to_vec())
            .unwrap_or_default();
        if let Some(bad) = expect_status.iter().find(|s| !(100..=599).contains(*s)) {
            cx.err(
                span.clone(),
                format!(
                    "pool {name:?}: health expect_status {bad} is not an HTTP status (100-599)"
                ),
            );
        }
        if h.kind == HealthKind::Tcp
            && (h.path.is_some() || h.expect_status.is_some() || h.expect_body.is_some())
        {
            cx.err(
                span.clone(),
                format!(
                    "pool {name:?}: health path/expect_status/expect_body need type = \"http\""
                ),
            );
        }
        let interval_ms = h.interval.map(|m| m.0).unwrap_or(2000).max(10);
        HealthCheck {
            kind: h.kind,
            interval_ms,
            timeout_ms: h
                .timeout
                .map(|m| m.0)
                .unwrap_or(interval_ms.min(1000))
                .max(1),
            rise: h.rise.unwrap_or(2).max(1),
            fall: h.fall.unwrap_or(3).max(1),
            method,
            path,
            host: h.host.clone(),
            expect_status,
            expect_body: h.expect_body.clone(),
            send: h.send.clone().unwrap_or_default().into_bytes(),
            expect: h.expect.clone().unwrap_or_default().into_bytes(),
            port: h.port,
        }
    });
    let passive = p.passive.as_ref().map(|ps| PassiveCheck {
        consecutive_failures: ps.consecutive_failures.unwrap_or(5).max(1),
        ejection_ms: ps.ejection.map(|m| m.0).unwrap_or(30_000).max(1),
        on_5xx: ps.on_5xx.unwrap_or(true),
    });

    let tls = p.tls.as_ref().and_then(|t| {
        let what = format!("pool {name:?}");
        let old_tls = old.and_then(|o| o.tls.as_ref());
        match crate::config::tls_upstream::build(
            t.get_ref(),
            &cx.pos.base_dir(),
            &what,
            t.span(),
            old_tls,
        ) {
            Ok(b) => {
                for (at, msg) in b.warnings {
                    cx.warn(at, msg);
                }
                Some(b.tls)
            }
            Err(problems) => {
                for (at, msg) in problems {
                    cx.err(at, msg);
                }
                None
            }
        }
    });

    let mut members = Vec::new();
    let mut seen = HashSet::new();
    // A pool of the cluster has the members published for it now (none
    // until some are): every build of the same text has the same ones.
    let published = if from_cluster {
        crate::cluster::members::of(&name)
    } else {
        Vec::new()
    };
    let old_members = old.map(|o| o.members.load_full());
    let old_members: Option<&[Arc<Member>]> = old_members.as_deref().map(|l| &l.list[..]);
    for m in published {
        members.push(cluster_member(&name, &m, old_members));
    }
    for m in &p.member {
        let addr = *m.address.get_ref();
        if !seen.insert(addr) {
            cx.err(
                m.address.span(),
                format!("pool {name:?}: member {addr} is listed twice"),
            );
            continue;
        }
        let weight = match &m.weight {
            None => 1,
            Some(w) if (1..=1000).contains(w.get_ref()) => *w.get_ref(),
            Some(w) => {
                cx.err(
                    w.span(),
                    format!(
                        "pool {name:?} member {addr}: weight must be between 1 and 1000, got {}",
                        w.get_ref()
                    ),
                );
                1
            }
        };
        let old_member = old_members.and_then(|o| o.iter().find(|om| om.addr == addr));
        members.push(Arc::new(Member {
            addr,
            weight,
            max_connections: m.max_connections.unwrap_or(0),
            backup: m.backup,
            cookie_id: format!("{:016x}", hash64(format!("{name}/{addr}").as_bytes(), 7)),
            state: old_member.map(|o| o.state.clone()).unwrap_or_default(),
            counters: old_member.map(|o| o.counters.clone()).unwrap_or_default(),
        }));
    }
    if !members.is_empty() && members.iter().all(|m| m.backup) {
        cx.err(
            span.clone(),
            format!("pool {name:?}: every member is a backup; at least one must be a primary"),
        );
    }
    if p.member.len() > MAX_POOL_MEMBERS {
        cx.err(
            span.clone(),
            format!(
                "pool {name:?} has {} members; a pool has at most {MAX_POOL_MEMBERS} (split it into several pools)",
                p.member.len()
            ),
        );
    }
    let slow_start_ms = p.slow_start.map(|m| m.0).unwrap_or(0);
    let mut problems = Vec::new();
    let proxy_protocol = crate::config::l4::proxy_version(p, &mut problems);
    let source_address = crate::config::l4::source_address(p, &mut problems);
    for (at, msg) in problems {
        cx.err(at, msg);
    }
    if source_address == Some(SourceAddress::Client) && !crate::source::transparent_allowed() {
        if let Some(at) = p.source_address.as_ref() {
            cx.warn(
                at.span(),
                format!("pool {name:?}: source_address = \"client\" needs CAP_NET_ADMIN (IP_TRANSPARENT), which this process does not have: connections to its members will fail"),
            );
        }
    }
    Some(Pool {
        proxy_protocol,
        source_address,
        members: ArcSwap::from_pointee(member_list(members, algorithm(p.algorithm), slow_start_ms)),
        cluster_members: from_cluster,
        name,
        algorithm: algorithm(p.algorithm),
        protocol,
        hash_key,
        persistence,
        idle_per_member: p.idle_per_member.unwrap_or(IDLE_PER_MEMBER),
        idle_timeout_ms: p.idle_timeout.map(|m| m.0).unwrap_or(20_000).max(1),
        health,
        passive,
        tls,
        counters: old.map(|o| o.counters.clone()).unwrap_or_default(),
    })
}

/// A member of a pool that takes its members from the cluster: the
/// state (health, drain, connections) and counters of the member at the
/// same address in `old` carry over.
pub fn cluster_member(
    pool: &str,
    m: &crate::cluster::members::MemberSpec,
    old: Option<&[Arc<Member>]>,
) -> Arc<Member> {
    let old_member = old.and_then(|o| o.iter().find(|om| om.addr == m.addr));
    Arc::new(Member {
        addr: m.addr,
        weight: m.weight,
        max_connections: 0,
        backup: false,
        cookie_id: format!(
            "{:016x}",
            hash64(format!("{pool}/{}", m.addr).as_bytes(), 7)
        ),
        state: old_member.map(|o| o.state.clone()).unwrap_or_default(),
        counters: old_member.map(|o| o.counters.clone()).unwrap_or_default(),
    })
}

/// `members` with the balancer built over them.
pub fn member_list(
    members: Vec<Arc<Member>>,
    algorithm: crate::balance::Algorithm,
    slow_start_ms: u64,
) -> MemberList {
    let keys: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let weights: Vec<u32> = members.iter().map(|m| m.weight).collect();
    let backups: Vec<bool> = members.iter().map(|m| m.backup).collect();
    MemberList {
        balancer: Balancer::new(algorithm, slow_start_ms, &keys, &weights, &backups),
        list: members,
    }
}

/// A run-time member change of a pool that takes its members from the
/// cluster, applied in place: the pool gets `set` (members that stay keep
/// their state and counters: health, drain, connections in flight,
/// persistence cookies, which hash the pool name and address) and a
/// balancer over it, in one swap that requests picking now see at once.
/// Answers the members that went away, for the caller to drain.
/// Runs on the control thread (the one writer of member lists).
pub fn swap_cluster_members(
    pool: &Pool,
    set: &[crate::cluster::members::MemberSpec],
) -> Vec<Arc<Member>> {
    let old = pool.members.load_full();
    let members: Vec<Arc<Member>> = set
        .iter()
        .map(|m| match old.iter().find(|o| o.addr == m.addr) {
            // The same member: the very same object, so a pick made on the
            // old list and one made on the new count the same connections.
            Some(o) if o.weight == m.weight => o.clone(),
            _ => cluster_member(&pool.name, m, Some(&old)),
        })
        .collect();
    let gone = old
        .iter()
        .filter(|o| !set.iter().any(|m| m.addr == o.addr))
        .cloned()
        .collect();
    let slow_start_ms = old.balancer.slow_start_ms;
    pool.members.store(Arc::new(member_list(
        members,
        pool.algorithm,
        slow_start_ms,
    )));
    gone
}

/// The file's algorithm name, as the balancer knows it.
pub(super) fn algorithm(a: Algorithm) -> crate::balance::Algorithm {
    use crate::balance::Algorithm as B;
    match a {
        Algorithm::RoundRobin => B::RoundRobin,
        Algorithm::WeightedRoundRobin => B::WeightedRoundRobin,
        Algorithm::LeastConnections => B::LeastConnections,
        Algorithm::P2c => B::P2c,
        Algorithm::ConsistentHash => B::ConsistentHash,
    }
}
