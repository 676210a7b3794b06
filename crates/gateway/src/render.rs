//! From the cluster's objects to a Switchyard configuration and the status
//! of every object: a pure function of what the watches hold, so the same
//! objects always give the same text (an unchanged render is not
//! published again) and it can be tested without an API server.
//!
//! The mapping (docs/kubernetes.md):
//! - every port of the class's Gateways is one vserver on
//!   `listen_address:(port + port_offset)`;
//! - each (route, listener, rule, match, host) is one policy, in the
//!   Gateway API's precedence order (the node takes the first policy that
//!   matches): exact host before wildcard before none, exact path before
//!   the longest prefix, then method, most headers, most query
//!   parameters, then the oldest route, then namespace/name, then the
//!   rule's order; a request no policy takes gets 404;
//! - a rule's Services become one pool whose members are the Services'
//!   ready endpoints (EndpointSlices), weighted by backendRef weight;
//!   without a usable backend the rule answers 500 (as the spec asks), or
//!   503 while the backends have no ready endpoint.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde_json::{json, Value};

use crate::backend_tls;
use crate::types::*;
use switchyard::cluster::members::MemberSpec;

pub struct Settings {
    /// `spec.controllerName` of the classes this controller serves.
    pub controller_name: String,
    /// The address the vservers listen on (the nodes' own).
    pub listen_address: IpAddr,
    /// Added to each listener's port (a node that may not bind below 1024,
    /// or tests that share a machine).
    pub port_offset: u16,
    /// The address written into each Gateway's status.
    pub status_address: String,
}

/// What the watches hold: the stores' own objects, shared (a copy of every
/// object per render was 12 % of the controller's CPU at 10,000 HTTPRoutes,
/// and dropping the copies another 10 %).
#[derive(Default)]
pub struct World {
    pub classes: Vec<Arc<GatewayClass>>,
    pub gateways: Vec<Arc<Gateway>>,
    pub routes: Vec<Arc<HttpRoute>>,
    pub grpc_routes: Vec<Arc<GrpcRoute>>,
    pub tls_routes: Vec<Arc<TlsRoute>>,
    pub tcp_routes: Vec<Arc<TcpRoute>>,
    pub udp_routes: Vec<Arc<UdpRoute>>,
    pub grants: Vec<Arc<ReferenceGrant>>,
    pub services: Vec<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
    pub namespaces: Vec<Arc<Namespace>>,
    pub secrets: Vec<Arc<Secret>>,
    /// `networking.k8s.io/v1` Ingresses and IngressClasses (ingress.rs).
    pub ingresses: Vec<Arc<Ingress>>,
    pub ingress_classes: Vec<Arc<IngressClass>>,
    /// BackendTLSPolicies and the ConfigMaps their CA certificates are in
    /// (backend_tls.rs).
    pub backend_tls: Vec<Arc<BackendTlsPolicy>>,
    pub config_maps: Vec<Arc<ConfigMap>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    GatewayClass,
    Gateway,
    HttpRoute,
    Ingress,
    GrpcRoute,
    TlsRoute,
    TcpRoute,
    UdpRoute,
    BackendTlsPolicy,
}

impl Kind {
    /// Routes' statuses list parents, some written by other controllers
    /// (main.rs keeps those).
    pub fn is_route(self) -> bool {
        matches!(
            self,
            Kind::HttpRoute | Kind::GrpcRoute | Kind::TlsRoute | Kind::TcpRoute | Kind::UdpRoute
        )
    }

    /// Before the names of this kind's pools (an HTTPRoute's have none).
    fn pool_prefix(self) -> &'static str {
        match self {
            Kind::GrpcRoute => "grpc:",
            Kind::TlsRoute => "tls:",
            Kind::TcpRoute => "tcp:",
            Kind::UdpRoute => "udp:",
            _ => "",
        }
    }
}

/// An HTTPRoute or a GRPCRoute as the render reads it: a GRPCRoute's
/// rules are turned into HTTPRoute rules (grpc.rs) and its pools speak
/// HTTP/2 to the members.
pub(crate) struct RouteIn<'a> {
    pub kind: Kind,
    pub metadata: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub status: &'a Value,
    pub parent_refs: &'a [ObjectRef],
    pub hostnames: &'a [String],
    pub rules: Vec<HttpRouteRule>,
}

impl RouteIn<'_> {
    /// The kind's name in the API (ReferenceGrants and listeners' allowed
    /// kinds name it).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::GrpcRoute => "GRPCRoute",
            _ => "HTTPRoute",
        }
    }

    fn of_http(r: &HttpRoute) -> RouteIn<'_> {
        RouteIn {
            kind: Kind::HttpRoute,
            metadata: &r.metadata,
            status: &r.status,
            parent_refs: &r.spec.parent_refs,
            hostnames: &r.spec.hostnames,
            rules: r.spec.rules.clone(),
        }
    }
}

/// The status one object should have (conditions without
/// lastTransitionTime: main.rs keeps the time of a condition that did not
/// change).
#[derive(Debug)]
pub struct StatusOf {
    pub kind: Kind,
    pub namespace: Option<String>,
    pub name: String,
    pub status: Value,
}

pub struct Output {
    /// None: nothing to serve (no Gateway of the class): nothing published.
    pub config: Option<String>,
    pub statuses: Vec<StatusOf>,
    /// Files the configuration names (`files/NAME`): the HTTPS listeners'
    /// certificates and keys, published beside it (docs/cluster.md).
    pub files: BTreeMap<String, Vec<u8>>,
    /// The members of each pool, published beside it: the pools say
    /// `cluster_members = true`.
    pub members: BTreeMap<String, Vec<MemberSpec>>,
    /// Events to write (ingress.rs: annotations not applied).
    pub events: Vec<crate::ingress::EventOf>,
}

pub(crate) fn cond(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Value {
    json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "observedGeneration": generation.unwrap_or(0),
    })
}

pub(crate) fn ns_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    m.namespace.clone().unwrap_or_default()
}

/// A TOML basic string (its escapes are JSON's).
pub(crate) fn q(s: &str) -> String {
    // A &str always serializes; the fallback is never taken.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Hostname intersection of a listener's and a route's (Gateway API):
/// the more specific of the two, or None when they cannot both match.
pub(crate) fn intersect(listener: Option<&str>, route: &str) -> Option<String> {
    let listener = match listener {
        None => return Some(route.to_ascii_lowercase()),
        Some(l) => l.to_ascii_lowercase(),
    };
    let route = route.to_ascii_lowercase();
    let covers = |wild: &str, name: &str| {
        wild.strip_prefix('*')
            .is_some_and(|suffix| name.ends_with(suffix) && name.len() > suffix.len())
    };
    if listener == route || covers(&listener, &route) {
        Some(route)
    } else if covers(&route, &listener) {
        Some(listener)
    } else {
        None
    }
}

/// The address a Gateway listens on: the first IPAddress of its
/// `spec.addresses` (Ok(None) stands for none asked: the controller's
/// listen address), or Err for an address this controller cannot take.
fn gateway_ip(g: &Gateway, s: &Settings) -> Result<IpAddr, String> {
    match g.spec.addresses.first() {
        None => Ok(s.listen_address),
        Some(a) if a.kind.as_deref().unwrap_or("IPAddress") == "IPAddress" => a
            .value
            .parse()
            .map_err(|_| format!("address {:?} is not an IP address", a.value)),
        Some(a) => Err(format!(
            "address type {:?} is not supported (IPAddress only)",
            a.kind.as_deref().unwrap_or("")
        )),
    }
}

/// Why a Gateway of ours is not served, if it is not: (Accepted's reason,
/// Programmed's reason, message). No `infrastructure.parametersRef` kind
/// is supported: the spec asks for `Accepted: False, InvalidParameters`
/// when the referent is missing or of an unsupported kind.
fn gateway_refused(g: &Gateway, s: &Settings) -> Option<(&'static str, &'static str, String)> {
    if let Some(p) = g
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
    {
        return Some((
            "InvalidParameters",
            "Invalid",
            format!(
                "infrastructure.parametersRef {}/{} {:?}: no parameters kind is supported",
                p.group, p.kind, p.name
            ),
        ));
    }
    gateway_ip(g, s)
        .err()
        .map(|why| ("UnsupportedAddress", "AddressNotUsable", why))
}

/// Precedence of a host pattern: exact names, then wildcards (longer
/// first), then none.
pub(crate) fn host_rank(h: &Option<String>) -> (u8, std::cmp::Reverse<usize>) {
    match h {
        Some(h) if !h.starts_with('*') => (0, std::cmp::Reverse(h.len())),
        Some(h) => (1, std::cmp::Reverse(h.len())),
        None => (2, std::cmp::Reverse(0)),
    }
}

/// Precedence of a policy (smaller first): host rank, path kind, path
/// length, method, header count, query count, route age, namespace/name,
/// rule index, match index.
pub(crate) type PrecedenceKey = (
    (u8, std::cmp::Reverse<usize>),
    u8,
    std::cmp::Reverse<usize>,
    u8,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<usize>,
    String,
    String,
    usize,
    usize,
);

/// One rendered policy and the key it is ordered by.
pub(crate) struct Rendered {
    pub key: PrecedenceKey,
    pub text: String,
}

/// Whether a ReferenceGrant in `to_ns` lets `from_kind` objects of
/// `from_ns` refer to the core object `to_kind`/`name`.
fn cx_grants(
    w: &World,
    from_ns: &str,
    from_kind: &str,
    to_ns: &str,
    to_kind: &str,
    name: &str,
) -> bool {
    w.grants.iter().any(|g| {
        ns_of(&g.metadata) == to_ns
            && g.spec
                .from
                .iter()
                .any(|f| f.group == GROUP && f.kind == from_kind && f.namespace == from_ns)
            && g.spec.to.iter().any(|t| {
                t.group.is_empty()
                    && t.kind == to_kind
                    && t.name.as_deref().is_none_or(|n| n == name)
            })
    })
}

pub(crate) struct Ctx<'a> {
    pub w: &'a World,
    /// Services and EndpointSlices by namespace and (Service) name, made
    /// once per render: a scan of both lists per backendRef was 10,000 x
    /// 20,000 comparisons, each with a namespace copied, at 10,000 routes
    /// to 10,000 Services.
    by_name: ServiceIndex<'a>,
    pub pools: BTreeMap<String, String>,
    pub members: BTreeMap<String, Vec<MemberSpec>>,
    /// The BackendTLSPolicies, judged; they learn which Gateways use them.
    pub btls: crate::backend_tls::Policies,
    /// The Gateway (namespace, name) whose routes are being rendered.
    pub gateway: Option<(String, String)>,
}

