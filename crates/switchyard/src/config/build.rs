//! File model -> validated snapshot. Collects every error rather than
//! stopping at the first, so an operator fixes a file in one pass.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use toml::Spanned;

use super::model::{self, Algorithm, HealthKind, PersistenceKind};
use super::snapshot::*;
use super::{ConfigError, Positions};
use crate::balance::{hash64, Balancer, MAX_POOL_MEMBERS};

struct Ctx<'a> {
    pos: &'a Positions<'a>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

impl Ctx<'_> {
    fn err(&mut self, span: Range<usize>, msg: impl Into<String>) {
        self.errors.push(self.pos.error(span.start, msg));
    }

    fn warn(&mut self, span: Range<usize>, msg: impl Into<String>) {
        self.warnings.push(self.pos.error(span.start, msg));
    }
}

pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn valid_value(s: &str) -> bool {
    s.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

pub fn build(
    pos: &Positions,
    file: model::File,
    previous: Option<&Snapshot>,
) -> Result<Snapshot, Vec<ConfigError>> {
    let mut cx = Ctx {
        pos,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let settings = settings(&mut cx, &file);
    let (store, cache_limits) = cache_store(&mut cx, file.cache.as_ref(), previous);
    let empty_lists = Default::default();
    let shield_lists = file
        .shield
        .as_ref()
        .map(|s| &s.lists)
        .unwrap_or(&empty_lists);
    let shield = file.shield.as_ref().and_then(|s| {
        let mut problems = Vec::new();
        let mut set = super::shield::build(
            "shield",
            &s.acl,
            s.default.as_ref(),
            shield_lists,
            &mut problems,
        );
        super::shield::build_xdp(s, &mut set, &mut problems);
        for (at, msg) in problems {
            cx.err(at, msg);
        }
        (!set.is_empty() || set.default_action() != crate::shield::acl::Action::Allow)
            .then(|| Arc::new(set))
    });

    let mut problems = Vec::new();
    let rulesets = file
        .waf
        .as_ref()
        .map(|w| super::waf::rulesets(w, &pos.base_dir(), &mut problems))
        .unwrap_or_default();
    for (at, msg) in problems {
        cx.err(at, msg);
    }

    // Pools first: virtual servers refer to them.
    let mut pools: Vec<Arc<Pool>> = Vec::new();
    let mut pool_names: HashMap<String, Arc<Pool>> = HashMap::new();
    for p in &file.pool {
        if pool_names.contains_key(p.name.get_ref()) {
            cx.err(
                p.name.span(),
                format!(
                    "pool {:?} is defined twice; pool names must be unique",
                    p.name.get_ref()
                ),
            );
            continue;
        }
        if let Some(pool) = build_pool(&mut cx, p, previous) {
            let pool = Arc::new(pool);
            pool_names.insert(pool.name.clone(), pool.clone());
            pools.push(pool);
        }
    }

    let mut vservers = Vec::new();
    let mut by_listen: crate::fasthash::FxHashMap<SocketAddr, Arc<VServer>> = Default::default();
    let mut vs_names = HashSet::new();
    let mut udp_by_listen: crate::fasthash::FxHashMap<SocketAddr, Arc<VServer>> =
        Default::default();
    // A TCP and a UDP vserver may share an address and port.
    let mut listen_owner: HashMap<SocketAddr, String> = HashMap::new();
    let mut udp_owner: HashMap<SocketAddr, String> = HashMap::new();
    if file.vserver.is_empty() {
        cx.errors.push(pos.error(
            0,
            "no virtual server: add at least one [[vserver]] with a name, listen and default_pool",
        ));
    }
    for v in &file.vserver {
        let name = v.name.get_ref().clone();
        if !vs_names.insert(name.clone()) {
            cx.err(
                v.name.span(),
                format!("vserver {name:?} is defined twice; vserver names must be unique"),
            );
            continue;
        }
        if v.listen.get_ref().is_empty() {
            cx.err(v.listen.span(), format!("vserver {name:?}: listen is empty; give at least one address such as \"127.0.0.1:8080\""));
        }
        let owners = if v.protocol == model::Protocol::Udp {
            &mut udp_owner
        } else {
            &mut listen_owner
        };
        for a in v.listen.get_ref() {
            if let Some(other) = owners.insert(*a.get_ref(), name.clone()) {
                cx.err(
                    a.span(),
                    format!(
                        "vserver {name:?}: address {} is already used by vserver {other:?}",
                        a.get_ref()
                    ),
                );
            }
        }
        let mut vs = build_vserver(&mut cx, v, &pool_names, previous, &store, &rulesets);
        if !v.acl.is_empty() {
            let mut problems = Vec::new();
            let set = super::shield::build(
                &format!("vserver {name:?} acl"),
                &v.acl,
                None,
                shield_lists,
                &mut problems,
            );
            for (at, msg) in problems {
                cx.err(at, msg);
            }
            vs.acl = Some(Arc::new(set));
        }
        if !v.limit.is_empty() {
            let old: HashMap<String, Arc<crate::stick::Table>> = previous
                .and_then(|p| p.vservers.iter().find(|o| o.name == name))
                .map(|o| {
                    o.limits
                        .iter()
                        .map(|l| (l.name.clone(), l.table.clone()))
                        .collect()
                })
                .unwrap_or_default();
            let mut problems = Vec::new();
            vs.limits = super::limits::build(
                &v.limit,
                &name,
                shield_lists,
                &old,
                v.name.span(),
                &mut problems,
            );
            if vs.protocol == model::Protocol::Udp {
                problems.push((
                    v.name.span(),
                    format!(
                        "vserver {name:?}: a udp vserver has no connections or requests to limit"
                    ),
                ));
            } else if vs.protocol != model::Protocol::Http
                && vs
                    .limits
                    .iter()
                    .any(|l| l.req_rate.is_some() || !l.key.at_accept())
            {
                problems.push((
                    v.name.span(),
                    format!("vserver {name:?}: req_rate and request keys are HTTP; an L4 vserver limits connections (conn_cur, conn_rate)"),
                ));
            }
            for (at, msg) in problems {
                cx.err(at, msg);
            }
        }
        let vs = Arc::new(vs);
        let map = if vs.protocol == model::Protocol::Udp {
            &mut udp_by_listen
        } else {
            &mut by_listen
        };
        for a in &vs.listen {
            map.entry(*a).or_insert_with(|| vs.clone());
        }
        vservers.push(vs);
    }

    let admin = file
        .admin
        .as_ref()
        .map(|a| build_admin(&mut cx, a, &listen_owner, previous));

    if !cx.errors.is_empty() {
        cx.errors.sort_by_key(|e| (e.line, e.col));
        return Err(cx.errors);
    }
    store.set_limits(cache_limits.0, cache_limits.1);
    Ok(Snapshot {
        generation: previous.map(|p| p.generation + 1).unwrap_or(1),
        settings,
        admin,
        source: Arc::from(pos.text),
        source_name: pos.file.to_string(),
        vservers,
        pools,
        cache: store,
        shield,
        by_listen,
        udp_by_listen,
        warnings: cx.warnings,
    })
}

/// The admin listener: loopback by default; anywhere else only with tokens.
fn build_admin(
    cx: &mut Ctx,
    a: &model::Admin,
    listen_owner: &HashMap<SocketAddr, String>,
    previous: Option<&Snapshot>,
) -> AdminSettings {
    let listen = a
        .listen
        .as_ref()
        .map(|l| *l.get_ref())
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9090)));
    let span = a.listen.as_ref().map(|l| l.span()).unwrap_or(0..0);
    if let Some(owner) = listen_owner.get(&listen) {
        cx.err(
            span.clone(),
            format!("admin listen address {listen} is already used by vserver {owner:?}"),
        );
    }
    let tokens = a.tokens_file.as_ref().and_then(|f| {
        let path = super::tls_server::resolve(&cx.pos.base_dir(), f.get_ref());
        match std::fs::read_to_string(&path) {
            Err(e) => {
                cx.err(
                    f.span(),
                    format!("admin tokens_file {}: cannot read it: {e}", path.display()),
                );
                None
            }
            Ok(text) => match super::tokens::Tokens::parse(&text) {
                Ok(t) => Some(Arc::new(t)),
                Err((line, msg)) => {
                    cx.err(
                        f.span(),
                        format!("admin tokens_file {} line {line}: {msg}", path.display()),
                    );
                    None
                }
            },
        }
    });
    if a.tokens_file.is_none() && !listen.ip().is_loopback() {
        cx.err(
            span.clone(),
            format!(
                "admin listen {listen} is not a loopback address: name a tokens_file so that only holders of a token can use the API"
            ),
        );
    }
    let tls = a.tls.as_ref().and_then(|t| {
        let old = previous
            .and_then(|p| p.admin.as_ref())
            .and_then(|a| a.tls.as_deref());
        match super::tls_server::build(t, &cx.pos.base_dir(), "admin", span.clone(), old) {
            Ok(t) => Some(Arc::new(t)),
            Err(problems) => {
                for (at, msg) in problems {
                    cx.err(at, msg);
                }
                None
            }
        }
    });
    AdminSettings {
        listen,
        tokens,
        tls,
    }
}

