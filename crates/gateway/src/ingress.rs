//! `networking.k8s.io/v1` Ingresses of our IngressClass, rendered into
//! the same configuration as the Gateways (render.rs calls `render` with
//! its policies, certificates and files): docs/kubernetes.md, "Ingress".
//!
//! - The classes served: IngressClasses whose `spec.controller` is the
//!   controller name; an Ingress names one (`spec.ingressClassName`, or the
//!   old `kubernetes.io/ingress.class` annotation) or names none while one
//!   of ours is marked `ingressclass.kubernetes.io/is-default-class`.
//! - Every rule is served on port 80 (+ offset), and on 443 (+ offset)
//!   once any served Ingress has a usable TLS Secret (the certificates are
//!   chosen by SNI, as nginx serves every host on 443); the vservers are
//!   the ones a Gateway listener on those ports uses.
//! - Paths: Exact is `path`; Prefix (and ImplementationSpecific) matches
//!   whole segments (`/foo` matches `/foo`, `/foo/`, `/foo/bar`, not
//!   `/foobar`); with `use-regex` a path is a regular expression matched
//!   from the start of the path, ignoring case (nginx's `location ~*`).
//! - Members are the Services' ready endpoints (EndpointSlices), never the
//!   ClusterIP.
//! - Annotations: ingress_annotations.rs; what is not applied is said in a
//!   Warning Event on the Ingress.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use serde_json::json;

use crate::ingress_annotations::{self as ann, Annotations, BackendProtocol, Canary};
use crate::render::{
    endpoint_shares, host_rank, ns_of, q, Ctx, Kind, Rendered, Settings, StatusOf,
    NO_READY_ENDPOINT,
};

pub const DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";
const LEGACY_CLASS: &str = "kubernetes.io/ingress.class";

/// A Kubernetes Event to write on an object (main.rs writes each once).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventOf {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// "Warning" or "Normal".
    pub kind: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// What render.rs hands over: the Gateways' policies by (address, port),
/// certificates by (address, port), files, statuses and events, which
/// the Ingresses add to.
pub struct Sink<'a> {
    pub policies: &'a mut BTreeMap<(IpAddr, u16), Vec<Rendered>>,
    /// `[[vserver.limit]]` tables by vserver (address, port), by name.
    pub limits: &'a mut BTreeMap<(IpAddr, u16), BTreeMap<String, String>>,
    pub certs: &'a mut BTreeMap<(IpAddr, u16), BTreeSet<String>>,
    pub files: &'a mut BTreeMap<String, Vec<u8>>,
    pub statuses: &'a mut Vec<StatusOf>,
    pub events: &'a mut Vec<EventOf>,
}

/// Whether an Ingress is ours to serve.
fn ours(cx: &Ctx, s: &Settings, ing: &Ingress) -> bool {
    let classes = &cx.w.ingress_classes;
    let is_ours = |c: &&Arc<k8s_openapi::api::networking::v1::IngressClass>| {
        c.spec.as_ref().and_then(|s| s.controller.as_deref()) == Some(s.controller_name.as_str())
    };
    let named = ing
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.clone())
        .or_else(|| {
            ing.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LEGACY_CLASS).cloned())
        });
    match named {
        Some(n) => classes
            .iter()
            .filter(is_ours)
            .any(|c| c.metadata.name.as_deref() == Some(n.as_str())),
        None => classes.iter().filter(is_ours).any(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS))
                .map(String::as_str)
                == Some("true")
        }),
    }
}

/// One (host, path) an Ingress serves, with its backend.
struct Entry<'a> {
    host: Option<String>,
    path: String,
    kind: String,
    backend: &'a IngressBackend,
    /// Order within the Ingress.
    idx: usize,
}

fn entries(ing: &Ingress) -> Vec<Entry<'_>> {
    let mut out = Vec::new();
    let Some(spec) = ing.spec.as_ref() else {
        return out;
    };
    let mut hosts_with_root = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for (ri, rule) in spec.rules.iter().flatten().enumerate() {
        let host = rule.host.clone().map(|h| h.to_ascii_lowercase());
        hosts.insert(host.clone());
        for (pi, p) in rule.http.iter().flat_map(|h| h.paths.iter()).enumerate() {
            let path = p.path.clone().unwrap_or_else(|| "/".into());
            if path == "/" && p.path_type != "Exact" {
                hosts_with_root.insert(host.clone());
            }
            out.push(Entry {
                host: host.clone(),
                path,
                kind: p.path_type.clone(),
                backend: &p.backend,
                idx: ri * 1000 + pi,
            });
        }
    }
    // The Ingress's defaultBackend takes what its hosts' paths do not,
    // and what no rule of any Ingress takes (it sorts after every host).
    if let Some(d) = spec.default_backend.as_ref() {
        hosts.insert(None);
        for (i, h) in hosts.into_iter().enumerate() {
            if !hosts_with_root.contains(&h) {
                out.push(Entry {
                    host: h,
                    path: "/".into(),
                    kind: "Prefix".into(),
                    backend: d,
                    idx: 1_000_000 + i,
                });
            }
        }
    }
    out
}

/// The ready endpoints of an Ingress backend, or why there are none.
fn endpoints(cx: &Ctx, ns: &str, b: &IngressBackend) -> Result<Vec<SocketAddr>, String> {
    let Some(svc) = b.service.as_ref() else {
        return Err("resource backends are not supported (Services only)".into());
    };
    let port = svc.port.as_ref().ok_or("a service backend needs a port")?;
    let number = match (port.number, port.name.as_deref()) {
        (Some(n), _) => n,
        (None, Some(name)) => cx
            .service(ns, &svc.name)
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.ports.as_ref())
            .and_then(|ps| ps.iter().find(|p| p.name.as_deref() == Some(name)))
            .map(|p| p.port)
            .ok_or(format!(
                "Service {ns}/{} has no port named {name}",
                svc.name
            ))?,
        (None, None) => return Err("a service backend needs a port".into()),
    };
    cx.endpoints(ns, &svc.name, number).map_err(|(_, why)| why)
}

fn backend_label(b: &IngressBackend) -> String {
    match b.service.as_ref() {
        Some(s) => {
            let port = s
                .port
                .as_ref()
                .map(|p| {
                    p.number
                        .map(|n| n.to_string())
                        .or(p.name.clone())
                        .unwrap_or_default()
                })
                .unwrap_or_default();
            format!("{}.{port}", s.name)
        }
        None => "resource".into(),
    }
}

/// What a policy of Ingress `owner` that sends to its members adds for
/// them, and the limit tables those lines name:
/// - rewrite-target: nginx's `rewrite "(?i)PATH" TARGET break`;
/// - limit-rps / limit-rpm: the requests it sends count (nginx's
///   limit_req runs after its redirects, so redirects do not);
/// - proxy-connect/read-timeout: how long the members may take;
/// - proxy-body-size: the bodies they get.
fn to_members(a: &Annotations, path: &str, owner: &str) -> (String, Vec<(String, String)>) {
    let mut text = String::new();
    if let Some(t) = &a.rewrite_target {
        let _ = writeln!(
            text,
            "rewrite = {{ path_regex = {}, path = {} }}",
            q(&format!("(?i)^{path}")),
            q(t)
        );
    }
    let tables = a
        .rate_limit
        .as_ref()
        .map(|r| r.tables(owner))
        .unwrap_or_default();
    if !tables.is_empty() {
        let names: Vec<String> = tables.iter().map(|(n, _)| q(n)).collect();
        let _ = writeln!(text, "limits = [{}]", names.join(", "));
    }
    let timeouts: Vec<String> = [
        ("upstream_connect", a.connect_timeout_s),
        ("upstream_response", a.read_timeout_s),
    ]
    .iter()
    .filter_map(|(k, v)| v.map(|s| format!("{k} = \"{s}s\"")))
    .collect();
    if !timeouts.is_empty() {
        let _ = writeln!(text, "timeouts = {{ {} }}", timeouts.join(", "));
    }
    if let Some(n) = a.max_body {
        let _ = writeln!(text, "max_body = {n}");
    }
    (text, tables)
}

