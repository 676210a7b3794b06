//! Cases of the Gateway API v1.7 conformance suite (GATEWAY-HTTP profile,
//! core), ported: the suite's own manifests (k8s/conformance, copied from
//! sigs.k8s.io/gateway-api/conformance v1.7.0 under its Apache-2.0
//! licence) with the expectations of its Go tests transcribed, run against
//! our echo backends instead of the suite's images (which cannot be
//! pulled here: no kubelet, no registry). The base manifests' Deployments
//! become one "pod" each (an EndpointSlice naming an echo server of
//! tests/echo.py, which answers with the pod's name and namespace as the
//! suite's echo-basic does), and each Gateway gets an address of its own
//! (127.0.0.20 + n) so that Gateways sharing port 80 stay apart, as
//! they do with one load balancer each in a cloud.
//!
//! Each case applies its manifest, waits for its route to be Accepted (or
//! for the condition the case checks), checks every expected response
//! (eventually, as the suite's MakeRequestAndExpectEventuallyConsistent
//! does), then deletes what it applied. The results are written in the
//! suite's ConformanceReport format.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::{condition, eventually, get, path_of, repo, run as sh, Api};

/// The base manifests' Services that have a Deployment: (name, namespace).
pub const BACKENDS: &[(&str, &str)] = &[
    ("infra-backend-v1", "gateway-conformance-infra"),
    ("infra-backend-v2", "gateway-conformance-infra"),
    ("infra-backend-v3", "gateway-conformance-infra"),
    ("app-backend-v1", "gateway-conformance-app-backend"),
    ("app-backend-v2", "gateway-conformance-app-backend"),
    ("web-backend", "gateway-conformance-web-backend"),
];

pub const INFRA: &str = "gateway-conformance-infra";

/// The GATEWAY-HTTP profile's core cases in the suite (its snapshot of
/// 2026-08-21): all of them are ported.
const CORE_CASES: usize = 36;

/// The controller name the tests run switchyard-gateway with.
const CONTROLLER: &str = "switchyard.dev/gateway-controller";

fn dir() -> PathBuf {
    repo().join("k8s/conformance/gateway-api-v1.7.0")
}

/// The documents of a manifest file, as JSON.
fn docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let text = text
        .replace("{GATEWAY_CLASS_NAME}", "switchyard")
        .replace("{GATEWAY_CONTROLLER_NAME}", CONTROLLER);
    let mut out = Vec::new();
    for d in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{file}: {e}"));
        if v.is_object() {
            out.push(v);
        }
    }
    out
}

/// What one request should get.
struct Expect {
    /// The request's Host (the suite's default: example.com).
    host: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    /// 200 with this backend (its pod's name starts with it), or another
    /// status.
    backend: Option<&'static str>,
    status: u16,
    /// A redirect's Location host and path.
    location: Option<(&'static str, &'static str)>,
    /// The backend's namespace.
    namespace: &'static str,
    /// Headers the backend must see (values joined with ","), and headers
    /// it must not see.
    seen: &'static [(&'static str, &'static str)],
    absent: &'static [&'static str],
    /// Sent to this Gateway rather than the case's.
    at: Option<&'static str>,
    /// Sent over TLS to the listener port 443 (SNI and Host: `host`).
    tls: bool,
    /// The path and the Host the backend must see (a URLRewrite's).
    saw_path: Option<&'static str>,
    saw_host: Option<&'static str>,
    /// Backends (in the infra namespace) that must get a copy of the
    /// request (RequestMirror): their echo logs it.
    mirrored_to: &'static [&'static str],
    /// The TLS server name the backend must have been sent
    /// (BackendTLSPolicy's hostname).
    sni: Option<&'static str>,
}

impl Expect {
    const fn on(self, host: &'static str) -> Expect {
        Expect { host, ..self }
    }

    const fn in_ns(self, namespace: &'static str) -> Expect {
        Expect { namespace, ..self }
    }

    /// The backend sees this path (and, with `Some`, this Host).
    const fn reaching(self, path: &'static str, host: Option<&'static str>) -> Expect {
        Expect {
            saw_path: Some(path),
            saw_host: host,
            ..self
        }
    }

    /// The backend was sent this TLS server name.
    const fn with_sni(self, name: &'static str) -> Expect {
        Expect {
            sni: Some(name),
            ..self
        }
    }

    /// Copies of the request reach these backends too.
    const fn mirrored_to(self, backends: &'static [&'static str]) -> Expect {
        Expect {
            mirrored_to: backends,
            ..self
        }
    }

    const fn over_tls(self) -> Expect {
        Expect { tls: true, ..self }
    }

    const fn at(self, gateway: &'static str) -> Expect {
        Expect {
            at: Some(gateway),
            ..self
        }
    }

    const fn seeing(
        self,
        seen: &'static [(&'static str, &'static str)],
        absent: &'static [&'static str],
    ) -> Expect {
        Expect {
            seen,
            absent,
            ..self
        }
    }
}

const fn to(path: &'static str, backend: &'static str) -> Expect {
    Expect {
        path,
        headers: &[],
        backend: Some(backend),
        status: 200,
        location: None,
        host: "example.com",
        namespace: INFRA,
        seen: &[],
        absent: &[],
        at: None,
        tls: false,
        saw_path: None,
        saw_host: None,
        mirrored_to: &[],
        sni: None,
    }
}

const fn with(
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    backend: &'static str,
) -> Expect {
    Expect {
        path,
        headers,
        backend: Some(backend),
        status: 200,
        location: None,
        host: "example.com",
        namespace: INFRA,
        seen: &[],
        absent: &[],
        at: None,
        tls: false,
        saw_path: None,
        saw_host: None,
        mirrored_to: &[],
        sni: None,
    }
}

const fn status(
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    status: u16,
) -> Expect {
    Expect {
        path,
        headers,
        backend: None,
        status,
        location: None,
        host: "example.com",
        namespace: INFRA,
        seen: &[],
        absent: &[],
        at: None,
        tls: false,
        saw_path: None,
        saw_host: None,
        mirrored_to: &[],
        sni: None,
    }
}

/// The rewrite cases' header modifier: what the request carries, and
/// what the backend must see of it.
const TO_MODIFY: &[(&str, &str)] = &[
    ("X-Header-Remove", "remove-val"),
    ("X-Header-Add-Append", "append-val-1"),
    ("X-Header-Set", "set-val"),
];
const MODIFIED: &[(&str, &str)] = &[
    ("X-Header-Add", "header-val-1"),
    ("X-Header-Add-Append", "append-val-1,header-val-2"),
    ("X-Header-Set", "set-overwrites-values"),
];

const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";

/// GatewayNameMaximumLength's Gateway: a name of 253 characters.
const LONG_GATEWAY_NAME: &str = "gateway-name-maximum-length-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// What a Gateway listener's status must say (the suite's
/// GatewayStatusMustHaveListeners): supported kinds it must list (none at
/// all when empty), conditions (type, status, reason; "" is any reason)
/// and attached routes.
struct ListenerWant {
    gateway: &'static str,
    listener: &'static str,
    kinds: &'static [&'static str],
    conditions: &'static [(&'static str, &'static str, &'static str)],
    attached: i64,
}

/// A listener of `gateway` taking HTTPRoutes, with these conditions and
/// attached routes (most cases' listeners).
const fn http_listener(
    gateway: &'static str,
    listener: &'static str,
    conditions: &'static [(&'static str, &'static str, &'static str)],
    attached: i64,
) -> ListenerWant {
    ListenerWant {
        gateway,
        listener,
        kinds: &["HTTPRoute"],
        conditions,
        attached,
    }
}

/// A case's own step against the API: Err says what did not hold.
type Step = fn(&Api) -> Result<(), String>;

/// A change to the manifest's object at an index, and the listener
/// statuses the changed Gateway must have then.
type Change = (usize, fn(&mut Value), &'static [ListenerWant]);

struct Case {
    name: &'static str,
    manifest: &'static str,
    /// The route (in the infra namespace, or `namespace/name`) and the
    /// condition (type, status, reason) its parent must show; each of
    /// `routes` (more routes of the manifest) must be Accepted.
    route: &'static str,
    condition: (&'static str, &'static str, &'static str),
    routes: &'static [&'static str],
    /// The Gateway the requests go to.
    gateway: &'static str,
    expect: Vec<Expect>,
    /// An object of the manifest deleted after `expect` held (`kind/namespace/name`
    /// as the API's path says it), and what must hold then.
    then_delete: Option<&'static str>,
    then_expect: Vec<Expect>,
    /// The Gateway's listeners' `attachedRoutes` once the routes are in:
    /// (listener, count); listener "*" is every listener.
    attached: &'static [(&'static str, i64)],
    /// More conditions the route's parent must show, and routes whose
    /// parent must show a condition other than Accepted.
    more: &'static [(&'static str, &'static str, &'static str)],
    others: &'static [(&'static str, (&'static str, &'static str, &'static str))],
    /// Listener statuses to wait for.
    listeners: &'static [ListenerWant],
    /// Gateways whose conditions must all carry their latest generation
    /// (the suite's GatewayMustHaveLatestConditions).
    latest: &'static [&'static str],
    /// The ObservedGenerationBump cases: a change to the manifest's first
    /// object, applied once its conditions carry its generation; then
    /// its generation must have grown and its conditions follow it.
    bump: Option<fn(&mut Value)>,
    /// More changes, each to the manifest's object at an index, then the
    /// listener statuses the changed Gateway must have, and no others
    /// (GatewayModifyListeners).
    changes: Vec<Change>,
    /// The share of requests each backend must get (the suite's
    /// TestWeightedDistribution: 500 requests, within 0.05 of each share).
    distribution: &'static [(&'static str, f64)],
    /// Done once the manifest is applied, with infra-backend-v1's pod
    /// address: what the cluster's controllers would do (the suite's
    /// own steps, or the EndpointSlice controller this API server lacks).
    prepare: Option<fn(&Api, &str)>,
    /// Conditions Gateways must show: (Gateway, (type, status, reason)).
    gateway_conditions: &'static [(&'static str, (&'static str, &'static str, &'static str))],
    /// An extended case: the feature it shows (reported apart from core).
    extended: Option<&'static str>,
    /// Services (and their ports' names) whose pod is the TLS backend
    /// (the suite's "tls-backend" Deployment): EndpointSlices to it.
    tls_services: &'static [(&'static str, &'static [&'static str])],
    /// BackendTLSPolicy conditions to wait for: (policy, Gateway,
    /// (type, status, reason)).
    policy_conditions: &'static [(
        &'static str,
        &'static str,
        (&'static str, &'static str, &'static str),
    )],
    /// A last step of the case's own, once the rest held.
    then: Option<Step>,
    /// Mirrored shares (the suite's HTTPRouteRequestPercentageMirror):
    /// of 500 requests to the path, the backend must get a copy of
    /// `percent` % within three standard deviations of the binomial.
    mirror_shares: &'static [(&'static str, &'static str, f64)],
}

