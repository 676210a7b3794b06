//! BackendTLSPolicy (Gateway API v1, standard channel): the nodes speak
//! TLS to a Service's pods, verify their certificate against the policy's
//! CA certificates (ConfigMaps, key `ca.crt`) or the system bundle
//! (`wellKnownCACertificates: System`), and send and verify the policy's
//! `hostname` (SNI), or its `subjectAltNames` in place of the hostname
//! (`san_dns`, `san_uri`). A pool whose backends a policy targets gets
//! `[pool.tls] ca = "files/..."`, `sni = HOSTNAME`; the CA bundle is
//! published as a cluster file, checked first with the node's own check
//! (`switchyard::config::check_ca_bundle`), so a bad certificate refuses
//! the policy, never the nodes' configuration.
//!
//! A backend whose policy is not valid (no usable CA certificate, a
//! hostname or a subjectAltName that is not one) is never sent plain text:
//! it is left out of its rule, and a rule left with no backend answers
//! 500, as the suite asks of an invalid policy ("5xx").
//!
//! Conflicts (GEP-713): of the policies that target the same Service and
//! section (a port name, or the whole Service), the oldest (then by
//! name) applies; the others are `Accepted: False, Conflicted`. A policy
//! for one port and one for the whole Service do not conflict: the port's
//! wins on that port.
//!
//! Status: one entry in `status.ancestors` per Gateway of ours whose
//! routes send to a targeted Service, with `Accepted` and `ResolvedRefs`
//! (entries of other controllers are kept: main.rs).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::render::{cond, ns_of, Kind, StatusOf, World};
use crate::types::{BackendTlsPolicy, GROUP};

/// What a backend's connections get.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Use {
    /// No policy targets it: plain HTTP (or h2c).
    Plain,
    /// TLS as the pool's `[pool.tls]` text says.
    Tls(String),
    /// Its policy is not valid: the backend must not be used.
    Refused,
}

/// One policy's judgement.
struct Verdict {
    policy: Arc<BackendTlsPolicy>,
    accepted: (bool, &'static str, String),
    resolved: (bool, &'static str, String),
    /// The `[pool.tls]` table, when the policy is valid.
    table: Option<String>,
}

/// A policy on a Service: the port (section) it names, if any, the policy
/// (an index into `Policies::verdicts`), and whether it applies (false: a
/// newer one on the same section, Conflicted, which still hears who uses
/// the Service).
struct Target {
    section: Option<String>,
    policy: usize,
    applies: bool,
}

/// The cluster's BackendTLSPolicies, judged once per render.
pub(crate) struct Policies {
    verdicts: Vec<Verdict>,
    /// Namespace -> Service -> the policies on it, oldest first.
    targets: BTreeMap<String, BTreeMap<String, Vec<Target>>>,
    /// Gateways (namespace, name) whose routes use each policy's Services.
    uses: RefCell<BTreeMap<usize, BTreeSet<(String, String)>>>,
    /// CA bundles to publish: file name -> PEM.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl Policies {
    pub(crate) fn judge(w: &World) -> Policies {
        let mut sorted: Vec<&Arc<BackendTlsPolicy>> = w.backend_tls.iter().collect();
        sorted.sort_by_key(|p| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                ns_of(&p.metadata),
                p.metadata.name.clone(),
            )
        });
        let mut out = Policies {
            verdicts: Vec::new(),
            targets: BTreeMap::new(),
            uses: RefCell::default(),
            files: BTreeMap::new(),
        };
        for p in sorted {
            let ns = ns_of(&p.metadata);
            let i = out.verdicts.len();
            let mut conflicted = None;
            for t in &p.spec.target_refs {
                if !t.group.as_deref().unwrap_or("").is_empty()
                    || t.kind.as_deref() != Some("Service")
                {
                    continue;
                }
                let slot = out
                    .targets
                    .entry(ns.clone())
                    .or_default()
                    .entry(t.name.clone())
                    .or_default();
                let older = slot
                    .iter()
                    .find(|o| o.applies && o.section == t.section_name)
                    .map(|o| o.policy);
                slot.push(Target {
                    section: t.section_name.clone(),
                    policy: i,
                    applies: older.is_none(),
                });
                if let Some(older) = older {
                    conflicted.get_or_insert_with(|| {
                        let o = &out.verdicts[older].policy.metadata;
                        format!(
                            "BackendTLSPolicy {} (older) targets Service {}{} too",
                            o.name.as_deref().unwrap_or(""),
                            t.name,
                            t.section_name
                                .as_ref()
                                .map(|s| format!(" port {s}"))
                                .unwrap_or_default()
                        )
                    });
                }
            }
            let mut v = judge_one(w, p, &mut out.files);
            if let Some(why) = conflicted {
                v.accepted = (false, "Conflicted", why);
                v.table = None;
            }
            out.verdicts.push(v);
        }
        out
    }