type NsName<'a> = (&'a str, &'a str);

#[derive(Default)]
struct ServiceIndex<'a> {
    services: HashMap<NsName<'a>, &'a Service>,
    slices: HashMap<NsName<'a>, Vec<&'a EndpointSlice>>,
}

impl<'a> ServiceIndex<'a> {
    fn of(w: &'a World) -> Self {
        let mut ix = ServiceIndex::default();
        for svc in &w.services {
            let m = &svc.metadata;
            if let Some(name) = m.name.as_deref() {
                ix.services
                    .insert((m.namespace.as_deref().unwrap_or(""), name), svc);
            }
        }
        for slice in &w.slices {
            let m = &slice.metadata;
            if let Some(owner) = m
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
            {
                ix.slices
                    .entry((m.namespace.as_deref().unwrap_or(""), owner.as_str()))
                    .or_default()
                    .push(slice);
            }
        }
        ix
    }
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(w: &'a World) -> Self {
        Ctx {
            w,
            by_name: ServiceIndex::of(w),
            pools: BTreeMap::new(),
            members: BTreeMap::new(),
            btls: crate::backend_tls::Policies::judge(w),
            gateway: None,
        }
    }

    /// The name of port `port` of Service `ns/name` (a BackendTLSPolicy's
    /// sectionName), if it has one.
    pub(crate) fn port_name(&self, ns: &str, name: &str, port: i32) -> Option<String> {
        self.service(ns, name)?
            .spec
            .as_ref()?
            .ports
            .as_ref()?
            .iter()
            .find(|p| p.port == port)?
            .name
            .clone()
    }

    /// Service `ns/name`, if it exists.
    pub(crate) fn service(&self, ns: &str, name: &str) -> Option<&'a Service> {
        self.by_name.services.get(&(ns, name)).copied()
    }

    fn namespace_labels(&self, ns: &str) -> BTreeMap<String, String> {
        self.w
            .namespaces
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(ns))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// The ready endpoints of Service `ns/name`'s port `port`, or Err with
    /// the reason when the reference does not resolve.
    pub(crate) fn endpoints(
        &self,
        ns: &str,
        name: &str,
        port: i32,
    ) -> Result<Vec<std::net::SocketAddr>, (&'static str, String)> {
        let svc = self.service(ns, name).ok_or((
            "BackendNotFound",
            format!("Service {ns}/{name} does not exist"),
        ))?;
        let sp = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|ps| ps.iter().find(|p| p.port == port))
            .ok_or((
                "BackendNotFound",
                format!("Service {ns}/{name} has no port {port}"),
            ))?;
        let mut out = BTreeSet::new();
        let slices = self.by_name.slices.get(&(ns, name));
        for slice in slices.into_iter().flatten() {
            let Some(target) = slice
                .ports
                .iter()
                .flatten()
                .find(|p| {
                    p.name == sp.name
                        || (p.name.as_deref().unwrap_or("") == sp.name.as_deref().unwrap_or(""))
                })
                .and_then(|p| p.port)
            else {
                continue;
            };
            for e in &slice.endpoints {
                // Ready, or not said otherwise (the API's reading of an
                // absent condition).
                if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                    continue;
                }
                for a in &e.addresses {
                    if let Ok(ip) = a.parse::<IpAddr>() {
                        out.insert(std::net::SocketAddr::new(ip, target as u16));
                    }
                }
            }
        }
        Ok(out.into_iter().collect())
    }
}

