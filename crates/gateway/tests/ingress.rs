//! Ingress (networking.k8s.io/v1) and its ingress-nginx annotations
//! through the controller on a real API server and a real node
//! (tests/harness): host and path routing with TLS from a Secret, the
//! redirect to HTTPS, whitelist-source-range, a canary by header, a
//! rewrite-target that refuses the Ingress, an unsupported annotation
//! that is said in an Event while the rest is served, and the status
//! address.

mod harness;

use std::time::Duration;

use harness::*;
use serde_json::{json, Value};

const NGINX: &str = "nginx.ingress.kubernetes.io/";

fn ingress(name: &str, annotations: Value, host: &str, paths: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"ingressClassName": "switchyard", "rules": [{"host": host, "http": {"paths": paths}}]},
    })
}

fn path(p: &str, kind: &str, svc: &str) -> Value {
    json!({"path": p, "pathType": kind, "backend": {"service": {"name": svc, "port": {"number": 8080}}}})
}

/// The Events of the namespace about Ingress `name`: (reason, message).
fn events(api: &Api, name: &str) -> Vec<(String, String)> {
    api.get("/api/v1/namespaces/default/events")
        .map(|v| {
            v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| {
                    e["involvedObject"]["name"] == name && e["involvedObject"]["kind"] == "Ingress"
                })
                .map(|e| {
                    (
                        e["reason"].as_str().unwrap_or("").to_string(),
                        e["message"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn ingress_on_a_real_api_server() {
    let Some(mut c) = start("ingress", 4) else {
        return;
    };
    let kubeconfig = c.kubeconfig("kubeconfig", TOKEN);
    c.start_controller(&kubeconfig, &[]);
    let api = &c.api;
    apply(
        api,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "switchyard"},
            "spec": {"controller": "switchyard.dev/gateway-controller"}}),
    );
    for (svc, pod) in [("web", 10u8), ("api", 11), ("canary", 12), ("other", 13)] {
        apply(api, service("default", svc));
        apply(api, endpoint_slice("default", svc, &[&c.pod_ip(pod)], 3000));
    }
    // A TLS Secret for shop.example.
    let pem = |name: &str| c.dir.join(name).display().to_string();
    assert!(
        run(
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
                "/CN=shop.example",
                "-addext",
                "subjectAltName=DNS:shop.example",
                "-keyout",
                &pem("shop.key"),
                "-out",
                &pem("shop.crt"),
            ]
        )
        .0
    );
    apply(
        api,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "shop-tls", "namespace": "default"},
        "stringData": {
            "tls.crt": std::fs::read_to_string(pem("shop.crt")).unwrap(),
            "tls.key": std::fs::read_to_string(pem("shop.key")).unwrap(),
        }}),
    );
    let mut shop = ingress(
        "shop",
        json!({}),
        "shop.example",
        json!([path("/", "Prefix", "web"), path("/api", "Prefix", "api")]),
    );
    shop["spec"]["tls"] = json!([{"hosts": ["shop.example"], "secretName": "shop-tls"}]);
    apply(api, shop);

    // HTTPS with the Secret's certificate, by host and path.
    let https_port = c.addr(443).port();
    let https_get = |p: &str| {
        let (ok, out) = run(
            "curl",
            &[
                "-s",
                "--cacert",
                &pem("shop.crt"),
                "--resolve",
                &format!("shop.example:{https_port}:127.0.0.1"),
                &format!("https://shop.example:{https_port}{p}"),
            ],
        );
        if ok {
            serde_json::from_str::<Value>(&out)
                .ok()
                .and_then(|v| v["pod"].as_str().map(String::from))
                .unwrap_or(out)
        } else {
            format!("curl failed: {out}")
        }
    };
    assert!(
        eventually(Duration::from_secs(60), || https_get("/api/x") == "pod-11"),
        "HTTPS /api/x: {}\n{}",
        https_get("/api/x"),
        c.context()
    );
    assert_eq!(https_get("/"), "pod-10");
    // Segment-wise prefix: /apix is not under /api.
    assert_eq!(https_get("/apix"), "pod-10");
    // ssl-redirect (default for TLS hosts): plain HTTP gets 308 to HTTPS
    // on port 443 as clients see it (the offset is only where the node
    // listens here).
    let r = get(c.addr(80), "shop.example", "/api/x?q=1", &[]).unwrap();
    assert_eq!(r.0, 308, "{r:?}");
    assert!(
        r.2.to_ascii_lowercase()
            .contains("location: https://shop.example/api/x?q=1"),
        "{r:?}"
    );
    // The status address.
    let st = api
        .get("/apis/networking.k8s.io/v1/namespaces/default/ingresses/shop")
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || api
            .get("/apis/networking.k8s.io/v1/namespaces/default/ingresses/shop")
            .is_some_and(
                |v| v["status"]["loadBalancer"]["ingress"][0]["ip"] == "127.0.0.1"
            )),
        "{st}"
    );

    // whitelist-source-range: the test's client is 127.0.0.1.
    apply(
        api,
        ingress(
            "closed",
            json!({format!("{NGINX}whitelist-source-range"): "10.0.0.0/8"}),
            "closed.example",
            json!([path("/", "Prefix", "other")]),
        ),
    );
    apply(
        api,
        ingress(
            "open",
            json!({format!("{NGINX}whitelist-source-range"): "10.0.0.0/8, 127.0.0.1/32"}),
            "open.example",
            json!([path("/", "Prefix", "other")]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || pod_of(&get(
            c.addr(80),
            "open.example",
            "/",
            &[]
        )) == "pod-13"),
        "{}",
        c.context()
    );
    assert_eq!(
        pod_of(&get(c.addr(80), "closed.example", "/", &[])),
        "status 403"
    );

    // limit-rps: 1 per second with a burst of 2 (the multiplier) per
    // client; the whitelisted Ingress next to it is not counted.
    apply(
        api,
        ingress(
            "limited",
            json!({format!("{NGINX}limit-rps"): "1", format!("{NGINX}limit-burst-multiplier"): "2"}),
            "limited.example",
            json!([path("/", "Prefix", "other")]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || pod_of(&get(
            c.addr(80),
            "limited.example",
            "/",
            &[]
        )) == "pod-13"),
        "{}",
        c.context()
    );
    // The request above counted: one more within the window, then 503.
    let statuses: Vec<String> = (0..3)
        .map(|_| pod_of(&get(c.addr(80), "limited.example", "/", &[])))
        .collect();
    assert!(
        statuses.iter().any(|s| s == "status 503"),
        "{statuses:?}\n{}",
        c.context()
    );
    // Other Ingresses on the vserver are not limited by it.
    for _ in 0..5 {
        assert_eq!(pod_of(&get(c.addr(80), "open.example", "/", &[])), "pod-13");
    }

    // A canary by header beside its main Ingress.
    apply(
        api,
        ingress(
            "main",
            json!({}),
            "app.example",
            json!([path("/", "Prefix", "web")]),
        ),
    );
    apply(
        api,
        ingress(
            "main-canary",
            json!({format!("{NGINX}canary"): "true", format!("{NGINX}canary-by-header"): "X-Canary"}),
            "app.example",
            json!([path("/", "Prefix", "canary")]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || pod_of(&get(
            c.addr(80),
            "app.example",
            "/",
            &[("X-Canary", "always")]
        )) == "pod-12"),
        "{}",
        c.context()
    );
    assert_eq!(pod_of(&get(c.addr(80), "app.example", "/", &[])), "pod-10");
    assert_eq!(
        pod_of(&get(
            c.addr(80),
            "app.example",
            "/",
            &[("X-Canary", "never")]
        )),
        "pod-10"
    );

    // rewrite-target: the member gets the path nginx's rewrite would give
    // it (the paths' captures), and an nginx variable the node cannot
    // expand refuses its Ingress (an Event) rather than serving paths its
    // members do not expect.
    apply(
        api,
        ingress(
            "rewritten",
            json!({format!("{NGINX}rewrite-target"): "/$2"}),
            "rw.example",
            json!([path(
                "/something(/|$)(.*)",
                "ImplementationSpecific",
                "other"
            )]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            let got = get(c.addr(80), "rw.example", "/Something/new/x?q=1", &[]);
            pod_of(&got) == "pod-13" && got.is_some_and(|g| g.1["path"] == "/new/x?q=1")
        }),
        "{:?}\n{}",
        get(c.addr(80), "rw.example", "/Something/new/x?q=1", &[]),
        c.context()
    );
    assert_eq!(
        get(c.addr(80), "rw.example", "/something", &[]).map(|g| g.1["path"].clone()),
        Some(json!("/"))
    );
    apply(
        api,
        ingress(
            "rewritten-var",
            json!({format!("{NGINX}rewrite-target"): "/$host/$1"}),
            "rwv.example",
            json!([path("/(.*)", "ImplementationSpecific", "other")]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            events(api, "rewritten-var")
                .iter()
                .any(|(r, m)| r == "IngressRefused" && m.contains("rewrite-target"))
        }),
        "{:?}\n{}",
        events(api, "rewritten-var"),
        c.context()
    );
    assert_eq!(
        pod_of(&get(c.addr(80), "rwv.example", "/x", &[])),
        "status 404"
    );

    // An unsupported annotation: an Event naming it, the rest served.
    apply(
        api,
        ingress(
            "timeouts",
            json!({format!("{NGINX}proxy-send-timeout"): "120"}),
            "t.example",
            json!([path("/", "Prefix", "other")]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || events(api, "timeouts")
            .iter()
            .any(|(r, m)| r == "UnsupportedAnnotation"
                && m.contains(
                    "nginx.ingress.kubernetes.io/proxy-send-timeout"
                ))),
        "{:?}\n{}",
        events(api, "timeouts"),
        c.context()
    );
    assert!(
        eventually(Duration::from_secs(60), || pod_of(&get(
            c.addr(80),
            "t.example",
            "/",
            &[]
        )) == "pod-13"),
        "{}",
        c.context()
    );
    // Written once, not once per render.
    let n = events(api, "timeouts").len();
    apply(
        api,
        endpoint_slice("default", "other", &[&c.pod_ip(13)], 3000),
    );
    apply(
        api,
        ingress(
            "later",
            json!({}),
            "later.example",
            json!([path("/", "Prefix", "other")]),
        ),
    );
    assert!(eventually(Duration::from_secs(60), || pod_of(&get(
        c.addr(80),
        "later.example",
        "/",
        &[]
    )) == "pod-13"));
    assert_eq!(events(api, "timeouts").len(), n);
}
