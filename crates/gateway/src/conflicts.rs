//! Listeners that cannot be told apart (the Gateway API's "distinct
//! listeners", Gateway spec.listeners): they are `Conflicted: True` and
//! none of them is programmed (the spec forbids picking a winner).
//!
//! - ProtocolConflict: one address and port carrying listeners the node
//!   cannot serve on one socket: HTTP beside HTTPS or TLS, TCP beside
//!   anything (the spec's own rule), and, a limit of Switchyard's, HTTPS
//!   (TLS terminated) beside TLS passthrough: one vserver either
//!   terminates TLS or relays it. UDP is its own transport: a UDP
//!   listener shares a port number with a TCP-based one freely. Checked
//!   across the Gateways that share an address, as they share the
//!   node's sockets.
//! - HostnameConflict: two listeners of one Gateway on one port with the
//!   same protocol family and the same hostname (none counts as one
//!   value; TCP and UDP listeners have no hostname, so two on one port
//!   always conflict). Across Gateways the same port and hostname is
//!   not a conflict: their routes share the vserver, as before.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::render::ns_of;
use crate::types::Gateway;

/// (gateway namespace, gateway name, listener name).
pub(crate) type ListenerId = (String, String, String);

/// The conflicted listeners: reason (`ProtocolConflict` or
/// `HostnameConflict`) and a message naming the others.
pub(crate) fn find(
    gateways: &[(&Gateway, IpAddr)],
) -> BTreeMap<ListenerId, (&'static str, String)> {
    // (address, port, udp) -> listeners: (id, family, hostname, gateway index).
    type Entry<'a> = (ListenerId, &'static str, Option<String>, usize);
    let mut by_port: BTreeMap<(IpAddr, i32, bool), Vec<Entry>> = BTreeMap::new();
    for (gi, (g, ip)) in gateways.iter().enumerate() {
        for l in &g.spec.listeners {
            let Some(family) = family(&l.protocol) else {
                continue; // refused as UnsupportedProtocol anyway
            };
            let id = (
                ns_of(&g.metadata),
                g.metadata.name.clone().unwrap_or_default(),
                l.name.clone(),
            );
            let host = l.hostname.as_ref().map(|h| h.to_ascii_lowercase());
            by_port
                .entry((*ip, l.port, family == "UDP"))
                .or_default()
                .push((id, family, host, gi));
        }
    }
    let mut out = BTreeMap::new();
    for ((_, port, _), ls) in by_port {
        let mut families: Vec<&str> = ls.iter().map(|l| l.1).collect();
        families.sort();
        families.dedup();
        if families.len() > 1 {
            let why = format!(
                "port {port} carries {} listeners ({}): one port serves one of them",
                families.join(" and "),
                ls.iter()
                    .map(|(id, ..)| format!("{}/{} {}", id.0, id.1, id.2))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for (id, ..) in ls {
                out.insert(id, ("ProtocolConflict", why.clone()));
            }
            continue;
        }
        for (i, (id, _, host, gi)) in ls.iter().enumerate() {
            let twins: Vec<&str> = ls
                .iter()
                .enumerate()
                .filter(|(j, (_, _, h, gj))| *j != i && gj == gi && h == host)
                .map(|(_, (other, ..))| other.2.as_str())
                .collect();
            if !twins.is_empty() {
                out.insert(
                    id.clone(),
                    (
                        "HostnameConflict",
                        format!(
                            "listener {} has the port ({port}) and hostname ({}) of {}",
                            id.2,
                            host.as_deref().unwrap_or("none"),
                            twins.join(", ")
                        ),
                    ),
                );
            }
        }
    }
    out
}

/// What shares one vserver: the protocols whose listeners may share a
/// port (told apart by hostname).
fn family(protocol: &str) -> Option<&'static str> {
    Some(match protocol {
        "HTTP" => "HTTP",
        "HTTPS" => "HTTPS",
        "TLS" => "TLS passthrough",
        "TCP" => "TCP",
        "UDP" => "UDP",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gw(name: &str, listeners: serde_json::Value) -> Gateway {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "n"},
            "spec": {"gatewayClassName": "c", "listeners": listeners},
        }))
        .unwrap()
    }

    fn reasons(gs: &[Gateway]) -> Vec<(String, &'static str)> {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let located: Vec<(&Gateway, IpAddr)> = gs.iter().map(|g| (g, ip)).collect();
        find(&located)
            .into_iter()
            .map(|((_, g, l), (r, _))| (format!("{g}/{l}"), r))
            .collect()
    }

    #[test]
    fn indistinct_listeners_conflict_and_distinct_ones_do_not() {
        let g = gw(
            "a",
            serde_json::json!([
                {"name": "web", "port": 80, "protocol": "HTTP"},
                {"name": "tls", "port": 80, "protocol": "HTTPS"},
                {"name": "x", "port": 81, "protocol": "HTTP", "hostname": "x.example"},
                {"name": "x2", "port": 81, "protocol": "HTTP", "hostname": "X.example"},
                {"name": "y", "port": 81, "protocol": "HTTP", "hostname": "y.example"},
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                {"name": "t1", "port": 90, "protocol": "TCP"},
                {"name": "t2", "port": 90, "protocol": "TCP"},
            ]),
        );
        assert_eq!(
            reasons(&[g]),
            vec![
                ("a/t1".into(), "HostnameConflict"),
                ("a/t2".into(), "HostnameConflict"),
                ("a/tls".into(), "ProtocolConflict"),
                ("a/web".into(), "ProtocolConflict"),
                ("a/x".into(), "HostnameConflict"),
                ("a/x2".into(), "HostnameConflict"),
            ]
        );
        // Two Gateways on one address: the same HTTP port and host share
        // the vserver; TCP beside HTTP on one port does not.
        let a = gw(
            "a",
            serde_json::json!([{"name": "web", "port": 80, "protocol": "HTTP"}]),
        );
        let b = gw(
            "b",
            serde_json::json!([{"name": "web", "port": 80, "protocol": "HTTP"}]),
        );
        assert!(reasons(&[a.clone(), b]).is_empty());
        let c = gw(
            "c",
            serde_json::json!([{"name": "db", "port": 80, "protocol": "TCP"}]),
        );
        assert_eq!(reasons(&[a, c]).len(), 2);
    }
}
