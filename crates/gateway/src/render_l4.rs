//! TLS passthrough, TCP and UDP listeners and their routes (TLSRoute,
//! TCPRoute, UDPRoute: `v1` in the Gateway API v1.7 standard channel).
//!
//! The mapping (docs/kubernetes.md):
//! - a TLS listener (mode Passthrough) is a `protocol = "tcp"` vserver
//!   whose `[[vserver.sni_route]]`s pick the pool by the ClientHello's
//!   server name (the route's hostnames intersected with the listener's);
//!   the TLS bytes go to the member untouched. A name no route takes is
//!   closed (the spec's "reject the connection"); a listener with no
//!   usable route has no vserver yet (its port is closed);
//! - a TCP listener is a `protocol = "tcp"` vserver, a UDP listener a
//!   `protocol = "udp"` one; its route's backends are the
//!   `default_pool`. Such a listener carries one route (nothing in a
//!   byte stream or a datagram picks between two): the oldest wins, a
//!   later one is `Accepted: False, NotAllowedByListeners`;
//! - a route's one rule (the CRDs allow one) is one pool, its Services'
//!   ready endpoints weighted by backendRef weight, as for HTTPRoute.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};

use crate::render::{
    cond, intersect, listener_kinds, namespaces_allow, ns_of, q, rule_pool, Ctx, Kind, RouteIn,
    StatusOf,
};
use crate::types::*;

/// One L4 route as the render reads it.
struct L4Route<'a> {
    kind: Kind,
    kind_name: &'static str,
    metadata: &'a ObjectMeta,
    status: &'a Value,
    spec: &'a L4RouteSpec,
}

/// What one L4 vserver serves, gathered from the listeners and routes.
#[derive(Default)]
struct L4VServer {
    udp: bool,
    /// The route whose pool is the default (TCP and UDP listeners, a TLS
    /// route without a hostname): (route, pool).
    default: Option<(String, Option<String>)>,
    /// SNI name -> pool (TLS listeners), the oldest route's first.
    sni: BTreeMap<String, String>,
}

/// Where an L4 listener listens and on which transport.
pub(crate) type L4Key = (IpAddr, u16, bool);

/// The L4 routes' statuses and attachments, and the text of the L4
/// vservers (one per listening address and transport).
pub(crate) struct L4Input<'a, 'w> {
    pub cx: &'a mut Ctx<'w>,
    pub controller_name: &'a str,
    pub port_offset: u16,
    pub listen_address: IpAddr,
    /// Our Gateways with the address each listens on.
    pub gateways: &'a [(&'w Gateway, IpAddr)],
    /// Whether listener `li` of Gateway `gi` is valid and not conflicted.
    pub usable: &'a dyn Fn(usize, usize) -> bool,
    pub statuses: &'a mut Vec<StatusOf>,
    pub attached: &'a mut BTreeMap<(usize, usize), i64>,
}

/// Whether `protocol` is an L4 listener's (these modules' to render).
pub(crate) fn is_l4(protocol: &str) -> bool {
    matches!(protocol, "TLS" | "TCP" | "UDP")
}

fn route_kind_of(protocol: &str) -> &'static str {
    match protocol {
        "TLS" => "TLSRoute",
        "TCP" => "TCPRoute",
        _ => "UDPRoute",
    }
}