/// Files to publish: name, contents.
type Files = Vec<(String, Vec<u8>)>;

/// The `[pool.tls]` of an Ingress's HTTPS backends from its `proxy-ssl-*`
/// annotations, and the files it names
/// (the Secret's CA bundle, client certificate and key), each checked
/// with the node's own checks; Err: why the Ingress cannot be served as
/// asked.
fn member_tls_table(
    w: &crate::render::World,
    t: &ann::MemberTls,
) -> Result<(String, Files), String> {
    let mut table = String::from("[pool.tls]\n");
    let mut files = Vec::new();
    let secret = match &t.secret {
        None => None,
        Some((sns, sname)) => {
            let data = w
                .secrets
                .iter()
                .find(|x| ns_of(&x.metadata) == *sns && x.metadata.name.as_deref() == Some(sname))
                .ok_or_else(|| format!("Secret {sns}/{sname} does not exist"))?
                .data
                .clone()
                .unwrap_or_default();
            Some((sns, sname, data))
        }
    };
    if t.verify {
        let Some((sns, sname, data)) = &secret else {
            return Err("proxy-ssl-verify needs proxy-ssl-secret (its ca.crt is what the members' certificates are checked against)".into());
        };
        let ca = data.get("ca.crt").ok_or_else(|| {
            format!("Secret {sns}/{sname} has no ca.crt to verify the members with")
        })?;
        switchyard::config::check_ca_bundle(&ca.0)
            .map_err(|e| format!("Secret {sns}/{sname} ca.crt: {e}"))?;
        let file = format!("proxy-ssl-{sns}-{sname}-ca.crt");
        let _ = writeln!(table, "ca = {}", q(&format!("files/{file}")));
        files.push((file, ca.0.clone()));
    } else {
        table.push_str("verify = false\n");
    }
    match (&t.name, t.server_name) {
        (Some(n), true) => {
            let _ = writeln!(table, "sni = {}", q(n));
        }
        // Checked, not sent (proxy_ssl_server_name off).
        (Some(n), false) if t.verify => {
            let _ = writeln!(table, "san_dns = [{}]", q(n));
        }
        _ => {}
    }
    if let Some((sns, sname, data)) = &secret {
        if let (Some(c), Some(k)) = (data.get("tls.crt"), data.get("tls.key")) {
            switchyard::config::check_cert_and_key(&c.0, &k.0)
                .map_err(|e| format!("Secret {sns}/{sname} tls.crt and tls.key: {e}"))?;
            let base = format!("proxy-ssl-{sns}-{sname}");
            let _ = writeln!(
                table,
                "cert = {}\nkey = {}",
                q(&format!("files/{base}.crt")),
                q(&format!("files/{base}.key"))
            );
            files.push((format!("{base}.crt"), c.0.clone()));
            files.push((format!("{base}.key"), k.0.clone()));
        }
    }
    if !t.versions.is_empty() {
        let v: Vec<String> = t.versions.iter().map(|v| q(v)).collect();
        let _ = writeln!(table, "versions = [{}]", v.join(", "));
    }
    Ok((table, files))
}

/// The pool of `backends` (endpoints, weight) with the Ingress's pool
/// settings, and the action that sends to it: a 503 while no endpoint is
/// ready.
fn pool_action(
    cx: &mut Ctx,
    name: &str,
    backends: &[(Vec<SocketAddr>, u32)],
    a: &Annotations,
) -> String {
    let Some((shares, top)) = endpoint_shares(backends) else {
        return NO_READY_ENDPOINT.into();
    };
    let weighted = backends
        .iter()
        .filter(|(e, w)| !e.is_empty() && *w > 0)
        .count()
        > 1;
    let algorithm = match (&a.hash_key, a.algorithm) {
        (Some(_), _) => "consistent-hash",
        _ if weighted => "weighted-round-robin",
        (None, Some(alg)) => alg,
        (None, None) => "round-robin",
    };
    let mut text = format!(
        "[[pool]]\nname = {}\nalgorithm = \"{algorithm}\"\n",
        q(name)
    );
    if let Some(k) = &a.hash_key {
        let _ = writeln!(text, "hash_key = {}", q(k));
    }
    if let Some(c) = &a.affinity_cookie {
        let _ = writeln!(
            text,
            "persistence = {{ type = \"cookie\", cookie = {} }}",
            q(c)
        );
    }
    if matches!(
        a.backend_protocol,
        BackendProtocol::Grpc | BackendProtocol::Grpcs
    ) {
        text.push_str("protocol = \"h2\"\n");
    }
    if matches!(
        a.backend_protocol,
        BackendProtocol::Https | BackendProtocol::Grpcs
    ) {
        // ingress-nginx does not verify its members' certificates unless
        // told (proxy-ssl-verify); neither does this.
        match &a.member_tls_table {
            Some(t) => text.push_str(t),
            None => text.push_str("[pool.tls]\nverify = false\n"),
        }
    }
    for ((eps, _), share) in backends.iter().zip(&shares) {
        if *share == 0.0 {
            continue;
        }
        let weight = ((share / top) * 1000.0).round().max(1.0) as u32;
        for ep in eps {
            let _ = write!(text, "[[pool.member]]\naddress = {}\n", q(&ep.to_string()));
            if weighted {
                let _ = writeln!(text, "weight = {weight}");
            }
        }
    }
    cx.pools.insert(name.to_string(), text);
    format!("action = {{ pool = {} }}", q(name))
}

/// The `path` part(s) of a match: one, or two for a prefix (the path
/// itself, and below it), and the (kind, length) it sorts by.
fn path_parts(path: &str, kind: &str, regex: bool) -> (Vec<String>, u8, usize) {
    if kind == "Exact" {
        return (vec![format!("path = {}", q(path))], 0, path.len());
    }
    if regex {
        return (
            vec![format!("path_regex = {}", q(&format!("(?i)^{path}")))],
            1,
            path.len(),
        );
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        (vec!["path_prefix = \"/\"".into()], 1, 1)
    } else {
        (
            vec![
                format!("path = {}", q(trimmed)),
                format!("path_prefix = {}", q(&format!("{trimmed}/"))),
            ],
            1,
            trimmed.len() + 1,
        )
    }
}

fn list(items: &[String]) -> String {
    let v: Vec<String> = items.iter().map(|i| q(i)).collect();
    format!("[{}]", v.join(", "))
}

/// `(?:^|;)\s*NAME=VALUE\s*(?:;|$)` for a Cookie field.
fn cookie_regex(name: &str, value: &str) -> String {
    let esc = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c.to_string()
                } else {
                    format!("\\{c}")
                }
            })
            .collect::<String>()
    };
    format!("(?:^|;)\\s*{}={}\\s*(?:;|$)", esc(name), esc(value))
}

/// One step of an entry's policies: extra match parts, the action (None:
/// edits only) and response edits.
struct Step {
    extra: Vec<String>,
    action: Option<String>,
    response: String,
}

