//! The L4 parts of a vserver, validated: relay settings of `tcp` and `udp`
//! vservers, SNI routes for TLS passthrough, the sources trusted to send a
//! PROXY protocol header (any vserver), and listening socket options. The
//! types they become live in `snapshot` with the rest of what the data
//! path reads.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::model::{self, Protocol};
use super::snapshot::{
    AcceptProxy, L4Settings, OnMemberDown, Pool, ProxyVersion, SniTable, SocketOpts, ZeroCopy,
};
use super::types::Problem;
use crate::source::SourceAddress;

/// `[vserver.l4]` and `[[vserver.sni_route]]` of vserver `name`.
pub fn build(
    v: &model::VServer,
    name: &str,
    pools: &HashMap<String, Arc<Pool>>,
    span: Range<usize>,
    problems: &mut Vec<Problem>,
) -> Option<L4Settings> {
    let what = format!("vserver {name:?}");
    let l4 = v.l4.as_ref();
    if v.protocol == Protocol::Http {
        if let Some(r) = v.sni_route.first() {
            problems.push((
                r.pool.span(),
                format!("{what}: sni_route is for protocol = \"tcp\" (TLS passthrough); an HTTP vserver routes by host with policies"),
            ));
        }
        if l4.is_some() {
            problems.push((
                span.clone(),
                format!("{what}: [vserver.l4] is for protocol = \"tcp\" or \"udp\""),
            ));
        }
        if let Some(w) = untrusted_wait(v) {
            problems.push((
                w,
                format!("{what}: proxy_protocol untrusted_wait is for tcp vservers; an HTTP vserver reads the request before it connects to a member"),
            ));
        }
        return None;
    }
    let udp = v.protocol == Protocol::Udp;
    let zero_copy = match l4.and_then(|l| l.zero_copy.as_ref()) {
        None => ZeroCopy::Auto,
        Some(z) => match z.get_ref().as_str() {
            "auto" => ZeroCopy::Auto,
            "splice" => ZeroCopy::Splice,
            "copy" => ZeroCopy::Copy,
            other => {
                problems.push((
                    z.span(),
                    format!("{what}: zero_copy {other:?}: use \"auto\", \"splice\" or \"copy\""),
                ));
                ZeroCopy::Auto
            }
        },
    };
    let max_sessions = match l4.and_then(|l| l.max_sessions.as_ref()) {
        None => 65_536,
        Some(m) if (1..=1 << 22).contains(m.get_ref()) => *m.get_ref(),
        Some(m) => {
            problems.push((
                m.span(),
                format!("{what}: max_sessions must be between 1 and 4194304"),
            ));
            65_536
        }
    };
    let on_member_down = match l4.and_then(|l| l.on_member_down.as_ref()) {
        None => OnMemberDown::Reassign,
        Some(o) => {
            match o.get_ref().as_str() {
                "reassign" => OnMemberDown::Reassign,
                "close" => OnMemberDown::Close,
                "keep" => OnMemberDown::Keep,
                other => {
                    problems.push((
                    o.span(),
                    format!("{what}: on_member_down {other:?}: use \"reassign\", \"close\" or \"keep\""),
                ));
                    OnMemberDown::Reassign
                }
            }
        }
    };
    let mut sni = SniTable::default();
    for r in &v.sni_route {
        let Some(pool) = pools.get(r.pool.get_ref()) else {
            problems.push((
                r.pool.span(),
                format!(
                    "{what}: sni_route pool {:?} is not defined",
                    r.pool.get_ref()
                ),
            ));
            continue;
        };
        if r.names.get_ref().is_empty() {
            problems.push((r.names.span(), format!("{what}: sni_route names is empty")));
        }
        for n in r.names.get_ref() {
            let lower = n.get_ref().to_ascii_lowercase();
            let (table, key) = match lower.strip_prefix("*.") {
                Some(parent) => (&mut sni.wildcard, parent.to_string()),
                None => (&mut sni.exact, lower.clone()),
            };
            if key.is_empty()
                || key.contains('*')
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            {
                problems.push((
                    n.span(),
                    format!(
                        "{what}: sni_route name {:?} is not a host name or *.parent wildcard",
                        n.get_ref()
                    ),
                ));
                continue;
            }
            if table.insert(key, pool.clone()).is_some() {
                problems.push((
                    n.span(),
                    format!("{what}: sni_route name {:?} is listed twice", n.get_ref()),
                ));
            }
        }
    }
    if !sni.is_empty() && v.tls.is_some() {
        problems.push((
            span.clone(),
            format!("{what}: sni_route passes TLS through untouched, [vserver.tls] terminates it: choose one"),
        ));
    }
    if udp && (!sni.is_empty() || v.tls.is_some()) {
        problems.push((
            span.clone(),
            format!("{what}: a udp vserver has no TLS (no tls, no sni_route)"),
        ));
    }
    let mut used: Vec<&Arc<Pool>> = v
        .default_pool
        .as_ref()
        .and_then(|n| pools.get(n.get_ref()))
        .into_iter()
        .collect();
    used.extend(sni.exact.values().chain(sni.wildcard.values()));
    check_l4_pools(&what, udp, !sni.is_empty(), &used, span.clone(), problems);
    check_transport_keys(v, udp, &what, span.clone(), problems);
    let default_idle = if udp { 30_000 } else { 600_000 };
    Some(L4Settings {
        idle_timeout_ms: l4
            .and_then(|l| l.idle_timeout)
            .map(|m| m.0)
            .unwrap_or(default_idle),
        zero_copy,
        client_hello_timeout_ms: l4
            .and_then(|l| l.client_hello_timeout)
            .map(|m| m.0)
            .unwrap_or(5_000),
        sni,
        max_sessions,
        per_datagram: l4.and_then(|l| l.per_datagram).unwrap_or(false),
        on_member_down,
    })
}