    /// What a backendRef to port `port_name` (None: unnamed) of Service
    /// `ns/name` gets, from a route of Gateway `gateway` (namespace, name).
    pub(crate) fn for_backend(
        &self,
        ns: &str,
        name: &str,
        port_name: Option<&str>,
        gateway: Option<&(String, String)>,
    ) -> Use {
        let Some(slot) = self.targets.get(ns).and_then(|s| s.get(name)) else {
            return Use::Plain;
        };
        if let Some(g) = gateway {
            let mut uses = self.uses.borrow_mut();
            for t in slot {
                uses.entry(t.policy).or_default().insert(g.clone());
            }
        }
        let applying = || slot.iter().filter(|t| t.applies);
        let pick = applying()
            .find(|t| t.section.is_some() && t.section.as_deref() == port_name)
            .or_else(|| applying().find(|t| t.section.is_none()));
        match pick {
            None => Use::Plain,
            Some(t) => match &self.verdicts[t.policy].table {
                Some(t) => Use::Tls(t.clone()),
                None => Use::Refused,
            },
        }
    }

    /// The policies' statuses: an ancestor per Gateway of ours that uses
    /// them (an empty list where we wrote one before, to clear ours).
    pub(crate) fn statuses(&self, controller: &str) -> Vec<StatusOf> {
        let uses = self.uses.borrow();
        let mut out = Vec::new();
        for (i, v) in self.verdicts.iter().enumerate() {
            let m = &v.policy.metadata;
            let gen = m.generation;
            let ancestors: Vec<Value> = uses
                .get(&i)
                .into_iter()
                .flatten()
                .map(|(gns, gname)| {
                    json!({
                        "ancestorRef": {"group": GROUP, "kind": "Gateway", "namespace": gns, "name": gname},
                        "controllerName": controller,
                        "conditions": [
                            cond("Accepted", v.accepted.0, v.accepted.1, &v.accepted.2, gen),
                            cond("ResolvedRefs", v.resolved.0, v.resolved.1, &v.resolved.2, gen),
                        ],
                    })
                })
                .collect();
            let ours_before = v.policy.status["ancestors"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["controllerName"] == controller));
            if !ancestors.is_empty() || ours_before {
                out.push(StatusOf {
                    kind: Kind::BackendTlsPolicy,
                    namespace: m.namespace.clone(),
                    name: m.name.clone().unwrap_or_default(),
                    status: json!({ "ancestors": ancestors }),
                });
            }
        }
        out
    }
}