/// The policies of a served entry after the redirects: the canary's
/// header and cookie choices, then the main backend (or the weighted
/// pair).
fn backend_steps(
    cx: &mut Ctx,
    ing: &Ingress,
    e: &Entry,
    a: &Annotations,
    canary: Option<(&Ingress, &Canary, &IngressBackend)>,
    events: &mut Vec<EventOf>,
) -> Vec<Step> {
    let ns = ns_of(&ing.metadata);
    let ns = ns.as_str();
    let ing_name = ing.metadata.name.clone().unwrap_or_default();
    let mut steps = Vec::new();
    let main_eps = match endpoints(cx, ns, e.backend) {
        Ok(eps) => eps,
        Err(why) => {
            events.push(event(ing, "BackendNotFound", why));
            Vec::new()
        }
    };
    let main_name = format!("ingress.{ns}.{ing_name}.{}", backend_label(e.backend));
    let main = pool_action(cx, &main_name, &[(main_eps.clone(), 1)], a);
    let plain = |action: &str, extra: Vec<String>| Step {
        extra,
        action: Some(action.to_string()),
        response: String::new(),
    };
    let Some((cing, c, cb)) = canary else {
        steps.push(plain(&main, vec![]));
        return steps;
    };
    let cns = ns_of(&cing.metadata);
    let cname = cing.metadata.name.clone().unwrap_or_default();
    let canary_eps = match endpoints(cx, &cns, cb) {
        Ok(eps) => eps,
        Err(why) => {
            events.push(event(cing, "BackendNotFound", why));
            Vec::new()
        }
    };
    let canary_name = format!("ingress.{cns}.{cname}.{}", backend_label(cb));
    let to_canary = pool_action(cx, &canary_name, &[(canary_eps.clone(), 1)], a);
    let header = |name: &str, value: &str, regex: bool| {
        format!(
            "header = [{{ name = {}, {} = {} }}]",
            q(name),
            if regex { "value_regex" } else { "value" },
            q(value)
        )
    };
    // ingress-nginx's order: the header decides, then the cookie, then
    // the weight.
    if let Some(h) = &c.by_header {
        if let Some(v) = &c.by_header_value {
            steps.push(plain(&to_canary, vec![header(h, v, false)]));
        } else if let Some(p) = &c.by_header_pattern {
            steps.push(plain(&to_canary, vec![header(h, p, true)]));
        } else {
            steps.push(plain(&main, vec![header(h, "never", false)]));
            steps.push(plain(&to_canary, vec![header(h, "always", false)]));
        }
    }
    if let Some(k) = &c.by_cookie {
        steps.push(plain(
            &main,
            vec![header("cookie", &cookie_regex(k, "never"), true)],
        ));
        steps.push(plain(
            &to_canary,
            vec![header("cookie", &cookie_regex(k, "always"), true)],
        ));
    }
    if c.weight == 0 {
        steps.push(plain(&main, vec![]));
    } else if c.weight >= c.weight_total {
        steps.push(plain(&to_canary, vec![]));
    } else {
        let both = pool_action(
            cx,
            &format!("{main_name}+canary.{cns}.{cname}"),
            &[
                (main_eps, c.weight_total - c.weight),
                (canary_eps, c.weight),
            ],
            a,
        );
        steps.push(plain(&both, vec![]));
    }
    steps
}

fn event(ing: &Ingress, reason: &'static str, message: String) -> EventOf {
    EventOf {
        namespace: ns_of(&ing.metadata),
        name: ing.metadata.name.clone().unwrap_or_default(),
        uid: ing.metadata.uid.clone().unwrap_or_default(),
        kind: "Warning",
        reason,
        message,
    }
}

/// CORS fields on the members' responses: the fixed ones, and per origin
/// when several are allowed (an edits-only step each, matched on the
/// request's Origin).
fn cors_steps(a: &Annotations) -> (Vec<Step>, String) {
    let Some(c) = &a.cors else {
        return (Vec::new(), String::new());
    };
    let mut fixed = vec![
        ("access-control-allow-methods", c.methods.clone()),
        ("access-control-allow-headers", c.headers.clone()),
        ("access-control-max-age", c.max_age.to_string()),
    ];
    if c.credentials {
        fixed.push(("access-control-allow-credentials", "true".into()));
    }
    if let Some(e) = &c.expose_headers {
        fixed.push(("access-control-expose-headers", e.clone()));
    }
    let table = |pairs: &[(&str, String)]| {
        let inner: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{} = {}", q(k), q(v)))
            .collect();
        format!(
            "response_headers = {{ set = {{ {} }} }}\n",
            inner.join(", ")
        )
    };
    let mut steps = Vec::new();
    if c.origins.len() == 1 {
        fixed.push(("access-control-allow-origin", c.origins[0].clone()));
    } else {
        for o in &c.origins {
            steps.push(Step {
                extra: vec![format!(
                    "header = [{{ name = \"origin\", value = {} }}]",
                    q(o)
                )],
                action: None,
                response: table(&[
                    ("access-control-allow-origin", o.clone()),
                    ("vary", "Origin".into()),
                ]),
            });
        }
    }
    (steps, table(&fixed))
}

