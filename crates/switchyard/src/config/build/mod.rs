//! File model -> validated snapshot. Collects every error rather than
//! stopping at the first, so an operator fixes a file in one pass.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;

use toml::Spanned;

use super::model::{self};
use super::read::Dropped;
use super::snapshot::*;
use super::{ConfigError, Positions};

mod offload;
mod policy;
mod pool;
#[cfg(test)]
mod tests;
mod vserver;

use offload::cache_store;
use pool::build_pool;
pub use pool::swap_cluster_members;
use vserver::build_vserver;

struct Ctx<'a> {
    pos: &'a Positions<'a>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    /// What reading dropped from the model: problems there may be its
    /// consequences and wait for the next run.
    dropped: &'a Dropped,
    /// Pools of the file that could not be built (their errors are
    /// reported): a reference to one is not "undefined".
    broken_pools: HashSet<String>,
}

impl Ctx<'_> {
    /// A problem with a value, unless it lies in a top-level table that
    /// lost a value to an error already reported (it may be a consequence).
    fn err(&mut self, span: Range<usize>, msg: impl Into<String>) {
        if !self.dropped.taints(&span) {
            self.errors.push(self.pos.error(span.start, msg));
        }
    }

    /// A cross-reference between tables (a pool, a listen address, a
    /// name): reported whatever else failed in the table.
    fn xref(&mut self, span: Range<usize>, msg: impl Into<String>) {
        self.errors.push(self.pos.error(span.start, msg));
    }

    /// An undefined pool, unless it is one whose own errors were reported.
    fn undefined_pool(&mut self, name: &str, span: Range<usize>, msg: impl Into<String>) {
        if !self.broken_pools.contains(name) {
            self.xref(span, msg);
        }
    }

    fn warn(&mut self, span: Range<usize>, msg: impl Into<String>) {
        self.warnings.push(self.pos.error(span.start, msg));
    }
}

fn valid_value(s: &str) -> bool {
    crate::http::head::is_field_value(s.as_bytes())
}

pub fn build(
    pos: &Positions,
    file: model::File,
    previous: Option<&Snapshot>,
) -> Result<Snapshot, Vec<ConfigError>> {
    build_read(pos, file, previous, &Dropped::default())
}

/// `build` for a model that reading may have left incomplete: problems
/// that may be consequences of what it dropped are not reported.
pub(super) fn build_read(
    pos: &Positions,
    file: model::File,
    previous: Option<&Snapshot>,
    dropped: &Dropped,
) -> Result<Snapshot, Vec<ConfigError>> {
    let mut cx = Ctx {
        pos,
        errors: Vec::new(),
        warnings: Vec::new(),
        dropped,
        broken_pools: HashSet::new(),
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
    // The previous snapshot's pools by name: each pool finds its old self
    // (member state, counters) in one lookup. A scan per pool was
    // quadratic: 50 million name comparisons at 10,000 pools.
    let old_pools: HashMap<&str, &Arc<Pool>> = previous
        .map(|s| s.pools.iter().map(|p| (p.name.as_str(), p)).collect())
        .unwrap_or_default();
    for p in &file.pool {
        if pool_names.contains_key(p.name.get_ref()) {
            cx.xref(
                p.name.span(),
                format!(
                    "pool {:?} is defined twice; pool names must be unique",
                    p.name.get_ref()
                ),
            );
            continue;
        }
        match build_pool(
            &mut cx,
            p,
            old_pools.get(p.name.get_ref().as_str()).copied(),
        ) {
            Some(pool) => {
                let pool = Arc::new(pool);
                pool_names.insert(pool.name.clone(), pool.clone());
                pools.push(pool);
            }
            None => {
                cx.broken_pools.insert(p.name.get_ref().clone());
            }
        }
    }

    let mut vservers = Vec::new();
    let mut by_listen: switchyard_fasthash::FxHashMap<SocketAddr, Arc<VServer>> =
        Default::default();
    let mut vs_names = HashSet::new();
    let mut udp_by_listen: switchyard_fasthash::FxHashMap<SocketAddr, Arc<VServer>> =
        Default::default();
    // A TCP and a UDP vserver may share an address and port.
    let mut listen_owner: HashMap<SocketAddr, String> = HashMap::new();
    let mut udp_owner: HashMap<SocketAddr, String> = HashMap::new();
    if file.vserver.is_empty() && !dropped.has_vservers {
        cx.errors.push(pos.error(
            0,
            "no virtual server: add at least one [[vserver]] with a name, listen and default_pool",
        ));
    }
    for v in &file.vserver {
        let name = v.name.get_ref().clone();
        if !vs_names.insert(name.clone()) {
            cx.xref(
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
                cx.xref(
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
            let old: HashMap<String, Arc<crate::shield::stick::Table>> = previous
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
                    .any(|l| l.req_rate.is_some() || l.req_cur.is_some() || !l.key.at_accept())
            {
                problems.push((
                    v.name.span(),
                    format!("vserver {name:?}: req_rate, req_cur and request keys are HTTP; an L4 vserver limits connections (conn_cur, conn_rate)"),
                ));
            }
            for (at, msg) in problems {
                cx.err(at, msg);
            }
        }
        let mut problems = Vec::new();
        policy_limits((&name, v.name.span()), &v.policy, &mut vs, &mut problems);
        for (at, msg) in problems {
            cx.err(at, msg);
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
        parts: Arc::default(),
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
        cx.xref(
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

fn pool_list(pools: &HashMap<String, Arc<Pool>>) -> String {
    let mut names: Vec<&str> = pools.keys().map(|s| s.as_str()).collect();
    names.sort();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Each policy's `limits`, resolved to the vserver's `scope = "policy"`
/// limits; a policy that names one must decide (have an action), and
/// every such limit must be named by some policy (else it counts nothing).
fn policy_limits(
    (vserver, at): (&str, std::ops::Range<usize>),
    policies: &[Arc<model::Policy>],
    vs: &mut VServer,
    problems: &mut Vec<super::types::Problem>,
) {
    let mut named = vec![false; vs.limits.len()];
    for (i, (pm, ps)) in policies.iter().zip(vs.policies.iter_mut()).enumerate() {
        let pname = pm.name.clone().unwrap_or_else(|| format!("#{}", i + 1));
        for l in &pm.limits {
            let what = format!("vserver {vserver:?} policy {pname:?}");
            if pm.action.is_none() {
                problems.push((
                    l.span(),
                    format!(
                        "{what}: limits apply to the requests a policy decides; give it an action"
                    ),
                ));
                break;
            }
            match vs.limits.iter().position(|x| x.name == *l.get_ref()) {
                Some(at) if vs.limits[at].per_policy => {
                    named[at] = true;
                    ps.limits.push(at);
                }
                Some(_) => problems.push((
                    l.span(),
                    format!("{what}: limit {:?} counts every request of the vserver; a policy names only scope = \"policy\" limits", l.get_ref()),
                )),
                None => problems.push((
                    l.span(),
                    format!("{what}: limit {:?} is not one of the vserver's [[vserver.limit]]", l.get_ref()),
                )),
            }
        }
    }
    for (l, named) in vs.limits.iter().zip(named) {
        if l.per_policy && !named {
            problems.push((
                at.clone(),
                format!("vserver {vserver:?} limit {:?}: scope = \"policy\" but no policy names it in its limits", l.name),
            ));
        }
    }
}