pub(crate) fn render(mut i: L4Input) -> String {
    let w = i.cx.w;
    let mut vservers: BTreeMap<L4Key, L4VServer> = BTreeMap::new();
    for (gi, (g, ip)) in i.gateways.iter().enumerate() {
        for (li, l) in g.spec.listeners.iter().enumerate() {
            if is_l4(&l.protocol) && (i.usable)(gi, li) {
                let udp = l.protocol == "UDP";
                vservers.entry((*ip, l.port as u16, udp)).or_default().udp = udp;
            }
        }
    }
    let mut routes: Vec<L4Route> = Vec::new();
    routes.extend(w.tls_routes.iter().map(|r| L4Route {
        kind: Kind::TlsRoute,
        kind_name: "TLSRoute",
        metadata: &r.metadata,
        status: &r.status,
        spec: &r.spec,
    }));
    routes.extend(w.tcp_routes.iter().map(|r| L4Route {
        kind: Kind::TcpRoute,
        kind_name: "TCPRoute",
        metadata: &r.metadata,
        status: &r.status,
        spec: &r.spec,
    }));
    routes.extend(w.udp_routes.iter().map(|r| L4Route {
        kind: Kind::UdpRoute,
        kind_name: "UDPRoute",
        metadata: &r.metadata,
        status: &r.status,
        spec: &r.spec,
    }));
    // Oldest first: an older route keeps its listener or name.
    routes.sort_by_key(|r| {
        (
            r.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ns_of(r.metadata),
            r.metadata.name.clone(),
            r.kind,
        )
    });
    for route in &routes {
        route_status_and_claims(&mut vservers, &mut i, route);
    }
    let mut text = String::new();
    for ((ip, port, udp), v) in &vservers {
        // Nothing to relay to yet (no route, or no usable backend): no
        // vserver, the port stays closed (the node refuses an L4 vserver
        // without a pool, and one such listener must not hold back the
        // whole configuration).
        if v.sni.is_empty() && !matches!(v.default, Some((_, Some(_)))) {
            continue;
        }
        let transport = if *udp { "udp" } else { "tcp" };
        let name = if *ip == i.listen_address {
            format!("gateway-{transport}-{port}")
        } else {
            format!("gateway-{ip}-{transport}-{port}")
        };
        let listen = SocketAddr::new(*ip, port + i.port_offset);
        let _ = write!(
            text,
            "\n[[vserver]]\nname = {}\nlisten = [{}]\nprotocol = \"{transport}\"\n",
            q(&name),
            q(&listen.to_string())
        );
        if let Some((_, Some(pool))) = &v.default {
            let _ = writeln!(text, "default_pool = {}", q(pool));
        }
        let mut by_pool: BTreeMap<&String, Vec<String>> = BTreeMap::new();
        for (sni, pool) in &v.sni {
            by_pool.entry(pool).or_default().push(q(sni));
        }
        for (pool, names) in by_pool {
            let _ = write!(
                text,
                "[[vserver.sni_route]]\nnames = [{}]\npool = {}\n",
                names.join(", "),
                q(pool)
            );
        }
    }
    text
}