/// A policy on its own: its CA certificates and hostname.
fn judge_one(
    w: &World,
    p: &Arc<BackendTlsPolicy>,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> Verdict {
    let ns = ns_of(&p.metadata);
    let pname = p.metadata.name.clone().unwrap_or_default();
    let v = &p.spec.validation;
    let refused =
        |accepted: (&'static str, String), resolved: (bool, &'static str, String)| Verdict {
            policy: p.clone(),
            accepted: (false, accepted.0, accepted.1),
            resolved,
            table: None,
        };
    let all_resolved = (true, "ResolvedRefs", "every reference resolved".to_string());
    let host_ok = switchyard::config::types::is_host(&v.hostname)
        && !v.hostname.contains(':')
        && v.hostname.parse::<std::net::IpAddr>().is_err();
    if !host_ok {
        return refused(
            (
                "Invalid",
                format!("hostname {:?} is not a DNS name", v.hostname),
            ),
            all_resolved,
        );
    }
    // subjectAltNames: checked in place of the hostname (still sent).
    let mut san_dns = Vec::new();
    let mut san_uri = Vec::new();
    for san in &v.subject_alt_names {
        match (
            san["type"].as_str(),
            san["hostname"].as_str(),
            san["uri"].as_str(),
        ) {
            (Some("Hostname"), Some(h), _)
                if switchyard::config::types::is_host(h) && !h.contains(':') =>
            {
                san_dns.push(crate::render::q(&h.to_ascii_lowercase()))
            }
            (Some("URI"), _, Some(u))
                if u.split_once("://")
                    .is_some_and(|(s, r)| !s.is_empty() && !r.is_empty())
                    && !u.bytes().any(|b| b <= b' ' || b == 0x7f) =>
            {
                san_uri.push(crate::render::q(u))
            }
            _ => {
                return refused(
                    (
                        "Invalid",
                        format!("subjectAltName {san} is not a Hostname or a URI"),
                    ),
                    all_resolved,
                )
            }
        }
    }
    let mut pem = Vec::new();
    let mut bad: Option<(&'static str, String)> = None;
    for r in &v.ca_certificate_refs {
        if !r.group.as_deref().unwrap_or("").is_empty() || r.kind.as_deref() != Some("ConfigMap") {
            bad.get_or_insert((
                "InvalidKind",
                format!(
                    "caCertificateRef {}/{} {} is not a ConfigMap",
                    r.group.as_deref().unwrap_or(""),
                    r.kind.as_deref().unwrap_or(""),
                    r.name
                ),
            ));
            continue;
        }
        let data = w
            .config_maps
            .iter()
            .find(|c| ns_of(&c.metadata) == ns && c.metadata.name.as_deref() == Some(&r.name))
            .map(|c| {
                c.data
                    .as_ref()
                    .and_then(|d| d.get("ca.crt"))
                    .cloned()
                    .unwrap_or_default()
            });
        match data {
            None => {
                bad.get_or_insert((
                    "InvalidCACertificateRef",
                    format!("ConfigMap {ns}/{} does not exist", r.name),
                ));
            }
            Some(text) => match switchyard::config::check_ca_bundle(text.as_bytes()) {
                Ok(_) => {
                    pem.extend_from_slice(text.trim_end().as_bytes());
                    pem.push(b'\n');
                }
                Err(e) => {
                    bad.get_or_insert((
                        "InvalidCACertificateRef",
                        format!("ConfigMap {ns}/{} key ca.crt: {e}", r.name),
                    ));
                }
            },
        }
    }
    let system = match v.well_known_ca_certificates.as_deref() {
        None => false,
        Some("System") => true,
        Some(other) => {
            return refused(
                (
                    "Invalid",
                    format!("wellKnownCACertificates {other:?} is not supported (System is)"),
                ),
                all_resolved,
            )
        }
    };
    let resolved = match &bad {
        Some((reason, why)) => (false, *reason, why.clone()),
        None => all_resolved,
    };
    if pem.is_empty() && !system {
        let why = bad
            .map(|(_, w)| w)
            .unwrap_or_else(|| "no caCertificateRefs and no wellKnownCACertificates".into());
        return refused(("NoValidCACertificate", why), resolved);
    }
    let mut table = String::from("[pool.tls]\n");
    if !pem.is_empty() {
        let file = format!("btls-{ns}-{pname}.crt");
        table.push_str(&format!(
            "ca = {}\n",
            crate::render::q(&format!("files/{file}"))
        ));
        files.insert(file, pem);
    }
    table.push_str(&format!(
        "sni = {}\n",
        crate::render::q(&v.hostname.to_ascii_lowercase())
    ));
    if !san_dns.is_empty() {
        table.push_str(&format!("san_dns = [{}]\n", san_dns.join(", ")));
    }
    if !san_uri.is_empty() {
        table.push_str(&format!("san_uri = [{}]\n", san_uri.join(", ")));
    }
    Verdict {
        policy: p.clone(),
        accepted: (
            true,
            "Accepted",
            "the nodes speak TLS to the targeted Services".into(),
        ),
        resolved,
        table: Some(table),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::render;
    use crate::render::test_world::{self, settings, shared};

    /// A CA certificate (EC P-256, self-signed, valid for 100 years).
    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBezCCASGgAwIBAgIUVNXMg9UFRj1bWO32J8WSJvGWI6AwCgYIKoZIzj0EAwIw\nEjEQMA4GA1UEAwwHVGVzdCBDQTAgFw0yNjEyMDQxODE1MDlaGA8yMTI2MTExMDE4\nMTUwOVowEjEQMA4GA1UEAwwHVGVzdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEH\nA0IABEogR6hHimWHUhK2pJZnCD0hi8sI+E2Z7lK/3qQb7W0YmdfURyWLzvKRdlDM\n7a7VEwhYZHUhWWYwYvAf377cUmCjUzBRMB0GA1UdDgQWBBTnhzAQOWjg3t7KHAL8\nz+LiE2PjLjAfBgNVHSMEGDAWgBTnhzAQOWjg3t7KHAL8z+LiE2PjLjAPBgNVHRMB\nAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIQDqZMMOJTTCe6EB5JhccfR1clZ+\nDDVFw0zj1tXVYhVXdQIgMKQw4tgs4e5HNkGzIDdRdzuCxo5sYKP+t6huwzWGiiQ=\n-----END CERTIFICATE-----\n";

    fn world(policies: Vec<Value>) -> World {
        let mut w = test_world::one_gateway();
        for (i, name) in ["secure", "plain"].iter().enumerate() {
            let ip = format!("10.0.0.{}", i + 1);
            test_world::add_service(&mut w, name, (443, "btls", 8443), &ip);
        }
        w.config_maps.push(shared(
            json!({"metadata": {"name": "ca", "namespace": "default"}, "data": {"ca.crt": CA}}),
        ));
        w.config_maps.push(shared(json!({"metadata": {"name": "junk", "namespace": "default"}, "data": {"ca.crt": "not a certificate"}})));
        w.routes.push(shared(json!({"metadata": {"name": "r", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [
                {"matches": [{"path": {"type": "Exact", "value": "/secure"}}], "backendRefs": [{"name": "secure", "port": 443}]},
                {"matches": [{"path": {"type": "Exact", "value": "/plain"}}], "backendRefs": [{"name": "plain", "port": 443}]}]}})));
        for (i, p) in policies.into_iter().enumerate() {
            let mut p = p;
            p["metadata"]["creationTimestamp"] = json!(format!("2026-01-01T00:00:0{i}Z"));
            w.backend_tls.push(shared(p));
        }
        w
    }

    fn policy(name: &str, section: Option<&str>, validation: Value) -> Value {
        let mut target = json!({"group": "", "kind": "Service", "name": "secure"});
        if let Some(s) = section {
            target["sectionName"] = json!(s);
        }
        json!({"metadata": {"name": name, "namespace": "default", "generation": 1},
            "spec": {"targetRefs": [target], "validation": validation}})
    }

    /// (Accepted, ResolvedRefs) of a policy's ancestor entry for gw.
    fn conditions(out: &crate::render::Output, name: &str) -> (String, String) {
        let st = out
            .statuses
            .iter()
            .find(|s| s.kind == Kind::BackendTlsPolicy && s.name == name)
            .unwrap_or_else(|| panic!("no status for {name}"));
        let a = &st.status["ancestors"][0];
        assert_eq!(a["ancestorRef"]["name"], "gw", "{a}");
        let c = |i: usize| {
            format!(
                "{} {}",
                a["conditions"][i]["status"].as_str().unwrap_or(""),
                a["conditions"][i]["reason"].as_str().unwrap_or("")
            )
        };
        (c(0), c(1))
    }

    #[test]
    fn a_valid_policy_gives_its_services_pools_tls_and_says_so() {
        let out = render(
            &world(vec![policy(
                "p",
                Some("btls"),
                json!({"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}], "hostname": "ABC.example.com"}),
            )]),
            &settings(),
        );
        let text = out.config.clone().unwrap();
        let secure = text.find("name = \"default.r.0\"").unwrap();
        let plain = text.find("name = \"default.r.1\"").unwrap();
        let tls = text
            .find("[pool.tls]\nca = \"files/btls-default-p.crt\"\nsni = \"abc.example.com\"\n")
            .expect(&text);
        assert!(tls > secure && (plain < secure || tls < plain), "{text}");
        assert_eq!(text.matches("[pool.tls]").count(), 1, "{text}");
        assert_eq!(
            out.files["btls-default-p.crt"],
            CA.trim_end()
                .as_bytes()
                .iter()
                .chain(b"\n")
                .copied()
                .collect::<Vec<u8>>()
        );
        assert_eq!(
            conditions(&out, "p"),
            ("True Accepted".into(), "True ResolvedRefs".into())
        );
    }

    /// A RequestMirror to a Service a policy targets: the mirror's pool
    /// speaks TLS as the policy says; with an invalid policy no copy goes
    /// (never plain text).
    #[test]
    fn mirrors_to_a_policy_targeted_service_speak_its_tls() {
        let with_mirror = |policy_validation: Value| {
            let mut w = world(vec![policy("p", None, policy_validation)]);
            w.routes = vec![shared(
                json!({"metadata": {"name": "m", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"parentRefs": [{"name": "gw"}], "rules": [
                    {"filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "secure", "port": 443}}}],
                     "backendRefs": [{"name": "plain", "port": 443}]}]}}),
            )];
            render(&w, &settings()).config.expect("a configuration")
        };
        let text =
            with_mirror(json!({"wellKnownCACertificates": "System", "hostname": "a.example"}));
        assert!(
            text.contains("mirror = [{ pool = \"default.m.0.mirror0\" }]"),
            "{text}"
        );
        assert!(
            text.contains("name = \"default.m.0.mirror0\"\nalgorithm = \"round-robin\"\ncluster_members = true\n[pool.tls]\nsni = \"a.example\"\n"),
            "{text}"
        );
        let text =
            with_mirror(json!({"wellKnownCACertificates": "System", "hostname": "not a host"}));
        assert!(!text.contains("mirror"), "{text}");
    }

    #[test]
    fn invalid_and_conflicting_policies_are_told_and_their_backends_get_no_plain_text() {
        let cases = [
            (
                json!({"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "missing"}], "hostname": "a.example"}),
                (
                    "False NoValidCACertificate",
                    "False InvalidCACertificateRef",
                ),
            ),
            (
                json!({"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "junk"}], "hostname": "a.example"}),
                (
                    "False NoValidCACertificate",
                    "False InvalidCACertificateRef",
                ),
            ),
            (
                json!({"caCertificateRefs": [{"group": "invalid.io", "kind": "InvalidKind", "name": "x"}], "hostname": "a.example"}),
                ("False NoValidCACertificate", "False InvalidKind"),
            ),
            (
                json!({"wellKnownCACertificates": "System", "hostname": "not a host"}),
                ("False Invalid", "True ResolvedRefs"),
            ),
        ];
        for (validation, (accepted, resolved)) in cases {
            let out = render(
                &world(vec![policy("p", None, validation.clone())]),
                &settings(),
            );
            assert_eq!(
                conditions(&out, "p"),
                (accepted.into(), resolved.into()),
                "{validation}"
            );
            let text = out.config.unwrap();
            assert!(!text.contains("[pool.tls]"), "{text}");
            // The targeted Service's rule answers 500; the other is served.
            assert!(text.contains("action = { status = 500"), "{text}");
            assert!(
                text.contains("action = { pool = \"default.r.1\" }"),
                "{text}"
            );
        }
        // subjectAltNames: checked in place of the hostname; one that is
        // neither a Hostname nor a URI refuses the policy.
        let out = render(
            &world(vec![policy(
                "p",
                None,
                json!({"wellKnownCACertificates": "System", "hostname": "a.example",
                "subjectAltNames": [{"type": "Hostname", "hostname": "B.example"}, {"type": "URI", "uri": "spiffe://td/ns/a"}]}),
            )]),
            &settings(),
        );
        assert!(
            out.config.unwrap().contains("[pool.tls]\nsni = \"a.example\"\nsan_dns = [\"b.example\"]\nsan_uri = [\"spiffe://td/ns/a\"]\n")
        );
        let out = render(
            &world(vec![policy(
                "p",
                None,
                json!({"wellKnownCACertificates": "System", "hostname": "a.example",
                "subjectAltNames": [{"type": "URI", "uri": "no scheme"}]}),
            )]),
            &settings(),
        );
        assert_eq!(conditions(&out, "p").0, "False Invalid");
        assert!(out.config.unwrap().contains("action = { status = 500"));
        // Some CA refs bad, one good: served, ResolvedRefs says which.
        let out = render(
            &world(vec![policy(
                "p",
                None,
                json!({"caCertificateRefs": [
                {"group": "", "kind": "ConfigMap", "name": "missing"},
                {"group": "", "kind": "ConfigMap", "name": "ca"}], "hostname": "a.example"}),
            )]),
            &settings(),
        );
        assert_eq!(
            conditions(&out, "p"),
            (
                "True Accepted".into(),
                "False InvalidCACertificateRef".into()
            )
        );
        assert!(out.config.unwrap().contains("sni = \"a.example\""));
        // The system bundle: no ca line.
        let out = render(
            &world(vec![policy(
                "p",
                None,
                json!({"wellKnownCACertificates": "System", "hostname": "a.example"}),
            )]),
            &settings(),
        );
        assert!(out
            .config
            .unwrap()
            .contains("[pool.tls]\nsni = \"a.example\"\n"));
        // Two on the same section: the older applies, the newer is
        // Conflicted; one on the whole Service beside one on its port is
        // not.
        let v = json!({"wellKnownCACertificates": "System", "hostname": "old.example"});
        let v2 = json!({"wellKnownCACertificates": "System", "hostname": "new.example"});
        let out = render(
            &world(vec![
                policy("old", Some("btls"), v.clone()),
                policy("new", Some("btls"), v2.clone()),
            ]),
            &settings(),
        );
        assert_eq!(conditions(&out, "old").0, "True Accepted");
        assert_eq!(conditions(&out, "new").0, "False Conflicted");
        assert!(out.config.unwrap().contains("sni = \"old.example\""));
        let out = render(
            &world(vec![
                policy("whole", None, v),
                policy("port", Some("btls"), v2),
            ]),
            &settings(),
        );
        assert_eq!(conditions(&out, "whole").0, "True Accepted");
        assert_eq!(conditions(&out, "port").0, "True Accepted");
        assert!(out.config.unwrap().contains("sni = \"new.example\""));
    }
}