fn bounded(
    cx: &mut Ctx,
    v: &Option<Spanned<usize>>,
    default: usize,
    min: usize,
    max: usize,
    what: &str,
) -> usize {
    match v {
        None => default,
        Some(s) if (min..=max).contains(s.get_ref()) => *s.get_ref(),
        Some(s) => {
            cx.err(
                s.span(),
                format!(
                    "{what} must be between {min} and {max}, got {}",
                    s.get_ref()
                ),
            );
            default
        }
    }
}

fn http2_settings(cx: &mut Ctx, f: &model::File) -> super::snapshot::Http2Settings {
    let h = &f.http2;
    let header_default = bounded(
        cx,
        &f.limits.max_header_bytes,
        32 * 1024,
        1024,
        1 << 20,
        "limits.max_header_bytes",
    );
    let max_window = (1usize << 31) - 1;
    super::snapshot::Http2Settings {
        max_concurrent_streams: bounded(
            cx,
            &h.max_concurrent_streams,
            100,
            1,
            10_000,
            "http2.max_concurrent_streams",
        ) as u32,
        stream_window: bounded(
            cx,
            &h.stream_window,
            256 * 1024,
            65_535,
            max_window,
            "http2.stream_window",
        ) as u32,
        connection_window: bounded(
            cx,
            &h.connection_window,
            1024 * 1024,
            65_535,
            max_window,
            "http2.connection_window",
        ) as u32,
        max_frame_size: bounded(
            cx,
            &h.max_frame_size,
            16_384,
            16_384,
            16_777_215,
            "http2.max_frame_size",
        ) as u32,
        max_header_list_size: bounded(
            cx,
            &h.max_header_list_size,
            header_default,
            1024,
            1 << 20,
            "http2.max_header_list_size",
        ) as u32,
        max_client_resets: bounded(
            cx,
            &h.max_client_resets,
            100,
            1,
            1_000_000,
            "http2.max_client_resets",
        ) as u32,
        max_control_frames: bounded(
            cx,
            &h.max_control_frames,
            1000,
            10,
            10_000_000,
            "http2.max_control_frames",
        ) as u32,
        abuse_window_ms: h.abuse_window.map(|m| m.0.max(100)).unwrap_or(10_000),
    }
}

fn settings(cx: &mut Ctx, f: &model::File) -> Settings {
    let t = &f.timeouts;
    let ms = |v: Option<super::types::Millis>, d: u64| v.map(|m| m.0.max(1)).unwrap_or(d);
    Settings {
        workers: f
            .global
            .workers
            .filter(|w| *w > 0)
            .unwrap_or_else(default_workers),
        pin_workers: f.global.pin_workers.unwrap_or(true),
        grace_period_ms: ms(f.global.grace_period, 30_000),
        access_log: f.global.access_log.unwrap_or(false),
        max_request_line: bounded(
            cx,
            &f.limits.max_request_line,
            8192,
            64,
            1 << 20,
            "limits.max_request_line",
        ),
        max_header_bytes: bounded(
            cx,
            &f.limits.max_header_bytes,
            32 * 1024,
            1024,
            1 << 20,
            "limits.max_header_bytes",
        ),
        max_headers: bounded(
            cx,
            &f.limits.max_headers,
            100,
            8,
            1000,
            "limits.max_headers",
        ),
        retries: f.limits.retries.unwrap_or(2),
        client_header_ms: ms(t.client_header, 10_000),
        client_idle_ms: ms(t.client_idle, 60_000),
        client_park_ms: ms(t.client_park, 5_000).max(100),
        client_body_ms: ms(t.client_body, 30_000),
        client_send_ms: ms(t.client_send, 60_000),
        upstream_connect_ms: ms(t.upstream_connect, 3_000),
        upstream_response_ms: ms(t.upstream_response, 60_000),
        tunnel_idle_ms: ms(t.tunnel_idle, 3_600_000),
        http2: http2_settings(cx, f),
    }
}

pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn build_pool(cx: &mut Ctx, p: &model::Pool, previous: Option<&Snapshot>) -> Option<Pool> {
    let name = p.name.get_ref().clone();
    let span = p.name.span();
    let old = previous.and_then(|s| s.pools.iter().find(|o| o.name == name));
    if p.member.is_empty() {
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
        match super::tls_upstream::build(t.get_ref(), &cx.pos.base_dir(), &what, t.span(), old_tls)
        {
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
        let old_member = old.and_then(|o| o.members.iter().find(|om| om.addr == addr));
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
    let keys: Vec<String> = members.iter().map(|m| m.addr.to_string()).collect();
    let weights: Vec<u32> = members.iter().map(|m| m.weight).collect();
    let backups: Vec<bool> = members.iter().map(|m| m.backup).collect();
    let slow_start_ms = p.slow_start.map(|m| m.0).unwrap_or(0);
    let mut problems = Vec::new();
    let proxy_protocol = super::l4::proxy_version(p, &mut problems);
    let source_address = super::l4::source_address(p, &mut problems);
    for (at, msg) in problems {
        cx.err(at, msg);
    }
    if source_address == Some(super::l4::SourceAddress::Client)
        && !crate::source::transparent_allowed()
    {
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
        balancer: Balancer::new(
            algorithm(p.algorithm),
            slow_start_ms,
            &keys,
            &weights,
            &backups,
        ),
        name,
        algorithm: algorithm(p.algorithm),
        protocol,
        hash_key,
        persistence,
        idle_per_member: p.idle_per_member.unwrap_or(64),
        idle_timeout_ms: p.idle_timeout.map(|m| m.0).unwrap_or(20_000).max(1),
        health,
        passive,
        tls,
        members,
        counters: old.map(|o| o.counters.clone()).unwrap_or_default(),
    })
}

/// `[vserver.compression]`: every key checked against what the encoders
/// accept.
fn build_compression(
    cx: &mut Ctx,
    c: &model::Compression,
    what: &str,
) -> crate::compress::Settings {
    use crate::compress::{Coding, Settings};
    let mut s = Settings::default();
    if let Some(list) = &c.algorithms {
        s.algorithms.clear();
        for a in list.get_ref() {
            match Coding::parse(a.get_ref()) {
                Some(coding) if !s.algorithms.contains(&coding) => s.algorithms.push(coding),
                Some(_) => cx.err(
                    a.span(),
                    format!(
                        "{what}: compression algorithm {:?} is listed twice",
                        a.get_ref()
                    ),
                ),
                None => cx.err(
                    a.span(),
                    format!(
                        "{what}: unknown compression algorithm {:?}; known: gzip, br, zstd",
                        a.get_ref()
                    ),
                ),
            }
        }
        if list.get_ref().is_empty() {
            cx.err(
                list.span(),
                format!("{what}: compression.algorithms is empty; remove the table or set enabled = false"),
            );
        }
    }
    let mut level = |v: &Option<toml::Spanned<u32>>, lo: u32, hi: u32, name: &str| -> Option<u32> {
        let v = v.as_ref()?;
        if (lo..=hi).contains(v.get_ref()) {
            Some(*v.get_ref())
        } else {
            cx.err(
                v.span(),
                format!(
                    "{what}: compression.{name} {} is out of range {lo} to {hi}",
                    v.get_ref()
                ),
            );
            None
        }
    };
    if let Some(l) = level(&c.gzip_level, 1, 9, "gzip_level") {
        s.gzip_level = l;
    }
    if let Some(l) = level(&c.brotli_level, 0, 11, "brotli_level") {
        s.brotli_level = l;
    }
    if let Some(z) = &c.zstd_level {
        if (-7..=19).contains(z.get_ref()) && *z.get_ref() != 0 {
            s.zstd_level = *z.get_ref();
        } else {
            cx.err(
                z.span(),
                format!(
                    "{what}: compression.zstd_level {} is out of range -7 to 19 (not 0)",
                    z.get_ref()
                ),
            );
        }
    }
    if let Some(types) = &c.types {
        s.types.clear();
        for t in types.get_ref() {
            let v = t.get_ref().trim().to_ascii_lowercase();
            let ok = match v.split_once('/') {
                Some((major, minor)) => {
                    !major.is_empty()
                        && major != "*"
                        && !minor.is_empty()
                        && (minor == "*" || !minor.contains('*'))
                        && !v.contains(';')
                }
                None => false,
            };
            if ok {
                s.types.push(v);
            } else {
                cx.err(
                    t.span(),
                    format!(
                        "{what}: compression type {:?} is not a media type (\"text/html\") or a range (\"text/*\")",
                        t.get_ref()
                    ),
                );
            }
        }
    }
    if let Some(n) = c.min_size {
        s.min_size = n;
    }
    s
}

const CACHE_MAX_BYTES: u64 = 256 << 20;
const CACHE_MAX_OBJECT: u64 = 8 << 20;

/// `[cache]`: the previous snapshot's store with the new limits, so a
/// reload keeps what is cached.
fn cache_store(
    cx: &mut Ctx,
    c: Option<&model::CacheStore>,
    previous: Option<&Snapshot>,
) -> (Arc<crate::cache::Store>, (u64, u64)) {
    let mut max = CACHE_MAX_BYTES;
    let mut obj = CACHE_MAX_OBJECT;
    if let Some(c) = c {
        if let Some(m) = &c.max_bytes {
            max = *m.get_ref();
            if max < 1 << 20 {
                cx.err(
                    m.span(),
                    format!("cache.max_bytes {max} is below the minimum of 1 MiB (1048576)"),
                );
            }
        }
        if let Some(o) = &c.max_object_bytes {
            obj = *o.get_ref();
            if obj > max {
                cx.err(
                    o.span(),
                    format!("cache.max_object_bytes {obj} is larger than cache.max_bytes {max}"),
                );
            }
        }
    }
    // The new limits apply once the whole configuration is valid: a
    // failed reload must not shrink the running cache.
    let store = match previous {
        Some(p) => p.cache.clone(),
        None => Arc::new(crate::cache::Store::new(max, obj)),
    };
    (store, (max, obj))
}

/// `[vserver.cache]`.
fn build_cache(cx: &mut Ctx, c: &model::VsCache, what: &str, name: &str) -> crate::cache::Settings {
    use crate::cache::{KeyPart, Settings};
    let mut s = Settings {
        name: format!("switchyard-{name}"),
        hit_status: format!("switchyard-{name}; hit"),
        ..Settings::default()
    };
    for k in c.key.iter().flatten() {
        let part = match k.get_ref().split_once(':') {
            Some(("header", n)) if is_token(n) => Some((KeyPart::Header, n.to_ascii_lowercase())),
            Some(("cookie", n)) if !n.is_empty() => Some((KeyPart::Cookie, n.to_string())),
            _ => None,
        };
        match part {
            Some(p) => s.key_extras.push(p),
            None => cx.err(
                k.span(),
                format!(
                    "{what}: cache key part {:?} is not \"header:NAME\" or \"cookie:NAME\"",
                    k.get_ref()
                ),
            ),
        }
    }
    s.store_set_cookie = c.store_set_cookie.unwrap_or(false);
    if let Some(h) = &c.heuristic_percent {
        if *h.get_ref() > 100 {
            cx.err(
                h.span(),
                format!(
                    "{what}: cache.heuristic_percent {} is over 100",
                    h.get_ref()
                ),
            );
        } else {
            s.heuristic_percent = *h.get_ref();
        }
    }
    s
}

fn build_vserver(
    cx: &mut Ctx,
    v: &model::VServer,
    pools: &HashMap<String, Arc<Pool>>,
    previous: Option<&Snapshot>,
    store: &Arc<crate::cache::Store>,
    rulesets: &HashMap<String, super::waf::Ruleset>,
) -> VServer {
    let name = v.name.get_ref().clone();
    let span = v.name.span();
    let old = previous.and_then(|s| s.vservers.iter().find(|o| o.name == name));
    let default_pool = v.default_pool.as_ref().and_then(|p| {
        let found = pools.get(p.get_ref()).cloned();
        if found.is_none() {
            cx.err(
                p.span(),
                format!(
                    "vserver {name:?}: default_pool {:?} is not defined; defined pools: {}",
                    p.get_ref(),
                    pool_list(pools)
                ),
            );
        }
        found
    });
    let mut policies = Vec::new();
    for (i, p) in v.policy.iter().enumerate() {
        let pname = p.name.clone().unwrap_or_else(|| format!("#{}", i + 1));
        let what = format!("vserver {name:?} policy {pname:?}");
        let matcher = build_matcher(cx, &p.matches, &what, span.clone());
        let action = p
            .action
            .as_ref()
            .and_then(|a| build_action(cx, a, pools, &what));
        if action.is_none()
            && p.request_headers.set.is_empty()
            && p.request_headers.add.is_empty()
            && p.request_headers.remove.is_empty()
            && p.response_headers.set.is_empty()
            && p.response_headers.add.is_empty()
            && p.response_headers.remove.is_empty()
            && p.action.is_none()
            && p.compression.is_none()
            && p.cache.is_none()
        {
            cx.err(
                span.clone(),
                format!("{what}: has neither an action nor header edits, so it does nothing"),
            );
        }
        policies.push(Policy {
            name: pname,
            matcher,
            action,
            request_headers: edits(cx, &p.request_headers, &what, span.clone()),
            response_headers: edits(cx, &p.response_headers, &what, span.clone()),
            compression: p.compression.as_ref().map(|c| match c {
                model::OnOrSettings::Switch(false) => PolicyCompression::Off,
                model::OnOrSettings::Switch(true) => PolicyCompression::On,
                // A settings table says on, unless it says otherwise.
                model::OnOrSettings::Settings(c) if c.enabled == Some(false) => {
                    PolicyCompression::Off
                }
                model::OnOrSettings::Settings(c) => {
                    PolicyCompression::With(Arc::new(build_compression(cx, c, &what)))
                }
            }),
            cache: p.cache,
        });
    }
    let what = format!("vserver {name:?}");
    let tls = v.tls.as_ref().and_then(|t| {
        let old_tls = old.and_then(|o| o.tls.as_deref());
        match super::tls_server::build(t, &cx.pos.base_dir(), &what, span.clone(), old_tls) {
            Ok(t) => Some(Arc::new(t)),
            Err(problems) => {
                for (at, msg) in problems {
                    cx.err(at, msg);
                }
                None
            }
        }
    });
    let h2c_only = match &v.h2c_only {
        Some(b) if *b.get_ref() && v.tls.is_some() => {
            cx.err(
                b.span(),
                format!("{what}: h2c_only is for cleartext vservers; on a TLS vserver use tls.alpn = [\"h2\"]"),
            );
            false
        }
        Some(b) => *b.get_ref(),
        None => false,
    };
    let h2c = h2c_only
        || match &v.h2c {
            Some(b) if *b.get_ref() && v.tls.is_some() => {
                cx.err(
                b.span(),
                format!(
                    "{what}: h2c is cleartext HTTP/2; on a TLS vserver offer HTTP/2 with tls.alpn = [\"h2\", \"http/1.1\"]"
                ),
            );
                false
            }
            Some(b) => *b.get_ref(),
            None => false,
        };
    let compression = v
        .compression
        .as_ref()
        .map(|c| build_compression(cx, c, &what));
    let cache = v.cache.as_ref().map(|c| build_cache(cx, c, &what, &name));
    let access_log = v.access_log.as_ref().and_then(|a| {
        let l4 = v.protocol != model::Protocol::Http;
        match crate::accesslog::build(a, &cx.pos.base_dir(), &what, l4) {
            Ok(c) => Some(Arc::new(c)),
            Err(problems) => {
                for (at, msg) in problems {
                    cx.err(at, msg);
                }
                None
            }
        }
    });
    let mut response_headers = edits(cx, &v.response_headers, &what, span.clone());
    if let Some(h) = tls.as_ref().and_then(|t| t.hsts.clone()) {
        // HSTS rides on the vserver's own response edits so every proxied
        // response carries it; a policy can still override it.
        response_headers
            .set
            .push(("strict-transport-security".to_string(), h));
    }
    let mut problems = Vec::new();
    let waf = v.waf.as_ref().and_then(|w| {
        super::waf::build(
            w,
            rulesets,
            &cx.pos.base_dir(),
            &what,
            old.and_then(|o| o.waf.as_deref()),
            &mut problems,
        )
        .map(Arc::new)
    });
    let l4 = super::l4::build(v, &name, pools, span.clone(), &mut problems).map(Arc::new);
    let accept_proxy = super::l4::accept_proxy(v).map(Arc::new);
    let socket = super::l4::socket_opts(v, &name, &mut problems);
    let normalize = super::normalize::build(v.normalize.as_ref(), &what, &mut problems);
    let http_pools = || {
        default_pool
            .iter()
            .chain(policies.iter().filter_map(|p| match &p.action {
                Some(Action::Pool(pool)) => Some(pool),
                _ => None,
            }))
    };
    let private_member_conns =
        v.protocol == model::Protocol::Http && http_pools().any(|p| p.proxy_protocol.is_some());
    if v.protocol == model::Protocol::Http {
        super::l4::check_http_pools(&name, http_pools(), span.clone(), &mut problems);
    }
    if l4.is_some() {
        let http_only = [
            (!v.policy.is_empty(), "policy"),
            (v.compression.is_some(), "compression"),
            (v.cache.is_some(), "cache"),
            (v.waf.is_some(), "waf"),
            (v.normalize.is_some(), "normalize"),
            (v.request_body.is_some(), "request_body"),
            (v.h2c.is_some() || v.h2c_only.is_some(), "h2c"),
            (
                !v.request_headers.set.is_empty()
                    || !v.request_headers.add.is_empty()
                    || !v.request_headers.remove.is_empty(),
                "request_headers",
            ),
        ];
        for (set, key) in http_only {
            if set {
                problems.push((
                    span.clone(),
                    format!(
                        "vserver {name:?}: {key} is HTTP; a {} vserver relays bytes",
                        if v.protocol == model::Protocol::Udp {
                            "udp"
                        } else {
                            "tcp"
                        }
                    ),
                ));
            }
        }
        super::l4::check_limits(v, &name, &mut problems);
        if v.default_pool.is_none() && v.sni_route.is_empty() {
            problems.push((
                span.clone(),
                format!("vserver {name:?}: an L4 vserver needs a default_pool (or sni_route)"),
            ));
        }
    }
    for (at, msg) in problems {
        cx.err(at, msg);
    }
    VServer {
        listen: v.listen.get_ref().iter().map(|a| *a.get_ref()).collect(),
        policies,
        default_pool,
        request_headers: edits(cx, &v.request_headers, &what, span.clone()),
        response_headers,
        tls,
        h2c,
        h2c_only,
        compression_on: v
            .compression
            .as_ref()
            .is_some_and(|c| c.enabled.unwrap_or(true)),
        compression: compression
            .or_else(|| {
                // A policy may turn on what the vserver leaves off.
                v.policy
                    .iter()
                    .any(|p| matches!(p.compression, Some(model::OnOrSettings::Switch(true))))
                    .then(crate::compress::Settings::default)
            })
            .map(Arc::new),
        cache_on: v.cache.as_ref().is_some_and(|c| c.enabled.unwrap_or(true)),
        cache: cache
            .or_else(|| {
                v.policy
                    .iter()
                    .any(|p| p.cache == Some(true))
                    .then(crate::cache::Settings::default)
            })
            .map(|settings| {
                Arc::new(super::snapshot::VsCache {
                    settings,
                    store: store.clone(),
                })
            }),
        counters: old.map(|o| o.counters.clone()).unwrap_or_default(),
        latency: old.map(|o| o.latency.clone()).unwrap_or_default(),
        access_log,
        private_member_conns,
        normalize,
        request_body: request_body(cx, v, &what),
        waf,
        limits: Vec::new(),
        protocol: v.protocol,
        l4,
        accept_proxy,
        socket,
        acl: None,
        name,
    }
}

fn pool_list(pools: &HashMap<String, Arc<Pool>>) -> String {
    let mut names: Vec<&str> = pools.keys().map(|s| s.as_str()).collect();
    names.sort();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

fn build_action(
    cx: &mut Ctx,
    a: &Spanned<model::Action>,
    pools: &HashMap<String, Arc<Pool>>,
    what: &str,
) -> Option<Action> {
    let span = a.span();
    let a = a.get_ref();
    let https = a.redirect_https == Some(true);
    let kinds = [
        a.pool.is_some(),
        a.redirect.is_some(),
        https,
        a.body.is_some()
            || (a.redirect.is_none() && a.pool.is_none() && !https && a.status.is_some()),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        cx.err(span, format!("{what}: action needs exactly one of pool = \"NAME\", redirect = \"URL\", redirect_https = true, or status + body (a fixed response)"));
        return None;
    }
    if a.https_port.is_some() && !https {
        cx.err(
            span,
            format!("{what}: https_port only applies to redirect_https = true"),
        );
        return None;
    }
    if https {
        let status = a.status.unwrap_or(301);
        if ![301, 302, 303, 307, 308].contains(&status) {
            cx.err(span, format!("{what}: redirect status {status} is not a redirect; allowed: 301, 302, 303, 307, 308"));
            return None;
        }
        return Some(Action::RedirectHttps {
            status,
            port: a.https_port.unwrap_or(443),
        });
    }
    if let Some(p) = &a.pool {
        return match pools.get(p) {
            Some(pool) => Some(Action::Pool(pool.clone())),
            None => {
                cx.err(
                    span,
                    format!(
                        "{what}: action pool {p:?} is not defined; defined pools: {}",
                        pool_list(pools)
                    ),
                );
                None
            }
        };
    }
    if let Some(loc) = &a.redirect {
        let status = a.status.unwrap_or(302);
        if ![301, 302, 303, 307, 308].contains(&status) {
            cx.err(span, format!("{what}: redirect status {status} is not a redirect; allowed: 301, 302, 303, 307, 308"));
            return None;
        }
        if !valid_value(loc) || loc.is_empty() {
            cx.err(
                span,
                format!("{what}: redirect location {loc:?} is empty or holds control characters"),
            );
            return None;
        }
        return Some(Action::Redirect {
            location: loc.clone(),
            status,
        });
    }
    let status = a.status.unwrap_or(200);
    if !(200..=599).contains(&status) {
        cx.err(
            span,
            format!("{what}: fixed response status {status} must be between 200 and 599"),
        );
        return None;
    }
    let ct = a
        .content_type
        .clone()
        .unwrap_or_else(|| "text/plain; charset=utf-8".to_string());
    if !valid_value(&ct) {
        cx.err(
            span,
            format!("{what}: content_type holds control characters"),
        );
        return None;
    }
    Some(Action::Respond {
        status,
        body: Bytes::from(a.body.clone().unwrap_or_default()),
        content_type: ct,
    })
}

fn build_matcher(cx: &mut Ctx, m: &model::Match, what: &str, span: Range<usize>) -> Matcher {
    let methods: Vec<String> = m
        .method
        .as_ref()
        .map(|v| v.to_vec())
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.to_ascii_uppercase())
        .collect();
    for meth in &methods {
        if !is_token(meth) {
            cx.err(
                span.clone(),
                format!("{what}: match method {meth:?} is not a valid method"),
            );
        }
    }
    let paths: Vec<String> = m.path.as_ref().map(|v| v.to_vec()).unwrap_or_default();
    let prefixes: Vec<String> = m
        .path_prefix
        .as_ref()
        .map(|v| v.to_vec())
        .unwrap_or_default();
    for p in paths.iter().chain(&prefixes) {
        if !p.starts_with('/') {
            cx.err(
                span.clone(),
                format!("{what}: match path {p:?} must start with '/'"),
            );
        }
    }
    // Requests are matched on their normalized path: a configured one is
    // written the same way (`/caf%c3%a9` matches `/caf%C3%A9`).
    let paths = normal_paths(cx, paths, what, &span);
    let prefixes = normal_paths(cx, prefixes, what, &span);
    let path_nocase = match m.case.as_deref() {
        None | Some("sensitive") => false,
        Some("insensitive") => true,
        Some(other) => {
            cx.err(
                span.clone(),
                format!("{what}: match case {other:?}: use \"sensitive\" or \"insensitive\""),
            );
            false
        }
    };
    let path_regex = m.path_regex.as_ref().map(|r| {
        if !path_nocase {
            return r.0.clone();
        }
        match regex::RegexBuilder::new(r.0.as_str())
            .case_insensitive(true)
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                cx.err(span.clone(), format!("{what}: match path_regex: {e}"));
                r.0.clone()
            }
        }
    });
    let nv = |cx: &mut Ctx, n: &Option<model::NameValue>, header: bool| {
        n.as_ref().map(|n| {
            if header && !is_token(&n.name) {
                cx.err(
                    span.clone(),
                    format!(
                        "{what}: match header name {:?} is not a valid field name",
                        n.name
                    ),
                );
            }
            let set = [
                n.value.is_some(),
                n.value_prefix.is_some(),
                n.value_regex.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if set > 1 {
                cx.err(
                    span.clone(),
                    format!("{what}: use only one of value, value_prefix, value_regex"),
                );
            }
            NameValueMatch {
                name: if header {
                    n.name.to_ascii_lowercase()
                } else {
                    n.name.clone()
                },
                value: if let Some(v) = &n.value {
                    ValueMatch::Exact(v.clone())
                } else if let Some(v) = &n.value_prefix {
                    ValueMatch::Prefix(v.clone())
                } else if let Some(r) = &n.value_regex {
                    ValueMatch::Regex(r.0.clone())
                } else {
                    ValueMatch::Present
                },
            }
        })
    };
    Matcher {
        hosts: m
            .host
            .as_ref()
            .map(|v| v.to_vec())
            .unwrap_or_default()
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        paths,
        path_prefixes: prefixes,
        path_regex,
        path_nocase,
        methods,
        header: nv(cx, &m.header, true),
        query: nv(cx, &m.query, false),
        sources: m.source.as_ref().map(|v| v.to_vec()).unwrap_or_default(),
    }
}

