//! The admin API's routes: one table (`ROUTES`) that dispatch, access
//! control and the OpenAPI test all read, so a route cannot be answered
//! without being documented, nor documented without being answered.
//!
//! What a reload does to run-time changes (also in the OpenAPI document):
//! a member's state (disabled, draining), forced health and weight belong
//! to the member, which a reload keeps when its pool and address stay; a
//! reload that changes the member's weight in the file drops the run-time
//! weight (the file was edited after the change); a member removed from
//! the file is gone with its state.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::auth::{bearer, Caller, Role};
use super::{dashboard, render, Admin, Control, Reply};
use crate::balance::{AdminState, ForcedHealth};
use crate::clock::now_ms;
use crate::config::snapshot::{Member, Pool, VServer};
use crate::config::Snapshot;
use crate::http::message::Request;
use crate::http::responses;
use crate::stats::{quantile, STATUS_CLASSES};
use crate::tls::x509;

/// The OpenAPI 3.1 description of `ROUTES`, served at `/api/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    Index,
    Healthz,
    OpenApi,
    Dashboard,
    DashboardAsset,
    StatsText,
    StatsJson,
    Metrics,
    LegacyReload,
    LegacyPurge,
    WhoAmI,
    Config,
    VServers,
    VServer,
    Pools,
    Pool,
    Member,
    MemberPatch,
    Certificates,
    Cache,
    CachePurge,
    Reload,
    Stats,
    Audit,
    Live,
    Events,
    Shield,
    ShieldList,
    ShieldRules,
    Waf,
    Readyz,
    Node,
    NodeSet,
    Cluster,
    ClusterConfig,
    ClusterPublish,
    ClusterFile,
}

pub struct Route {
    pub method: &'static str,
    /// Segments; `{name}` matches one segment.
    pub path: &'static str,
    /// Least role that may call it; None: no token needed.
    pub role: Option<Role>,
    pub id: Id,
}

const fn r(method: &'static str, path: &'static str, role: Option<Role>, id: Id) -> Route {
    Route {
        method,
        path,
        role,
        id,
    }
}

const READ: Option<Role> = Some(Role::Read);
const ADMIN: Option<Role> = Some(Role::Admin);

pub const ROUTES: &[Route] = &[
    r("GET", "/", None, Id::Index),
    r("GET", "/healthz", None, Id::Healthz),
    r("GET", "/readyz", None, Id::Readyz),
    r("GET", "/api/openapi.json", None, Id::OpenApi),
    r("GET", "/dashboard/", None, Id::Dashboard),
    r("GET", "/dashboard/{file}", None, Id::DashboardAsset),
    r("GET", "/stats", READ, Id::StatsText),
    r("GET", "/stats.json", READ, Id::StatsJson),
    r("GET", "/metrics", READ, Id::Metrics),
    r("POST", "/reload", ADMIN, Id::LegacyReload),
    r("POST", "/cache/purge", ADMIN, Id::LegacyPurge),
    r("GET", "/api/v1/whoami", READ, Id::WhoAmI),
    r("GET", "/api/v1/config", READ, Id::Config),
    r("GET", "/api/v1/vservers", READ, Id::VServers),
    r("GET", "/api/v1/vservers/{vserver}", READ, Id::VServer),
    r("GET", "/api/v1/pools", READ, Id::Pools),
    r("GET", "/api/v1/pools/{pool}", READ, Id::Pool),
    r(
        "GET",
        "/api/v1/pools/{pool}/members/{member}",
        READ,
        Id::Member,
    ),
    r(
        "PATCH",
        "/api/v1/pools/{pool}/members/{member}",
        ADMIN,
        Id::MemberPatch,
    ),
    r("GET", "/api/v1/certificates", READ, Id::Certificates),
    r("GET", "/api/v1/cache", READ, Id::Cache),
    r("POST", "/api/v1/cache/purge", ADMIN, Id::CachePurge),
    r("POST", "/api/v1/reload", ADMIN, Id::Reload),
    r("GET", "/api/v1/stats", READ, Id::Stats),
    r("GET", "/api/v1/audit", READ, Id::Audit),
    r("GET", "/api/v1/live", READ, Id::Live),
    r("GET", "/api/v1/events", READ, Id::Events),
    r("GET", "/api/v1/shield", READ, Id::Shield),
    r("GET", "/api/v1/waf", READ, Id::Waf),
    r("GET", "/api/v1/node", READ, Id::Node),
    r("POST", "/api/v1/node", ADMIN, Id::NodeSet),
    r("GET", "/api/v1/cluster", READ, Id::Cluster),
    r("GET", "/api/v1/cluster/config", READ, Id::ClusterConfig),
    r("PUT", "/api/v1/cluster/config", ADMIN, Id::ClusterPublish),
    r(
        "PUT",
        "/api/v1/cluster/files/{file}",
        ADMIN,
        Id::ClusterFile,
    ),
    r(
        "PATCH",
        "/api/v1/shield/lists/{list}",
        ADMIN,
        Id::ShieldList,
    ),
    r("PUT", "/api/v1/shield/rules", ADMIN, Id::ShieldRules),
];