/// One route: its parents' statuses, the listeners it attaches to, and
/// the names or defaults it claims on their vservers.
fn route_status_and_claims(
    vservers: &mut BTreeMap<L4Key, L4VServer>,
    i: &mut L4Input,
    route: &L4Route,
) {
    let rns = ns_of(route.metadata);
    let rname = route.metadata.name.clone().unwrap_or_default();
    let gen = route.metadata.generation;
    let id = format!("{} {rns}/{rname}", route.kind_name);
    let gateways = i.gateways;
    let mut parents = Vec::new();
    // The pool of the one rule, made once for every parent.
    let mut pool: Option<Result<String, &'static str>> = None;
    let mut unresolved = None;
    for pref in &route.spec.parent_refs {
        let group = pref.group.as_deref().unwrap_or(GROUP);
        let kind = pref.kind.as_deref().unwrap_or("Gateway");
        let pns = pref.namespace.clone().unwrap_or_else(|| rns.clone());
        if group != GROUP || kind != "Gateway" {
            continue;
        }
        let Some((gi, (gw, ip))) = gateways.iter().enumerate().find(|(_, (g, _))| {
            ns_of(&g.metadata) == pns && g.metadata.name.as_deref() == Some(&pref.name)
        }) else {
            continue; // another controller's Gateway
        };
        let parent_ref = super::render::parent_ref_status(&pns, pref);
        let named: Vec<(usize, &Listener)> = gw
            .spec
            .listeners
            .iter()
            .enumerate()
            .filter(|(_, l)| pref.section_name.as_ref().is_none_or(|n| *n == l.name))
            .filter(|(_, l)| pref.port.is_none_or(|p| p == l.port))
            .filter(|(li, _)| (i.usable)(gi, *li))
            .collect();
        let allowed: Vec<(usize, &Listener)> = named
            .iter()
            .copied()
            .filter(|(_, l)| {
                route_kind_of(&l.protocol) == route.kind_name
                    && is_l4(&l.protocol)
                    && namespaces_allow(i.cx, l, &pns, &rns)
                    && listener_kinds(l)
                        .0
                        .iter()
                        .any(|k| k["kind"] == route.kind_name)
            })
            .collect();
        // SNI names per listener (TLS); None stands for "any".
        let mut hosts_by_listener: Vec<(usize, &Listener, Vec<Option<String>>)> = Vec::new();
        for (li, l) in &allowed {
            let hosts: Vec<Option<String>> =
                if l.protocol != "TLS" || route.spec.hostnames.is_empty() {
                    vec![l.hostname.clone().map(|h| h.to_ascii_lowercase())]
                } else {
                    let mut hs: Vec<Option<String>> = route
                        .spec
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
        let mut accepted = if named.is_empty() {
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
                "no listener allows this route (namespace, kind or protocol)",
                gen,
            )
        } else if hosts_by_listener.is_empty() {
            cond(
                "Accepted",
                false,
                "NoMatchingListenerHostname",
                "no hostname of the route matches a listener's",
                gen,
            )
        } else if route.spec.rules.len() != 1 {
            cond(
                "Accepted",
                false,
                "UnsupportedValue",
                "an L4 route has exactly one rule",
                gen,
            )
        } else {
            cond("Accepted", true, "Accepted", "attached", gen)
        };
        if accepted["status"] == "True" {
            // A TCP or UDP listener another (older) route already holds.
            let taken: Vec<String> = hosts_by_listener
                .iter()
                .filter(|(_, l, _)| l.protocol != "TLS")
                .filter_map(|(_, l, _)| {
                    let key = (*ip, l.port as u16, l.protocol == "UDP");
                    vservers
                        .get(&key)
                        .and_then(|v| v.default.as_ref())
                        .filter(|(holder, _)| *holder != id)
                        .map(|(holder, _)| format!("listener {} carries {holder}", l.name))
                })
                .collect();
            if !taken.is_empty() && taken.len() == hosts_by_listener.len() {
                accepted = cond(
                    "Accepted",
                    false,
                    "NotAllowedByListeners",
                    &format!(
                        "{} (a {} listener carries one route)",
                        taken.join(", "),
                        route.kind_name.trim_end_matches("Route")
                    ),
                    gen,
                );
            }
        }
        if accepted["status"] == "True" {
            if pool.is_none() {
                let r = RouteIn {
                    kind: route.kind,
                    metadata: route.metadata,
                    status: route.status,
                    parent_refs: &route.spec.parent_refs,
                    hostnames: &route.spec.hostnames,
                    rules: vec![HttpRouteRule {
                        matches: None,
                        filters: Vec::new(),
                        backend_refs: route.spec.rules[0]
                            .backend_refs
                            .iter()
                            .map(|b| HttpBackendRef {
                                target: b.clone(),
                                filters: Vec::new(),
                            })
                            .collect(),
                    }],
                };
                pool = Some(rule_pool(i.cx, &r, 0, &r.rules[0], &mut unresolved));
            }
            let pool = pool.clone().and_then(Result::ok);
            for (li, l, hosts) in &hosts_by_listener {
                let key = (*ip, l.port as u16, l.protocol == "UDP");
                let Some(v) = vservers.get_mut(&key) else {
                    continue;
                };
                if l.protocol == "TLS" {
                    for h in hosts {
                        match (h, &pool) {
                            (Some(name), Some(p)) => {
                                v.sni.entry(name.clone()).or_insert_with(|| p.clone());
                            }
                            (None, _) => {
                                v.default.get_or_insert((id.clone(), pool.clone()));
                            }
                            (Some(_), None) => {}
                        }
                    }
                } else if v.default.as_ref().is_some_and(|(holder, _)| *holder != id) {
                    continue;
                } else {
                    v.default = Some((id.clone(), pool.clone()));
                }
                *i.attached.entry((gi, *li)).or_default() += 1;
            }
        }
        parents.push(super::render::route_parent(
            parent_ref,
            i.controller_name,
            accepted,
            unresolved.as_ref(),
            gen,
        ));
    }
    let ours_before = route.status["parents"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p["controllerName"] == i.controller_name));
    if !parents.is_empty() || ours_before {
        i.statuses.push(StatusOf {
            kind: route.kind,
            namespace: Some(rns),
            name: rname,
            status: json!({"parents": parents}),
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::render::{render, Settings, World};
    use serde_json::json;

    fn parse<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn shared<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> std::sync::Arc<T> {
        std::sync::Arc::new(parse(v))
    }

    fn route(
        kind: &str,
        name: &str,
        section: &str,
        hostnames: &[&str],
        svc: &str,
    ) -> serde_json::Value {
        json!({"metadata": {"name": name, "namespace": "n", "creationTimestamp": format!("2026-01-01T00:00:0{}Z", name.len())},
            "spec": {"parentRefs": [{"name": "g", "sectionName": section}], "hostnames": hostnames,
                "rules": [{"backendRefs": [{"name": svc, "port": 1}]}]}, "kind": kind})
    }

    #[test]
    fn l4_listeners_render_a_configuration_the_node_accepts() {
        let mut w = World {
            classes: vec![shared(
                json!({"metadata": {"name": "c"}, "spec": {"controllerName": "me"}}),
            )],
            gateways: vec![shared(
                json!({"metadata": {"name": "g", "namespace": "n"}, "spec": {"gatewayClassName": "c", "listeners": [
                    {"name": "tls", "port": 443, "protocol": "TLS", "tls": {"mode": "Passthrough"}},
                    {"name": "tcp", "port": 5432, "protocol": "TCP"},
                    {"name": "udp", "port": 53, "protocol": "UDP"},
                    {"name": "web", "port": 80, "protocol": "HTTP"},
                    {"name": "idle", "port": 6000, "protocol": "TCP"},
                ]}}),
            )],
            tls_routes: vec![
                shared(route(
                    "TLSRoute",
                    "a",
                    "tls",
                    &["a.example", "*.b.example"],
                    "s",
                )),
                // An older route's name is kept: "a.example" stays "a"'s.
                shared(route("TLSRoute", "late", "tls", &["a.example"], "t")),
            ],
            tcp_routes: vec![
                shared(route("TCPRoute", "db", "tcp", &[], "s")),
                shared(route("TCPRoute", "db-later", "tcp", &[], "t")),
            ],
            udp_routes: vec![shared(route("UDPRoute", "dns", "udp", &[], "s"))],
            ..Default::default()
        };
        for svc in ["s", "t"] {
            w.services
                .push(shared(json!({"metadata": {"name": svc, "namespace": "n"},
                "spec": {"ports": [{"name": "p", "port": 1}]}})));
            w.slices.push(shared(json!({"metadata": {"name": svc, "namespace": "n", "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4", "ports": [{"name": "p", "port": 9}],
                "endpoints": [{"addresses": ["10.0.0.1"]}]})));
        }
        let s = Settings {
            controller_name: "me".into(),
            listen_address: "127.0.0.1".parse().unwrap(),
            port_offset: 0,
            status_address: "127.0.0.1".into(),
        };
        let out = render(&w, &s);
        let text = out.config.unwrap();
        if let Err(e) = switchyard::config::parse("rendered", &text, None) {
            panic!("{e}\n{text}");
        }
        assert!(text.contains("name = \"gateway-tcp-443\"\nlisten = [\"127.0.0.1:443\"]\nprotocol = \"tcp\"\n[[vserver.sni_route]]\nnames = [\"*.b.example\", \"a.example\"]\npool = \"tls:n.a.0\""), "{text}");
        assert!(text.contains("name = \"gateway-tcp-5432\"\nlisten = [\"127.0.0.1:5432\"]\nprotocol = \"tcp\"\ndefault_pool = \"tcp:n.db.0\""), "{text}");
        assert!(text.contains("name = \"gateway-udp-53\"\nlisten = [\"127.0.0.1:53\"]\nprotocol = \"udp\"\ndefault_pool = \"udp:n.dns.0\""), "{text}");
        assert!(!text.contains("tcp:n.db-later.0\"\n"), "{text}");
        // A listener without a route: no vserver, and the rest renders.
        assert!(!text.contains("gateway-tcp-6000"), "{text}");
        let later = out
            .statuses
            .iter()
            .find(|st| st.name == "db-later")
            .unwrap();
        assert_eq!(
            later.status["parents"][0]["conditions"][0]["reason"], "NotAllowedByListeners",
            "{:?}",
            later.status
        );
        let gw = out.statuses.iter().find(|st| st.name == "g").unwrap();
        let attached: Vec<(String, i64)> = gw.status["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["name"].as_str().unwrap().to_string(),
                    l["attachedRoutes"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            attached,
            [
                ("tls".into(), 2),
                ("tcp".into(), 1),
                ("udp".into(), 1),
                ("web".into(), 0),
                ("idle".into(), 0)
            ]
        );
    }
}