/// Configured paths in the form requests are matched in
/// (`http::normalize`, with nothing refused: a path written with an
/// escaped slash means it).
fn normal_paths(cx: &mut Ctx, paths: Vec<String>, what: &str, span: &Range<usize>) -> Vec<String> {
    use crate::http::normalize::{self, BadEncoding, EscapedSlashes, Rules};
    let rules = Rules {
        merge_slashes: false,
        escaped_slashes: EscapedSlashes::Keep,
        bad_encoding: BadEncoding::Keep,
        forward_original: false,
    };
    paths
        .into_iter()
        .map(|p| match normalize::target(p.as_bytes(), &rules) {
            Ok(Some(n)) => match String::from_utf8(n.to_vec()) {
                Ok(n) => n,
                Err(_) => {
                    cx.err(
                        span.clone(),
                        format!("{what}: match path {p:?} is not UTF-8 once normalized"),
                    );
                    p
                }
            },
            _ => p,
        })
        .collect()
}

fn edits(cx: &mut Ctx, e: &model::HeaderEdits, what: &str, span: Range<usize>) -> HeaderEdits {
    let mut check = |n: &str, v: Option<&str>| {
        if !is_token(n) {
            cx.err(
                span.clone(),
                format!("{what}: header edit name {n:?} is not a valid field name"),
            );
        }
        if v.is_some_and(|v| !valid_value(v)) {
            cx.err(
                span.clone(),
                format!("{what}: header edit value for {n:?} holds control characters"),
            );
        }
    };
    for (n, v) in e.set.iter().chain(&e.add) {
        check(n, Some(v));
    }
    for n in &e.remove {
        check(n, None);
    }
    HeaderEdits {
        set: e.set.iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
        add: e.add.iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
        remove: e.remove.iter().map(|n| n.to_ascii_lowercase()).collect(),
    }
}