/// A per-source limit: its settings, keys tracked and refusals by reason.
fn limit_json(l: &crate::shield::stick::Limit) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let c = l.counters();
    let rate = |r: Option<crate::shield::stick::Rate>| {
        r.map(|r| json!({"count": r.n, "window_ms": r.period_ms}))
    };
    json!({
        "name": l.name,
        "key": match &l.key {
            crate::shield::stick::Key::Source => "src".to_string(),
            crate::shield::stick::Key::Header(h) => format!("header:{h}"),
            crate::shield::stick::Key::Cookie(c) => format!("cookie:{c}"),
            crate::shield::stick::Key::Path => "path".to_string(),
        },
        "conn_cur": l.conn_cur,
        "conn_rate": rate(l.conn_rate),
        "req_rate": rate(l.req_rate),
        "req_cur": l.req_cur,
        "action": match l.action {
            crate::shield::stick::Action::Reject => "reject",
            crate::shield::stick::Action::Close => "close",
            crate::shield::stick::Action::Tarpit(_) => "tarpit",
            crate::shield::stick::Action::Deny(_) => "deny",
        },
        "keys": l.table.len(),
        "refused": crate::shield::stick::Reason::ALL
            .iter()
            .map(|r| (r.name().to_string(), Value::from(c.refused[*r as usize].load(Relaxed))))
            .collect::<Map<String, Value>>(),
        "tarpitted": c.tarpitted.load(Relaxed),
        "untracked": c.table_full.load(Relaxed),
    })
}

/// A vserver's WAF: its settings and counters, matches per rule id.
fn waf_json(name: &str, w: &switchyard_waf::policy::VsWaf) -> Value {
    use switchyard_waf::policy::WafCounters as C;
    let c = &w.counters;
    let tx: Map<String, Value> =
        w.tx.iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    Value::from(String::from_utf8_lossy(v).into_owned()),
                )
            })
            .collect();
    json!({
        "name": name,
        "ruleset": w.ruleset,
        "rules_loaded": w.engine.rule_counts().iter().sum::<usize>(),
        "mode": w.mode.name(),
        "tx": tx,
        "sample_percent": w.sample_percent,
        "request_body": w.request_body,
        "response_body": w.response_body,
        "body_limit": w.body_limit,
        "inspected": C::get(&c.inspected),
        "sampled_out": C::get(&c.sampled_out),
        "blocked": C::get(&c.blocked),
        "detected": C::get(&c.detected),
        "body_rejected": C::get(&c.body_rejected),
        "limits_exceeded": C::get(&c.limits_exceeded),
        "rules": c
            .rules_sorted()
            .into_iter()
            .map(|(id, n)| json!({"id": id, "matches": n}))
            .collect::<Vec<Value>>(),
    })
}

/// Matches `path` against a route pattern; the captured `{}` segments,
/// percent-decoded.
fn matches(pattern: &str, path: &str) -> Option<Vec<String>> {
    let mut params = Vec::new();
    let mut p = pattern.split('/');
    let mut a = path.split('/');
    loop {
        match (p.next(), a.next()) {
            (None, None) => return Some(params),
            (Some(ps), Some(seg)) if ps.starts_with('{') && ps.ends_with('}') => {
                if seg.is_empty() {
                    return None;
                }
                params.push(percent_decode(seg));
            }
            (Some(ps), Some(seg)) if ps == seg => {}
            _ => return None,
        }
    }
}

/// Answers one request: routing, access control, then the route.
pub fn handle<C: Control>(admin: &Admin<C>, peer: SocketAddr, req: &Request, body: &[u8]) -> Reply {
    let path = String::from_utf8_lossy(req.path_only()).into_owned();
    let method = String::from_utf8_lossy(req.method_str()).into_owned();
    let found: Vec<(&Route, Vec<String>)> = ROUTES
        .iter()
        .filter_map(|r| matches(r.path, &path).map(|p| (r, p)))
        .collect();
    let Some((route, params)) = found
        .iter()
        .find(|(r, _)| r.method == method || (method == "HEAD" && r.method == "GET"))
    else {
        if found.is_empty() {
            return err(404, &format!("no route {path}; see GET /api/openapi.json"));
        }
        let allow: Vec<&str> = found.iter().map(|(r, _)| r.method).collect();
        let allow = allow.join(", ");
        return Reply::Full(responses::simple(
            405,
            "application/json",
            json_body(
                &json!({ "error": format!("{method} is not allowed on {path}; use {allow}") }),
            )
            .as_bytes(),
            true,
            &[("allow", &allow)],
        ));
    };
    let snap = admin.control.snapshot();
    let caller = match route.role {
        None => None,
        Some(need) => match authenticate(&snap, req) {
            Err(why) => {
                return Reply::Full(responses::simple(
                    401,
                    "application/json",
                    json_body(&json!({ "error": why })).as_bytes(),
                    true,
                    &[("www-authenticate", "Bearer realm=\"switchyard admin\"")],
                ))
            }
            Ok(c) if c.role < need => {
                return err(
                    403,
                    &format!("{} may only read; this route needs the admin role", c.name),
                )
            }
            Ok(c) => Some(c),
        },
    };
    let query = String::from_utf8_lossy(req.query().unwrap_or_default()).into_owned();
    let if_match = req.head.get("if-match").map(|v| {
        String::from_utf8_lossy(v)
            .trim()
            .trim_matches('"')
            .to_string()
    });
    let cx = Cx {
        admin,
        snap: &snap,
        peer,
        caller: caller.unwrap_or_else(anonymous),
        params,
        query: &query,
        body,
        if_match,
    };
    cx.run(route.id)
}