pub fn render(cx: &mut Ctx, s: &Settings, out: Sink) {
    let w = cx.w;
    let mut served: Vec<&Ingress> = w
        .ingresses
        .iter()
        .map(Arc::as_ref)
        .filter(|i| ours(cx, s, i))
        .collect();
    served.sort_by_key(|i| {
        (
            i.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ns_of(&i.metadata),
            i.metadata.name.clone(),
        )
    });
    // Annotations first: refused Ingresses serve nothing, canaries join
    // the Ingress they shadow.
    let mut parsed = Vec::new();
    for ing in served {
        let p = ann::parse(&ing.metadata.annotations.clone().unwrap_or_default());
        for pr in &p.ignored {
            out.events.push(event(
                ing,
                "UnsupportedAnnotation",
                format!(
                    "{}: {} (the rest of the Ingress is served)",
                    pr.key, pr.message
                ),
            ));
        }
        for pr in &p.refused {
            out.events.push(event(
                ing,
                "IngressRefused",
                format!("{}: {}; the Ingress is not served", pr.key, pr.message),
            ));
        }
        // A regular expression the node would refuse would keep the whole
        // configuration from being published: the Ingress is refused alone.
        let bad_regex = p.annotations.use_regex.then(|| {
            entries(ing).into_iter().find_map(|e| {
                if e.kind == "Exact" {
                    return None;
                }
                ann::node_regex(&format!("(?i)^{}", e.path))
                    .err()
                    .map(|why| format!("path {:?}: {why}", e.path))
            })
        });
        // proxy-ssl-*: the Secret read and checked now; one that cannot be
        // used refuses the Ingress (it would be served unverified).
        let mut p = p;
        match p
            .annotations
            .member_tls
            .as_ref()
            .map(|t| member_tls_table(w, t))
        {
            Some(Ok((table, files))) => {
                p.annotations.member_tls_table = Some(table);
                out.files.extend(files);
            }
            Some(Err(why)) => {
                out.events.push(event(
                    ing,
                    "IngressRefused",
                    format!(
                        "{}proxy-ssl-*: {why}; the Ingress is not served",
                        ann::PREFIX
                    ),
                ));
                p.refused.push(ann::Problem {
                    key: format!("{}proxy-ssl-secret", ann::PREFIX),
                    message: why,
                });
            }
            None => {}
        }
        if let Some(Some(why)) = bad_regex {
            out.events.push(event(
                ing,
                "IngressRefused",
                format!("{}use-regex: {why}; the Ingress is not served", ann::PREFIX),
            ));
            unaddress(ing, out.statuses);
        } else if p.refused.is_empty() {
            parsed.push((ing, p.annotations));
        } else {
            unaddress(ing, out.statuses);
        }
    }
    let (canaries, mains): (Vec<_>, Vec<_>) =
        parsed.into_iter().partition(|(_, a)| a.canary.is_some());
    // TLS: the Secrets of the main Ingresses; their hosts redirect to HTTPS.
    let https = (s.listen_address, 443u16);
    let mut tls_hosts: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (ing, _) in &mains {
        let ns = ns_of(&ing.metadata);
        let name = ing.metadata.name.clone().unwrap_or_default();
        for t in ing.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
            let Some(secret) = t.secret_name.as_deref() else {
                continue;
            };
            let data = w
                .secrets
                .iter()
                .find(|x| ns_of(&x.metadata) == ns && x.metadata.name.as_deref() == Some(secret))
                .and_then(|x| x.data.as_ref());
            let (Some(crt), Some(key)) = (
                data.and_then(|d| d.get("tls.crt")),
                data.and_then(|d| d.get("tls.key")),
            ) else {
                out.events.push(event(
                    ing,
                    "InvalidTLSSecret",
                    format!("Secret {ns}/{secret} does not exist or lacks tls.crt and tls.key: its hosts are served over HTTP only"),
                ));
                continue;
            };
            if !crt.0.starts_with(b"-----BEGIN") || !key.0.starts_with(b"-----BEGIN") {
                out.events.push(event(
                    ing,
                    "InvalidTLSSecret",
                    format!("Secret {ns}/{secret}: tls.crt and tls.key must be PEM; its hosts are served over HTTP only"),
                ));
                continue;
            }
            let file = format!("secret-{ns}-{secret}");
            out.files.insert(format!("{file}.crt"), crt.0.clone());
            out.files.insert(format!("{file}.key"), key.0.clone());
            out.certs.entry(https).or_default().insert(file);
            tls_hosts
                .entry((ns.clone(), name.clone()))
                .or_default()
                .extend(t.hosts.iter().flatten().map(|h| h.to_ascii_lowercase()));
        }
    }
    let with_https = out.certs.contains_key(&https);
    let http = (s.listen_address, 80u16);
    for (ing, a) in &mains {
        let ns = ns_of(&ing.metadata);
        let name = ing.metadata.name.clone().unwrap_or_default();
        let created = ing
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let hosts_tls = tls_hosts.get(&(ns.clone(), name.clone()));
        for e in entries(ing) {
            // The canary shadowing this host and path, if any (the oldest).
            let canary = canaries.iter().find_map(|(c, ca)| {
                if ns_of(&c.metadata) != ns {
                    return None;
                }
                let b = entries(c)
                    .into_iter()
                    .find(|ce| ce.host == e.host && ce.path == e.path && ce.idx < 1_000_000)?;
                Some((*c, ca.canary.as_ref()?, b.backend))
            });
            let (parts, pk, plen) = path_parts(&e.path, &e.kind, a.use_regex);
            let mut steps = Vec::new();
            if !a.deny_sources.is_empty() {
                steps.push(Step {
                    extra: vec![format!("source = {}", list(&a.deny_sources))],
                    action: Some("action = { status = 403, body = \"forbidden\\n\" }".into()),
                    response: String::new(),
                });
            }
            let (cors, cors_fixed) = cors_steps(a);
            steps.extend(cors);
            let mut decide = match &a.redirect {
                Some((url, code)) => vec![Step {
                    extra: vec![],
                    action: Some(format!(
                        "action = {{ redirect = {}, status = {code} }}",
                        q(url)
                    )),
                    response: String::new(),
                }],
                None => backend_steps(cx, ing, &e, a, canary, out.events),
            };
            for st in &mut decide {
                if st.response.is_empty() {
                    st.response = cors_fixed.clone();
                }
            }
            if !a.allow_sources.is_empty() {
                for st in &mut decide {
                    st.extra
                        .push(format!("source = {}", list(&a.allow_sources)));
                }
                decide.push(Step {
                    extra: vec![],
                    action: Some("action = { status = 403, body = \"forbidden\\n\" }".into()),
                    response: String::new(),
                });
            }
            steps.extend(decide);
            let redirect_http = a.force_ssl_redirect
                || (with_https
                    && a.ssl_redirect != Some(false)
                    && e.host
                        .as_ref()
                        .is_some_and(|h| hosts_tls.is_some_and(|t| t.contains(h))));
            // To port 443 as clients see it: the offset is where the nodes
            // listen behind the LoadBalancer (k8s/deploy maps 443 to
            // 8443), not a port clients use (Gateway redirects keep the
            // listener's port the same way).
            let to_https = Step {
                extra: vec![],
                action: Some("action = { redirect_https = true, status = 308 }".into()),
                response: String::new(),
            };
            let mut at: Vec<((IpAddr, u16), &[Step])> = Vec::new();
            if redirect_http {
                at.push((http, std::slice::from_ref(&to_https)));
            } else {
                at.push((http, &steps));
            }
            if with_https {
                at.push((https, &steps));
            }
            for (port, steps) in at {
                for (ti, part) in parts.iter().enumerate() {
                    for (mi, st) in steps.iter().enumerate() {
                        let mut m = Vec::new();
                        if let Some(h) = &e.host {
                            m.push(format!("host = {}", q(h)));
                        }
                        m.push(part.clone());
                        m.extend(st.extra.iter().cloned());
                        let mut text = format!(
                            "[[vserver.policy]]\nname = {}\nmatch = {{ {} }}\n",
                            q(&format!(
                                "ingress {ns}/{name} {} {}",
                                e.host.as_deref().unwrap_or("*"),
                                e.path
                            )),
                            m.join(", ")
                        );
                        if let Some(act) = &st.action {
                            text.push_str(act);
                            text.push('\n');
                            if act.starts_with("action = { pool") {
                                let owner = format!("ingress {ns}/{name}");
                                let (lines, tables) = to_members(a, &e.path, &owner);
                                text.push_str(&lines);
                                if !tables.is_empty() {
                                    out.limits.entry(port).or_default().extend(tables);
                                }
                            }
                        }
                        text.push_str(&st.response);
                        out.policies.entry(port).or_default().push(Rendered {
                            key: (
                                host_rank(&e.host),
                                pk,
                                std::cmp::Reverse(plen),
                                1,
                                std::cmp::Reverse(0),
                                std::cmp::Reverse(0),
                                created.clone(),
                                format!("ingress {ns}/{name}"),
                                e.idx,
                                ti * 1000 + mi,
                            ),
                            text,
                        });
                    }
                }
            }
            // app-root: a request for "/" of this host goes there.
            if let Some(root) = &a.app_root {
                let mut m = Vec::new();
                if let Some(h) = &e.host {
                    m.push(format!("host = {}", q(h)));
                }
                m.push("path = \"/\"".into());
                for port in [Some(http), with_https.then_some(https)]
                    .into_iter()
                    .flatten()
                {
                    out.policies.entry(port).or_default().push(Rendered {
                        key: (
                            host_rank(&e.host),
                            0,
                            std::cmp::Reverse(1),
                            1,
                            std::cmp::Reverse(0),
                            std::cmp::Reverse(0),
                            created.clone(),
                            format!("ingress {ns}/{name}"),
                            0,
                            0,
                        ),
                        text: format!(
                            "[[vserver.policy]]\nname = {}\nmatch = {{ {} }}\naction = {{ redirect_path = {}, status = 302 }}\n",
                            q(&format!("ingress {ns}/{name} app-root")),
                            m.join(", "),
                            q(root)
                        ),
                    });
                }
            }
        }
        let address = if s.status_address.parse::<IpAddr>().is_ok() {
            json!({"ip": s.status_address})
        } else {
            json!({"hostname": s.status_address})
        };
        out.statuses.push(StatusOf {
            kind: Kind::Ingress,
            namespace: Some(ns.clone()),
            name: name.clone(),
            status: json!({"loadBalancer": {"ingress": [address]}}),
        });
    }
    // Canaries are served through their main Ingress; one without is said.
    for (c, _) in &canaries {
        let cns = ns_of(&c.metadata);
        let shadows = entries(c).iter().any(|ce| {
            mains.iter().any(|(m, _)| {
                ns_of(&m.metadata) == cns
                    && entries(m)
                        .iter()
                        .any(|me| me.host == ce.host && me.path == ce.path)
            })
        });
        if shadows {
            out.statuses.push(StatusOf {
                kind: Kind::Ingress,
                namespace: Some(cns),
                name: c.metadata.name.clone().unwrap_or_default(),
                status: json!({"loadBalancer": {"ingress": [
                    if s.status_address.parse::<IpAddr>().is_ok() { json!({"ip": s.status_address}) } else { json!({"hostname": s.status_address}) }
                ]}}),
            });
        } else {
            out.events.push(event(
                c,
                "NoMainIngress",
                "a canary Ingress needs an Ingress (not a canary) of its namespace with the same host and path; none has, so it is not served".into(),
            ));
            unaddress(c, out.statuses);
        }
    }
}