/// The file's algorithm name, as the balancer knows it.
fn algorithm(a: Algorithm) -> crate::balance::Algorithm {
    use crate::balance::Algorithm as B;
    match a {
        Algorithm::RoundRobin => B::RoundRobin,
        Algorithm::WeightedRoundRobin => B::WeightedRoundRobin,
        Algorithm::LeastConnections => B::LeastConnections,
        Algorithm::P2c => B::P2c,
        Algorithm::ConsistentHash => B::ConsistentHash,
    }
}

/// Apache's mod_reqtimeout default, `body=20,MinRate=500`: a body may
/// take 20 s, then must average 500 bytes/s (a trickle of one byte every
/// 2 s is cut after 20 s; a phone on a poor link sends far more). A
/// request body that has kept the proxy waiting 10 minutes in all is cut
/// whatever its rate: without that bound a client at exactly 500 bytes/s
/// holds a connection for as long as its (chunked: endless) body lasts; a
/// 300 MB upload over 5 Mbit/s still fits. Uploads larger or slower than
/// that raise `deadline` (or set "0s") on their vserver.
const BODY_GRACE_MS: u64 = 20_000;
const BODY_MIN_RATE: u64 = 500;
const BODY_DEADLINE_MS: u64 = 600_000;

/// `[vserver.request_body]`, with the defaults above.
fn request_body(cx: &mut Ctx, v: &model::VServer, what: &str) -> crate::http::body::BodyPace {
    let r = v.request_body.as_ref();
    let min_rate = match r.and_then(|r| r.min_rate.as_ref()) {
        None => BODY_MIN_RATE,
        Some(m) if *m.get_ref() <= 1 << 30 => *m.get_ref(),
        Some(m) => {
            cx.err(
                m.span(),
                format!(
                    "{what}: request_body.min_rate {} is out of range 0 to 1073741824 bytes per second",
                    m.get_ref()
                ),
            );
            BODY_MIN_RATE
        }
    };
    crate::http::body::BodyPace {
        gap_ms: 0,
        grace_ms: r.and_then(|r| r.grace).map_or(BODY_GRACE_MS, |m| m.0),
        min_rate,
        deadline_ms: r.and_then(|r| r.deadline).map_or(BODY_DEADLINE_MS, |m| m.0),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    const GOOD: &str = r#"
[[vserver]]
name = "web"
listen = ["127.0.0.1:18080"]
default_pool = "app"

[[vserver.policy]]
match = { path_prefix = "/images/" }
action = { pool = "img" }

[[pool]]
name = "app"
[[pool.member]]
address = "127.0.0.1:9001"

[[pool]]
name = "img"
algorithm = "consistent-hash"
hash_key = "uri"
[[pool.member]]
address = "127.0.0.1:9002"
"#;

    #[test]
    fn good_file_builds() {
        let s = parse("t.toml", GOOD, None).unwrap();
        assert_eq!(s.vservers.len(), 1);
        assert_eq!(s.pools.len(), 2);
        assert_eq!(s.vservers[0].policies.len(), 1);
    }

    #[test]
    fn unknown_pool_is_located() {
        let bad = GOOD.replace(
            "action = { pool = \"img\" }",
            "action = { pool = \"imgs\" }",
        );
        let e = parse("t.toml", &bad, None).unwrap_err();
        let first = &e.0[0];
        assert_eq!((first.line, first.col), (9, 10), "{e}");
        assert!(first.message.contains("\"imgs\" is not defined"), "{e}");
    }

    #[test]
    fn a_pool_over_the_member_limit_is_refused() {
        let n = crate::balance::MAX_POOL_MEMBERS;
        let members = |count: usize| -> String {
            (0..count)
                .map(|i| {
                    format!(
                        "[[pool.member]]\naddress = \"127.0.{}.{}:80\"\n",
                        i / 250,
                        i % 250 + 1
                    )
                })
                .collect()
        };
        let base = "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\ndefault_pool = \"p\"\n[[pool]]\nname = \"p\"\n";
        assert!(parse("t.toml", &format!("{base}{}", members(n)), None).is_ok());
        let e = parse("t.toml", &format!("{base}{}", members(n + 1)), None).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(
            e.to_string(),
            format!("t.toml:6:8: pool \"p\" has {} members; a pool has at most {n} (split it into several pools)", n + 1)
        );
    }

    #[test]
    fn source_address_is_an_address_or_client_and_client_is_for_l4_only() {
        let pool = |extra: &str| {
            format!("[[pool]]\nname = \"p\"\n{extra}\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n")
        };
        let vs = |proto: &str| {
            format!("[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n")
        };
        let local = parse(
            "t.toml",
            &format!("{}{}", vs("http"), pool("source_address = \"127.0.0.9\"")),
            None,
        )
        .unwrap();
        assert_eq!(
            local.pools[0].source_address,
            Some(super::super::l4::SourceAddress::Local(
                "127.0.0.9".parse().unwrap()
            ))
        );
        let tcp = parse(
            "t.toml",
            &format!("{}{}", vs("tcp"), pool("source_address = \"client\"")),
            None,
        )
        .unwrap();
        assert_eq!(
            tcp.pools[0].source_address,
            Some(super::super::l4::SourceAddress::Client)
        );
        let e = parse(
            "t.toml",
            &format!("{}{}", vs("tcp"), pool("source_address = \"clients\"")),
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(
                "source_address \"clients\": use an IP address of this host or \"client\""
            ),
            "{e}"
        );
        let e = parse(
            "t.toml",
            &format!("{}{}", vs("http"), pool("source_address = \"client\"")),
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "t.toml:2:8: vserver \"v\": pool \"p\" connects from the client's address"
            ),
            "{e}"
        );
        // A pool an HTTP vserver reaches only through a policy is checked too.
        let by_policy = format!(
            "{}[[vserver.policy]]\naction = {{ pool = \"pp\" }}\n{}[[pool]]\nname = \"pp\"\nproxy_protocol = \"v1\"\nprotocol = \"h2\"\n[[pool.member]]\naddress = \"127.0.0.1:3\"\n",
            vs("http"),
            pool("")
        );
        let e = parse("t.toml", &by_policy, None).unwrap_err();
        assert!(
            e.to_string()
                .contains("pool \"pp\" sends a PROXY protocol header to h2 members"),
            "{e}"
        );
    }

    #[test]
    fn l4_vservers_refuse_what_only_http_or_the_other_transport_does() {
        let cfg = |proto: &str, vs_extra: &str, pool_extra: &str| {
            format!(
                "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n{vs_extra}\n[[pool]]\nname = \"p\"\n{pool_extra}\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n"
            )
        };
        let refused = [
            cfg("tcp", "[vserver.l4]\nper_datagram = true", ""),
            cfg("tcp", "[vserver.l4]\nmax_sessions = 10", ""),
            cfg("udp", "[vserver.l4]\nzero_copy = \"copy\"", ""),
            cfg("udp", "[vserver.l4]\nclient_hello_timeout = \"1s\"", ""),
            cfg("udp", "[vserver.socket]\nnodelay = true", ""),
            cfg("udp", "", "proxy_protocol = \"v1\""),
            cfg("udp", "", "[pool.tls]\nverify = false"),
            cfg("tcp", "", "protocol = \"h2\""),
            cfg(
                "udp",
                "",
                "persistence = { type = \"cookie\", cookie = \"S\" }",
            ),
            cfg(
                "tcp",
                "",
                "algorithm = \"consistent-hash\"\nhash_key = \"header:x-user\"",
            ),
            cfg(
                "tcp",
                "[[vserver.sni_route]]\nnames = [\"a.test\"]\npool = \"p\"",
                "[pool.tls]\nverify = false",
            ),
        ];
        let says = [
            "[vserver.l4] per_datagram is for udp vservers",
            "[vserver.l4] max_sessions is for udp vservers",
            "[vserver.l4] zero_copy is for tcp vservers",
            "[vserver.l4] client_hello_timeout is for tcp vservers",
            "[vserver.socket] nodelay is a TCP option",
            "sends PROXY v1, a text header for streams",
            "a udp vserver has no TLS (no DTLS)",
            "protocol = \"h2\", which is what HTTP members speak",
            "persists by cookie, which needs HTTP",
            "hashes a part of an HTTP request",
            "TLS inside TLS",
        ];
        for (c, want) in refused.iter().zip(says) {
            let e = parse("t.toml", c, None).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
        for (c, want) in [
            (
                cfg(
                    "udp",
                    "[[vserver.limit]]\nname = \"l\"\nconn_rate = \"10/1s\"",
                    "",
                ),
                "a udp vserver has no connections or requests to limit",
            ),
            (
                cfg(
                    "tcp",
                    "[[vserver.limit]]\nname = \"l\"\nreq_rate = \"10/1s\"",
                    "",
                ),
                "req_rate and keys from requests are HTTP",
            ),
        ] {
            let e = parse("t.toml", &c, None).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
        // What they may have.
        for ok in [
            cfg("udp", "[vserver.l4]\nper_datagram = true\n[vserver.socket]\nfreebind = true", "proxy_protocol = \"v2\""),
            cfg("tcp", "[vserver.l4]\nzero_copy = \"copy\"\n[[vserver.limit]]\nname = \"l\"\nconn_cur = 5", "algorithm = \"consistent-hash\"\nhash_key = \"source-ip\"\n[pool.tls]\nverify = false"),
        ] {
            assert!(parse("t.toml", &ok, None).is_ok(), "{ok}");
        }
    }

    #[test]
    fn bad_algorithm_lists_allowed() {
        let bad = GOOD.replace("consistent-hash", "rr");
        let e = parse("t.toml", &bad, None).unwrap_err();
        assert!(e.to_string().starts_with("t.toml:18:13:"), "{e}");
        assert!(e.to_string().contains("round-robin"), "{e}");
    }

    #[test]
    fn bad_duration_is_located() {
        let bad = GOOD.replace(
            "name = \"app\"\n",
            "name = \"app\"\nslow_start = \"10 parsecs\"\n",
        );
        let e = parse("t.toml", &bad, None).unwrap_err();
        assert!(e.to_string().starts_with("t.toml:13:14:"), "{e}");
    }

    #[test]
    fn pool_tls_verify_false_warns_and_unknown_keys_are_refused() {
        let tls = GOOD.replace(
            "name = \"app\"\n",
            "name = \"app\"\n[pool.tls]\nverify = false\nsni = \"api.internal\"\n",
        );
        let s = parse("t.toml", &tls, None).unwrap();
        let t = s.pools[0].tls.as_ref().expect("tls built");
        assert!(!t.verify);
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        let w = s.warnings[0].as_warning();
        assert!(
            w.starts_with("t.toml:14:10: warning: pool \"app\" tls: verify = false"),
            "{w}"
        );
        // Unchanged settings: the built config is handed to the next snapshot.
        let again = parse("t.toml", &tls, Some(&s)).unwrap();
        assert!(std::sync::Arc::ptr_eq(
            t,
            again.pools[0].tls.as_ref().expect("tls built")
        ));
        let changed = parse(
            "t.toml",
            &tls.replace("api.internal", "b.internal"),
            Some(&s),
        )
        .unwrap();
        assert!(!std::sync::Arc::ptr_eq(
            t,
            changed.pools[0].tls.as_ref().expect("tls built")
        ));

        let bad = tls.replace("verify = false", "verify = false\nciphers = []");
        let e = parse("t.toml", &bad, None).unwrap_err();
        assert!(e.to_string().starts_with("t.toml:15:1:"), "{e}");
        assert!(e.to_string().contains("unknown field `ciphers`"), "{e}");

        let bad = tls.replace("verify = false", "verify = false\nkey = \"k.pem\"");
        let e = parse("t.toml", &bad, None).unwrap_err();
        assert!(e.to_string().starts_with("t.toml:15:7:"), "{e}");
        assert!(e.to_string().contains("key needs cert"), "{e}");
    }

    #[test]
    fn state_survives_reload() {
        let a = parse("t.toml", GOOD, None).unwrap();
        let b = parse("t.toml", GOOD, Some(&a)).unwrap();
        assert!(std::sync::Arc::ptr_eq(
            &a.pools[0].members[0].state,
            &b.pools[0].members[0].state
        ));
        assert_eq!(b.generation, 2);
    }

    #[test]
    fn untrusted_wait_is_for_tcp_vservers() {
        let cfg = |proto: &str, wait: &str| {
            format!(
                "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n\
                 [vserver.proxy_protocol]\ntrusted = [\"10.0.0.0/8\"]\n{wait}\n\
                 [[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n"
            )
        };
        let b = parse("t.toml", &cfg("tcp", "untrusted_wait = \"2s\""), None).expect("tcp");
        let ap = b.vservers[0].accept_proxy.as_ref().expect("proxy_protocol");
        assert_eq!(ap.untrusted_wait_ms, 2_000);
        let b = parse("t.toml", &cfg("tcp", ""), None).expect("tcp");
        let ap = b.vservers[0].accept_proxy.as_ref().expect("proxy_protocol");
        assert_eq!(ap.untrusted_wait_ms, 500, "the default");
        for proto in ["http", "udp"] {
            let e = parse("t.toml", &cfg(proto, "untrusted_wait = \"1s\""), None).unwrap_err();
            assert!(
                e.to_string().contains("untrusted_wait is for tcp vservers"),
                "{proto}: {e}"
            );
        }
    }

    #[test]
    fn on_member_down_is_a_udp_choice_of_three() {
        use crate::config::l4::OnMemberDown;
        let cfg = |proto: &str, l4: &str| {
            format!(
                "[[vserver]]\nname = \"v\"\nlisten = [\"127.0.0.1:1\"]\nprotocol = \"{proto}\"\ndefault_pool = \"p\"\n\
                 [vserver.l4]\n{l4}\n[[pool]]\nname = \"p\"\n[[pool.member]]\naddress = \"127.0.0.1:2\"\n"
            )
        };
        for (l4, want) in [
            ("", OnMemberDown::Reassign),
            ("on_member_down = \"reassign\"", OnMemberDown::Reassign),
            ("on_member_down = \"close\"", OnMemberDown::Close),
            ("on_member_down = \"keep\"", OnMemberDown::Keep),
        ] {
            let b = parse("t.toml", &cfg("udp", l4), None).expect(l4);
            let got = b.vservers[0].l4.as_ref().expect("l4").on_member_down;
            assert_eq!(got, want, "{l4:?}");
        }
        let e = parse("t.toml", &cfg("udp", "on_member_down = \"drop\""), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("on_member_down \"drop\": use \"reassign\", \"close\" or \"keep\""),
            "{e}"
        );
        assert!(e.to_string().contains("t.toml:"), "with its position: {e}");
        let e = parse("t.toml", &cfg("tcp", "on_member_down = \"keep\""), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("[vserver.l4] on_member_down is for udp vservers"),
            "{e}"
        );
    }
}