/// Whether `req` publishes a configuration (`PUT /api/v1/cluster/config`)
/// from a caller with the admin role: only that body may be longer than
/// the others (a cluster's text is megabytes at thousands of routes), and
/// only once the caller is known, so that no one else makes the node hold
/// megabytes.
pub fn publishes_configuration<C: Control>(admin: &Admin<C>, req: &Request) -> bool {
    req.method_str() == b"PUT"
        && req.path_only() == b"/api/v1/cluster/config"
        && authenticate(&admin.control.snapshot(), req).is_ok_and(|c| c.role >= Role::Admin)
}

/// Without a tokens file everyone who reaches the (loopback) listener is admin.
fn anonymous() -> Caller {
    Caller {
        name: "anonymous".into(),
        role: Role::Admin,
    }
}

fn authenticate(snap: &Snapshot, req: &Request) -> Result<Caller, &'static str> {
    let Some(tokens) = snap.admin.as_ref().and_then(|a| a.tokens.as_ref()) else {
        return Ok(anonymous());
    };
    let value = req
        .head
        .get("authorization")
        .ok_or("send Authorization: Bearer <token>")?;
    let token = bearer(value).ok_or("send Authorization: Bearer <token>")?;
    tokens.check(token).ok_or("the token is not valid")
}

struct Cx<'a, C> {
    admin: &'a Admin<C>,
    snap: &'a Snapshot,
    peer: SocketAddr,
    caller: Caller,
    params: &'a [String],
    query: &'a str,
    body: &'a [u8],
    /// `If-Match` (quotes removed).
    if_match: Option<String>,
}