/// The action of a rule: `action = { pool = ... }` or a fixed answer.
fn rule_action(
    cx: &mut Ctx,
    route: &RouteIn,
    idx: usize,
    rule: &HttpRouteRule,
    unresolved: &mut Option<(&'static str, String)>,
) -> String {
    match rule_pool(cx, route, idx, rule, unresolved) {
        Ok(pool) => format!("action = {{ pool = {} }}", q(&pool)),
        Err(answer) => answer.into(),
    }
}

/// The answer of a rule without a pool: no usable backend (500, as the
/// spec asks) or no ready endpoint (503).
const NO_USABLE_BACKEND: &str = "action = { status = 500, body = \"no usable backend\\n\" }";

/// One backendRef of `route` resolved: a core Service in its namespace
/// (or one whose ReferenceGrant allows it), its ready endpoints, and the
/// `[pool.tls]` table its BackendTLSPolicy asks for ("" for none).
struct Backend {
    eps: Vec<std::net::SocketAddr>,
    tls: String,
}

/// Why a backendRef gives no backend.
enum NoBackend {
    /// It does not resolve: the ResolvedRefs reason and message.
    Unresolved((&'static str, String)),
    /// Its BackendTLSPolicy is not valid: never spoken to in plain text.
    Refused,
}

fn backend(cx: &mut Ctx, route: &RouteIn, t: &ObjectRef) -> Result<Backend, NoBackend> {
    let ns = ns_of(route.metadata);
    let group = t.group.as_deref().unwrap_or("");
    let kind = t.kind.as_deref().unwrap_or("Service");
    if !group.is_empty() || kind != "Service" {
        return Err(NoBackend::Unresolved((
            "InvalidKind",
            format!("backendRef kind {group:?}/{kind:?} is not supported (only core Services)"),
        )));
    }
    let bns = t.namespace.clone().unwrap_or_else(|| ns.clone());
    let from = route.kind_name();
    if bns != ns && !cx_grants(cx.w, &ns, from, &bns, "Service", &t.name) {
        return Err(NoBackend::Unresolved((
            "RefNotPermitted",
            format!(
                "no ReferenceGrant in {bns} lets {from}s of {ns} refer to Service {}",
                t.name
            ),
        )));
    }
    let Some(port) = t.port else {
        return Err(NoBackend::Unresolved((
            "BackendNotFound",
            format!("backendRef to Service {} has no port", t.name),
        )));
    };
    let eps = cx
        .endpoints(&bns, &t.name, port)
        .map_err(NoBackend::Unresolved)?;
    let port_name = cx.port_name(&bns, &t.name, port);
    let tls = match cx
        .btls
        .for_backend(&bns, &t.name, port_name.as_deref(), cx.gateway.as_ref())
    {
        backend_tls::Use::Refused => return Err(NoBackend::Refused),
        backend_tls::Use::Plain => String::new(),
        backend_tls::Use::Tls(t) => t,
    };
    Ok(Backend { eps, tls })
}

/// The `mirror = [...]` line of a rule's RequestMirror filters, with a
/// pool for each mirror's backend (members published beside the text, as
/// the rule's own); a mirror whose backend does not resolve is left out
/// (the route then says why in ResolvedRefs), one without a ready
/// endpoint too (there is nobody to copy to).
fn rule_mirrors(
    cx: &mut Ctx,
    route: &RouteIn,
    idx: usize,
    rule: &HttpRouteRule,
    unresolved: &mut Option<(&'static str, String)>,
) -> String {
    let mut entries = Vec::new();
    let mirrors = rule
        .filters
        .iter()
        .filter_map(|f| f.request_mirror.as_ref());
    for (k, m) in mirrors.enumerate() {
        let (target, percent) = match request_mirror(m) {
            // No request is copied: no mirror (the node refuses 0 %).
            Ok((_, Some(0.0))) => continue,
            Ok(tp) => tp,
            Err(_) => continue, // refused whole at acceptance (UnsupportedValue)
        };
        let Backend { eps, tls } = match backend(cx, route, &target) {
            Ok(b) if !b.eps.is_empty() => b,
            Ok(_) | Err(NoBackend::Refused) => continue,
            Err(NoBackend::Unresolved(e)) => {
                unresolved.get_or_insert(e);
                continue;
            }
        };
        let name = format!(
            "{}{}.{}.{}.mirror{k}",
            route.kind.pool_prefix(),
            ns_of(route.metadata),
            route.metadata.name.as_deref().unwrap_or(""),
            idx
        );
        cx.pools.insert(
            name.clone(),
            format!(
                "[[pool]]\nname = {}\nalgorithm = \"round-robin\"\ncluster_members = true\n{tls}",
                q(&name)
            ),
        );
        cx.members.insert(
            name.clone(),
            eps.into_iter()
                .map(|addr| MemberSpec { addr, weight: 1 })
                .collect(),
        );
        entries.push(match percent {
            Some(p) => format!("{{ pool = {}, percent = {p} }}", q(&name)),
            None => format!("{{ pool = {} }}", q(&name)),
        });
    }
    if entries.is_empty() {
        return String::new();
    }
    format!("mirror = [{}]\n", entries.join(", "))
}

/// A RequestMirror filter's backend and share (None: every request), or
/// why the node could not mirror as asked.
fn request_mirror(m: &serde_json::Value) -> Result<(ObjectRef, Option<f64>), String> {
    let target: ObjectRef = serde_json::from_value(m["backendRef"].clone())
        .map_err(|e| format!("RequestMirror backendRef: {e}"))?;
    let percent = match (m.get("percent"), m.get("fraction")) {
        (Some(_), Some(_)) => {
            return Err("RequestMirror takes percent or fraction, not both".into())
        }
        (Some(p), None) => Some(p.as_f64().unwrap_or(100.0)),
        (None, Some(f)) => {
            let num = f["numerator"].as_f64().unwrap_or(0.0);
            let den = f["denominator"].as_f64().unwrap_or(100.0);
            if den <= 0.0 || num < 0.0 || num > den {
                return Err(format!(
                    "RequestMirror fraction {num}/{den} is not a share (0 <= numerator <= denominator, denominator > 0)"
                ));
            }
            Some(num * 100.0 / den)
        }
        (None, None) => None,
    };
    match percent {
        Some(p) if !(0.0..=100.0).contains(&p) => Err(format!(
            "RequestMirror percent {p} is not between 0 and 100"
        )),
        Some(p) if p >= 100.0 => Ok((target, None)),
        p => Ok((target, p)),
    }
}

/// The pool of a rule's backends (members published beside the text),
/// or Err(the answer instead) when it has none.
pub(crate) fn rule_pool(
    cx: &mut Ctx,
    route: &RouteIn,
    idx: usize,
    rule: &HttpRouteRule,
    unresolved: &mut Option<(&'static str, String)>,
) -> Result<String, &'static str> {
    let ns = ns_of(route.metadata);
    let mut backends = Vec::new();
    // The pool's TLS to its members (BackendTLSPolicy): the first
    // backend's; a backend that would need other TLS, or whose policy is
    // not valid, is left out (never sent plain text).
    let mut tls: Option<String> = None;
    let mut refused = false;
    for b in &rule.backend_refs {
        let weight = b.target.weight.unwrap_or(1);
        let Backend { eps, tls: table } = match backend(cx, route, &b.target) {
            Ok(b) => b,
            Err(NoBackend::Unresolved(e)) => {
                unresolved.get_or_insert(e);
                continue;
            }
            Err(NoBackend::Refused) => {
                refused = true;
                continue;
            }
        };
        match &tls {
            None => tls = Some(table),
            Some(first) if *first != table => {
                unresolved.get_or_insert((
                    "UnsupportedProtocol",
                    format!(
                        "Service {}/{} needs other TLS than the rule's first backend (BackendTLSPolicy); one pool speaks one way to its members",
                        b.target.namespace.as_deref().unwrap_or(&ns),
                        b.target.name
                    ),
                ));
                continue;
            }
            Some(_) => {}
        }
        if weight > 0 {
            backends.push((eps, weight));
        }
    }
    if rule.backend_refs.is_empty() || (backends.is_empty() && (unresolved.is_some() || refused)) {
        return Err(NO_USABLE_BACKEND);
    }
    let Some((shares, top)) = endpoint_shares(&backends) else {
        return Err(NO_READY_ENDPOINT);
    };
    let weighted = backends.len() > 1;
    // The members go apart from the text (`<prefix>/members/<pool>`): an
    // endpoint change is a run-time change on the nodes, not a new
    // configuration (switchyard::cluster::members).
    let mut members = Vec::new();
    for ((eps, _), share) in backends.iter().zip(&shares) {
        let weight = ((share / top) * 1000.0).round().max(1.0) as u32;
        for ep in eps {
            members.push(MemberSpec {
                addr: *ep,
                weight: if weighted { weight } else { 1 },
            });
        }
    }
    // Each kind's pools apart from an HTTPRoute's of the same name.
    let name = format!(
        "{}{}.{}.{}",
        route.kind.pool_prefix(),
        ns,
        route.metadata.name.as_deref().unwrap_or(""),
        idx
    );
    let algorithm = if weighted {
        "weighted-round-robin"
    } else {
        "round-robin"
    };
    // gRPC members speak HTTP/2 in cleartext (prior knowledge).
    let protocol = if route.kind == Kind::GrpcRoute {
        "protocol = \"h2\"\n"
    } else {
        ""
    };
    cx.pools.insert(
        name.clone(),
        format!(
            "[[pool]]\nname = {}\nalgorithm = \"{algorithm}\"\n{protocol}cluster_members = true\n{}",
            q(&name),
            tls.unwrap_or_default()
        ),
    );
    cx.members.insert(name.clone(), members);
    Ok(name)
}

/// A RequestRedirect filter: a redirect the node builds from the request
/// (`redirect_scheme`, `redirect_host`, `redirect_port`, `redirect_path`).
/// Without a port or a scheme the listener's port is kept, as the spec
/// asks; with a scheme and no port, the scheme's own.
fn redirect_action(r: &RequestRedirect, m: &HttpRouteMatch, listener_port: i32) -> String {
    let mut parts = vec![format!("status = {}", r.status_code.unwrap_or(302))];
    if let Some(s) = &r.scheme {
        parts.push(format!("redirect_scheme = {}", q(&s.to_ascii_lowercase())));
    }
    if let Some(h) = &r.hostname {
        parts.push(format!("redirect_host = {}", q(h)));
    }
    match (r.port, &r.scheme) {
        (Some(p), _) => parts.push(format!("redirect_port = {p}")),
        (None, None) => parts.push(format!("redirect_port = {listener_port}")),
        (None, Some(_)) => {}
    }
    if let Some(path) = &r.path {
        match path.get("type").and_then(|t| t.as_str()) {
            Some("ReplaceFullPath") => {
                let to = path
                    .get("replaceFullPath")
                    .and_then(|v| v.as_str())
                    .unwrap_or("/");
                parts.push(format!("redirect_path = {}", q(to)));
            }
            Some("ReplacePrefixMatch") => {
                let to = path
                    .get("replacePrefixMatch")
                    .and_then(|v| v.as_str())
                    .unwrap_or("/");
                let to = if to.is_empty() { "/" } else { to };
                parts.push(format!("redirect_path = {}", q(to)));
                let from = m
                    .path
                    .as_ref()
                    .and_then(|p| p.value.clone())
                    .unwrap_or_else(|| "/".into());
                parts.push(format!("redirect_path_prefix = {}", q(&from)));
            }
            _ => {}
        }
    }
    format!("action = {{ {} }}", parts.join(", "))
}

/// A URLRewrite filter (the Gateway API's HTTPURLRewriteFilter), checked.
struct UrlRewrite {
    host: Option<String>,
    /// The new path, and whether it replaces the match's prefix
    /// (ReplacePrefixMatch) or the whole path (ReplaceFullPath).
    path: Option<(String, bool)>,
}

impl UrlRewrite {
    /// The policy's `rewrite` line for the match `m` (its path prefix is
    /// what ReplacePrefixMatch replaces; no path: "/").
    fn line(&self, m: &HttpRouteMatch) -> String {
        let mut parts = Vec::new();
        if let Some((to, prefix)) = &self.path {
            parts.push(format!("path = {}", q(to)));
            if *prefix {
                let from = m
                    .path
                    .as_ref()
                    .and_then(|p| p.value.clone())
                    .unwrap_or_else(|| "/".into());
                parts.push(format!("path_prefix = {}", q(&from)));
            }
        }
        if let Some(h) = &self.host {
            parts.push(format!("host = {}", q(h)));
        }
        format!("rewrite = {{ {} }}\n", parts.join(", "))
    }
}

/// The URLRewrite filter's parts, or why the node could not apply them
/// (the route is then not Accepted: UnsupportedValue), so that one route
/// never makes the whole render one the nodes refuse.
fn url_rewrite(u: &serde_json::Value) -> Result<UrlRewrite, String> {
    let host = match u.get("hostname").and_then(|h| h.as_str()) {
        None => None,
        Some(h) if switchyard::config::types::is_host(h) => Some(h.to_ascii_lowercase()),
        Some(h) => return Err(format!("URLRewrite hostname {h:?} is not a host name")),
    };
    let path = match u.get("path") {
        None => None,
        Some(p) => {
            let (key, prefix) = match p.get("type").and_then(|t| t.as_str()) {
                Some("ReplaceFullPath") => ("replaceFullPath", false),
                Some("ReplacePrefixMatch") => ("replacePrefixMatch", true),
                other => return Err(format!("URLRewrite path type {other:?} is not supported")),
            };
            let to = p.get(key).and_then(|v| v.as_str()).unwrap_or("/");
            let to = if to.is_empty() { "/" } else { to };
            if !switchyard::config::types::is_normalized_path(to) {
                return Err(format!(
                    "URLRewrite path {to:?} is not a normalized path (no empty, . or .. segment, no %, ?, #, space or \\)"
                ));
            }
            Some((to.to_string(), prefix))
        }
    };
    if host.is_none() && path.is_none() {
        return Err("URLRewrite changes neither the hostname nor the path".into());
    }
    Ok(UrlRewrite { host, path })
}

fn header_edits(m: &HeaderModifier) -> String {
    let table = |v: &[NameValue]| {
        let inner: Vec<String> = v
            .iter()
            .map(|nv| format!("{} = {}", q(&nv.name.to_ascii_lowercase()), q(&nv.value)))
            .collect();
        format!("{{ {} }}", inner.join(", "))
    };
    let remove: Vec<String> = m.remove.iter().map(|r| q(r)).collect();
    format!(
        "{{ set = {}, add = {}, remove = [{}] }}",
        table(&m.set),
        table(&m.add),
        remove.join(", ")
    )
}

/// The `match` tables of one Gateway API match, for one host (several
/// when a PathPrefix needs both its exact path and the path with `/`),
/// or Err(reason) for a match the node cannot express.
fn matches(m: &HttpRouteMatch, host: &Option<String>) -> Result<Vec<String>, String> {
    let mut common = Vec::new();
    if let Some(h) = host {
        common.push(format!("host = {}", q(h)));
    }
    if let Some(method) = &m.method {
        common.push(format!("method = {}", q(method)));
    }
    let nv = |v: &[ValueMatch], lower: bool| -> Result<String, String> {
        let mut items = Vec::new();
        for x in v {
            let name = if lower {
                x.name.to_ascii_lowercase()
            } else {
                x.name.clone()
            };
            match x.kind.as_deref().unwrap_or("Exact") {
                "Exact" => items.push(format!(
                    "{{ name = {}, value = {} }}",
                    q(&name),
                    q(&x.value)
                )),
                "RegularExpression" => items.push(format!(
                    "{{ name = {}, value_regex = {} }}",
                    q(&name),
                    q(&x.value)
                )),
                other => return Err(format!("match type {other:?} is not supported")),
            }
        }
        Ok(format!("[{}]", items.join(", ")))
    };
    if !m.headers.is_empty() {
        common.push(format!("header = {}", nv(&m.headers, true)?));
    }
    if !m.query_params.is_empty() {
        common.push(format!("query = {}", nv(&m.query_params, false)?));
    }
    let (kind, value) = match &m.path {
        None => ("PathPrefix", "/".to_string()),
        Some(p) => (
            p.kind.as_deref().unwrap_or("PathPrefix"),
            p.value.clone().unwrap_or_else(|| "/".into()),
        ),
    };
    let with = |extra: String| {
        let mut all = common.clone();
        all.push(extra);
        format!("match = {{ {} }}", all.join(", "))
    };
    Ok(match kind {
        "Exact" => vec![with(format!("path = {}", q(&value)))],
        "PathPrefix" => {
            let trimmed = value.trim_end_matches('/');
            if trimmed.is_empty() {
                vec![with("path_prefix = \"/\"".into())]
            } else {
                // "/foo" matches "/foo" and "/foo/..." but not "/foobar".
                vec![
                    with(format!("path = {}", q(trimmed))),
                    with(format!("path_prefix = {}", q(&format!("{trimmed}/")))),
                ]
            }
        }
        "RegularExpression" => vec![with(format!(
            "path_regex = {}",
            q(&format!("^(?:{value})$"))
        ))],
        other => return Err(format!("path match type {other:?} is not supported")),
    })
}

/// The route kinds a listener takes (those of its protocol that it
/// allows) and whether it takes every kind it names.
pub(crate) fn listener_kinds(l: &Listener) -> (Vec<Value>, bool) {
    let supported = route_kinds_of(&l.protocol);
    match &l.allowed_routes.as_ref().and_then(|a| a.kinds.clone()) {
        None => (
            supported
                .iter()
                .map(|k| json!({"group": GROUP, "kind": k}))
                .collect(),
            true,
        ),
        Some(kinds) => {
            let mut ok = Vec::new();
            let mut all = true;
            for k in kinds {
                if supported.contains(&k.kind.as_str())
                    && k.group.as_deref().unwrap_or(GROUP) == GROUP
                {
                    ok.push(json!({"group": GROUP, "kind": k.kind}));
                } else {
                    all = false;
                }
            }
            (ok, all)
        }
    }
}

/// Whether listener `l` of a Gateway in `gateway_ns` takes routes of
/// namespace `route_ns` (`allowedRoutes.namespaces`).
pub(crate) fn namespaces_allow(cx: &Ctx, l: &Listener, gateway_ns: &str, route_ns: &str) -> bool {
    let from = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
        .and_then(|n| n.from.clone())
        .unwrap_or_else(|| "Same".into());
    match from.as_str() {
        "All" => true,
        "Same" => gateway_ns == route_ns,
        "Selector" => {
            let labels = cx.namespace_labels(route_ns);
            let sel = l
                .allowed_routes
                .as_ref()
                .and_then(|a| a.namespaces.as_ref())
                .and_then(|n| n.selector.clone())
                .unwrap_or_default();
            sel.match_labels
                .unwrap_or_default()
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
                && sel.match_expressions.unwrap_or_default().iter().all(|e| {
                    let have = labels.get(&e.key);
                    let vals = e.values.clone().unwrap_or_default();
                    match e.operator.as_str() {
                        "In" => have.is_some_and(|h| vals.contains(h)),
                        "NotIn" => have.is_none_or(|h| !vals.contains(h)),
                        "Exists" => have.is_some(),
                        "DoesNotExist" => have.is_none(),
                        _ => false,
                    }
                })
        }
        _ => false,
    }
}

/// Hosts an accepted HTTPRoute or GRPCRoute holds on a listener.
struct Claim {
    /// "HTTPRoute ns/name", for the message of the route refused.
    route: String,
    /// None: any host.
    hosts: Vec<Option<String>>,
}

/// Whether two host lists (None: any host) have a host in common.
fn hosts_overlap(a: &[Option<String>], b: &[Option<String>]) -> bool {
    a.iter().any(|x| {
        b.iter().any(|y| match (x, y) {
            (None, _) | (_, None) => true,
            (Some(x), Some(y)) => intersect(Some(x), y).is_some(),
        })
    })
}

/// The route kinds a listener of `protocol` takes.
pub(crate) fn route_kinds_of(protocol: &str) -> &'static [&'static str] {
    match protocol {
        "HTTP" | "HTTPS" => &["HTTPRoute", "GRPCRoute"],
        "TLS" => &["TLSRoute"],
        "TCP" => &["TCPRoute"],
        "UDP" => &["UDPRoute"],
        _ => &[],
    }
}

/// What a rule answers while none of its backends has a ready endpoint.
pub(crate) const NO_READY_ENDPOINT: &str =
    "action = { status = 503, body = \"no ready endpoint\\n\" }";

/// Members' weights: each backend's share of the weights spread over its
/// endpoints, and the heaviest share (the one that gets weight 1000);
/// None when no backend has a ready endpoint.
pub(crate) fn endpoint_shares<W: Copy + Into<f64>>(
    backends: &[(Vec<std::net::SocketAddr>, W)],
) -> Option<(Vec<f64>, f64)> {
    let shares: Vec<f64> = backends
        .iter()
        .map(|(eps, w)| {
            if eps.is_empty() {
                0.0
            } else {
                (*w).into() / eps.len() as f64
            }
        })
        .collect();
    let top = shares.iter().cloned().fold(0.0, f64::max);
    (top > 0.0).then_some((shares, top))
}

pub fn render(w: &World, s: &Settings) -> Output {
    let mut statuses = Vec::new();
    let mut cx = Ctx::new(w);
    let ours: BTreeSet<String> = w
        .classes
        .iter()
        .filter(|c| c.spec.controller_name == s.controller_name)
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    for c in &w.classes {
        if c.spec.controller_name != s.controller_name {
            continue;
        }
        statuses.push(StatusOf {
            kind: Kind::GatewayClass,
            namespace: None,
            name: c.metadata.name.clone().unwrap_or_default(),
            status: json!({"conditions": [cond("Accepted", true, "Accepted", "handled by switchyard-gateway", c.metadata.generation)]}),
        });
    }
    // Gateways whose address cannot be taken, or that ask for parameters,
    // serve nothing; they are told.
    let (gateways, unusable): (Vec<&Gateway>, Vec<&Gateway>) = w
        .gateways
        .iter()
        .map(Arc::as_ref)
        .filter(|g| ours.contains(&g.spec.gateway_class_name))
        .partition(|g| gateway_refused(g, s).is_none());
    let mut gateways = gateways;
    gateways.sort_by_key(|g| (ns_of(&g.metadata), g.metadata.name.clone()));
    for g in unusable {
        let (accepted, programmed, why) = gateway_refused(g, s).unwrap_or_default();
        let gen = g.metadata.generation;
        statuses.push(StatusOf {
            kind: Kind::Gateway,
            namespace: Some(ns_of(&g.metadata)),
            name: g.metadata.name.clone().unwrap_or_default(),
            status: json!({
                "conditions": [
                    cond("Accepted", false, accepted, &why, gen),
                    cond("Programmed", false, programmed, &why, gen),
                ],
            }),
        });
    }
    // (gateway index, listener index) -> attached route count.
    let mut attached: BTreeMap<(usize, usize), i64> = BTreeMap::new();
    let mut policies: BTreeMap<(IpAddr, u16), Vec<Rendered>> = BTreeMap::new();
    // Listener validity, computed once: Ok(allowed kinds) or Err(reason, message).
    // A listener's validity: Ok(None) for HTTP, Ok(Some(certificate file
    // name)) for HTTPS, or Err(condition type, reason, message).
    // Listeners that cannot be told apart (conflicts.rs): not programmed.
    let conflicted = {
        let located: Vec<(&Gateway, IpAddr)> = gateways
            .iter()
            .map(|g| (*g, gateway_ip(g, s).unwrap_or(s.listen_address)))
            .collect();
        crate::conflicts::find(&located)
    };
    let listener_ok = |g: &Gateway,
                       l: &Listener|
     -> Result<Option<String>, (&'static str, &'static str, String)> {
        let id = (
            ns_of(&g.metadata),
            g.metadata.name.clone().unwrap_or_default(),
            l.name.clone(),
        );
        if let Some((reason, why)) = conflicted.get(&id) {
            return Err(("Conflicted", reason, why.clone()));
        }
        if !(1..=65535).contains(&l.port) || l.port as u32 + s.port_offset as u32 > 65535 {
            return Err((
                "Accepted",
                "PortUnavailable",
                format!("port {} (+{}) is out of range", l.port, s.port_offset),
            ));
        }
        match l.protocol.as_str() {
            "HTTP" => Ok(None),
            "HTTPS" => {
                let tls = l.tls.as_ref();
                if tls.and_then(|t| t.mode.as_deref()).unwrap_or("Terminate") != "Terminate" {
                    return Err((
                        "Accepted",
                        "UnsupportedProtocol",
                        "HTTPS listeners terminate TLS (mode Passthrough is TLSRoute's)".into(),
                    ));
                }
                let Some(r) = tls.and_then(|t| t.certificate_refs.first()) else {
                    return Err((
                        "ResolvedRefs",
                        "InvalidCertificateRef",
                        "an HTTPS listener needs a certificateRef".into(),
                    ));
                };
                if !r.group.as_deref().unwrap_or("").is_empty()
                    || r.kind.as_deref().unwrap_or("Secret") != "Secret"
                {
                    return Err((
                        "ResolvedRefs",
                        "InvalidCertificateRef",
                        "certificateRefs name core Secrets only".into(),
                    ));
                }
                let gns = ns_of(&g.metadata);
                let sns = r.namespace.clone().unwrap_or_else(|| gns.clone());
                if sns != gns && !cx_grants(w, &gns, "Gateway", &sns, "Secret", &r.name) {
                    return Err((
                        "ResolvedRefs",
                        "RefNotPermitted",
                        format!(
                            "no ReferenceGrant in {sns} lets Gateways of {gns} use Secret {}",
                            r.name
                        ),
                    ));
                }
                let secret = w.secrets.iter().find(|x| {
                    ns_of(&x.metadata) == sns && x.metadata.name.as_deref() == Some(r.name.as_str())
                });
                let data = secret.and_then(|x| x.data.as_ref());
                let (Some(crt), Some(key)) = (
                    data.and_then(|d| d.get("tls.crt")),
                    data.and_then(|d| d.get("tls.key")),
                ) else {
                    return Err((
                        "ResolvedRefs",
                        "InvalidCertificateRef",
                        format!(
                            "Secret {sns}/{} does not exist or lacks tls.crt and tls.key",
                            r.name
                        ),
                    ));
                };
                if !crt.0.starts_with(b"-----BEGIN") || !key.0.starts_with(b"-----BEGIN") {
                    return Err((
                        "ResolvedRefs",
                        "InvalidCertificateRef",
                        format!("Secret {sns}/{}: tls.crt and tls.key must be PEM", r.name),
                    ));
                }
                Ok(Some(format!("secret-{sns}-{}", r.name)))
            }
            // TLS is passed through: terminating it for a TLSRoute
            // (extended) is not supported.
            "TLS" => match l.tls.as_ref().and_then(|t| t.mode.as_deref()) {
                Some("Passthrough") => Ok(None),
                _ => Err((
                    "Accepted",
                    "UnsupportedProtocol",
                    "TLS listeners pass TLS through (tls.mode: Passthrough)".into(),
                )),
            },
            "TCP" | "UDP" => Ok(None),
            other => Err((
                "Accepted",
                "UnsupportedProtocol",
                format!("protocol {other} is not supported (HTTP, HTTPS, TLS, TCP and UDP are)"),
            )),
        }
    };
    let kinds_ok = listener_kinds;
    // Routes, oldest first (ties: namespace/name), as the precedence rules ask.
    let mut routes: Vec<RouteIn> = w
        .routes
        .iter()
        .map(|r| RouteIn::of_http(r))
        .chain(w.grpc_routes.iter().map(|r| crate::grpc::route_in(r)))
        .collect();
    routes.sort_by_key(|r| {
        (
            r.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ns_of(r.metadata),
            r.metadata.name.clone(),
            r.kind,
        )
    });
    let mut grpc_ports = BTreeSet::new();
    // The hosts each listener's accepted routes hold, by kind: an
    // HTTPRoute and a GRPCRoute may not share a hostname on a listener.
    let mut claimed: BTreeMap<(usize, usize, Kind), Vec<Claim>> = BTreeMap::new();
    for route in routes {
        let rns = ns_of(route.metadata);
        let rname = route.metadata.name.clone().unwrap_or_default();
        let created = route
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let gen = route.metadata.generation;
        let mut parents = Vec::new();
        // The rules' unresolved references and unsupported parts.
        let mut unresolved = None;
        let mut unsupported: Option<String> = None;
        for rule in &route.rules {
            for f in rule
                .filters
                .iter()
                .chain(rule.backend_refs.iter().flat_map(|b| b.filters.iter()))
            {
                if !matches!(
                    f.kind.as_str(),
                    "RequestHeaderModifier"
                        | "ResponseHeaderModifier"
                        | "RequestRedirect"
                        | "URLRewrite"
                        | "RequestMirror"
                ) {
                    unsupported.get_or_insert(format!("filter {} is not supported yet", f.kind));
                }
                if let Some(Err(why)) = f.url_rewrite.as_ref().map(url_rewrite) {
                    unsupported.get_or_insert(why);
                }
                if let Some(m) = &f.request_mirror {
                    if route.kind == Kind::GrpcRoute {
                        // The node copies a body as it streams to the
                        // member, before the answer is read: a
                        // bidirectional stream would stall.
                        unsupported.get_or_insert(
                            "RequestMirror is not supported on GRPCRoute (streams would stall)"
                                .into(),
                        );
                    } else if let Err(why) = request_mirror(m) {
                        unsupported.get_or_insert(why);
                    }
                }
            }
            if rule.backend_refs.iter().any(|b| !b.filters.is_empty()) {
                unsupported.get_or_insert("filters on a backendRef are not supported yet".into());
            }
        }
        for pref in route.parent_refs {
            let group = pref.group.as_deref().unwrap_or(GROUP);
            let kind = pref.kind.as_deref().unwrap_or("Gateway");
            let pns = pref.namespace.clone().unwrap_or_else(|| rns.clone());
            if group != GROUP || kind != "Gateway" {
                continue;
            }
            let Some((gi, gw)) = gateways.iter().enumerate().find(|(_, g)| {
                ns_of(&g.metadata) == pns && g.metadata.name.as_deref() == Some(&pref.name)
            }) else {
                continue; // not a Gateway of ours: another controller's to say
            };
            let parent_ref = parent_ref_status(&pns, pref);
            // Listeners this parentRef names (section, port), then those
            // that allow the route, then those whose hostnames intersect.
            let named: Vec<(usize, &Listener)> = gw
                .spec
                .listeners
                .iter()
                .enumerate()
                .filter(|(_, l)| pref.section_name.as_ref().is_none_or(|n| *n == l.name))
                .filter(|(_, l)| pref.port.is_none_or(|p| p == l.port))
                .filter(|(_, l)| listener_ok(gw, l).is_ok())
                .collect();
            let allowed: Vec<(usize, &Listener)> = named
                .iter()
                .cloned()
                .filter(|(_, l)| {
                    namespaces_allow(&cx, l, &pns, &rns)
                        && kinds_ok(l).0.iter().any(|k| k["kind"] == route.kind_name())
                })
                .collect();
            let mut hosts_by_listener = Vec::new();
            for (li, l) in &allowed {
                let hosts: Vec<Option<String>> = if route.hostnames.is_empty() {
                    vec![l.hostname.clone().map(|h| h.to_ascii_lowercase())]
                } else {
                    let mut hs: Vec<Option<String>> = route
                        .hostnames
                        .iter()
                        .filter_map(|h| intersect(l.hostname.as_deref(), h))
                        .map(Some)
                        .collect();
                    hs.sort();
                    hs.dedup();
                    hs
                };
                if !hosts.is_empty() {
                    hosts_by_listener.push((*li, *l, hosts));
                }
            }
            // The GRPCRoute docs let an implementation refuse the newer of
            // an HTTPRoute and a GRPCRoute whose hostnames meet on a
            // listener (the routes come oldest first, then by
            // namespace/name, the order the spec asks): never merging
            // their rules keeps a gRPC call from falling into an HTTP
            // rule's catch-all.
            let matched_hosts = !hosts_by_listener.is_empty();
            let mut clashes = Vec::new();
            hosts_by_listener.retain(|(li, l, hosts)| {
                // Claims are kept by kind: only the other kinds' are
                // looked at. One list of every claim was a scan of the
                // listener's routes per route: 50 million steps at
                // 10,000 HTTPRoutes on one listener.
                let holder = claimed
                    .range((gi, *li, Kind::GatewayClass)..)
                    .take_while(|((g, l, _), _)| (*g, *l) == (gi, *li))
                    .filter(|((_, _, kind), _)| *kind != route.kind)
                    .find_map(|(_, cs)| cs.iter().find(|c| hosts_overlap(&c.hosts, hosts)));
                if let Some(c) = holder {
                    clashes.push(format!(
                        "listener {} carries {} with the same hostnames",
                        l.name, c.route
                    ));
                }
                holder.is_none()
            });
            let accepted = if named.is_empty() {
                cond(
                    "Accepted",
                    false,
                    "NoMatchingParent",
                    "no listener of the Gateway matches sectionName/port",
                    gen,
                )
            } else if allowed.is_empty() {
                cond(
                    "Accepted",
                    false,
                    "NotAllowedByListeners",
                    "no listener allows this route (namespace or kind)",
                    gen,
                )
            } else if !matched_hosts {
                cond(
                    "Accepted",
                    false,
                    "NoMatchingListenerHostname",
                    "no hostname of the route matches a listener's",
                    gen,
                )
            } else if hosts_by_listener.is_empty() {
                cond(
                    "Accepted",
                    false,
                    "NotAllowedByListeners",
                    &format!(
                        "{} (an older route of the other kind keeps them)",
                        clashes.join(", ")
                    ),
                    gen,
                )
            } else if let Some(why) = &unsupported {
                cond("Accepted", false, "UnsupportedValue", why, gen)
            } else {
                cond("Accepted", true, "Accepted", "attached", gen)
            };
            let ok = accepted["status"] == "True";
            if ok {
                for (li, l, hosts) in &hosts_by_listener {
                    *attached.entry((gi, *li)).or_default() += 1;
                    claimed
                        .entry((gi, *li, route.kind))
                        .or_default()
                        .push(Claim {
                            route: format!("{} {rns}/{rname}", route.kind_name()),
                            hosts: hosts.clone(),
                        });
                    let port = (gateway_ip(gw, s).unwrap_or(s.listen_address), l.port as u16);
                    if route.kind == Kind::GrpcRoute {
                        grpc_ports.insert(port);
                    }
                    cx.gateway = Some((
                        ns_of(&gw.metadata),
                        gw.metadata.name.clone().unwrap_or_default(),
                    ));
                    for (ri, rule) in route.rules.iter().enumerate() {
                        let mut unresolved_here = None;
                        let action = rule_action(&mut cx, &route, ri, rule, &mut unresolved_here);
                        // Copies go with the rule's pool (a rule without
                        // one answers itself: nothing to copy).
                        let mirror = if action.starts_with("action = { pool") {
                            rule_mirrors(&mut cx, &route, ri, rule, &mut unresolved_here)
                        } else {
                            String::new()
                        };
                        if unresolved.is_none() {
                            unresolved = unresolved_here;
                        }
                        let mut edits = String::new();
                        for f in &rule.filters {
                            if let Some(m) = &f.request_header_modifier {
                                let _ = writeln!(edits, "request_headers = {}", header_edits(m));
                            }
                            if let Some(m) = &f.response_header_modifier {
                                let _ = writeln!(edits, "response_headers = {}", header_edits(m));
                            }
                        }
                        let default_match = vec![HttpRouteMatch::default()];
                        let ms = rule
                            .matches
                            .as_ref()
                            .filter(|m| !m.is_empty())
                            .unwrap_or(&default_match);
                        for (mi, m) in ms.iter().enumerate() {
                            for host in hosts {
                                let Ok(tables) = matches(m, host) else {
                                    continue;
                                };
                                let (pk, plen) = match &m.path {
                                    None => (1, 1),
                                    Some(p) => match p.kind.as_deref().unwrap_or("PathPrefix") {
                                        "Exact" => (0, p.value.as_deref().unwrap_or("/").len()),
                                        "PathPrefix" => (
                                            1,
                                            p.value
                                                .as_deref()
                                                .unwrap_or("/")
                                                .trim_end_matches('/')
                                                .len()
                                                + 1,
                                        ),
                                        _ => (2, p.value.as_deref().unwrap_or("").len()),
                                    },
                                };
                                let action = match rule
                                    .filters
                                    .iter()
                                    .find_map(|f| f.request_redirect.as_ref())
                                {
                                    Some(r) => redirect_action(r, m, l.port),
                                    None => action.clone(),
                                };
                                // A URLRewrite goes with the rule's pool (a
                                // rule without one answers as it is).
                                let rewrite = rule
                                    .filters
                                    .iter()
                                    .find_map(|f| f.url_rewrite.as_ref())
                                    .filter(|_| action.starts_with("action = { pool"))
                                    .and_then(|u| url_rewrite(u).ok())
                                    .map(|r| r.line(m))
                                    .unwrap_or_default();
                                // Likewise the copies (a redirect copies nothing).
                                let mirror = if action.starts_with("action = { pool") {
                                    mirror.as_str()
                                } else {
                                    ""
                                };
                                for t in tables {
                                    policies.entry(port).or_default().push(Rendered {
                                        key: (
                                            host_rank(host),
                                            pk,
                                            std::cmp::Reverse(plen),
                                            if m.method.is_some() { 0 } else { 1 },
                                            std::cmp::Reverse(m.headers.len()),
                                            std::cmp::Reverse(m.query_params.len()),
                                            created.clone(),
                                            format!("{rns}/{rname}"),
                                            ri,
                                            mi,
                                        ),
                                        text: format!(
                                            "[[vserver.policy]]\nname = {}\n{t}\n{action}\n{rewrite}{mirror}{edits}",
                                            q(&format!("{rns}/{rname} rule {ri} match {mi}"))
                                        ),
                                    });
                                }
                            }
                        }
                    }
                }
            }
            parents.push(route_parent(
                parent_ref,
                &s.controller_name,
                accepted,
                unresolved.as_ref(),
                gen,
            ));
        }
        // A route that names none of our Gateways any more still gets an
        // (empty) entry list from us: main.rs then removes the parents
        // this controller wrote before and keeps other controllers'.
        let ours_before = route.status["parents"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["controllerName"] == s.controller_name.as_str())
        });
        if !parents.is_empty() || ours_before {
            statuses.push(StatusOf {
                kind: route.kind,
                namespace: Some(rns.clone()),
                name: rname,
                status: json!({"parents": parents}),
            });
        }
    }
    // TLS, TCP and UDP listeners and their routes (render_l4.rs).
    let located: Vec<(&Gateway, IpAddr)> = gateways
        .iter()
        .map(|g| (*g, gateway_ip(g, s).unwrap_or(s.listen_address)))
        .collect();
    let usable = |gi: usize, li: usize| {
        gateways
            .get(gi)
            .and_then(|g| g.spec.listeners.get(li).map(|l| listener_ok(g, l).is_ok()))
            .unwrap_or(false)
    };
    let l4_text = crate::render_l4::render(crate::render_l4::L4Input {
        cx: &mut cx,
        controller_name: &s.controller_name,
        port_offset: s.port_offset,
        listen_address: s.listen_address,
        gateways: &located,
        usable: &usable,
        statuses: &mut statuses,
        attached: &mut attached,
    });
    for (gi, g) in gateways.iter().enumerate() {
        let gen = g.metadata.generation;
        let mut listeners = Vec::new();
        let mut any = false;
        let mut not_valid = Vec::new();
        for (li, l) in g.spec.listeners.iter().enumerate() {
            let (kinds, all_kinds) = kinds_ok(l);
            let mut conds = Vec::new();
            let mut refs_ok = true;
            let mut conflict = None;
            match listener_ok(g, l) {
                Ok(_) => {
                    any = true;
                    conds.push(cond("Accepted", true, "Accepted", "", gen));
                    conds.push(cond("Programmed", true, "Programmed", "", gen));
                }
                Err(("ResolvedRefs", reason, why)) => {
                    refs_ok = false;
                    conds.push(cond("Accepted", true, "Accepted", "", gen));
                    conds.push(cond("Programmed", false, "Invalid", &why, gen));
                    conds.push(cond("ResolvedRefs", false, reason, &why, gen));
                }
                // The port cannot be given to it (the reason the
                // Gateway API's ListenerSet GEP shows for a conflict).
                Err(("Conflicted", reason, why)) => {
                    not_valid.push(l.name.clone());
                    conds.push(cond("Accepted", false, "PortUnavailable", &why, gen));
                    conds.push(cond("Programmed", false, "Invalid", &why, gen));
                    conflict = Some((reason, why));
                }
                Err((_, reason, why)) => {
                    conds.push(cond("Accepted", false, reason, &why, gen));
                    conds.push(cond("Programmed", false, "Invalid", &why, gen));
                }
            }
            conds.push(if !refs_ok {
                Value::Null
            } else if all_kinds {
                cond("ResolvedRefs", true, "ResolvedRefs", "", gen)
            } else {
                cond(
                    "ResolvedRefs",
                    false,
                    "InvalidRouteKinds",
                    &format!(
                        "a {} listener takes {}",
                        l.protocol,
                        route_kinds_of(&l.protocol).join(" and ")
                    ),
                    gen,
                )
            });
            conds.retain(|c| !c.is_null());
            conds.push(match conflict {
                Some((reason, why)) => cond("Conflicted", true, reason, &why, gen),
                None => cond("Conflicted", false, "NoConflicts", "", gen),
            });
            listeners.push(json!({
                "name": l.name,
                "supportedKinds": kinds,
                "attachedRoutes": attached.get(&(gi, li)).copied().unwrap_or(0),
                "conditions": conds,
            }));
        }
        let conditions = if any && !not_valid.is_empty() {
            // Served in part: the spec asks for ListenersNotValid naming
            // the conflicted listeners left out.
            let why = format!("conflicted listeners: {}", not_valid.join(", "));
            vec![
                cond("Accepted", true, "ListenersNotValid", &why, gen),
                cond("Programmed", true, "Programmed", "", gen),
            ]
        } else if any {
            vec![
                cond("Accepted", true, "Accepted", "", gen),
                cond("Programmed", true, "Programmed", "", gen),
            ]
        } else {
            vec![
                cond(
                    "Accepted",
                    false,
                    "ListenersNotValid",
                    "no listener is valid",
                    gen,
                ),
                cond("Programmed", false, "Invalid", "no listener is valid", gen),
            ]
        };
        statuses.push(StatusOf {
            kind: Kind::Gateway,
            namespace: Some(ns_of(&g.metadata)),
            name: g.metadata.name.clone().unwrap_or_default(),
            status: json!({
                "addresses": [match gateway_ip(g, s) {
                    Ok(ip) if ip != s.listen_address => json!({"type": "IPAddress", "value": ip.to_string()}),
                    _ => json!({"type": if s.status_address.parse::<IpAddr>().is_ok() { "IPAddress" } else { "Hostname" }, "value": s.status_address}),
                }],
                "conditions": conditions,
                "listeners": listeners,
            }),
        });
    }
    // Ports of every valid listener get a vserver, routes or not; an
    // HTTPS listener's certificate goes with its port (several: chosen by
    // SNI on the node).
    let mut certs: BTreeMap<(IpAddr, u16), BTreeSet<String>> = BTreeMap::new();
    let mut files = BTreeMap::new();
    for g in &gateways {
        for l in &g.spec.listeners {
            if crate::render_l4::is_l4(&l.protocol) {
                continue;
            }
            if let Ok(cert) = listener_ok(g, l) {
                let at = (gateway_ip(g, s).unwrap_or(s.listen_address), l.port as u16);
                policies.entry(at).or_default();
                if let Some(name) = cert {
                    if let Some(r) = l.tls.as_ref().and_then(|t| t.certificate_refs.first()) {
                        let sns = r.namespace.clone().unwrap_or_else(|| ns_of(&g.metadata));
                        let data = w
                            .secrets
                            .iter()
                            .find(|x| {
                                ns_of(&x.metadata) == sns
                                    && x.metadata.name.as_deref() == Some(r.name.as_str())
                            })
                            .and_then(|x| x.data.clone())
                            .unwrap_or_default();
                        for (k, ext) in [("tls.crt", "crt"), ("tls.key", "key")] {
                            files.insert(
                                format!("{name}.{ext}"),
                                data.get(k).map(|b| b.0.clone()).unwrap_or_default(),
                            );
                        }
                    }
                    certs.entry(at).or_default().insert(name);
                }
            }
        }
    }
    // BackendTLSPolicies: their CA bundles, and their statuses now that
    // the routes said which Gateways use them.
    cx.gateway = None;
    files.extend(std::mem::take(&mut cx.btls.files));
    statuses.extend(cx.btls.statuses(&s.controller_name));
    // Ingresses (ingress.rs) join the Gateways' vservers on ports 80/443.
    let mut events = Vec::new();
    let mut limits: BTreeMap<(IpAddr, u16), BTreeMap<String, String>> = BTreeMap::new();
    crate::ingress::render(
        &mut cx,
        s,
        crate::ingress::Sink {
            policies: &mut policies,
            limits: &mut limits,
            certs: &mut certs,
            files: &mut files,
            statuses: &mut statuses,
            events: &mut events,
        },
    );
    if policies.is_empty() && l4_text.is_empty() {
        return Output {
            config: None,
            statuses,
            files: BTreeMap::new(),
            members: BTreeMap::new(),
            events,
        };
    }
    let mut text = String::from(
        "# Rendered by switchyard-gateway from the cluster's Gateway API objects: do not edit.\n",
    );
    for ((ip, port), mut ps) in policies {
        // The text breaks ties (the same route on two listeners of one
        // port): the watches hand objects over in no set order, and the
        // same objects must always render the same text.
        ps.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.text.cmp(&b.text)));
        // One route on two Gateways that share an address renders twice.
        ps.dedup_by(|a, b| a.text == b.text);
        let listen = std::net::SocketAddr::new(ip, port + s.port_offset);
        let name = if ip == s.listen_address {
            format!("gateway-{port}")
        } else {
            format!("gateway-{ip}-{port}")
        };
        let _ = write!(
            text,
            "\n[[vserver]]\nname = {}\nlisten = [{}]\n",
            q(&name),
            q(&listen.to_string())
        );
        // gRPC clients open HTTP/2 at once: with prior knowledge on a
        // plain port, through ALPN on a TLS one.
        let grpc = grpc_ports.contains(&(ip, port));
        if grpc && !certs.contains_key(&(ip, port)) {
            text.push_str("h2c = true\n");
        }
        if let Some(names) = certs.get(&(ip, port)) {
            let list: Vec<String> = names
                .iter()
                .map(|n| {
                    format!(
                        "{{ cert = {}, key = {} }}",
                        q(&format!("files/{n}.crt")),
                        q(&format!("files/{n}.key"))
                    )
                })
                .collect();
            let _ = writeln!(text, "[vserver.tls]\ncertificates = [{}]", list.join(", "));
            if grpc {
                text.push_str("alpn = [\"h2\", \"http/1.1\"]\n");
            }
        }
        for t in limits.get(&(ip, port)).into_iter().flat_map(|l| l.values()) {
            text.push_str(t);
        }
        for p in ps {
            text.push_str(&p.text);
        }
        text.push_str("[[vserver.policy]]\nname = \"no route\"\naction = { status = 404, body = \"no route\\n\" }\n");
    }
    text.push_str(&l4_text);
    for (_, p) in cx.pools {
        text.push('\n');
        text.push_str(&p);
    }
    Output {
        config: Some(text),
        statuses,
        files,
        members: cx.members,
        events,
    }
}