/// Keys of one transport set on a vserver of the other, which it would
/// ignore.
fn check_transport_keys(
    v: &model::VServer,
    udp: bool,
    what: &str,
    span: Range<usize>,
    problems: &mut Vec<Problem>,
) {
    // (set, key, the transport it belongs to)
    let l4_keys = v.l4.as_ref().map_or([(false, "", "tcp"); 5], |l| {
        [
            (l.zero_copy.is_some(), "zero_copy", "tcp"),
            (
                l.client_hello_timeout.is_some(),
                "client_hello_timeout",
                "tcp",
            ),
            (l.per_datagram.is_some(), "per_datagram", "udp"),
            (l.max_sessions.is_some(), "max_sessions", "udp"),
            (l.on_member_down.is_some(), "on_member_down", "udp"),
        ]
    });
    let kind = if udp { "udp" } else { "tcp" };
    if let Some(w) = untrusted_wait(v).filter(|_| udp) {
        problems.push((
            w,
            format!("{what}: proxy_protocol untrusted_wait is for tcp vservers"),
        ));
    }
    for (set, key, belongs) in l4_keys {
        if set && belongs != kind {
            problems.push((
                span.clone(),
                format!("{what}: [vserver.l4] {key} is for {belongs} vservers"),
            ));
        }
    }
    let Some(s) = v.socket.as_ref().filter(|_| udp) else {
        return;
    };
    let tcp_only = [
        (s.backlog.is_some(), "backlog"),
        (s.keepalive.is_some(), "keepalive"),
        (s.fast_open.is_some(), "fast_open"),
        (s.defer_accept.is_some(), "defer_accept"),
        (s.nodelay.is_some(), "nodelay"),
        (s.smart_accept.is_some(), "smart_accept"),
    ];
    for (set, key) in tcp_only {
        if set {
            problems.push((
                span.clone(),
                format!("{what}: [vserver.socket] {key} is a TCP option; a udp vserver has only freebind"),
            ));
        }
    }
}

/// `[[vserver.limit]]` of an L4 vserver: a tcp one limits connections per
/// source; requests and their keys are HTTP's, and a udp vserver has
/// neither.
pub fn check_limits(v: &model::VServer, name: &str, problems: &mut Vec<Problem>) {
    for lim in &v.limit {
        let lname = lim.name.get_ref();
        let refuse = |why: &str| {
            (
                lim.name.span(),
                format!("vserver {name:?} limit {lname:?}: {why}"),
            )
        };
        if v.protocol == model::Protocol::Udp {
            problems.push(refuse("a udp vserver has no connections or requests to limit; per-source datagram floods are the shield's ([shield] ddos, acl)"));
        } else if lim.req_rate.is_some()
            || lim.req_cur.is_some()
            || lim.key.as_ref().is_some_and(|k| k.get_ref() != "src")
        {
            problems.push(refuse("a tcp vserver limits connections per source (conn_cur, conn_rate, key \"src\"); req_rate, req_cur and keys from requests are HTTP"));
        }
    }
}

/// What the pools of an L4 vserver may not ask for: anything that needs
/// HTTP (h2 members, cookie persistence, a hash of a request's parts);
/// for udp, TLS and text PROXY headers; TLS to members of a vserver that
/// passes the client's TLS through (`passthrough`: it would wrap TLS in
/// TLS).
fn check_l4_pools(
    what: &str,
    udp: bool,
    passthrough: bool,
    used: &[&Arc<Pool>],
    span: Range<usize>,
    problems: &mut Vec<Problem>,
) {
    use crate::balance::persist::{HashKey, Persist};
    let kind = if udp { "udp" } else { "tcp" };
    for p in used {
        let name = &p.name;
        let mut refuse =
            |why: String| problems.push((span.clone(), format!("{what}: pool {name:?} {why}")));
        if p.protocol == model::UpstreamProtocol::H2 {
            refuse(format!("has protocol = \"h2\", which is what HTTP members speak; a {kind} vserver relays bytes"));
        }
        if matches!(p.persistence, Some(Persist::Cookie(_))) {
            refuse(format!(
                "persists by cookie, which needs HTTP; a {kind} vserver can persist by source-ip"
            ));
        }
        if matches!(
            p.hash_key,
            Some(HashKey::Uri | HashKey::Header(_) | HashKey::Cookie(_))
        ) {
            refuse(format!(
                "hashes a part of an HTTP request; a {kind} vserver can hash source-ip"
            ));
        }
        if udp && p.tls.is_some() {
            refuse("has [pool.tls]; a udp vserver has no TLS (no DTLS)".to_string());
        }
        if udp && p.proxy_protocol == Some(ProxyVersion::V1) {
            refuse(
                "sends PROXY v1, a text header for streams; a udp vserver sends \"v2\"".to_string(),
            );
        }
        if !udp && passthrough && p.tls.is_some() {
            refuse("has [pool.tls], but sni_route passes the client's TLS through untouched: TLS inside TLS".to_string());
        }
    }
}