fn json_body(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

fn ok(v: Value) -> Reply {
    Reply::Full(responses::simple(
        200,
        "application/json",
        json_body(&v).as_bytes(),
        true,
        &[("cache-control", "no-store")],
    ))
}

fn err(status: u16, why: &str) -> Reply {
    Reply::Full(responses::simple(
        status,
        "application/json",
        json_body(&json!({ "error": why })).as_bytes(),
        true,
        &[],
    ))
}

impl<C: Control> Cx<'_, C> {
    fn param(&self, i: usize) -> &str {
        self.params.get(i).map(|s| s.as_str()).unwrap_or("")
    }

    fn run(&self, id: Id) -> Reply {
        let snap = self.snap;
        match id {
            Id::Index => Reply::Full(responses::simple(
                302,
                "text/plain; charset=utf-8",
                b"the dashboard is at /dashboard/; the API is described at /api/openapi.json\n",
                true,
                &[("location", "/dashboard/")],
            )),
            Id::Healthz => Reply::Full(responses::simple(200, "text/plain", b"ok\n", true, &[])),
            Id::Readyz => {
                if crate::admin::ready() {
                    Reply::Full(responses::simple(200, "text/plain", b"ready\n", true, &[]))
                } else {
                    Reply::Full(responses::simple(
                        503,
                        "text/plain",
                        b"drained\n",
                        true,
                        &[],
                    ))
                }
            }
            Id::Node => ok(json!({
                "ready": crate::admin::ready(),
                "cluster": crate::cluster::node().map(|n| n.settings.prefix.clone()),
            })),
            Id::NodeSet => self.node_set(),
            Id::OpenApi => Reply::Full(responses::simple(
                200,
                "application/json",
                OPENAPI.as_bytes(),
                true,
                &[],
            )),
            Id::Dashboard => self.asset("index.html"),
            Id::DashboardAsset => self.asset(self.param(0)),
            Id::StatsText => Reply::Full(responses::simple(
                200,
                "text/plain; charset=utf-8",
                render::text(snap).as_bytes(),
                true,
                &[],
            )),
            Id::StatsJson => Reply::Full(responses::simple(
                200,
                "application/json",
                render::json(snap).as_bytes(),
                true,
                &[],
            )),
            Id::Metrics => Reply::Full(responses::simple(
                200,
                "text/plain; version=0.0.4",
                render::prometheus(snap).as_bytes(),
                true,
                &[],
            )),
            Id::LegacyReload => match self.reload() {
                Ok(g) => Reply::Full(responses::simple(
                    200,
                    "text/plain",
                    format!("reloaded: configuration generation {g} is live\n").as_bytes(),
                    true,
                    &[],
                )),
                Err(e) => Reply::Full(responses::simple(
                    400,
                    "text/plain",
                    format!("reload rejected, the running configuration stays:\n{e}\n").as_bytes(),
                    true,
                    &[],
                )),
            },
            Id::Reload => match self.reload() {
                Ok(g) => ok(json!({ "generation": g })),
                Err(e) => Reply::Full(responses::simple(
                    400,
                    "application/json",
                    json_body(&json!({
                        "error": "reload rejected, the running configuration stays",
                        "problems": e.lines().collect::<Vec<_>>(),
                    }))
                    .as_bytes(),
                    true,
                    &[],
                )),
            },
            Id::LegacyPurge => self.purge_query(),
            Id::CachePurge => self.purge_body(),
            Id::WhoAmI => {
                ok(json!({ "name": self.caller.name, "role": self.caller.role.as_str() }))
            }
            Id::Config => ok(json!({
                "generation": snap.generation,
                "source": snap.source_name,
                "text": &*snap.source,
                "warnings": snap.warnings.iter().map(|w| w.as_warning()).collect::<Vec<_>>(),
            })),
            Id::VServers => ok(Value::Array(
                snap.vservers.iter().map(|v| vserver(v)).collect(),
            )),
            Id::VServer => match snap.vservers.iter().find(|v| v.name == self.param(0)) {
                Some(v) => ok(vserver(v)),
                None => err(404, &format!("no vserver {:?}", self.param(0))),
            },
            Id::Pools => ok(Value::Array(snap.pools.iter().map(|p| pool(p)).collect())),
            Id::Pool => match self.pool() {
                Some(p) => ok(pool(p)),
                None => err(404, &format!("no pool {:?}", self.param(0))),
            },
            Id::Member => match self.member() {
                Ok((p, m)) => ok(member(p, &m)),
                Err(e) => e,
            },
            Id::MemberPatch => self.patch_member(),
            Id::Certificates => ok(certificates(snap)),
            Id::Cache => {
                let c = snap.cache.usage();
                ok(json!({
                    "objects": c.objects,
                    "bytes": c.bytes,
                    "max_bytes": c.max_bytes,
                    "evictions": c.evictions,
                    "not_admitted": c.not_admitted,
                    "purged": c.purged,
                    "vservers": snap.vservers.iter().filter(|v| v.cache.is_some()).map(|v| {
                        let c = v.counters.read();
                        json!({
                            "name": v.name,
                            "enabled": v.cache_on,
                            "hits": c.cache_hits,
                            "misses": c.cache_misses,
                            "revalidations": c.cache_revalidations,
                            "stale_served": c.cache_stale_served,
                            "coalesced": c.cache_coalesced,
                            "stored": c.cache_stored,
                        })
                    }).collect::<Vec<_>>(),
                }))
            }
            Id::Stats => match serde_json::from_str::<Value>(&render::json(snap)) {
                Ok(v) => ok(v),
                Err(e) => err(500, &format!("stats: {e}")),
            },
            Id::Audit => ok(Value::Array(self.admin.audit())),
            Id::Live => {
                let samples: Vec<Value> = self
                    .admin
                    .history()
                    .iter()
                    .filter_map(|s| serde_json::from_str(s).ok())
                    .collect();
                ok(Value::Array(samples))
            }
            Id::Events => Reply::Events,
            Id::Shield => ok(json!({
                "global": snap.shield.as_ref().map(|s| s.describe()),
                "vservers": snap
                    .vservers
                    .iter()
                    .filter_map(|v| v.acl.as_ref().map(|a| (v.name.clone(), a.describe())))
                    .collect::<Map<String, Value>>(),
                "limits": snap
                    .vservers
                    .iter()
                    .filter(|v| !v.limits.is_empty())
                    .map(|v| {
                        (
                            v.name.clone(),
                            Value::from(v.limits.iter().map(|l| limit_json(l)).collect::<Vec<Value>>()),
                        )
                    })
                    .collect::<Map<String, Value>>(),
            })),
            Id::ShieldList => self.edit_list(),
            Id::ShieldRules => self.replace_rules(),
            Id::Cluster => self.cluster(),
            Id::ClusterConfig => self.cluster_config(),
            Id::ClusterPublish => self.cluster_publish(),
            Id::ClusterFile => self.cluster_file(),
            Id::Waf => ok(json!({
                "vservers": snap
                    .vservers
                    .iter()
                    .filter_map(|v| v.waf.as_ref().map(|w| waf_json(&v.name, w)))
                    .collect::<Vec<Value>>(),
            })),
        }
    }

    /// `{"ready": false}` drains the node (`/readyz` answers 503 while
    /// every request is still served); `{"ready": true}` takes it back.
    fn node_set(&self) -> Reply {
        let v: Value = match serde_json::from_slice(self.body) {
            Ok(v) => v,
            Err(e) => return err(400, &format!("the body is not JSON: {e}")),
        };
        let Some(ready) = v.get("ready").and_then(Value::as_bool) else {
            return err(
                400,
                "send {\"ready\": false} to drain the node, {\"ready\": true} to take it back",
            );
        };
        crate::admin::set_ready(ready);
        self.admin.record_change(
            &self.caller,
            self.peer,
            if ready { "node ready" } else { "node drained" },
            true,
        );
        ok(json!({ "ready": ready }))
    }

    /// This node, and every node's status from etcd.
    fn cluster(&self) -> Reply {
        let Some(node) = crate::cluster::node() else {
            return err(
                404,
                "this instance is not a cluster node (no [cluster] in its file)",
            );
        };
        let nodes = crate::cluster::statuses(&node.settings).unwrap_or_else(|e| {
            vec![json!({ "error": format!("cannot list the nodes' status: {e}") })]
        });
        ok(json!({
            "prefix": node.settings.prefix,
            "endpoints": node.settings.endpoints,
            "this": node.status_json(),
            "nodes": nodes,
        }))
    }

    /// The published configuration; its revision is the ETag.
    fn cluster_config(&self) -> Reply {
        let Some(node) = crate::cluster::node() else {
            return err(
                404,
                "this instance is not a cluster node (no [cluster] in its file)",
            );
        };
        match crate::cluster::published(&node.settings) {
            Ok((rev, text)) => Reply::Full(responses::simple(
                200,
                "application/toml",
                text.unwrap_or_default().as_bytes(),
                true,
                &[
                    ("etag", &format!("\"{rev}\"")),
                    ("cache-control", "no-store"),
                ],
            )),
            Err(e) => err(503, &e),
        }
    }

    /// Publishes the body (TOML) to the cluster, validated here first with
    /// this node's own file; `If-Match: "<revision>"` makes it a
    /// compare-and-swap (a stale revision gets 409).
    fn cluster_publish(&self) -> Reply {
        let Some(node) = crate::cluster::node() else {
            return err(
                404,
                "this instance is not a cluster node (no [cluster] in its file)",
            );
        };
        let Ok(text) = std::str::from_utf8(self.body) else {
            return err(
                400,
                "the body must be the configuration's TOML text (UTF-8)",
            );
        };
        match crate::config::publish::check(node, text) {
            Ok(()) => {}
            Err(e @ crate::config::publish::Unpublishable::Etcd(_)) => {
                return err(503, &e.to_string())
            }
            Err(e) => return err(400, &e.to_string()),
        }
        let expect =
            match self.if_match.as_deref() {
                None | Some("*") => None,
                Some(v) => match v.parse::<i64>() {
                    Ok(r) => Some(r),
                    Err(_) => return err(
                        400,
                        "If-Match must be the revision (the ETag of GET /api/v1/cluster/config)",
                    ),
                },
            };
        match crate::cluster::publish(&node.settings, text, expect) {
            Ok(Some(rev)) => {
                self.admin.record_change(
                    &self.caller,
                    self.peer,
                    &format!("cluster publish: revision {rev}"),
                    true,
                );
                ok(json!({ "revision": rev }))
            }
            Ok(None) => err(
                409,
                "the published configuration changed since that revision; GET it again and redo the change",
            ),
            Err(e) => err(503, &e),
        }
    }

    /// Publishes a file (certificate, key, rule file) for every node; the
    /// configuration is published again so every node writes it and
    /// reloads.
    fn cluster_file(&self) -> Reply {
        let Some(node) = crate::cluster::node() else {
            return err(
                404,
                "this instance is not a cluster node (no [cluster] in its file)",
            );
        };
        let name = self.param(0).to_string();
        if self.body.is_empty() || self.body.len() > 1 << 20 {
            return err(400, "the body is the file's content (1 byte to 1 MiB)");
        }
        match crate::cluster::publish_file(&node.settings, &name, self.body) {
            Ok(rev) => {
                self.admin.record_change(
                    &self.caller,
                    self.peer,
                    &format!("cluster file {name}: revision {rev}"),
                    true,
                );
                ok(json!({ "file": name, "revision": rev }))
            }
            Err(e) if e.contains("file name") => err(400, &e),
            Err(e) => err(503, &e),
        }
    }

    /// `{"add": [CIDR...], "remove": [CIDR...]}` on address list `{list}`,
    /// in every rule set that uses it; the rules are recompiled and swapped
    /// in without touching established connections.
    /// New global rules, written as the file writes them (`[[acl]]`
    /// tables, TOML; or JSON `{"acl": [...]}` with the same keys):
    /// validated like the file, then in force at once for
    /// new connections (and in XDP), established ones untouched. A reload
    /// puts the file's rules back.
    fn replace_rules(&self) -> Reply {
        let Some(set) = self.snap.shield.as_ref() else {
            return err(
                404,
                "no [shield] section: add one to the file (a reload) first",
            );
        };
        let Ok(text) = std::str::from_utf8(self.body) else {
            return err(400, "the body is not UTF-8");
        };
        let lists = set.list_names();
        let parsed = if text.trim_start().starts_with('{') {
            match serde_json::from_str::<Value>(text) {
                Ok(v) => crate::config::shield::rules_from_json(&v, &lists),
                Err(e) => return err(400, &format!("the body is not JSON: {e}")),
            }
        } else {
            crate::config::shield::rules_from_text(text, &lists)
        };
        let rules = match parsed {
            Ok(r) => r,
            Err(problems) => return err(400, &problems.join("\n")),
        };
        let names: Vec<String> = rules.iter().map(|(r, _, _)| r.name.clone()).collect();
        match set.replace_rules(rules) {
            Ok(n) => {
                self.admin.record_change(
                    &self.caller,
                    self.peer,
                    &format!("shield rules: {n} in force ({})", names.join(", ")),
                    true,
                );
                ok(json!({ "rules": n }))
            }
            Err(e) => err(400, &e),
        }
    }

    fn edit_list(&self) -> Reply {
        let name = self.param(0).to_string();
        let v: Value = match serde_json::from_slice(self.body) {
            Ok(v) => v,
            Err(e) => return err(400, &format!("the body is not JSON: {e}")),
        };
        let Some(o) = v.as_object() else {
            return err(400, "the body must be a JSON object");
        };
        if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "add" | "remove")) {
            return err(400, &format!("unknown field {k:?}; fields are add, remove"));
        }
        let cidrs = |key: &str| -> Result<Vec<crate::cidr::Cidr>, String> {
            match o.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .ok_or_else(|| format!("{key}: entries are strings"))
                            .and_then(crate::cidr::Cidr::parse)
                    })
                    .collect(),
                Some(_) => Err(format!("{key} must be an array of CIDRs")),
            }
        };
        let (add, remove) = match (cidrs("add"), cidrs("remove")) {
            (Ok(a), Ok(r)) => (a, r),
            (Err(e), _) | (_, Err(e)) => return err(400, &e),
        };
        let sets: Vec<&crate::shield::AclSet> = self
            .snap
            .shield
            .iter()
            .chain(self.snap.vservers.iter().filter_map(|v| v.acl.as_ref()))
            .map(|a| &**a)
            .filter(|a| a.has_list(&name))
            .collect();
        if sets.is_empty() {
            return err(404, &format!("no rule set uses an address list {name:?}"));
        }
        let mut len = 0;
        for set in sets {
            match set.edit_list(&name, &add, &remove) {
                Ok(n) => len = n,
                Err(e) => return err(500, &e),
            }
        }
        let text = |l: &[crate::cidr::Cidr]| {
            l.iter()
                .map(crate::shield::cidr_text)
                .collect::<Vec<_>>()
                .join(" ")
        };
        self.admin.record_change(
            &self.caller,
            self.peer,
            &format!(
                "shield list {name}: add [{}] remove [{}]",
                text(&add),
                text(&remove)
            ),
            true,
        );
        ok(json!({ "list": name, "entries": len }))
    }

    fn asset(&self, name: &str) -> Reply {
        match dashboard::asset(name) {
            Some((ctype, bytes)) => Reply::Full(responses::simple(
                200,
                ctype,
                bytes,
                true,
                &[("cache-control", "no-cache")],
            )),
            None => err(404, &format!("no dashboard file {name:?}")),
        }
    }

    fn reload(&self) -> Result<u64, String> {
        let r = self.admin.control.reload();
        self.admin
            .record_change(&self.caller, self.peer, "reload", r.is_ok());
        if let Err(e) = &r {
            crate::log::error(format_args!(
                "reload rejected, the running configuration stays:\n{e}"
            ));
        }
        r
    }

    fn pool(&self) -> Option<&Pool> {
        self.snap
            .pools
            .iter()
            .find(|p| p.name == self.param(0))
            .map(|p| &**p)
    }

    fn member(&self) -> Result<(&Pool, Arc<Member>), Reply> {
        let p = self
            .pool()
            .ok_or_else(|| err(404, &format!("no pool {:?}", self.param(0))))?;
        let want = self.param(1);
        let addr: SocketAddr = want.parse().map_err(|_| {
            err(
                404,
                &format!(
                    "{want:?} is not a member address (give it as 127.0.0.1:8080 or [::1]:8080)"
                ),
            )
        })?;
        let m = p
            .members
            .load()
            .iter()
            .find(|m| m.addr == addr)
            .cloned()
            .ok_or_else(|| err(404, &format!("pool {:?} has no member {addr}", p.name)))?;
        Ok((p, m))
    }

    /// `{"state": "enabled"|"disabled"|"draining", "weight": 1..1000 | null,
    /// "health": "auto"|"up"|"down"}`: every field optional, all checked
    /// before any is applied.
    fn patch_member(&self) -> Reply {
        let (p, m) = match self.member() {
            Ok(x) => x,
            Err(e) => return e,
        };
        let v: Value = match serde_json::from_slice(self.body) {
            Ok(v) => v,
            Err(e) => return err(400, &format!("the body is not JSON: {e}")),
        };
        let Some(o) = v.as_object() else {
            return err(400, "the body must be a JSON object");
        };
        if let Some(k) = o
            .keys()
            .find(|k| !matches!(k.as_str(), "state" | "weight" | "health"))
        {
            return err(
                400,
                &format!("unknown field {k:?}; fields are state, weight, health"),
            );
        }
        let state = match o.get("state") {
            None => None,
            Some(Value::String(s)) => match s.as_str() {
                "enabled" => Some(AdminState::Enabled),
                "disabled" => Some(AdminState::Disabled),
                "draining" => Some(AdminState::Draining),
                other => {
                    return err(
                        400,
                        &format!("state {other:?}: use \"enabled\", \"disabled\" or \"draining\""),
                    )
                }
            },
            Some(_) => return err(400, "state must be a string"),
        };
        let weight = match o.get("weight") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(w) => match w.as_u64() {
                Some(w @ 1..=1000) => Some(Some(w as u32)),
                _ => return err(
                    400,
                    "weight must be an integer from 1 to 1000, or null for the configured weight",
                ),
            },
        };
        let health = match o.get("health") {
            None => None,
            Some(Value::String(s)) => match s.as_str() {
                "auto" => Some(ForcedHealth::Auto),
                "up" => Some(ForcedHealth::Up),
                "down" => Some(ForcedHealth::Down),
                other => {
                    return err(
                        400,
                        &format!("health {other:?}: use \"auto\", \"up\" or \"down\""),
                    )
                }
            },
            Some(_) => return err(400, "health must be a string"),
        };
        if state.is_none() && weight.is_none() && health.is_none() {
            return err(400, "nothing to change: give state, weight or health");
        }
        let mut what = Vec::new();
        if let Some(s) = state {
            m.state.set_admin(s);
            what.push(format!("state {}", s.as_str()));
        }
        if let Some(w) = weight {
            m.state.set_weight_override(w, m.weight);
            what.push(match w {
                Some(w) => format!("weight {w}"),
                None => format!("weight back to the configured {}", m.weight),
            });
        }
        if let Some(h) = health {
            m.state.set_forced(h);
            what.push(format!("health {}", h.as_str()));
        }
        self.admin.record_change(
            &self.caller,
            self.peer,
            &format!("pool {} member {}: {}", p.name, m.addr, what.join(", ")),
            true,
        );
        ok(member(p, &m))
    }

    fn purge_query(&self) -> Reply {
        let (how, url) = self.query.split_once('=').unwrap_or(("", ""));
        self.purge(how, &percent_decode(url))
    }

    fn purge_body(&self) -> Reply {
        let v: Value = match serde_json::from_slice(self.body) {
            Ok(v) => v,
            Err(e) => return err(400, &format!("the body is not JSON: {e}")),
        };
        match (
            v.get("url").and_then(Value::as_str),
            v.get("prefix").and_then(Value::as_str),
        ) {
            (Some(u), None) => self.purge("url", u),
            (None, Some(p)) => self.purge("prefix", p),
            _ => err(
                400,
                "give {\"url\": \"http://host/path\"} or {\"prefix\": \"http://host/dir/\"}",
            ),
        }
    }

    /// Removes a URL (every variant and key extra) or every URL under a prefix.
    fn purge(&self, how: &str, url: &str) -> Reply {
        if url.is_empty() || !matches!(how, "url" | "prefix") {
            return err(
                400,
                "give ?url=http://host/path or ?prefix=http://host/path",
            );
        }
        let n = crate::cache::purge(&self.snap.cache, url, how == "prefix");
        // A cluster node tells the others (their caches hold their own copies).
        let cluster = crate::cluster::node().map(|node| {
            crate::cluster::publish_purge(&node.settings, how, url)
                .map_err(|e| format!("not sent to the other nodes: {e}"))
        });
        self.admin.record_change(
            &self.caller,
            self.peer,
            &format!("cache purge {how} {url}: {n} removed"),
            true,
        );
        match cluster {
            None => ok(json!({ "purged": n })),
            Some(Ok(())) => ok(json!({ "purged": n, "cluster": "sent to every node" })),
            Some(Err(e)) => ok(json!({ "purged": n, "cluster": e })),
        }
    }
}