/// One entry of a route's `status.parents`: Accepted as judged, and
/// ResolvedRefs from the first reference that did not resolve, if any.
pub(crate) fn route_parent(
    parent_ref: Value,
    controller_name: &str,
    accepted: Value,
    unresolved: Option<&(&'static str, String)>,
    gen: Option<i64>,
) -> Value {
    let resolved = match unresolved {
        None => cond(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "every reference resolved",
            gen,
        ),
        Some((reason, why)) => cond("ResolvedRefs", false, reason, why, gen),
    };
    json!({
        "parentRef": parent_ref,
        "controllerName": controller_name,
        "conditions": [accepted, resolved],
    })
}

/// A route status's `parentRef`: the Gateway `pref` names in namespace
/// `pns`, with the section and port it named.
pub(crate) fn parent_ref_status(pns: &str, pref: &ObjectRef) -> serde_json::Value {
    let mut parent_ref =
        json!({"group": GROUP, "kind": "Gateway", "namespace": pns, "name": pref.name});
    if let Some(sn) = &pref.section_name {
        parent_ref["sectionName"] = json!(sn);
    }
    if let Some(p) = pref.port {
        parent_ref["port"] = json!(p);
    }
    parent_ref
}

/// Worlds for the unit tests: one GatewayClass "c" of controller "me"
/// and its Gateway default/gw with an HTTP listener on port 80, and
/// Services with one ready endpoint each.
#[cfg(test)]
pub(crate) mod test_world {
    use super::*;

    pub(crate) fn shared<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("object"))
    }

    pub(crate) fn one_gateway() -> World {
        let mut w = World {
            classes: vec![shared(
                json!({"metadata": {"name": "c"}, "spec": {"controllerName": "me"}}),
            )],
            ..Default::default()
        };
        w.gateways.push(shared(json!({"metadata": {"name": "gw", "namespace": "default"}, "spec": {"gatewayClassName": "c", "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP"}]}})));
        w
    }

    /// Service default/`name` with port `port` named `port_name` to
    /// `target` on the pod at `ip`.
    pub(crate) fn add_service(
        w: &mut World,
        name: &str,
        (port, port_name, target): (u16, &str, u16),
        ip: &str,
    ) {
        w.services.push(shared(json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"name": port_name, "port": port, "targetPort": target, "protocol": "TCP"}]}})));
        w.slices.push(shared(
            json!({"metadata": {"name": format!("{name}-1"), "namespace": "default",
            "labels": {"kubernetes.io/service-name": name}}, "addressType": "IPv4",
            "ports": [{"name": port_name, "port": target, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]}),
        ));
    }

    pub(crate) fn settings() -> Settings {
        Settings {
            controller_name: "me".into(),
            listen_address: "127.0.0.1".parse().unwrap(),
            port_offset: 0,
            status_address: "127.0.0.1".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_intersect_as_the_spec_says() {
        assert_eq!(
            intersect(None, "a.example.com").as_deref(),
            Some("a.example.com")
        );
        assert_eq!(
            intersect(Some("*.example.com"), "a.example.com").as_deref(),
            Some("a.example.com")
        );
        assert_eq!(
            intersect(Some("a.example.com"), "*.example.com").as_deref(),
            Some("a.example.com")
        );
        assert_eq!(intersect(Some("b.example.com"), "a.example.com"), None);
        assert_eq!(intersect(Some("*.example.com"), "example.com"), None);
    }

    fn parse<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn shared<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> std::sync::Arc<T> {
        std::sync::Arc::new(parse(v))
    }

    fn world(reverse: bool) -> World {
        let mut w = World {
            classes: vec![shared(
                json!({"metadata": {"name": "c"}, "spec": {"controllerName": "me"}}),
            )],
            ..Default::default()
        };
        for g in ["g1", "g2"] {
            w.gateways.push(shared(json!({"metadata": {"name": g, "namespace": "n"}, "spec": {"gatewayClassName": "c", "listeners": [
                {"name": "a", "port": 80, "protocol": "HTTP", "hostname": "a.example.com"},
                {"name": "b", "port": 80, "protocol": "HTTP", "hostname": "b.example.com"},
            ]}})));
        }
        for (i, r) in ["r1", "r2", "r3"].iter().enumerate() {
            w.routes.push(shared(json!({"metadata": {"name": r, "namespace": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"parentRefs": [{"name": "g1"}, {"name": "g2"}], "rules": [
                    {"matches": [{"path": {"type": "PathPrefix", "value": format!("/p{i}")}}, {"headers": [{"name": "x", "value": "1"}]}],
                     "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org"}}]},
                ]}})));
        }
        if reverse {
            w.gateways.reverse();
            w.routes.reverse();
        }
        w
    }

    /// URLRewrite: what the node's `rewrite` takes renders, what it would
    /// refuse makes the route not Accepted (never a render the nodes
    /// refuse); ReplacePrefixMatch replaces the match's prefix.
    #[test]
    fn url_rewrites_render_or_are_refused() {
        let m: HttpRouteMatch =
            parse(json!({"path": {"type": "PathPrefix", "value": "/prefix/one"}}));
        let r = url_rewrite(&json!({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/one"}, "hostname": "Example.ORG"})).unwrap();
        assert_eq!(
            r.line(&m),
            "rewrite = { path = \"/one\", path_prefix = \"/prefix/one\", host = \"example.org\" }\n"
        );
        let r = url_rewrite(&json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": ""}}))
            .unwrap();
        assert_eq!(
            r.line(&HttpRouteMatch::default()),
            "rewrite = { path = \"/\" }\n"
        );
        for bad in [
            json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": "/a/../b"}}),
            json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": "/a//b"}}),
            json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": "/a%2fb"}}),
            json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": "a"}}),
            json!({"path": {"type": "Other"}}),
            json!({"hostname": "a b"}),
            json!({}),
        ] {
            assert!(url_rewrite(&bad).is_err(), "{bad}");
        }
    }

    /// RequestMirror: each mirror a pool of its Service's endpoints and an
    /// entry of the policy's `mirror` (percent or fraction as a share),
    /// none beside a redirect; what the node would refuse makes the route
    /// not Accepted; the text is one the node takes.
    #[test]
    fn request_mirrors_render_or_are_refused() {
        assert_eq!(
            request_mirror(&json!({"backendRef": {"name": "s", "port": 80}, "fraction": {"numerator": 25, "denominator": 50}}))
                .unwrap()
                .1,
            Some(50.0)
        );
        assert_eq!(
            request_mirror(&json!({"backendRef": {"name": "s", "port": 80}, "percent": 100}))
                .unwrap()
                .1,
            None
        );
        for bad in [
            json!({"backendRef": {"name": "s", "port": 80}, "percent": 10, "fraction": {"numerator": 1}}),
            json!({"backendRef": {"name": "s", "port": 80}, "fraction": {"numerator": 3, "denominator": 2}}),
            json!({"backendRef": {"name": "s", "port": 80}, "percent": 101}),
            json!({"percent": 10}),
        ] {
            assert!(request_mirror(&bad).is_err(), "{bad}");
        }
        let s = test_world::settings();
        let mut w = test_world::one_gateway();
        for (i, name) in ["app", "shadow"].iter().enumerate() {
            let ip = format!("10.0.0.{}", i + 1);
            test_world::add_service(&mut w, name, (8080, "http", 3000), &ip);
        }
        let mirror = |extra: Value| {
            let mut m = json!({"backendRef": {"name": "shadow", "port": 8080}});
            if let (Some(m), Some(e)) = (m.as_object_mut(), extra.as_object()) {
                m.extend(e.clone());
            }
            json!({"type": "RequestMirror", "requestMirror": m})
        };
        w.routes.push(shared(json!({"metadata": {"name": "r", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [
                {"matches": [{"path": {"type": "Exact", "value": "/all"}}], "filters": [mirror(json!({}))],
                 "backendRefs": [{"name": "app", "port": 8080}]},
                {"matches": [{"path": {"type": "Exact", "value": "/some"}}], "filters": [mirror(json!({"percent": 20}))],
                 "backendRefs": [{"name": "app", "port": 8080}]},
                {"matches": [{"path": {"type": "Exact", "value": "/away"}}], "filters": [mirror(json!({})),
                    {"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org"}}],
                 "backendRefs": [{"name": "app", "port": 8080}]}]}})));
        let out = render(&w, &s);
        let text = out.config.unwrap();
        assert!(
            text.contains("mirror = [{ pool = \"default.r.0.mirror0\" }]"),
            "{text}"
        );
        assert!(
            text.contains("mirror = [{ pool = \"default.r.1.mirror0\", percent = 20 }]"),
            "{text}"
        );
        assert_eq!(text.matches("mirror = [").count(), 2, "{text}");
        assert_eq!(
            out.members["default.r.0.mirror0"][0].addr,
            "10.0.0.2:3000".parse().unwrap()
        );
        let route = out.statuses.iter().find(|x| x.kind == Kind::HttpRoute);
        let accepted = &route.expect("a route status").status["parents"][0]["conditions"][0];
        assert_eq!(accepted["status"], "True", "{accepted}");
        switchyard::config::parse("rendered", &text, None)
            .unwrap_or_else(|e| panic!("the node refuses it: {e}\n{text}"));
        // A mirror the node could not carry out: the route is refused.
        w.routes = vec![shared(
            json!({"metadata": {"name": "r", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [
                {"filters": [mirror(json!({"percent": 150}))], "backendRefs": [{"name": "app", "port": 8080}]}]}}),
        )];
        let out = render(&w, &s);
        let route = out.statuses.iter().find(|x| x.kind == Kind::HttpRoute);
        let accepted = &route.expect("a route status").status["parents"][0]["conditions"][0];
        assert_eq!(accepted["reason"], "UnsupportedValue", "{accepted}");
    }

    #[test]
    fn the_same_objects_in_any_order_render_the_same_text() {
        let s = Settings {
            controller_name: "me".into(),
            listen_address: "127.0.0.1".parse().unwrap(),
            port_offset: 0,
            status_address: "127.0.0.1".into(),
        };
        let a = render(&world(false), &s).config.unwrap();
        let b = render(&world(true), &s).config.unwrap();
        assert_eq!(a, b);
        // Precedence: exact hosts, then the longest path prefix first.
        let first = a.find("path = \"/p0\"").unwrap();
        assert!(a.find("header = ").unwrap() > first, "{a}");
        assert!(a.contains("redirect_host = \"example.org\""), "{a}");
        // Each route once per host although both Gateways carry it.
        assert_eq!(a.matches("path = \"/p0\"").count(), 2, "{a}");
    }

    #[test]
    fn host_lists_overlap_where_a_host_could_match_both() {
        let h =
            |v: &[&str]| -> Vec<Option<String>> { v.iter().map(|x| Some(x.to_string())).collect() };
        assert!(hosts_overlap(&h(&["a.example"]), &h(&["*.example"])));
        assert!(hosts_overlap(&[None], &h(&["b.example"])));
        assert!(!hosts_overlap(&h(&["a.example"]), &h(&["b.example"])));
        assert!(!hosts_overlap(&h(&["*.a.example"]), &h(&["b.example"])));
    }

    #[test]
    fn a_prefix_matches_whole_segments() {
        let m = HttpRouteMatch {
            path: Some(PathMatch {
                kind: Some("PathPrefix".into()),
                value: Some("/foo/".into()),
            }),
            ..Default::default()
        };
        let t = matches(&m, &None).unwrap();
        assert_eq!(
            t,
            vec![
                "match = { path = \"/foo\" }".to_string(),
                "match = { path_prefix = \"/foo/\" }".to_string()
            ]
        );
    }

    /// The render's cost at the propagation bench's sizes (one Gateway,
    /// N HTTPRoutes of one rule each to one Service):
    /// `cargo test --release -p switchyard-gateway render_cost -- --ignored --nocapture`
    /// (`RENDER_COST_SAVE=DIR` keeps each text there).
    #[test]
    #[ignore = "a measurement, not a check: prints the render's time per size"]
    fn render_cost() {
        let s = Settings {
            controller_name: "me".into(),
            listen_address: "127.0.0.1".parse().unwrap(),
            port_offset: 0,
            status_address: "127.0.0.1".into(),
        };
        let service = |name: &str| -> Arc<Service> {
            shared(json!({"metadata": {"name": name, "namespace": "default"},
                "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 3000, "protocol": "TCP"}]}}))
        };
        let slice = |name: &str, i: usize| -> Arc<EndpointSlice> {
            shared(
                json!({"metadata": {"name": format!("{name}-1"), "namespace": "default",
                "labels": {"kubernetes.io/service-name": name}}, "addressType": "IPv4",
                "ports": [{"name": "http", "port": 3000, "protocol": "TCP"}],
                "endpoints": [{"addresses": [format!("10.0.{}.{}", i / 250, i % 250 + 1)], "conditions": {"ready": true}}]}),
            )
        };
        for own_service in [false, true] {
            for n in [1_000usize, 2_000, 10_000] {
                let mut w = World {
                    classes: vec![shared(
                        json!({"metadata": {"name": "c"}, "spec": {"controllerName": "me"}}),
                    )],
                    ..Default::default()
                };
                w.gateways.push(shared(json!({"metadata": {"name": "gw", "namespace": "default"}, "spec": {"gatewayClassName": "c", "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP"}]}})));
                for i in 0..if own_service { n } else { 1 } {
                    let name = if own_service {
                        format!("s{i}")
                    } else {
                        "app".into()
                    };
                    w.services.push(service(&name));
                    w.slices.push(slice(&name, i));
                }
                for i in 0..n {
                    let backend = if own_service {
                        format!("s{i}")
                    } else {
                        "app".into()
                    };
                    w.routes.push(shared(json!({"metadata": {"name": format!("r{i}"), "namespace": "default",
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
                        "spec": {"parentRefs": [{"name": "gw", "namespace": "default"}],
                            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": format!("/r{i}")}}],
                                "backendRefs": [{"name": backend, "port": 8080}]}]}})));
                }
                let t = std::time::Instant::now();
                let out = render(&w, &s);
                let took = t.elapsed();
                let text = out.config.unwrap_or_default();
                eprintln!(
                    "{n} routes to {}: render {:.1} ms, {} bytes, {} statuses",
                    if own_service {
                        "a Service each"
                    } else {
                        "one Service"
                    },
                    took.as_secs_f64() * 1e3,
                    text.len(),
                    out.statuses.len()
                );
                if let Some(dir) = std::env::var_os("RENDER_COST_SAVE") {
                    let file = format!(
                        "routes-{n}-{}.toml",
                        if own_service { "own" } else { "one" }
                    );
                    std::fs::write(std::path::Path::new(&dir).join(file), &text).unwrap();
                }
                assert!(text.contains(&format!("\"/r{}\"", n - 1)));
                assert_eq!(out.members.len(), n);
            }
        }
    }
}