/// Where `[vserver.proxy_protocol] untrusted_wait` is, when set.
fn untrusted_wait(v: &model::VServer) -> Option<Range<usize>> {
    let p = v.proxy_protocol.as_ref()?;
    p.untrusted_wait.map(|_| p.trusted.span())
}

pub fn accept_proxy(v: &model::VServer) -> Option<AcceptProxy> {
    v.proxy_protocol.as_ref().map(|p| AcceptProxy {
        trusted: p.trusted.get_ref().iter().map(|c| *c.get_ref()).collect(),
        timeout_ms: p.timeout.map(|m| m.0).unwrap_or(5_000),
        // Long enough for any client that speaks first (its first bytes
        // follow the handshake at once), short for one that waits for a
        // server's greeting.
        untrusted_wait_ms: p.untrusted_wait.map(|m| m.0).unwrap_or(500),
    })
}

pub fn socket_opts(v: &model::VServer, name: &str, problems: &mut Vec<Problem>) -> SocketOpts {
    let mut o = SocketOpts {
        smart_accept: v.protocol == model::Protocol::Http,
        ..SocketOpts::default()
    };
    let Some(s) = &v.socket else {
        return o;
    };
    if let Some(b) = &s.backlog {
        if (1..=65_535).contains(b.get_ref()) {
            o.backlog = *b.get_ref() as i32;
        } else {
            problems.push((
                b.span(),
                format!("vserver {name:?}: socket backlog must be between 1 and 65535"),
            ));
        }
    }
    if let Some(f) = &s.fast_open {
        o.fast_open = *f.get_ref();
    }
    o.keepalive_ms = s.keepalive.map(|m| m.0.max(1000));
    o.defer_accept_s = s
        .defer_accept
        .map(|m| m.0.div_ceil(1000) as u32)
        .unwrap_or(0);
    o.nodelay = s.nodelay.unwrap_or(true);
    o.freebind = s.freebind.unwrap_or(false);
    o.smart_accept = s.smart_accept.unwrap_or(o.smart_accept);
    o
}

/// What the pools an HTTP vserver sends to may not ask for. The client's
/// own address: an HTTP member connection is reused for many clients.
/// PROXY headers to h2 members: one h2 connection carries every client's
/// streams. (A PROXY header to HTTP/1.1 members works: those connections
/// are then private to the client connection whose header they carry.)
pub fn check_http_pools<'a>(
    vserver: &str,
    used: impl Iterator<Item = &'a Arc<Pool>>,
    span: Range<usize>,
    problems: &mut Vec<Problem>,
) {
    for p in used {
        if p.proxy_protocol.is_some() && p.protocol == model::UpstreamProtocol::H2 {
            problems.push((
                span.clone(),
                format!(
                    "vserver {vserver:?}: pool {:?} sends a PROXY protocol header to h2 members, whose connections carry every client's streams; use protocol = \"http1\" (its connections are kept per client) or X-Forwarded-For",
                    p.name
                ),
            ));
        }
        if p.source_address == Some(SourceAddress::Client) {
            problems.push((
                span.clone(),
                format!(
                    "vserver {vserver:?}: pool {:?} connects from the client's address (source_address = \"client\"), which only tcp and udp vservers do; an HTTP member connection carries many clients",
                    p.name
                ),
            ));
        }
    }
}

/// A pool's `source_address`: an IP address or "client".
pub fn source_address(p: &model::Pool, problems: &mut Vec<Problem>) -> Option<SourceAddress> {
    let v = p.source_address.as_ref()?;
    let text = v.get_ref().trim();
    if text == "client" {
        return Some(SourceAddress::Client);
    }
    match text.parse() {
        Ok(ip) => Some(SourceAddress::Local(ip)),
        Err(_) => {
            problems.push((
                v.span(),
                format!(
                    "pool {:?}: source_address {text:?}: use an IP address of this host or \"client\"",
                    p.name.get_ref()
                ),
            ));
            None
        }
    }
}

/// `proxy_protocol` of a pool.
pub fn proxy_version(p: &model::Pool, problems: &mut Vec<Problem>) -> Option<ProxyVersion> {
    let v = p.proxy_protocol.as_ref()?;
    match v.get_ref().as_str() {
        "v1" => Some(ProxyVersion::V1),
        "v2" => Some(ProxyVersion::V2),
        other => {
            problems.push((
                v.span(),
                format!(
                    "pool {:?}: proxy_protocol {other:?}: use \"v1\" or \"v2\"",
                    p.name.get_ref()
                ),
            ));
            None
        }
    }
}