fn classes(r: &[u64; 6]) -> Value {
    let mut o = Map::new();
    for (c, n) in STATUS_CLASSES.iter().zip(r) {
        o.insert((*c).into(), json!(n));
    }
    Value::Object(o)
}

fn counters(fields: Vec<(&'static str, u64)>, responses: &[u64; 6]) -> Value {
    let mut o = Map::new();
    for (k, v) in fields {
        o.insert(k.into(), json!(v));
    }
    o.insert("responses".into(), classes(responses));
    Value::Object(o)
}

fn vserver(v: &VServer) -> Value {
    let c = v.counters.read();
    let mut lat = Vec::new();
    for h in v.latency.all() {
        h.merge_into(&mut lat);
    }
    json!({
        "name": v.name,
        "listen": v.listen.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "protocol": format!("{:?}", v.protocol).to_ascii_lowercase(),
        "tls": v.tls.is_some(),
        "h2c": v.h2c,
        "default_pool": v.default_pool.as_ref().map(|p| p.name.clone()),
        "policies": v.policies.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
        "compression": v.compression_on,
        "cache": v.cache_mode(),
        "latency_us": {
            "p50": quantile(&lat, 0.5),
            "p90": quantile(&lat, 0.9),
            "p99": quantile(&lat, 0.99),
        },
        "counters": counters(c.fields(), &c.responses),
    })
}

fn pool(p: &Pool) -> Value {
    let c = p.counters.read();
    json!({
        "name": p.name,
        "algorithm": p.algorithm.as_str(),
        "protocol": p.protocol.as_str(),
        "health_check": p.health.is_some(),
        "counters": counters(c.fields(), &c.responses),
        "members": p.members.load().iter().map(|m| member(p, m)).collect::<Vec<_>>(),
    })
}

/// A member as the API shows it; `state` is what it is doing, `admin_state`
/// what an operator set.
pub fn member(p: &Pool, m: &Member) -> Value {
    let c = m.counters.read();
    let s = &m.state;
    let now = now_ms();
    let ejected_until = s.ejected_until_ms.load(Ordering::Relaxed);
    json!({
        "pool": p.name,
        "address": m.addr.to_string(),
        "state": render::member_state(m),
        "status": render::member_status(p, m),
        "failing": s.failing(),
        "admin_state": s.admin().as_str(),
        "health": {
            "forced": s.forced().as_str(),
            "checked": p.health.is_some(),
            "check_healthy": s.healthy.load(Ordering::Relaxed),
            "check_ok_streak": s.check_ok_streak.load(Ordering::Relaxed),
            "check_fail_streak": s.check_fail_streak.load(Ordering::Relaxed),
            "passive_consecutive_failures": s.consecutive_failures.load(Ordering::Relaxed),
            "connect_fail_streak": s.connect_fail_streak.load(Ordering::Relaxed),
            "ejected_for_ms": ejected_until.saturating_sub(now),
        },
        "weight": s.weight_override().unwrap_or(m.weight),
        "configured_weight": m.weight,
        "backup": m.backup,
        "max_connections": m.max_connections,
        "inflight": s.inflight.load(Ordering::Relaxed),
        "connections": {
            "active": c.server_connections_active,
            "idle": c.server_connections_idle,
            "total": c.server_connections_total,
        },
        "counters": counters(c.fields(), &c.responses),
    })
}

/// Every certificate served: each TLS vserver's, then the admin listener's.
pub fn certificates(snap: &Snapshot) -> Value {
    let now = crate::clock::unix_secs();
    let mut out = Vec::new();
    let tls = snap
        .vservers
        .iter()
        .filter_map(|v| v.tls.as_ref().map(|t| (v.name.as_str(), t)))
        .chain(
            snap.admin
                .as_ref()
                .and_then(|a| a.tls.as_ref())
                .map(|t| ("admin", t)),
        );
    for (owner, t) in tls {
        for (i, ck) in t.certs.all().iter().enumerate() {
            let Some(leaf) = ck.cert.first() else {
                continue;
            };
            let Ok(info) = x509::parse(leaf) else {
                continue;
            };
            let ocsp = match &ck.ocsp {
                None => json!({ "stapled": false }),
                Some(der) => match x509::ocsp(der) {
                    Ok(o) => json!({
                        "stapled": true,
                        "response_status": o.response_status,
                        "cert_status": o.cert_status,
                        "this_update": o.this_update.map(crate::tls::format_time),
                        "next_update": o.next_update.map(crate::tls::format_time),
                        "expired": o.next_update.is_some_and(|n| n < now),
                    }),
                    Err(e) => json!({ "stapled": true, "error": e }),
                },
            };
            out.push(json!({
                "vserver": owner,
                "default": i == 0,
                "subject": info.subject,
                "names": info.names(),
                "not_before": crate::tls::format_time(info.not_before),
                "not_after": crate::tls::format_time(info.not_after),
                "days_left": (info.not_after - now).div_euclid(86_400),
                "ocsp": ocsp,
            }));
        }
    }
    // ACME-managed certificates (docs/acme.md), also before the first is
    // issued (days_left -1: the dashboard shows it as a problem).
    for m in crate::acme::all() {
        let info = m
            .current
            .load_full()
            .and_then(|ck| ck.cert.first().and_then(|c| x509::parse(c).ok()));
        let owner = m.owner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        out.push(json!({
            "vserver": owner,
            "default": false,
            "subject": info.as_ref().map(|i| i.subject.clone()).unwrap_or_default(),
            "names": m.spec.names,
            "not_before": info.as_ref().map(|i| crate::tls::format_time(i.not_before)).unwrap_or_default(),
            "not_after": info.as_ref().map(|i| crate::tls::format_time(i.not_after)).unwrap_or_default(),
            "days_left": info.as_ref().map_or(-1, |i| (i.not_after - now).div_euclid(86_400)),
            "ocsp": { "stapled": false },
            "acme": m.status_json(),
        }));
    }
    Value::Array(out)
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_capture_decoded_segments() {
        assert_eq!(
            matches(
                "/api/v1/pools/{pool}/members/{member}",
                "/api/v1/pools/web/members/%5B%3A%3A1%5D%3A80"
            ),
            Some(vec!["web".to_string(), "[::1]:80".to_string()])
        );
        assert_eq!(matches("/api/v1/pools/{pool}", "/api/v1/pools/"), None);
        assert_eq!(matches("/api/v1/pools/{pool}", "/api/v1/pools/a/b"), None);
        assert_eq!(matches("/", "/"), Some(vec![]));
        assert_eq!(matches("/dashboard/", "/dashboard/"), Some(vec![]));
        assert_eq!(matches("/dashboard/{file}", "/dashboard/"), None);
    }

    /// Every route in the table is in the OpenAPI document with its method,
    /// and the document lists no route the table lacks.
    #[test]
    fn openapi_lists_exactly_the_routes() {
        let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        assert_eq!(doc["openapi"].as_str().map(|v| &v[..3]), Some("3.1"));
        let paths = doc["paths"].as_object().expect("paths");
        let mut documented = Vec::new();
        for (path, ops) in paths {
            for (method, op) in ops.as_object().expect("operations") {
                if matches!(method.as_str(), "parameters" | "summary" | "description") {
                    continue;
                }
                assert!(
                    op["responses"].is_object(),
                    "{method} {path} has no responses"
                );
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
        let mut table: Vec<(String, String)> = ROUTES
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        documented.sort();
        table.sort();
        assert_eq!(documented, table);
        // Routes that need a token say so; public ones say security: [].
        for r in ROUTES {
            let op = &paths[r.path][r.method.to_lowercase()];
            let public = op["security"].as_array().is_some_and(|a| a.is_empty());
            assert_eq!(public, r.role.is_none(), "{} {}", r.method, r.path);
            if r.role.is_some() {
                assert!(
                    op["responses"]["401"].is_object(),
                    "{} {} documents no 401",
                    r.method,
                    r.path
                );
            }
        }
    }
}