/// An Ingress not served loses the address it was given before (a
/// merge patch's null removes the field), so that no one reads it as
/// served.
fn unaddress(ing: &Ingress, statuses: &mut Vec<StatusOf>) {
    let addressed = ing
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .is_some_and(|i| !i.is_empty());
    if addressed {
        statuses.push(StatusOf {
            kind: Kind::Ingress,
            namespace: Some(ns_of(&ing.metadata)),
            name: ing.metadata.name.clone().unwrap_or_default(),
            status: json!({"loadBalancer": {"ingress": null}}),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{render, World};
    use serde_json::{json, Value};

    fn parse<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn shared<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> std::sync::Arc<T> {
        std::sync::Arc::new(parse(v))
    }

    fn settings() -> Settings {
        Settings {
            controller_name: "me".into(),
            listen_address: "127.0.0.1".parse().unwrap(),
            port_offset: 10000,
            status_address: "192.0.2.7".into(),
        }
    }

    /// A class of ours ("sy", the default), one of another controller's,
    /// Services a, b, c with endpoints, and a TLS Secret.
    fn world(ingresses: Vec<Value>) -> World {
        let mut w = World {
            ingress_classes: vec![
                shared(
                    json!({"metadata": {"name": "sy", "annotations": {DEFAULT_CLASS: "true"}}, "spec": {"controller": "me"}}),
                ),
                shared(
                    json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}),
                ),
            ],
            ..Default::default()
        };
        for (svc, ip) in [("a", "10.0.0.1"), ("b", "10.0.0.2"), ("c", "10.0.0.3")] {
            w.services
                .push(shared(json!({"metadata": {"name": svc, "namespace": "n"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})));
            w.slices.push(shared(json!({"metadata": {"name": format!("{svc}-1"), "namespace": "n", "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
                "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]})));
        }
        w.secrets.push(shared(json!({"metadata": {"name": "tls", "namespace": "n"},
            "data": {"tls.crt": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==", "tls.key": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCg=="}})));
        for (i, v) in ingresses.into_iter().enumerate() {
            let mut v = v;
            v["metadata"]["namespace"] = json!("n");
            v["metadata"]["uid"] = json!(format!("uid-{i}"));
            v["metadata"]["creationTimestamp"] = json!(format!("2026-01-01T00:00:0{i}Z"));
            w.ingresses.push(shared(v));
        }
        w
    }

    fn ingress(name: &str, annotations: Value, host: &str, paths: Value) -> Value {
        json!({"metadata": {"name": name, "annotations": annotations},
            "spec": {"rules": [{"host": host, "http": {"paths": paths}}]}})
    }

    fn path(p: &str, kind: &str, svc: &str) -> Value {
        json!({"path": p, "pathType": kind, "backend": {"service": {"name": svc, "port": {"number": 80}}}})
    }

    /// The rendered text must be a configuration the node takes.
    fn checked(w: &World) -> (String, crate::render::Output) {
        let out = render(w, &settings());
        let text = out.config.clone().expect("a configuration");
        if !text.contains("[vserver.tls]") {
            if let Err(e) = switchyard::config::parse("rendered", &text, None) {
                panic!("{e}\n{text}");
            }
        }
        (text, out)
    }

    /// The policies of one vserver, in order.
    fn vserver(text: &str, port: u16) -> &str {
        let start = text
            .find(&format!("listen = [\"127.0.0.1:{port}\"]"))
            .unwrap_or_else(|| panic!("no vserver on {port}:\n{text}"));
        let rest = &text[start..];
        &rest[..rest
            .find("\n[[vserver]]")
            .or(rest.find("\n[[pool]]"))
            .unwrap_or(rest.len())]
    }

    #[test]
    fn hosts_and_paths_with_their_precedence() {
        let w = world(vec![ingress(
            "i",
            json!({}),
            "shop.example.com",
            json!([
                path("/", "Prefix", "a"),
                path("/api", "Prefix", "b"),
                path("/api/v1/login", "Exact", "c")
            ]),
        )]);
        let (text, out) = checked(&w);
        let vs = vserver(&text, 10080);
        let exact = vs.find("path = \"/api/v1/login\"").unwrap();
        let api = vs.find("path_prefix = \"/api/\"").unwrap();
        let root = vs.find("path_prefix = \"/\"").unwrap();
        assert!(exact < api && api < root, "{vs}");
        // Segment-wise prefix: "/api" itself too, not "/apis".
        assert!(
            vs.contains("match = { host = \"shop.example.com\", path = \"/api\" }"),
            "{vs}"
        );
        // Members are endpoints, not the ClusterIP.
        assert!(text.contains("address = \"10.0.0.2:8080\""), "{text}");
        assert!(
            !text.contains("[vserver.tls]"),
            "no Secret, no HTTPS: {text}"
        );
        let st = out
            .statuses
            .iter()
            .find(|s| s.kind == Kind::Ingress)
            .unwrap();
        assert_eq!(st.status["loadBalancer"]["ingress"][0]["ip"], "192.0.2.7");
        assert!(out.events.is_empty(), "{:?}", out.events);
    }

    #[test]
    fn only_our_classes_are_served() {
        let mut other = ingress(
            "other",
            json!({}),
            "x.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        other["spec"]["ingressClassName"] = json!("nginx");
        let mut legacy = ingress(
            "legacy",
            json!({"kubernetes.io/ingress.class": "sy"}),
            "l.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        legacy["spec"]["ingressClassName"] = Value::Null;
        let none = ingress(
            "none",
            json!({}),
            "d.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let text = render(&world(vec![other, legacy, none]), &settings())
            .config
            .unwrap();
        assert!(!text.contains("x.example.com"), "{text}");
        assert!(text.contains("l.example.com"), "{text}");
        // The default class takes an Ingress naming none...
        assert!(text.contains("d.example.com"), "{text}");
        // ...unless no class of ours is the default.
        let mut w = world(vec![ingress(
            "none",
            json!({}),
            "d.example.com",
            json!([path("/", "Prefix", "a")]),
        )]);
        std::sync::Arc::make_mut(&mut w.ingress_classes[0])
            .metadata
            .annotations = None;
        assert!(render(&w, &settings()).config.is_none());
    }

    #[test]
    fn tls_hosts_get_https_and_a_redirect() {
        let mut i = ingress(
            "i",
            json!({}),
            "shop.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        i["spec"]["tls"] = json!([{"hosts": ["shop.example.com"], "secretName": "tls"}]);
        let w = world(vec![i.clone()]);
        let out = render(&w, &settings());
        let text = out.config.unwrap();
        let https = vserver(&text, 10443);
        assert!(
            https.contains("certificates = [{ cert = \"files/secret-n-tls.crt\""),
            "{https}"
        );
        assert!(https.contains("action = { pool = "), "{https}");
        let http = vserver(&text, 10080);
        assert!(
            http.contains("action = { redirect_https = true, status = 308 }"),
            "{http}"
        );
        assert!(!http.contains("action = { pool"), "{http}");
        assert!(out.files.contains_key("secret-n-tls.crt"));
        // ssl-redirect: "false" serves both.
        i["metadata"]["annotations"] = json!({"nginx.ingress.kubernetes.io/ssl-redirect": "false"});
        let text = render(&world(vec![i.clone()]), &settings()).config.unwrap();
        assert!(vserver(&text, 10080).contains("action = { pool"), "{text}");
        // A missing Secret: HTTP only, and said.
        i["spec"]["tls"][0]["secretName"] = json!("nope");
        let out = render(&world(vec![i]), &settings());
        assert!(!out.config.unwrap().contains("10443"));
        assert_eq!(out.events[0].reason, "InvalidTLSSecret");
    }

    #[test]
    fn force_ssl_redirect_without_tls() {
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/force-ssl-redirect": "true"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, _) = checked(&world(vec![i]));
        assert!(text.contains("redirect_https = true"), "{text}");
    }

    #[test]
    fn source_ranges() {
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/whitelist-source-range": "10.1.0.0/16,192.0.2.1",
                   "nginx.ingress.kubernetes.io/denylist-source-range": "10.1.2.0/24"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, _) = checked(&world(vec![i]));
        let vs = vserver(&text, 10080);
        let deny = vs.find("source = [\"10.1.2.0/24\"]").unwrap();
        let allow = vs
            .find("source = [\"10.1.0.0/16\", \"192.0.2.1\"] }\naction = { pool")
            .unwrap();
        let refuse = vs.rfind("action = { status = 403").unwrap();
        assert!(deny < allow && allow < refuse, "{vs}");
        // A range that does not parse: the Ingress is not served.
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/whitelist-source-range": "10.1.0.0/99"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let out = render(&world(vec![i]), &settings());
        assert!(out.config.is_none());
        assert_eq!(out.events[0].reason, "IngressRefused");
        assert!(out.events[0].message.contains("whitelist-source-range"));
    }

    #[test]
    fn canary_by_header_cookie_and_weight() {
        let main = ingress(
            "main",
            json!({}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let canary = ingress(
            "canary",
            json!({"nginx.ingress.kubernetes.io/canary": "true",
                   "nginx.ingress.kubernetes.io/canary-by-header": "X-Canary",
                   "nginx.ingress.kubernetes.io/canary-by-cookie": "beta",
                   "nginx.ingress.kubernetes.io/canary-weight": "20"}),
            "a.example.com",
            json!([path("/", "Prefix", "b")]),
        );
        let (text, out) = checked(&world(vec![main, canary]));
        let vs = vserver(&text, 10080);
        let order = [
            "value = \"never\" }] }\naction = { pool = \"ingress.n.main.a.80\" }",
            "value = \"always\" }] }\naction = { pool = \"ingress.n.canary.b.80\" }",
            "beta=never",
            "beta=always",
            "action = { pool = \"ingress.n.main.a.80+canary.n.canary\" }",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|o| vs.find(o).unwrap_or_else(|| panic!("{o}: {vs}")))
            .collect();
        assert!(at.windows(2).all(|p| p[0] < p[1]), "{vs}");
        // 80/20 over one endpoint each.
        assert!(text.contains("address = \"10.0.0.1:8080\"\nweight = 1000\n[[pool.member]]\naddress = \"10.0.0.2:8080\"\nweight = 250"), "{text}");
        // Both Ingresses get the address.
        assert_eq!(
            out.statuses
                .iter()
                .filter(|s| s.kind == Kind::Ingress)
                .count(),
            2
        );
        // A canary alone is not served, and says so.
        let lone = ingress(
            "c",
            json!({"nginx.ingress.kubernetes.io/canary": "true"}),
            "z.example.com",
            json!([path("/", "Prefix", "b")]),
        );
        let out = render(&world(vec![lone]), &settings());
        assert!(out.config.is_none());
        assert_eq!(out.events[0].reason, "NoMainIngress");
    }

    #[test]
    fn pool_settings_from_annotations() {
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/backend-protocol": "GRPCS",
                   "nginx.ingress.kubernetes.io/affinity": "cookie",
                   "nginx.ingress.kubernetes.io/session-cookie-name": "route"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, _) = checked(&world(vec![i]));
        assert!(
            text.contains("persistence = { type = \"cookie\", cookie = \"route\" }"),
            "{text}"
        );
        assert!(
            text.contains("protocol = \"h2\"\n[pool.tls]\nverify = false"),
            "{text}"
        );
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/upstream-hash-by": "$remote_addr"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, _) = checked(&world(vec![i]));
        assert!(
            text.contains("algorithm = \"consistent-hash\"\nhash_key = \"source-ip\""),
            "{text}"
        );
    }

    #[test]
    fn cors_fields_on_responses() {
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/enable-cors": "true",
                   "nginx.ingress.kubernetes.io/cors-allow-origin": "https://a.example, https://b.example"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, out) = checked(&world(vec![i]));
        assert!(text.contains("header = [{ name = \"origin\", value = \"https://b.example\" }] }\nresponse_headers = { set = { \"access-control-allow-origin\" = \"https://b.example\""), "{text}");
        assert!(
            text.contains(
                "\"access-control-allow-methods\" = \"GET, PUT, POST, DELETE, PATCH, OPTIONS\""
            ),
            "{text}"
        );
        assert!(out.events.iter().any(|e| e.message.contains("preflight")));
    }

    /// proxy-ssl-*: verification against the Secret's ca.crt, the name
    /// sent (server-name on) or only checked, the client certificate
    /// presented, the versions; a Secret that cannot be used refuses the
    /// Ingress (never served unverified); on an HTTP backend they are
    /// ignored with an Event. The node takes the text (its files written).
    #[test]
    fn proxy_ssl_annotations_verify_the_members() {
        const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJlekNDQVNHZ0F3SUJBZ0lVVk5YTWc5VUZSajFiV08zMko4V1NKdkdXSTZBd0NnWUlLb1pJemowRUF3SXcKRWpFUU1BNEdBMVVFQXd3SFZHVnpkQ0JEUVRBZ0Z3MHlOakV5TURReE9ERTFNRGxhR0E4eU1USTJNVEV4TURFNApNVFV3T1Zvd0VqRVFNQTRHQTFVRUF3d0hWR1Z6ZENCRFFUQlpNQk1HQnlxR1NNNDlBZ0VHQ0NxR1NNNDlBd0VICkEwSUFCRW9nUjZoSGltV0hVaEsycEpabkNEMGhpOHNJK0UyWjdsSy8zcVFiN1cwWW1kZlVSeVdMenZLUmRsRE0KN2E3VkV3aFlaSFVoV1dZd1l2QWYzNzdjVW1DalV6QlJNQjBHQTFVZERnUVdCQlRuaHpBUU9XamczdDdLSEFMOAp6K0xpRTJQakxqQWZCZ05WSFNNRUdEQVdnQlRuaHpBUU9XamczdDdLSEFMOHorTGlFMlBqTGpBUEJnTlZIUk1CCkFmOEVCVEFEQVFIL01Bb0dDQ3FHU000OUJBTUNBMGdBTUVVQ0lRRHFaTU1PSlRUQ2U2RUI1SmhjY2ZSMWNsWisKRERWRncwemoxdFhWWWhWWGRRSWdNS1F3NHRnczRlNUhOa0d6SURkUmR6dUN4bzVzWUtQK3Q2aHV3eldHaWlRPQotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg==";
        const CLIENT_CRT: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrRENDQVRXZ0F3SUJBZ0lVTHQ1OVp0UEMxZkJwb3FXaGJuWmJJTHY2VmRzd0NnWUlLb1pJemowRUF3SXcKSERFYU1CZ0dBMVVFQXd3UmMzZHBkR05vZVdGeVpDQmpiR2xsYm5Rd0lCY05Nall4TWpBME1UZ3pPREU0V2hnUApNakV5TmpFeE1UQXhPRE00TVRoYU1Cd3hHakFZQmdOVkJBTU1FWE4zYVhSamFIbGhjbVFnWTJ4cFpXNTBNRmt3CkV3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFTkU5aGVKcGFaVW12MVNGQUc5KysrN2I3TFZZRDA1UTkKWWxpbUhNa3RDWVFGdjYrMk9VM1h0TzRFT0V6dER6Nnl5NWNhR3VmYXhLbnpBU1lEeVZPclA2TlRNRkV3SFFZRApWUjBPQkJZRUZOK0NkcjByTWxOSWF0QUl2dTA2cWVnMGhueENNQjhHQTFVZEl3UVlNQmFBRk4rQ2RyMHJNbE5JCmF0QUl2dTA2cWVnMGhueENNQThHQTFVZEV3RUIvd1FGTUFNQkFmOHdDZ1lJS29aSXpqMEVBd0lEU1FBd1JnSWgKQVBBYUFwMllsMjJLTFNBRlFLR2lIZFFtYlphYlVuYXB6c3R5bkZTRXdwUE5BaUVBeDQ4SzM3QTJBaERqUk51awpVZkZMY01wZktyRWJnVjZVeElHdU1seGxOTWc9Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";
        const CLIENT_KEY: &str = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JR0hBZ0VBTUJNR0J5cUdTTTQ5QWdFR0NDcUdTTTQ5QXdFSEJHMHdhd0lCQVFRZzdxMlEveVRBMXRmZEttUlUKSFNGeGZZTThrODVFVzlsT0t0cmQxZVdUSEl1aFJBTkNBQVEwVDJGNG1scGxTYS9WSVVBYjM3Nzd0dnN0VmdQVApsRDFpV0tZY3lTMEpoQVcvcjdZNVRkZTA3Z1E0VE8wUFByTExseG9hNTlyRXFmTUJKZ1BKVTZzLwotLS0tLUVORCBQUklWQVRFIEtFWS0tLS0tCg==";
        let with = |extra: &[(&str, &str)]| {
            let mut a = json!({"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"});
            for (k, v) in extra {
                a[format!("nginx.ingress.kubernetes.io/{k}")] = json!(v);
            }
            ingress("i", a, "a.example.com", json!([path("/", "Prefix", "a")]))
        };
        let world_with = |i: Value, data: Value| {
            let mut w = world(vec![i]);
            w.secrets.push(shared(
                json!({"metadata": {"name": "up", "namespace": "certs"}, "data": data}),
            ));
            w
        };
        let all = json!({"ca.crt": CA, "tls.crt": CLIENT_CRT, "tls.key": CLIENT_KEY});
        let out = render(
            &world_with(
                with(&[
                    ("proxy-ssl-verify", "on"),
                    ("proxy-ssl-secret", "certs/up"),
                    ("proxy-ssl-name", "API.internal"),
                    ("proxy-ssl-server-name", "on"),
                    ("proxy-ssl-protocols", "TLSv1.2 TLSv1.3"),
                ]),
                all.clone(),
            ),
            &settings(),
        );
        let text = out.config.clone().expect("a configuration");
        assert!(
            text.contains("[pool.tls]\nca = \"files/proxy-ssl-certs-up-ca.crt\"\nsni = \"api.internal\"\ncert = \"files/proxy-ssl-certs-up.crt\"\nkey = \"files/proxy-ssl-certs-up.key\"\nversions = [\"1.2\", \"1.3\"]\n"),
            "{text}"
        );
        assert!(out.events.is_empty(), "{:?}", out.events);
        // The node takes it, its files beside it.
        let dir = std::env::temp_dir().join(format!("sy-proxy-ssl-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("files")).unwrap();
        for (name, data) in &out.files {
            std::fs::write(dir.join("files").join(name), data).unwrap();
        }
        let file = dir.join("rendered.toml");
        std::fs::write(&file, &text).unwrap();
        if let Err(e) = switchyard::config::load(&file, None) {
            panic!("{e}\n{text}");
        }
        let _ = std::fs::remove_dir_all(&dir);
        // server-name off: the name is checked, not sent.
        let out = render(
            &world_with(
                with(&[
                    ("proxy-ssl-verify", "on"),
                    ("proxy-ssl-secret", "certs/up"),
                    ("proxy-ssl-name", "api.internal"),
                ]),
                json!({"ca.crt": CA}),
            ),
            &settings(),
        );
        let text = out.config.unwrap();
        assert!(
            text.contains(
                "ca = \"files/proxy-ssl-certs-up-ca.crt\"\nsan_dns = [\"api.internal\"]\n"
            ),
            "{text}"
        );
        assert!(!text.contains("sni = "), "{text}");
        // Verification asked for, and nothing to verify with: refused.
        for (extra, data) in [
            (vec![("proxy-ssl-verify", "on")], json!({"ca.crt": CA})),
            (
                vec![("proxy-ssl-verify", "on"), ("proxy-ssl-secret", "certs/up")],
                json!({"tls.crt": CLIENT_CRT}),
            ),
            (
                vec![("proxy-ssl-verify", "on"), ("proxy-ssl-secret", "certs/up")],
                json!({"ca.crt": "bm90IGEgY2VydGlmaWNhdGU="}),
            ),
            (
                vec![
                    ("proxy-ssl-verify", "on"),
                    ("proxy-ssl-secret", "certs/missing"),
                ],
                json!({"ca.crt": CA}),
            ),
            (
                vec![("proxy-ssl-secret", "certs/up")],
                json!({"tls.crt": CLIENT_CRT, "tls.key": CA}),
            ),
            (vec![("proxy-ssl-verify", "maybe")], json!({"ca.crt": CA})),
        ] {
            let out = render(&world_with(with(&extra), data), &settings());
            assert!(out.config.is_none(), "{extra:?}: {:?}", out.config);
            assert!(
                out.events.iter().any(|e| e.reason == "IngressRefused"),
                "{extra:?}: {:?}",
                out.events
            );
        }
        // On a cleartext backend: ignored, said.
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/proxy-ssl-verify": "on"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let out = render(&world(vec![i]), &settings());
        assert!(!out.config.unwrap().contains("[pool.tls]"));
        assert!(out.events.iter().any(|e| e.message.contains("proxy-ssl-*")));
    }

    /// limit-rps / limit-rpm: a `scope = "policy"` limit per rate in each
    /// vserver the Ingress is served on, named by its pool policies only
    /// (not by the HTTPS redirect, which nginx answers before limit_req),
    /// nginx's burst as the window; limit-whitelist as allow; a rate that
    /// is not one refuses the Ingress (it would be served unlimited). The
    /// node takes the text.
    #[test]
    fn limit_rps_and_rpm_limit_the_ingress_requests_per_source() {
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/limit-rps": "5",
                   "nginx.ingress.kubernetes.io/limit-rpm": "100",
                   "nginx.ingress.kubernetes.io/limit-burst-multiplier": "3",
                   "nginx.ingress.kubernetes.io/limit-whitelist": "10.1.0.0/16, 192.0.2.1"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, out) = checked(&world(vec![i]));
        let vs = vserver(&text, 10080);
        assert!(
            vs.contains("[[vserver.limit]]\nname = \"ingress n/i rps\"\nscope = \"policy\"\nreq_rate = \"15/3s\"\nstatus = 503\nallow = [\"10.1.0.0/16\", \"192.0.2.1\"]\n"),
            "{vs}"
        );
        assert!(vs.contains("req_rate = \"300/3m\""), "{vs}");
        assert!(
            vs.contains("action = { pool = \"ingress.n.i.a.80\" }\nlimits = [\"ingress n/i rps\", \"ingress n/i rpm\"]\n"),
            "{vs}"
        );
        assert!(out.events.is_empty(), "{:?}", out.events);
        // Defaults: a burst of 5.
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/limit-rps": "2"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, _) = checked(&world(vec![i]));
        assert!(text.contains("req_rate = \"10/5s\""), "{text}");
        // limit-connections: the requests in progress per source (nginx's
        // limit_conn), with the same whitelist; the node takes the text.
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/limit-connections": "4",
                   "nginx.ingress.kubernetes.io/limit-whitelist": "10.1.0.0/16"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, out) = checked(&world(vec![i]));
        let vs = vserver(&text, 10080);
        assert!(
            vs.contains("[[vserver.limit]]\nname = \"ingress n/i conn\"\nscope = \"policy\"\nreq_cur = 4\nstatus = 503\nallow = [\"10.1.0.0/16\"]\n"),
            "{vs}"
        );
        assert!(vs.contains("limits = [\"ingress n/i conn\"]\n"), "{vs}");
        assert!(out.events.is_empty(), "{:?}", out.events);
        for bad in [
            json!({"nginx.ingress.kubernetes.io/limit-rps": "fast"}),
            json!({"nginx.ingress.kubernetes.io/limit-rps": "0"}),
            json!({"nginx.ingress.kubernetes.io/limit-connections": "0"}),
            json!({"nginx.ingress.kubernetes.io/limit-connections": "many"}),
            json!({"nginx.ingress.kubernetes.io/limit-rps": "5", "nginx.ingress.kubernetes.io/limit-whitelist": "10.0.0.0/99"}),
        ] {
            let i = ingress(
                "i",
                bad.clone(),
                "a.example.com",
                json!([path("/", "Prefix", "a")]),
            );
            let out = render(&world(vec![i]), &settings());
            assert!(out.config.is_none(), "{bad}");
            assert!(
                out.events.iter().any(|e| e.reason == "IngressRefused"),
                "{bad}"
            );
        }
    }

    /// proxy-body-size: nginx's sizes as the pool policies' max_body ("0":
    /// none); a size that is not one refuses the Ingress.
    #[test]
    fn proxy_body_size_limits_the_bodies_the_members_get() {
        for (size, want) in [
            ("8m", Some(8u64 << 20)),
            ("512K", Some(512 << 10)),
            ("100", Some(100)),
            ("0", None),
        ] {
            let i = ingress(
                "i",
                json!({"nginx.ingress.kubernetes.io/proxy-body-size": size}),
                "a.example.com",
                json!([path("/", "Prefix", "a")]),
            );
            let (text, out) = checked(&world(vec![i]));
            match want {
                Some(n) => assert!(
                    text.contains(&format!(
                        "action = {{ pool = \"ingress.n.i.a.80\" }}\nmax_body = {n}\n"
                    )),
                    "{size}: {text}"
                ),
                None => assert!(!text.contains("max_body"), "{text}"),
            }
            assert!(out.events.is_empty(), "{size}: {:?}", out.events);
        }
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/proxy-body-size": "8 megs"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let out = render(&world(vec![i]), &settings());
        assert!(out.config.is_none());
        assert!(out.events.iter().any(|e| e.reason == "IngressRefused"));
    }

    /// proxy-connect-timeout / proxy-read-timeout: the pool policies'
    /// `timeouts` (seconds); proxy-send-timeout is said to be ignored.
    #[test]
    fn proxy_timeouts_are_the_pool_policies_timeouts() {
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/proxy-connect-timeout": "5",
                   "nginx.ingress.kubernetes.io/proxy-read-timeout": "120s",
                   "nginx.ingress.kubernetes.io/proxy-send-timeout": "30"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, out) = checked(&world(vec![i]));
        assert!(
            text.contains("action = { pool = \"ingress.n.i.a.80\" }\ntimeouts = { upstream_connect = \"5s\", upstream_response = \"120s\" }\n"),
            "{text}"
        );
        assert_eq!(out.events.len(), 1, "{:?}", out.events);
        assert!(out.events[0].message.contains("proxy-send-timeout"));
    }

    /// rewrite-target: the paths become regular expressions (as
    /// ingress-nginx makes them) and the pool's policy rewrites with
    /// nginx's captures; the node takes the text; an nginx variable the
    /// node cannot expand refuses the Ingress.
    #[test]
    fn rewrite_target_rewrites_with_the_paths_captures() {
        let i = ingress(
            "rw",
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/$2"}),
            "a.example.com",
            json!([path("/something(/|$)(.*)", "ImplementationSpecific", "a")]),
        );
        let (text, out) = checked(&world(vec![i]));
        assert!(
            text.contains("path_regex = \"(?i)^/something(/|$)(.*)\" }\naction = { pool = "),
            "{text}"
        );
        assert!(
            text.contains(
                "rewrite = { path_regex = \"(?i)^/something(/|$)(.*)\", path = \"/${2}\" }"
            ),
            "{text}"
        );
        assert!(out.events.is_empty(), "{:?}", out.events);
        let i = ingress(
            "var",
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/$host/$1"}),
            "v.example.com",
            json!([path("/(.*)", "ImplementationSpecific", "a")]),
        );
        let good = ingress(
            "good",
            json!({}),
            "g.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, out) = checked(&world(vec![i, good]));
        assert!(!text.contains("v.example.com"), "{text}");
        assert!(
            out.events
                .iter()
                .any(|e| e.reason == "IngressRefused" && e.message.contains("nginx variable")),
            "{:?}",
            out.events
        );
    }

    #[test]
    fn redirects_app_root_regex_and_default_backend() {
        let mut i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/app-root": "/app", "nginx.ingress.kubernetes.io/use-regex": "true"}),
            "a.example.com",
            json!([path("/v[0-9]+/items", "ImplementationSpecific", "a")]),
        );
        i["spec"]["defaultBackend"] = json!({"service": {"name": "c", "port": {"name": "http"}}});
        let (text, _) = checked(&world(vec![i]));
        assert!(
            text.contains("path_regex = \"(?i)^/v[0-9]+/items\""),
            "{text}"
        );
        assert!(
            text.contains("path = \"/\" }\naction = { redirect_path = \"/app\", status = 302 }"),
            "{text}"
        );
        // defaultBackend: the host's other paths and every other host.
        assert!(
            text.contains("match = { host = \"a.example.com\", path_regex = \"(?i)^/\" }"),
            "{text}"
        );
        assert!(text.contains("address = \"10.0.0.3:8080\""), "{text}");
        let i = ingress(
            "r",
            json!({"nginx.ingress.kubernetes.io/permanent-redirect": "https://example.org/"}),
            "r.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, _) = checked(&world(vec![i]));
        assert!(
            text.contains("action = { redirect = \"https://example.org/\", status = 301 }"),
            "{text}"
        );
        // A path the node cannot compile refuses its Ingress only.
        let bad = ingress(
            "bad",
            json!({"nginx.ingress.kubernetes.io/use-regex": "true"}),
            "b.example.com",
            json!([path("/x(", "ImplementationSpecific", "a")]),
        );
        let good = ingress(
            "good",
            json!({}),
            "g.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, out) = checked(&world(vec![bad, good]));
        assert!(
            !text.contains("b.example.com") && text.contains("g.example.com"),
            "{text}"
        );
        assert_eq!(out.events[0].reason, "IngressRefused");
        assert!(
            out.events[0].message.contains("use-regex"),
            "{:?}",
            out.events
        );
    }

    #[test]
    fn unsupported_annotations_are_said_and_the_rest_served() {
        let i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/proxy-send-timeout": "60", "nginx.ingress.kubernetes.io/proxy-buffering": "off"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let (text, out) = checked(&world(vec![i]));
        assert!(text.contains("a.example.com"));
        let keys: Vec<&str> = out.events.iter().map(|e| e.reason).collect();
        assert_eq!(keys, vec!["UnsupportedAnnotation", "UnsupportedAnnotation"]);
        assert!(
            out.events[0].message.contains("proxy-buffering"),
            "{:?}",
            out.events
        );
        assert_eq!(out.events[0].uid, "uid-0");
        // A snippet refuses the Ingress: nothing of it is served.
        let mut i = ingress(
            "i",
            json!({"nginx.ingress.kubernetes.io/configuration-snippet": "deny all;"}),
            "a.example.com",
            json!([path("/", "Prefix", "a")]),
        );
        let out = render(&world(vec![i.clone()]), &settings());
        assert!(out.config.is_none());
        assert!(out.statuses.iter().all(|s| s.kind != Kind::Ingress));
        assert_eq!(out.events[0].reason, "IngressRefused");
        // One that had an address (served before) loses it.
        i["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}});
        let out = render(&world(vec![i]), &settings());
        let st = out
            .statuses
            .iter()
            .find(|s| s.kind == Kind::Ingress)
            .unwrap();
        assert_eq!(st.status, json!({"loadBalancer": {"ingress": null}}));
    }
}