impl Default for Case {
    fn default() -> Self {
        Case {
            name: "",
            manifest: "",
            route: "",
            condition: ("Accepted", "True", "Accepted"),
            routes: &[],
            gateway: "same-namespace",
            expect: Vec::new(),
            then_delete: None,
            then_expect: Vec::new(),
            attached: &[],
            more: &[],
            others: &[],
            listeners: &[],
            latest: &[],
            bump: None,
            changes: Vec::new(),
            gateway_conditions: &[],
            distribution: &[],
            prepare: None,
            extended: None,
            mirror_shares: &[],
            tls_services: &[],
            policy_conditions: &[],
            then: None,
        }
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "HTTPRouteSimpleSameNamespace",
            manifest: "httproute-simple-same-namespace.yaml",
            route: "gateway-conformance-infra-test",
            condition: ("Accepted", "True", "Accepted"),
            expect: vec![to("/", V1)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteMatching",
            manifest: "httproute-matching.yaml",
            route: "matching",
            condition: ("Accepted", "True", "Accepted"),
            expect: vec![
                to("/", V1),
                to("/example", V1),
                with("/", &[("Version", "one")], V1),
                to("/v2", V2),
                to("/v2/example", V2),
                with("/", &[("Version", "two")], V2),
                to("/v2/", V2),
                to("/v2example", V1),
                to("/foo/v2/example", V1),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteExactPathMatching",
            manifest: "httproute-exact-path-matching.yaml",
            route: "exact-matching",
            condition: ("Accepted", "True", "Accepted"),
            expect: vec![
                to("/one", V1),
                to("/two", V2),
                status("/", &[], 404),
                status("/one/example", &[], 404),
                status("/two/", &[], 404),
                status("/Two", &[], 404),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteHeaderMatching",
            manifest: "httproute-header-matching.yaml",
            route: "header-matching",
            condition: ("Accepted", "True", "Accepted"),
            expect: vec![
                with("/", &[("Version", "one")], V1),
                with("/", &[("Version", "two")], V2),
                with("/", &[("Version", "two"), ("Color", "orange")], V1),
                with("/", &[("Version", "two"), ("Color", "blue")], V2),
                status("/", &[("Color", "orange")], 404),
                status("/", &[("Some-Other-Header", "one")], 404),
                with("/", &[("Color", "blue")], V1),
                with("/", &[("Color", "green")], V1),
                with("/", &[("Color", "red")], V2),
                with("/", &[("Color", "yellow")], V2),
                status("/", &[("Color", "purple")], 404),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteRedirectHostAndStatus",
            manifest: "httproute-redirect-host-and-status.yaml",
            route: "redirect-host-and-status",
            condition: ("Accepted", "True", "Accepted"),
            expect: vec![
                Expect {
                    path: "/hostname-redirect",
                    headers: &[],
                    backend: None,
                    status: 302,
                    location: Some(("example.org", "/hostname-redirect")),
                    host: "example.com",
                    namespace: INFRA,
                    seen: &[],
                    absent: &[],
                    at: None,
                    tls: false,
                    saw_path: None,
                    saw_host: None,
                    mirrored_to: &[],
                    sni: None,
                },
                Expect {
                    path: "/host-and-status",
                    headers: &[],
                    backend: None,
                    status: 301,
                    location: Some(("example.org", "/host-and-status")),
                    host: "example.com",
                    namespace: INFRA,
                    seen: &[],
                    absent: &[],
                    at: None,
                    tls: false,
                    saw_path: None,
                    saw_host: None,
                    mirrored_to: &[],
                    sni: None,
                },
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteInvalidNonExistentBackendRef",
            manifest: "httproute-invalid-nonexistent-backendref.yaml",
            route: "invalid-nonexistent-backend-ref",
            condition: ("ResolvedRefs", "False", "BackendNotFound"),
            expect: vec![status("/", &[], 500)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteInvalidCrossNamespaceBackendRef",
            manifest: "httproute-invalid-cross-namespace-backend-ref.yaml",
            route: "invalid-cross-namespace-backend-ref",
            condition: ("ResolvedRefs", "False", "RefNotPermitted"),
            expect: vec![status("/", &[], 500)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteMatchingAcrossRoutes",
            manifest: "httproute-matching-across-routes.yaml",
            route: "matching-part1",
            routes: &["matching-part2"],
            expect: vec![
                to("/", V1),
                to("/example", V1),
                to("/example", V1).on("example.net"),
                with("/example", &[("Version", "one")], V1),
                to("/v2", V2),
                to("/v2", V1).on("example.net"),
                to("/v2/example", V2),
                with("/", &[("Version", "two")], V2),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteInvalidBackendRefUnknownKind",
            manifest: "httproute-invalid-backendref-unknown-kind.yaml",
            route: "invalid-backend-ref-unknown-kind",
            condition: ("ResolvedRefs", "False", "InvalidKind"),
            expect: vec![status("/v2", &[], 500)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteInvalidParentRefNotMatchingSectionName",
            manifest: "httproute-invalid-parentref-not-matching-section-name.yaml",
            route: "httproute-listener-not-matching-section-name",
            condition: ("Accepted", "False", "NoMatchingParent"),
            attached: &[("*", 0)],
            ..Default::default()
        },
        Case {
            name: "HTTPRoutePartiallyInvalidViaInvalidReferenceGrant",
            manifest: "httproute-partially-invalid-via-invalid-reference-grant.yaml",
            route: "invalid-reference-grant",
            condition: ("ResolvedRefs", "False", "RefNotPermitted"),
            expect: vec![
                status("/v2", &[], 500),
                to("/", "app-backend-v1").in_ns("gateway-conformance-app-backend"),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteReferenceGrant",
            manifest: "httproute-reference-grant.yaml",
            route: "reference-grant",
            condition: ("ResolvedRefs", "True", "ResolvedRefs"),
            expect: vec![to("/", "web-backend").in_ns("gateway-conformance-web-backend")],
            then_delete: Some("/apis/gateway.networking.k8s.io/v1/namespaces/gateway-conformance-web-backend/referencegrants/reference-grant"),
            then_expect: vec![status("/", &[], 500)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteCrossNamespace",
            manifest: "httproute-cross-namespace.yaml",
            route: "gateway-conformance-web-backend/cross-namespace",
            condition: ("ResolvedRefs", "True", "ResolvedRefs"),
            gateway: "backend-namespaces",
            expect: vec![to("/", "web-backend").in_ns("gateway-conformance-web-backend")],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteListenerHostnameMatching",
            manifest: "httproute-listener-hostname-matching.yaml",
            route: "backend-v1",
            condition: ("ResolvedRefs", "True", "ResolvedRefs"),
            routes: &["backend-v2", "backend-v3"],
            gateway: "httproute-listener-hostname-matching",
            expect: vec![
                to("/", V1).on("bar.com"),
                to("/", V2).on("foo.bar.com"),
                to("/", V3).on("baz.bar.com"),
                to("/", V3).on("boo.bar.com"),
                to("/", V3).on("multiple.prefixes.bar.com"),
                to("/", V3).on("multiple.prefixes.foo.com"),
                status("/", &[], 404).on("foo.com"),
                status("/", &[], 404).on("no.matching.host"),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteRequestHeaderModifier",
            manifest: "httproute-request-header-modifier.yaml",
            route: "request-header-modifier",
            expect: vec![
                with("/set", &[("Some-Other-Header", "val")], V1).seeing(
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Set", "set-overwrites-values"),
                    ],
                    &[],
                ),
                with(
                    "/set",
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Set", "some-other-value"),
                    ],
                    V1,
                )
                .seeing(
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Set", "set-overwrites-values"),
                    ],
                    &[],
                ),
                with("/add", &[("Some-Other-Header", "val")], V1).seeing(
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Add", "add-appends-values"),
                    ],
                    &[],
                ),
                with(
                    "/add",
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Add", "some-other-value"),
                    ],
                    V1,
                )
                .seeing(
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Add", "some-other-value,add-appends-values"),
                    ],
                    &[],
                ),
                with("/remove", &[("X-Header-Remove", "val")], V1)
                    .seeing(&[], &["X-Header-Remove"]),
                with(
                    "/multiple",
                    &[
                        ("X-Header-Set-2", "set-val-2"),
                        ("X-Header-Add-2", "add-val-2"),
                        ("X-Header-Remove-2", "remove-val-2"),
                        ("Another-Header", "another-header-val"),
                    ],
                    V1,
                )
                .seeing(
                    &[
                        ("X-Header-Set-1", "header-set-1"),
                        ("X-Header-Set-2", "header-set-2"),
                        ("X-Header-Add-1", "header-add-1"),
                        ("X-Header-Add-2", "add-val-2,header-add-2"),
                        ("X-Header-Add-3", "header-add-3"),
                        ("Another-Header", "another-header-val"),
                    ],
                    &["X-Header-Remove-1", "X-Header-Remove-2"],
                ),
                with(
                    "/case-insensitivity",
                    &[
                        ("x-header-set", "original-val-set"),
                        ("x-header-add", "original-val-add"),
                        ("x-header-remove", "original-val-remove"),
                        ("Another-Header", "another-header-val"),
                    ],
                    V1,
                )
                .seeing(
                    &[
                        ("X-Header-Set", "header-set"),
                        ("X-Header-Add", "original-val-add,header-add"),
                        ("Another-Header", "another-header-val"),
                    ],
                    &["x-header-remove", "X-Header-Remove"],
                ),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteInvalidCrossNamespaceParentRef",
            manifest: "httproute-invalid-cross-namespace-parent-ref.yaml",
            route: "gateway-conformance-web-backend/invalid-cross-namespace-parent-ref",
            condition: ("Accepted", "False", "NotAllowedByListeners"),
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            attached: &[("*", 0)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteHostnameIntersection",
            manifest: "httproute-hostname-intersection.yaml",
            route: "specific-host-matches-listener-specific-host",
            condition: ("ResolvedRefs", "True", "ResolvedRefs"),
            more: &[("Accepted", "True", "Accepted")],
            routes: &[
                "specific-host-matches-listener-wildcard-host",
                "wildcard-host-matches-listener-specific-host",
                "wildcard-host-matches-listener-wildcard-host",
                "httproute-hostname-intersection-all",
            ],
            others: &[(
                "no-intersecting-hosts",
                ("Accepted", "False", "NoMatchingListenerHostname"),
            )],
            gateway: "httproute-hostname-intersection",
            attached: &[("listener-1", 2), ("listener-2", 1), ("listener-3", 1)],
            expect: vec![
                to("/s1", V1).on("very.specific.com"),
                to("/s1", V1).on("very.specific.com:1234"),
                status("/s1", &[], 404).on("non.matching.com"),
                status("/s1", &[], 404).on("foo.nonmatchingwildcard.io"),
                status("/s1", &[], 404).on("foo.wildcard.io"),
                status("/non-matching-prefix", &[], 404).on("very.specific.com"),
                to("/s2", V2).on("foo.wildcard.io"),
                to("/s2", V2).on("bar.wildcard.io"),
                to("/s2", V2).on("foo.bar.wildcard.io"),
                status("/s2", &[], 404).on("non.matching.com"),
                status("/s2", &[], 404).on("wildcard.io"),
                status("/s2", &[], 404).on("very.specific.com"),
                status("/non-matching-prefix", &[], 404).on("foo.wildcard.io"),
                to("/s3", V3).on("very.specific.com"),
                status("/s3", &[], 404).on("non.matching.com"),
                status("/s3", &[], 404).on("foo.specific.com"),
                status("/s3", &[], 404).on("foo.wildcard.io"),
                to("/s4", V1).on("foo.anotherwildcard.io"),
                to("/s4", V1).on("bar.anotherwildcard.io"),
                to("/s4", V1).on("foo.bar.anotherwildcard.io"),
                status("/s4", &[], 404).on("anotherwildcard.io"),
                status("/s4", &[], 404).on("foo.wildcard.io"),
                status("/s4", &[], 404).on("very.specific.com"),
                status("/non-matching-prefix", &[], 404).on("foo.anotherwildcard.io"),
                status("/s5", &[], 404).on("specific.but.wrong.com"),
                status("/s5", &[], 404).on("wildcard.io"),
                to("/", V2)
                    .on("first.com")
                    .at("httproute-hostname-intersection-all"),
                to("/", V2)
                    .on("sub.first.com")
                    .at("httproute-hostname-intersection-all"),
                to("/", V2)
                    .on("second.com")
                    .at("httproute-hostname-intersection-all"),
                to("/", V2)
                    .on("sub.second.com")
                    .at("httproute-hostname-intersection-all"),
                status("/", &[], 404)
                    .on("third.com")
                    .at("httproute-hostname-intersection-all"),
                status("/", &[], 404)
                    .on("sub.third.com")
                    .at("httproute-hostname-intersection-all"),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteInvalidReferenceGrant",
            manifest: "httproute-invalid-reference-grant.yaml",
            route: "reference-grant",
            condition: ("ResolvedRefs", "False", "RefNotPermitted"),
            expect: vec![status("/", &[], 500)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteMultipleGateways",
            manifest: "httproute-multiple-gateways.yaml",
            route: "multiple-gateways-shared-route",
            routes: &[
                "same-namespace-dedicated-route",
                "all-namespaces-dedicated-route",
            ],
            expect: vec![
                to("/shared", V1),
                to("/", V2),
                to("/shared", V1).at("all-namespaces"),
                to("/", V3).at("all-namespaces"),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteNoBackendRefs",
            manifest: "httproute-omitted-backendrefs.yaml",
            route: "omitted-backendrefs",
            condition: ("ResolvedRefs", "True", "ResolvedRefs"),
            more: &[("Accepted", "True", "Accepted")],
            expect: vec![
                to("/forward", V1),
                status("/omitted-no-forward", &[], 500),
                status("/empty-no-forward", &[], 500),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRoutePathMatchOrder",
            manifest: "httproute-path-match-order.yaml",
            route: "path-matching-order",
            condition: ("ResolvedRefs", "True", "ResolvedRefs"),
            more: &[("Accepted", "True", "Accepted")],
            expect: vec![
                to("/match/exact/one", V3),
                to("/match/exact", V2),
                to("/match", V1),
                to("/match/prefix/one/any", V2),
                to("/match/prefix/any", V1),
                to("/match/any", V3),
            ],
            ..Default::default()
        },
        Case {
            name: "GatewayInvalidRouteKind",
            manifest: "gateway-invalid-route-kind.yaml",
            listeners: const { &[
                ListenerWant {
                    gateway: "gateway-only-invalid-route-kind",
                    listener: "http",
                    kinds: &[],
                    conditions: &[("ResolvedRefs", "False", "InvalidRouteKinds")],
                    attached: 0,
                },
                http_listener("gateway-supported-and-invalid-route-kind", "http", &[("ResolvedRefs", "False", "InvalidRouteKinds")], 0),
            ] },
            ..Default::default()
        },
        Case {
            name: "GatewaySecretMissingReferenceGrant",
            manifest: "gateway-secret-missing-reference-grant.yaml",
            listeners: const { &[http_listener("gateway-secret-missing-reference-grant", "https", &[("ResolvedRefs", "False", "RefNotPermitted")], 0)] },
            ..Default::default()
        },
        Case {
            name: "GatewaySecretInvalidReferenceGrant",
            manifest: "gateway-secret-invalid-reference-grant.yaml",
            listeners: const { &[http_listener("gateway-secret-invalid-reference-grant", "https", &[("ResolvedRefs", "False", "RefNotPermitted")], 0)] },
            ..Default::default()
        },
        Case {
            name: "GatewaySecretReferenceGrantAllInNamespace",
            manifest: "gateway-secret-reference-grant-all-in-namespace.yaml",
            listeners: const { &[http_listener("gateway-secret-reference-grant-all-in-namespace", "https", &[
                    ("Programmed", "True", "Programmed"),
                    ("ResolvedRefs", "True", ""),
                ], 0)] },
            ..Default::default()
        },
        Case {
            name: "GatewaySecretReferenceGrantSpecific",
            manifest: "gateway-secret-reference-grant-specific.yaml",
            listeners: const { &[http_listener("gateway-secret-reference-grant-specific", "https", &[
                    ("Programmed", "True", "Programmed"),
                    ("ResolvedRefs", "True", ""),
                ], 0)] },
            ..Default::default()
        },
        Case {
            name: "GatewayInvalidTLSConfiguration",
            manifest: "gateway-invalid-tls-configuration.yaml",
            listeners: const { &[
                http_listener("gateway-certificate-nonexistent-secret", "https", &[("ResolvedRefs", "False", "InvalidCertificateRef")], 0),
                http_listener("gateway-certificate-unsupported-group", "https", &[("ResolvedRefs", "False", "InvalidCertificateRef")], 0),
                http_listener("gateway-certificate-unsupported-kind", "https", &[("ResolvedRefs", "False", "InvalidCertificateRef")], 0),
                http_listener("gateway-certificate-malformed-secret", "https", &[("ResolvedRefs", "False", "InvalidCertificateRef")], 0),
            ] },
            ..Default::default()
        },
        Case {
            name: "GatewayNameMaximumLength",
            manifest: "gateway-name-maximum-length.yaml",
            latest: &[LONG_GATEWAY_NAME],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteObservedGenerationBump",
            manifest: "httproute-observed-generation-bump.yaml",
            route: "observed-generation-bump",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            bump: Some(|r| r["spec"]["rules"][0]["backendRefs"][0]["name"] = json!(V2)),
            expect: vec![to("/", V2)],
            ..Default::default()
        },
        Case {
            name: "GatewayObservedGenerationBump",
            manifest: "gateway-observed-generation-bump.yaml",
            bump: Some(|g| {
                if let Some(ls) = g["spec"]["listeners"].as_array_mut() {
                    ls.push(json!({"name": "alternate", "hostname": "foo.com", "port": 80,
                        "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}));
                }
            }),
            ..Default::default()
        },
        Case {
            name: "GatewayClassObservedGenerationBump",
            manifest: "gatewayclass-observed-generation-bump.yaml",
            bump: Some(|c| c["spec"]["description"] = json!("new")),
            ..Default::default()
        },
        Case {
            name: "GatewayInvalidParametersRef",
            manifest: "gateway-invalid-parameters-ref.yaml",
            latest: &["gateway-invalid-parameters-ref"],
            gateway_conditions: &[(
                "gateway-invalid-parameters-ref",
                ("Accepted", "False", "InvalidParameters"),
            )],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteWeight",
            manifest: "httproute-weight.yaml",
            route: "weighted-backends",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            distribution: &[(V1, 0.7), (V2, 0.3), (V3, 0.0)],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteServiceTypes",
            manifest: "httproute-service-types.yaml",
            route: "service-types",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            // The suite fills the manual slices with infra-backend-v1's pod
            // addresses (IPv4 only here); the headless Service's slice is
            // the EndpointSlice controller's work, done here in its place.
            prepare: Some(|api, v1_ip| {
                for (slice, service) in [
                    ("manual-endpointslices-ip4", "manual-endpointslices"),
                    (
                        "headless-manual-endpointslices-ip4",
                        "headless-manual-endpointslices",
                    ),
                    ("headless-1", "headless"),
                ] {
                    let mut v = super::endpoint_slice(INFRA, service, &[v1_ip], 3000);
                    v["metadata"]["name"] = json!(slice);
                    v["ports"][0]["name"] = json!("first-port");
                    api.apply(&path_of(&v), &v.to_string());
                }
            }),
            expect: vec![
                to("/manual-endpointslices", V1),
                to("/headless-manual-endpointslices", V1),
                to("/headless", V1),
            ],
            ..Default::default()
        },
        Case {
            name: "HTTPRouteHTTPSListener",
            manifest: "httproute-https-listener.yaml",
            route: "httproute-https-test",
            routes: &["httproute-https-test-no-hostname"],
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            gateway: "same-namespace-with-https-listener",
            expect: vec![
                to("/", V1).on("example.org").over_tls(),
                to("/", V2).on("second-example.org").over_tls(),
            ],
            ..Default::default()
        },
        Case {
            name: "GatewayModifyListeners",
            manifest: "gateway-modify-listeners.yaml",
            route: "http-route-1",
            routes: &["http-route-2"],
            latest: &["gateway-add-listener", "gateway-remove-listener"],
            changes: vec![
                (
                    0,
                    |g| {
                        if let Some(ls) = g["spec"]["listeners"].as_array_mut() {
                            ls.push(json!({"name": "http", "port": 80, "protocol": "HTTP",
                                "hostname": "data.test.com",
                                "allowedRoutes": {"namespaces": {"from": "All"}}}));
                        }
                    },
                    const { &[
                        http_listener("gateway-add-listener", "https", &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")], 1),
                        http_listener("gateway-add-listener", "http", &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")], 1),
                    ] },
                ),
                (
                    2,
                    |g| {
                        if let Some(ls) = g["spec"]["listeners"].as_array_mut() {
                            ls.retain(|l| l["name"] == "http");
                        }
                    },
                    const { &[http_listener("gateway-remove-listener", "http", &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")], 1),] },
                ),
            ],
            ..Default::default()
        },
        // Extended: URLRewrite (HTTPRoutePathRewrite, HTTPRouteHostRewrite).
        Case {
            name: "HTTPRouteRewritePath",
            manifest: "httproute-rewrite-path.yaml",
            route: "rewrite-path",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            expect: vec![
                to("/prefix/one/two", V1).reaching("/one/two", None),
                to("/strip-prefix/three", V1).reaching("/three", None),
                to("/strip-prefix", V1).reaching("/", None),
                to("/full/one/two", V1).reaching("/one", None),
                with(
                    "/full/rewrite-path-and-modify-headers/test",
                    TO_MODIFY,
                    V1,
                )
                .reaching("/test", None)
                .seeing(MODIFIED, &["X-Header-Remove"]),
                with(
                    "/prefix/rewrite-path-and-modify-headers/one",
                    TO_MODIFY,
                    V1,
                )
                .reaching("/prefix/one", None)
                .seeing(MODIFIED, &["X-Header-Remove"]),
            ],
            extended: Some("HTTPRoutePathRewrite"),
            ..Default::default()
        },
        Case {
            name: "HTTPRouteRewriteHost",
            manifest: "httproute-rewrite-host.yaml",
            route: "rewrite-host",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            expect: vec![
                to("/one", V1)
                    .on("rewrite.example")
                    .reaching("/one", Some("one.example.org")),
                to("/two", V2)
                    .on("rewrite.example")
                    .reaching("/two", Some("example.org")),
                with(
                    "/rewrite-host-and-modify-headers",
                    &[
                        ("X-Header-Remove", "remove-val"),
                        ("X-Header-Add-Append", "append-val-1"),
                    ],
                    V2,
                )
                .on("rewrite.example")
                .reaching("/rewrite-host-and-modify-headers", Some("test.example.org"))
                .seeing(MODIFIED, &["X-Header-Remove"]),
            ],
            extended: Some("HTTPRouteHostRewrite"),
            ..Default::default()
        },
        Case {
            name: "HTTPRouteRequestMirror",
            manifest: "httproute-request-mirror.yaml",
            route: "request-mirror",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            expect: vec![
                to("/mirror", V1).reaching("/mirror", None).mirrored_to(&[V2]),
                with("/mirror-and-modify-headers", TO_MODIFY_MIRRORED, V1)
                    .reaching("/mirror-and-modify-headers", None)
                    .seeing(MODIFIED, &["X-Header-Remove"])
                    .mirrored_to(&[V2]),
            ],
            extended: Some("HTTPRouteRequestMirror"),
            ..Default::default()
        },
        Case {
            name: "HTTPRouteRequestMultipleMirrors",
            manifest: "httproute-request-multiple-mirrors.yaml",
            route: "request-multiple-mirrors",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            expect: vec![
                to("/multi-mirror", V1)
                    .reaching("/multi-mirror", None)
                    .mirrored_to(&[V2, V3]),
                with(
                    "/multi-mirror-and-modify-request-headers",
                    TO_MODIFY_MIRRORED,
                    V1,
                )
                .reaching("/multi-mirror-and-modify-request-headers", None)
                .seeing(MODIFIED, &["X-Header-Remove"])
                .mirrored_to(&[V2, V3]),
            ],
            extended: Some("HTTPRouteRequestMultipleMirrors"),
            ..Default::default()
        },
        Case {
            name: "HTTPRouteRequestPercentageMirror",
            manifest: "httproute-request-percentage-mirror.yaml",
            route: "request-percentage-mirror",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            expect: vec![
                to("/percent-mirror", V1),
                to("/percent-mirror-fraction", V1),
                with("/percent-mirror-and-modify-headers", TO_MODIFY_MIRRORED, V1)
                    .seeing(MODIFIED, &["X-Header-Remove"]),
            ],
            mirror_shares: &[
                ("/percent-mirror", V2, 20.0),
                ("/percent-mirror-fraction", V2, 50.0),
                ("/percent-mirror-and-modify-headers", V2, 35.0),
            ],
            extended: Some("HTTPRouteRequestPercentageMirror"),
            ..Default::default()
        },
        Case {
            name: "BackendTLSPolicy",
            manifest: "backendtlspolicy.yaml",
            route: "backendtlspolicy",
            routes: &["backendtlspolicy-reencrypt"],
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            tls_services: &[
                ("backendtlspolicy-test", &["btls"]),
                ("backendtlspolicy-host-mismatch-test", &["btls"]),
                ("backendtlspolicy-cert-mismatch-test", &["btls"]),
                ("backendtlspolicy-reconcile-test", &["btls"]),
            ],
            policy_conditions: &[
                ("normative-test", "same-namespace", ("Accepted", "True", "Accepted")),
                ("normative-test", "same-namespace", ("ResolvedRefs", "True", "ResolvedRefs")),
                ("normative-test", "same-namespace-with-https-listener", ("Accepted", "True", "Accepted")),
                ("host-mismatch", "same-namespace", ("Accepted", "True", "Accepted")),
                ("host-mismatch", "same-namespace", ("ResolvedRefs", "True", "ResolvedRefs")),
                ("cert-mismatch", "same-namespace", ("Accepted", "True", "Accepted")),
                ("cert-mismatch", "same-namespace", ("ResolvedRefs", "True", "ResolvedRefs")),
                ("reconcile-test", "same-namespace", ("Accepted", "True", "Accepted")),
            ],
            expect: vec![
                to("/backendtlspolicy", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("abc.example.com"),
                // The suite's: another Host, so no route at all.
                status("/backendtlspolicy-host-mismatch", &[], 404).on("abc.example.org"),
                // Ours: the route's Host, and the certificate is not for
                // the policy's hostname (mismatch.example.com).
                status("/backendtlspolicy-host-mismatch", &[], 502).on("abc.example.com"),
                // The CA of the policy did not sign the certificate.
                status("/backendtlspolicy-cert-mismatch", &[], 502).on("abc.example.com"),
                // Re-encrypt: TLS from the client to the HTTPS listener,
                // TLS again to the pod.
                to("/backendtlspolicy", TLS_BACKEND)
                    .on("https-listener.org")
                    .over_tls()
                    .at("same-namespace-with-https-listener")
                    .with_sni("abc.example.com"),
            ],
            then: Some(reconcile_ca),
            extended: Some("BackendTLSPolicy"),
            ..Default::default()
        },
        Case {
            name: "BackendTLSPolicyInvalidCACertificateRef",
            manifest: "backendtlspolicy-invalid-kind.yaml",
            route: "backendtlspolicy-invalid-kind-test",
            tls_services: &[("backendtlspolicy-invalid-kind-test", &["https"])],
            policy_conditions: &[
                ("invalid-kind", "same-namespace", ("Accepted", "False", "NoValidCACertificate")),
                ("invalid-kind", "same-namespace", ("ResolvedRefs", "False", "InvalidKind")),
            ],
            // The suite takes 500, 502 or 503; never the backend in
            // plain text.
            expect: vec![status("/backendtlspolicy-invalid-kind", &[], 500).on("abc.example.com")],
            extended: Some("BackendTLSPolicy"),
            ..Default::default()
        },
        Case {
            name: "BackendTLSPolicyConflictResolution",
            manifest: "backendtlspolicy-conflict-resolution.yaml",
            route: "backendtlspolicy-conflict-resolution",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            tls_services: &[
                ("backendtlspolicy-conflicted-without-section-name-test", &["https"]),
                ("backendtlspolicy-conflicted-with-section-name-test", &["https-1", "https-2"]),
                ("backendtlspolicy-not-conflicted-test", &["https-1", "https-2"]),
            ],
            policy_conditions: &[
                ("conflicted-without-section-name-1", "same-namespace", ("Accepted", "True", "Accepted")),
                ("conflicted-without-section-name-2", "same-namespace", ("Accepted", "False", "Conflicted")),
                ("conflicted-with-section-name-1", "same-namespace", ("Accepted", "True", "Accepted")),
                ("conflicted-with-section-name-2", "same-namespace", ("Accepted", "False", "Conflicted")),
                ("not-conflicted-with-section-name", "same-namespace", ("Accepted", "True", "Accepted")),
                ("not-conflicted-without-section-name", "same-namespace", ("Accepted", "True", "Accepted")),
            ],
            expect: vec![
                to("/backendtlspolicy-conflicted-without-section-name", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("other.example.com"),
                to("/backendtlspolicy-conflicted-with-section-name", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("other.example.com"),
                to("/backendtlspolicy-not-conflicted-with-section-name", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("other.example.com"),
                to("/backendtlspolicy-not-conflicted-without-section-name", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("abc.example.com"),
            ],
            extended: Some("BackendTLSPolicy"),
            ..Default::default()
        },
        Case {
            name: "BackendTLSPolicySANValidation",
            manifest: "backendtlspolicy-san.yaml",
            route: "backendtlspolicy-san-test",
            more: &[("ResolvedRefs", "True", "ResolvedRefs")],
            tls_services: SAN_SERVICES,
            policy_conditions: &[
                ("san-dns", "same-namespace", ("Accepted", "True", "Accepted")),
                ("san-dns-mismatch", "same-namespace", ("Accepted", "True", "Accepted")),
                ("san-uri", "same-namespace", ("Accepted", "True", "Accepted")),
                ("san-uri-mismatch", "same-namespace", ("Accepted", "True", "Accepted")),
                ("multiple-sans", "same-namespace", ("Accepted", "True", "Accepted")),
                ("multiple-mismatch-sans", "same-namespace", ("Accepted", "True", "Accepted")),
            ],
            expect: vec![
                to("/backendtlspolicy-san-dns", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("abc.example.com"),
                status("/backendtlspolicy-san-dns-mismatch", &[], 502).on("abc.example.com"),
                to("/backendtlspolicy-san-uri", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("abc.example.com"),
                status("/backendtlspolicy-san-uri-mismatch", &[], 502).on("abc.example.com"),
                to("/backendtlspolicy-multiple-sans", TLS_BACKEND)
                    .on("abc.example.com")
                    .with_sni("abc.example.com"),
                status("/backendtlspolicy-multiple-mismatch-sans", &[], 502).on("abc.example.com"),
            ],
            extended: Some("BackendTLSPolicySANValidation"),
            ..Default::default()
        },
    ]
}

/// The SAN case's Services (one port, "btls").
const SAN_SERVICES: &[(&str, &[&str])] = &[
    ("backendtlspolicy-san-dns-test", &["btls"]),
    ("backendtlspolicy-san-dns-mismatch-test", &["btls"]),
    ("backendtlspolicy-san-uri-test", &["btls"]),
    ("backendtlspolicy-san-uri-mismatch-test", &["btls"]),
    ("backendtlspolicy-multiple-sans-test", &["btls"]),
    ("backendtlspolicy-multiple-mismatch-sans-test", &["btls"]),
];

/// The TLS backend's pod name starts with this (the echo's `pod`).
const TLS_BACKEND: &str = "tls-backend";

/// The suite's TLS backend: its pod's address (port 8443), the CA that
/// signed its certificate (for abc.example.com, other.example.com and
/// spiffe://abc.example.com/test-identity, as the suite's), and a CA
/// that signed nothing.
pub struct TlsBackend {
    pub ip: String,
    pub ca: String,
    pub mismatch_ca: String,
}

/// Makes the TLS backend's certificate and key in `dir` (openssl), and
/// the two CAs: (certificate file, key file, CA PEM, mismatch CA PEM).
pub fn tls_backend_files(dir: &std::path::Path) -> (PathBuf, PathBuf, String, String) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let p = |f: &str| dir.join(f).to_str().unwrap_or_default().to_string();
    for ca in ["ca", "mismatch-ca"] {
        let (ok, out) = sh(
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=conformance {ca}"),
                "-keyout",
                &p(&format!("{ca}.key")),
                "-out",
                &p(&format!("{ca}.crt")),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        assert!(ok, "openssl: {out}");
    }
    let (ok, out) = sh(
        "openssl",
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=abc.example.com",
            "-keyout",
            &p("tls.key"),
            "-out",
            &p("tls.csr"),
        ],
    );
    assert!(ok, "openssl: {out}");
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=DNS:abc.example.com,DNS:other.example.com,URI:spiffe://abc.example.com/test-identity\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap_or_else(|e| panic!("ext: {e}"));
    let (ok, out) = sh(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            &p("tls.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &p("ext"),
            "-out",
            &p("tls.crt"),
        ],
    );
    assert!(ok, "openssl: {out}");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    (
        dir.join("tls.crt"),
        dir.join("tls.key"),
        read("ca.crt"),
        read("mismatch-ca.crt"),
    )
}

fn policy_path(name: &str) -> String {
    format!("/apis/gateway.networking.k8s.io/v1/namespaces/{INFRA}/backendtlspolicies/{name}")
}

/// Whether BackendTLSPolicy `name` shows `(type, status, reason)` for
/// Gateway `gateway` (its ancestor entry of ours), within 30 s (the
/// suite's BackendTLSPolicyMustHaveCondition).
fn policy_shows(api: &Api, name: &str, gateway: &str, (t, st, reason): (&str, &str, &str)) -> bool {
    let want = Some((st.to_string(), reason.to_string()));
    eventually(Duration::from_secs(30), || {
        api.get(&policy_path(name)).is_some_and(|p| {
            p["status"]["ancestors"].as_array().is_some_and(|a| {
                a.iter().any(|x| {
                    x["ancestorRef"]["name"] == gateway
                        && x["controllerName"] == CONTROLLER
                        && condition(&x["conditions"], t) == want
                })
            })
        })
    })
}

/// The suite's "Changing the content of a ConfigMap used by
/// BackendTLSPolicy as CA certificate should be reconciled": the policy
/// moved to a ConfigMap that does not exist yet is refused, accepted once
/// it exists, refused when its ca.crt is emptied, accepted when it is
/// back.
fn reconcile_ca(api: &Api) -> Result<(), String> {
    const POLICY: &str = "reconcile-test";
    const CM: &str = "tls-checks-ca-certificate-reconcile-test";
    let ok = [
        ("Accepted", "True", "Accepted"),
        ("ResolvedRefs", "True", "ResolvedRefs"),
    ];
    let refused = [
        ("Accepted", "False", "NoValidCACertificate"),
        ("ResolvedRefs", "False", "InvalidCACertificateRef"),
    ];
    let shows = |step: &str, conds: &[(&'static str, &'static str, &'static str)]| match conds
        .iter()
        .find(|c| !policy_shows(api, POLICY, "same-namespace", **c))
    {
        None => Ok(()),
        Some(c) => Err(format!(
            "{step}: policy {POLICY} never showed {c:?}: {:?}",
            api.get(&policy_path(POLICY)).map(|v| v["status"].clone())
        )),
    };
    let shared = api
        .get(&format!(
            "/api/v1/namespaces/{INFRA}/configmaps/tls-checks-ca-certificate"
        ))
        .ok_or("no ConfigMap tls-checks-ca-certificate")?;
    let ca = shared["data"]["ca.crt"].as_str().unwrap_or("").to_string();
    let mut policy = api.get(&policy_path(POLICY)).ok_or("no policy")?;
    let original = policy["spec"]["validation"]["caCertificateRefs"].clone();
    policy["spec"]["validation"]["caCertificateRefs"] =
        json!([{"group": "", "kind": "ConfigMap", "name": CM}]);
    let clean = |mut v: Value| {
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("managedFields");
            m.remove("resourceVersion");
        }
        v.as_object_mut().map(|o| o.remove("status"));
        v
    };
    api.apply(&policy_path(POLICY), &clean(policy.clone()).to_string());
    shows("its ConfigMap missing", &refused)?;
    let cm = |data: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CM, "namespace": INFRA}, "data": {"ca.crt": data}})
    };
    api.apply(&path_of(&cm(&ca)), &cm(&ca).to_string());
    shows("its ConfigMap made", &ok)?;
    api.apply(&path_of(&cm("")), &cm("").to_string());
    shows("its ca.crt emptied", &refused)?;
    api.apply(&path_of(&cm(&ca)), &cm(&ca).to_string());
    shows("its ca.crt back", &ok)?;
    policy["spec"]["validation"]["caCertificateRefs"] = original;
    api.apply(&path_of(&clean(policy.clone())), &clean(policy).to_string());
    api.delete(&path_of(&cm("")));
    Ok(())
}

/// The mirror cases' request headers (the suite's: no X-Header-Set).
const TO_MODIFY_MIRRORED: &[(&str, &str)] = &[
    ("X-Header-Remove", "remove-val"),
    ("X-Header-Add-Append", "append-val-1"),
];

/// How many copies of `path` (query included) `backend`'s echo logged.
fn copies_logged(echo_log: &str, backend: &str, path: &str) -> usize {
    let pod = format!("{backend}-pod");
    echo_log
        .lines()
        .filter(|l| {
            let mut w = l.split(' ');
            w.next() == Some("echoed") && w.next() == Some(pod.as_str()) && w.nth(2) == Some(path)
        })
        .count()
}

/// The suite's TestMirroredRequestsDistribution: 500 requests to `path`
/// (10 at a time, each round with a query of its own), and the copies
/// `backend` logged within three standard deviations of 500 x percent.
/// Up to five rounds, as the suite tries.
fn mirror_share(
    addr: SocketAddr,
    echo_log: &dyn Fn() -> String,
    (path, backend, percent): (&str, &str, f64),
) -> Result<(), String> {
    const N: usize = 500;
    let p = percent / 100.0;
    let band = 3.0 * (N as f64 * p * (1.0 - p)).sqrt();
    let mut last = String::new();
    for round in 0..5 {
        let with_query = format!("{path}?round={round}-{}", std::process::id());
        let sent = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..10 {
                s.spawn(|| {
                    while sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < N {
                        let _ = get(addr, "example.com", &with_query, &[]);
                    }
                });
            }
        });
        // The copies go out beside the answers: let the last ones land.
        let mut copies = copies_logged(&echo_log(), backend, &with_query);
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(100));
            let now = copies_logged(&echo_log(), backend, &with_query);
            if now == copies {
                break;
            }
            copies = now;
        }
        let want = N as f64 * p;
        if (copies as f64 - want).abs() <= band {
            return Ok(());
        }
        last = format!(
            "{path}: {copies} of {N} requests mirrored to {backend}, expected {want:.0} +- {band:.0}"
        );
    }
    Err(last)
}

/// One request's mismatch, or None when it got what was expected.
fn mismatch(addr: SocketAddr, e: &Expect) -> Option<String> {
    let got = if e.tls {
        // The HTTPS listeners' port, offset as the HTTP ones are.
        let port = addr.port() - 80 + 443;
        get_tls(SocketAddr::new(addr.ip(), port), e.host, e.path)
    } else {
        get(addr, e.host, e.path, e.headers)
    };
    let Some((code, body, head)) = got else {
        return Some(format!("{} {} {:?}: no answer", e.host, e.path, e.headers));
    };
    if code != e.status {
        return Some(format!(
            "{} {} {:?}: status {code}, expected {}",
            e.host, e.path, e.headers, e.status
        ));
    }
    if let Some(b) = e.backend {
        let pod = body["pod"].as_str().unwrap_or("");
        if !pod.starts_with(&format!("{b}-")) || body["namespace"] != e.namespace {
            return Some(format!(
                "{} {} {:?}: served by {pod} in {}, expected {b} in {}",
                e.host, e.path, e.headers, body["namespace"], e.namespace
            ));
        }
    }
    if let Some(want) = e.saw_path {
        if body["path"] != want {
            return Some(format!(
                "{} {}: the backend saw path {}, expected {want}",
                e.host, e.path, body["path"]
            ));
        }
    }
    if let Some(want) = e.sni {
        if body["sni"] != want {
            return Some(format!(
                "{} {}: the backend was sent SNI {}, expected {want}",
                e.host, e.path, body["sni"]
            ));
        }
    }
    if let Some(want) = e.saw_host {
        let host = body["host"].as_str().unwrap_or("");
        if host.split(':').next() != Some(want) {
            return Some(format!(
                "{} {}: the backend saw Host {host:?}, expected {want}",
                e.host, e.path
            ));
        }
    }
    // The request's headers as the backend saw them (the echo lists each
    // name's values; the suite joins them with ",").
    let saw = |name: &str| -> Option<String> {
        body["headers"].as_object().and_then(|h| {
            h.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| {
                    v.as_array()
                        .map(|vs| {
                            vs.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .unwrap_or_default()
                })
        })
    };
    for (name, value) in e.seen {
        if saw(name).as_deref() != Some(value) {
            return Some(format!(
                "{} {:?}: the backend saw {name}: {:?}, expected {value:?}",
                e.path,
                e.headers,
                saw(name)
            ));
        }
    }
    if let Some(name) = e.absent.iter().find(|n| saw(n).is_some()) {
        return Some(format!(
            "{} {:?}: the backend saw {name}: {:?}, expected none",
            e.path,
            e.headers,
            saw(name)
        ));
    }
    if let Some((host, path)) = e.location {
        let loc = head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("location"))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        // The suite compares the parts: host (port aside), path.
        let rest = loc.split_once("://").map(|(_, r)| r).unwrap_or("");
        let (authority, p) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let h = authority.split(':').next().unwrap_or("");
        if h != host || p != path {
            return Some(format!(
                "{}: Location {loc:?}, expected host {host} path {path}",
                e.path
            ));
        }
    }
    None
}

/// Applies the base manifests, runs every case, writes the report:
/// (case, Ok or why it failed).
pub fn run(
    api: &Api,
    pod_ip: &dyn Fn(usize) -> String,
    http_port: u16,
    log: &dyn Fn() -> String,
    echo_log: &dyn Fn() -> String,
    tls_backend: &TlsBackend,
) -> Vec<CaseResult> {
    // Base: namespaces, Gateways (each on its own address), Services with
    // one endpoint each.
    let mut gateways = Vec::new();
    // The name of each Service's port 8080 (the EndpointSlice's must match).
    let mut port_names = std::collections::BTreeMap::new();
    for mut d in docs("base-manifests.yaml") {
        match d["kind"].as_str() {
            Some("Namespace") => {}
            Some("Service") => {
                let name = d["spec"]["ports"]
                    .as_array()
                    .and_then(|ps| ps.iter().find(|p| p["port"] == 8080))
                    .and_then(|p| p["name"].as_str())
                    .unwrap_or("")
                    .to_string();
                port_names.insert(
                    d["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    name,
                );
            }
            Some("Gateway") => {
                let address = format!("127.0.0.{}", 20 + gateways.len());
                d["spec"]["addresses"] = json!([{"type": "IPAddress", "value": address}]);
                gateways.push((
                    d["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    address,
                ));
            }
            _ => continue, // Deployments: the echo pods stand in
        }
        api.apply(&path_of(&d), &d.to_string());
    }
    for (i, (svc, ns)) in BACKENDS.iter().enumerate() {
        let mut slice = super::endpoint_slice(ns, svc, &[&pod_ip(i)], 3000);
        slice["ports"][0]["name"] = json!(port_names.get(*svc).cloned().unwrap_or_default());
        api.apply(&path_of(&slice), &slice.to_string());
    }
    let (secret, _) = tls_secret("gateway-conformance-web-backend", "certificate", &[]);
    api.apply(&path_of(&secret), &secret.to_string());
    let (secret, pem) = tls_secret(
        INFRA,
        "tls-validity-checks-certificate",
        &[
            "example.org",
            "second-example.org",
            "*.wildcard.org",
            "secure.test.com",
            "data.test.com",
            "https-listener.org",
        ],
    );
    api.apply(&path_of(&secret), &secret.to_string());
    // The CA certificates BackendTLSPolicies name (the suite makes them
    // at its start): the one that signed the TLS backend's certificate,
    // and one that signed nothing.
    for (name, pem) in [
        ("tls-checks-ca-certificate", &tls_backend.ca),
        ("mismatch-ca-certificate", &tls_backend.mismatch_ca),
    ] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": INFRA}, "data": {"ca.crt": pem}});
        api.apply(&path_of(&cm), &cm.to_string());
    }
    let trusted = std::env::temp_dir().join(format!("sy-conformance-{}.pem", std::process::id()));
    std::fs::write(&trusted, pem).unwrap_or_else(|e| panic!("{}: {e}", trusted.display()));
    let _ = TRUSTED.set(trusted);
    let address = |gateways: &[(String, String)], gw: &str| -> SocketAddr {
        let a = gateways
            .iter()
            .find(|(n, _)| n == gw)
            .map(|(_, a)| a.clone())
            .unwrap_or_default();
        format!("{a}:{http_port}")
            .parse()
            .unwrap_or_else(|e| panic!("{a}: {e}"))
    };
    let mut results = Vec::new();
    for case in cases() {
        let mut applied = docs(case.manifest);
        // A case's own Gateways get addresses of their own too.
        for d in applied.iter_mut().filter(|d| d["kind"] == "Gateway") {
            let address = format!("127.0.0.{}", 20 + gateways.len());
            d["spec"]["addresses"] = json!([{"type": "IPAddress", "value": address}]);
            gateways.push((
                d["metadata"]["name"].as_str().unwrap_or("").to_string(),
                address,
            ));
        }
        for d in &applied {
            api.apply(&path_of(d), &d.to_string());
        }
        if let Some(prepare) = case.prepare {
            prepare(api, &pod_ip(0));
        }
        for (svc, port_names) in case.tls_services {
            let mut slice = super::endpoint_slice(INFRA, svc, &[&tls_backend.ip], 8443);
            slice["ports"] = port_names
                .iter()
                .map(|n| json!({"name": n, "port": 8443, "protocol": "TCP"}))
                .collect();
            api.apply(&path_of(&slice), &slice.to_string());
        }
        let route_path = |route: &str| {
            let (ns, name) = route.split_once('/').unwrap_or((INFRA, route));
            format!("/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes/{name}")
        };
        let (ctype, cstatus, creason) = case.condition;
        let shows = |route: &str, (ctype, cstatus, creason): (&str, &str, &str)| {
            let want = Some((cstatus.to_string(), creason.to_string()));
            eventually(Duration::from_secs(30), || {
                api.get(&route_path(route)).is_some_and(|v| {
                    condition(&v["status"]["parents"][0]["conditions"], ctype) == want
                })
            })
        };
        let mut outcome = if case.route.is_empty() {
            Ok(())
        } else if !shows(case.route, case.condition) {
            Err(format!(
                "route {} never showed {ctype}={cstatus} ({creason}): {:?}",
                case.route,
                api.get(&route_path(case.route))
                    .map(|v| v["status"].clone())
            ))
        } else if let Some(r) = case
            .routes
            .iter()
            .find(|r| !shows(r, ("Accepted", "True", "Accepted")))
        {
            Err(format!("route {r} was never Accepted"))
        } else if let Some(c) = case.more.iter().find(|c| !shows(case.route, **c)) {
            Err(format!("route {} never showed {c:?}", case.route))
        } else if let Some((r, c)) = case.others.iter().find(|(r, c)| !shows(r, *c)) {
            Err(format!("route {r} never showed {c:?}"))
        } else {
            Ok(())
        };
        if outcome.is_ok() && !case.attached.is_empty() {
            let gw = format!(
                "/apis/gateway.networking.k8s.io/v1/namespaces/{INFRA}/gateways/{}",
                case.gateway
            );
            let counts = || -> Vec<(String, i64)> {
                api.get(&gw)
                    .and_then(|v| v["status"]["listeners"].as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .map(|l| {
                        (
                            l["name"].as_str().unwrap_or("").to_string(),
                            l["attachedRoutes"].as_i64().unwrap_or(-1),
                        )
                    })
                    .collect()
            };
            let as_wanted = |c: &[(String, i64)]| {
                !c.is_empty()
                    && case.attached.iter().all(|(name, n)| {
                        c.iter()
                            .filter(|(l, _)| *name == "*" || l == name)
                            .all(|(_, x)| x == n)
                            && (*name == "*" || c.iter().any(|(l, _)| l == name))
                    })
            };
            if !eventually(Duration::from_secs(30), || as_wanted(&counts())) {
                outcome = Err(format!(
                    "Gateway {}: attachedRoutes {:?}, expected {:?}",
                    case.gateway,
                    counts(),
                    case.attached
                ));
            }
        }
        if let Some(w) = case
            .listeners
            .iter()
            .find(|w| outcome.is_ok() && !listener_shows(api, w))
        {
            outcome = Err(format!(
                "Gateway {} listener {}: status {:?}, expected kinds {:?}, conditions {:?}, attachedRoutes {}",
                w.gateway,
                w.listener,
                listener_status(api, w),
                w.kinds,
                w.conditions,
                w.attached
            ));
        }
        if let Some((p, g, c)) = case
            .policy_conditions
            .iter()
            .find(|(p, g, c)| outcome.is_ok() && !policy_shows(api, p, g, *c))
        {
            outcome = Err(format!(
                "BackendTLSPolicy {p} never showed {c:?} for Gateway {g}: {:?}",
                api.get(&policy_path(p)).map(|v| v["status"].clone())
            ));
        }
        if let Some(g) = case
            .latest
            .iter()
            .find(|g| outcome.is_ok() && !has_latest_conditions(api, g))
        {
            outcome = Err(format!(
                "Gateway {g}: conditions without its latest generation: {:?}",
                api.get(&format!(
                    "/apis/gateway.networking.k8s.io/v1/namespaces/{INFRA}/gateways/{g}"
                ))
                .map(|v| v["status"].clone())
            ));
        }
        if let Some((g, c)) = case.gateway_conditions.iter().find(|(g, (t, st, reason))| {
            let want = Some((st.to_string(), reason.to_string()));
            let path =
                format!("/apis/gateway.networking.k8s.io/v1/namespaces/{INFRA}/gateways/{g}");
            outcome.is_ok()
                && !eventually(Duration::from_secs(30), || {
                    api.get(&path)
                        .is_some_and(|v| condition(&v["status"]["conditions"], t) == want)
                })
        }) {
            outcome = Err(format!("Gateway {g} never showed {c:?}"));
        }
        if let (Ok(()), Some(change)) = (&outcome, case.bump) {
            outcome = bumped(api, &applied[0], change);
        }
        for (doc, change, wants) in &case.changes {
            if outcome.is_err() {
                break;
            }
            outcome = bumped(api, &applied[*doc], *change);
            if let Some(w) = wants.iter().find(|w| {
                !listener_shows(api, w)
                    || !only_listeners(
                        api,
                        w.gateway,
                        wants.iter().filter(|x| x.gateway == w.gateway).count(),
                    )
            }) {
                if outcome.is_ok() {
                    outcome = Err(format!(
                        "after the change, Gateway {} listener {}: {:?}, expected {:?} {:?} attachedRoutes {}",
                        w.gateway,
                        w.listener,
                        listener_status(api, w),
                        w.kinds,
                        w.conditions,
                        w.attached
                    ));
                }
            }
        }
        // Eventually consistent, as the suite waits.
        let check = |expect: &[Expect]| -> Result<(), String> {
            for e in expect {
                let addr = address(&gateways, e.at.unwrap_or(case.gateway));
                if !eventually(Duration::from_secs(30), || mismatch(addr, e).is_none()) {
                    return Err(mismatch(addr, e).unwrap_or_else(|| "flapping".into()));
                }
                for b in e.mirrored_to {
                    if !eventually(Duration::from_secs(30), || {
                        copies_logged(&echo_log(), b, e.path) > 0
                    }) {
                        return Err(format!("{}: no copy of the request reached {b}", e.path));
                    }
                }
            }
            Ok(())
        };
        if outcome.is_ok() {
            outcome = check(&case.expect);
        }
        if outcome.is_ok() && !case.distribution.is_empty() {
            outcome = distributed(address(&gateways, case.gateway), case.distribution);
        }
        for share in case.mirror_shares {
            if outcome.is_ok() {
                outcome = mirror_share(address(&gateways, case.gateway), echo_log, *share);
            }
        }
        if let (Ok(()), Some(then)) = (&outcome, case.then) {
            outcome = then(api);
        }
        if let (Ok(()), Some(what)) = (&outcome, case.then_delete) {
            api.delete(what);
            outcome = check(&case.then_expect);
        }
        if let Err(e) = &outcome {
            eprintln!("{}: FAILED: {e}\n{}", case.name, log());
        }
        for d in applied.iter().rev() {
            api.delete(&path_of(d));
        }
        for (svc, _) in case.tls_services {
            api.delete(&format!(
                "/apis/discovery.k8s.io/v1/namespaces/{INFRA}/endpointslices/{svc}-1"
            ));
        }
        results.push((case.name, case.extended, outcome));
    }
    report(&results);
    if let Some(f) = TRUSTED.get() {
        let _ = std::fs::remove_file(f);
    }
    results
}

/// The status of one listener of a Gateway in the infra namespace.
fn listener_status(api: &Api, w: &ListenerWant) -> Option<Value> {
    let gw = api.get(&format!(
        "/apis/gateway.networking.k8s.io/v1/namespaces/{INFRA}/gateways/{}",
        w.gateway
    ))?;
    gw["status"]["listeners"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == w.listener)
        .cloned()
}

/// Whether the listener's status says what `w` wants, within 30 s.
fn listener_shows(api: &Api, w: &ListenerWant) -> bool {
    eventually(Duration::from_secs(30), || {
        let Some(l) = listener_status(api, w) else {
            return false;
        };
        // As the suite compares: every expected kind present (the
        // implementation may support more), none when none is expected.
        let kinds: Vec<(&str, &str)> = l["supportedKinds"]
            .as_array()
            .map(|ks| {
                ks.iter()
                    .filter_map(|k| {
                        let group = k["group"].as_str().unwrap_or("gateway.networking.k8s.io");
                        Some((group, k["kind"].as_str()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let kinds_ok = if w.kinds.is_empty() {
            kinds.is_empty()
        } else {
            w.kinds
                .iter()
                .all(|want| kinds.contains(&("gateway.networking.k8s.io", *want)))
        };
        kinds_ok
            && l["attachedRoutes"].as_i64() == Some(w.attached)
            && w.conditions.iter().all(|(t, st, reason)| {
                condition(&l["conditions"], t).is_some_and(|(got_st, got_reason)| {
                    got_st == *st && (reason.is_empty() || got_reason == *reason)
                })
            })
    })
}

/// Whether the Gateway's conditions (some at least) all name its current
/// generation, within 30 s.
fn has_latest_conditions(api: &Api, gateway: &str) -> bool {
    let path = format!("/apis/gateway.networking.k8s.io/v1/namespaces/{INFRA}/gateways/{gateway}");
    eventually(Duration::from_secs(30), || {
        api.get(&path).is_some_and(|g| {
            let generation = g["metadata"]["generation"].as_i64();
            g["status"]["conditions"].as_array().is_some_and(|cs| {
                !cs.is_empty()
                    && cs
                        .iter()
                        .all(|c| c["observedGeneration"].as_i64() == generation)
            })
        })
    })
}

/// The conditions of `object` this controller writes: a GatewayClass's and
/// a Gateway's own, a route's under its parents of this controller.
fn our_conditions(object: &Value) -> Vec<Value> {
    let status = &object["status"];
    match status["parents"].as_array() {
        Some(parents) => parents
            .iter()
            .filter(|p| p["controllerName"] == CONTROLLER)
            .flat_map(|p| p["conditions"].as_array().cloned().unwrap_or_default())
            .collect(),
        None => status["conditions"].as_array().cloned().unwrap_or_default(),
    }
}

/// The object's generation, once it has conditions from us that all name
/// it (within 30 s).
fn latest_generation(api: &Api, path: &str) -> Option<i64> {
    let mut seen = None;
    eventually(Duration::from_secs(30), || {
        let Some(o) = api.get(path) else {
            return false;
        };
        let generation = o["metadata"]["generation"].as_i64();
        let conds = our_conditions(&o);
        let latest = !conds.is_empty()
            && conds
                .iter()
                .all(|c| c["observedGeneration"].as_i64() == generation);
        let accepted = conds
            .iter()
            .any(|c| c["type"] == "Accepted" && c["status"] == "True");
        seen = generation;
        latest && accepted
    })
    .then_some(seen)
    .flatten()
}

/// An ObservedGenerationBump case: the conditions follow the object's
/// generation before and after `change`.
fn bumped(api: &Api, object: &Value, change: fn(&mut Value)) -> Result<(), String> {
    let path = path_of(object);
    let before = latest_generation(api, &path)
        .ok_or_else(|| format!("{path}: conditions never named its generation"))?;
    let mut changed = object.clone();
    change(&mut changed);
    api.apply(&path, &changed.to_string());
    let after = latest_generation(api, &path).filter(|g| *g > before);
    match after {
        Some(_) => Ok(()),
        None => Err(format!(
            "{path}: after the change (generation {before} before), its conditions did not follow: {:?}",
            api.get(&path).map(|o| (o["metadata"]["generation"].clone(), o["status"].clone()))
        )),
    }
}

/// Whether 500 requests to `/` spread over the backends as `shares` say,
/// each within 0.05 of its share (the suite's tolerance).
fn distributed(addr: SocketAddr, shares: &[(&str, f64)]) -> Result<(), String> {
    const REQUESTS: usize = 500;
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for _ in 0..REQUESTS {
        let got = get(addr, "example.com", "/", &[]);
        let backend = match &got {
            Some((200, body, _)) => {
                let pod = body["pod"].as_str().unwrap_or("");
                pod.strip_suffix("-pod").unwrap_or(pod).to_string()
            }
            Some((code, _, _)) => format!("status {code}"),
            None => "no answer".into(),
        };
        *seen.entry(backend).or_default() += 1;
    }
    let off: Vec<String> = shares
        .iter()
        .filter_map(|(backend, share)| {
            let got = seen.get(*backend).copied().unwrap_or(0) as f64 / REQUESTS as f64;
            ((got - share).abs() > 0.05).then(|| format!("{backend}: {got:.3}, expected {share}"))
        })
        .collect();
    let strays: usize = seen
        .iter()
        .filter(|(b, _)| !shares.iter().any(|(s, _)| s == b))
        .map(|(_, n)| n)
        .sum();
    if off.is_empty() && strays == 0 {
        Ok(())
    } else {
        Err(format!("distribution {seen:?}: {}", off.join(", ")))
    }
}

/// Whether the Gateway's status lists exactly `n` listeners (within 30 s).
fn only_listeners(api: &Api, gateway: &str, n: usize) -> bool {
    let path = format!("/apis/gateway.networking.k8s.io/v1/namespaces/{INFRA}/gateways/{gateway}");
    eventually(Duration::from_secs(30), || {
        api.get(&path)
            .and_then(|g| g["status"]["listeners"].as_array().map(Vec::len))
            == Some(n)
    })
}

/// A self-signed certificate as a TLS Secret, for `*` and the names in
/// `sans` (the suite makes its base Secrets, `certificate` and
/// `tls-validity-checks-certificate`, the same way at its start), and the
/// certificate's PEM (what a client verifying it trusts).
fn tls_secret(namespace: &str, name: &str, sans: &[&str]) -> (Value, String) {
    let dir = std::env::temp_dir().join(format!("sy-conformance-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let (key, crt) = (dir.join("tls.key"), dir.join("tls.crt"));
    let san = sans
        .iter()
        .map(|n| format!("DNS:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut args = vec![
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=*",
    ];
    let ext = format!("subjectAltName={san}");
    if !sans.is_empty() {
        args.extend(["-addext", ext.as_str()]);
    }
    let (key_s, crt_s) = (
        key.to_str().unwrap_or_default().to_string(),
        crt.to_str().unwrap_or_default().to_string(),
    );
    args.extend(["-keyout", key_s.as_str(), "-out", crt_s.as_str()]);
    let (ok, out) = sh("openssl", &args);
    assert!(ok, "openssl: {out}");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let pem = read(&crt);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {"tls.crt": pem, "tls.key": read(&key)},
    });
    let _ = std::fs::remove_dir_all(&dir);
    (secret, pem)
}

/// The PEM file HTTPS requests trust: the `tls-validity-checks-certificate`
/// of this run.
static TRUSTED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// A request over TLS to `addr` with `host` as SNI and Host, the server's
/// certificate verified against `TRUSTED` (curl): (status, the echo's
/// JSON or the body, the head).
fn get_tls(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, Value, String)> {
    let name = host.split(':').next().unwrap_or(host);
    let port = addr.port();
    let (ok, out) = sh(
        "curl",
        &[
            "-sS",
            "-i",
            "--max-time",
            "3",
            "--cacert",
            TRUSTED.get()?.to_str()?,
            "--resolve",
            &format!("{name}:{port}:{}", addr.ip()),
            &format!("https://{name}:{port}{path}"),
        ],
    );
    if !ok {
        return None;
    }
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((
        status,
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
        head.to_string(),
    ))
}

/// A case's name, the extended feature it shows (None: core), and how
/// it went.
pub type CaseResult = (&'static str, Option<&'static str>, Result<(), String>);

/// The suite's ConformanceReport (v1.7) for what was run, printed and
/// written to the test target's directory: the core cases, then the
/// extended ones with the features they show.
fn report(all: &[CaseResult]) {
    let (core, extended): (Vec<&CaseResult>, Vec<&CaseResult>) =
        all.iter().partition(|r| r.1.is_none());
    let passed = core.iter().filter(|r| r.2.is_ok()).count();
    let failed: Vec<&str> = core.iter().filter(|r| r.2.is_err()).map(|r| r.0).collect();
    let mut text = String::from(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ConformanceReport\ngatewayAPIVersion: v1.7.0\ngatewayAPIChannel: standard\n\
         implementation:\n  organization: switchyard\n  project: switchyard-gateway\n  url: https://example.invalid/switchyard\n  version: 0.1.0\n  contact: []\n\
         mode: default\nprofiles:\n- name: GATEWAY-HTTP\n  core:\n",
    );
    text.push_str(&format!(
        "    result: {}\n    statistics:\n      Passed: {passed}\n      Failed: {}\n      Skipped: 0\n",
        match (failed.is_empty(), core.len() >= CORE_CASES) {
            (true, true) => "success",
            (true, false) => "partial",
            (false, _) => "failure",
        },
        failed.len()
    ));
    if !failed.is_empty() {
        text.push_str("    failedTests:\n");
        for f in &failed {
            text.push_str(&format!("    - {f}\n"));
        }
    }
    text.push_str("  summary: the suite's core cases ported (tests/conformance): its manifests, its expectations transcribed, echo backends in place of its images\n  tests:\n");
    for (name, _, r) in &core {
        text.push_str(&format!(
            "  - name: {name}\n    result: {}\n",
            if r.is_ok() { "success" } else { "failure" }
        ));
    }
    if !extended.is_empty() {
        // A feature is supported when every case that shows it passes.
        let mut features: Vec<&str> = extended.iter().filter_map(|r| r.1).collect();
        features.dedup();
        let ok: Vec<&str> = features
            .into_iter()
            .filter(|f| {
                extended
                    .iter()
                    .filter(|r| r.1 == Some(*f))
                    .all(|r| r.2.is_ok())
            })
            .collect();
        let passed = extended.iter().filter(|r| r.2.is_ok()).count();
        let bad: Vec<&str> = extended
            .iter()
            .filter(|r| r.2.is_err())
            .map(|r| r.0)
            .collect();
        text.push_str(&format!(
            "  extended:\n    result: {}\n    statistics:\n      Passed: {}\n      Failed: {}\n      Skipped: 0\n    supportedFeatures:\n",
            if bad.is_empty() { "success" } else { "failure" },
            passed,
            bad.len()
        ));
        for f in &ok {
            text.push_str(&format!("    - {f}\n"));
        }
        for (name, feature, r) in &extended {
            text.push_str(&format!(
                "    # {name} ({}): {}\n",
                feature.unwrap_or(""),
                if r.is_ok() { "success" } else { "failure" }
            ));
        }
    }
    println!("{text}");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gateway-conformance-report.yaml");
    let _ = std::fs::write(&out, &text);
    println!("report: {}", out.display());
}
