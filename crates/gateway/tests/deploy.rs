//! k8s/deploy/ against a real API server: every manifest applies, the
//! ClusterRole has no wildcard and refuses what the controller does not
//! do, and the controller running AS the ServiceAccount (a token from
//! the TokenRequest API) reconciles a Gateway with a route and an Ingress
//! with an Event: the role is enough. (Pods never run here: the
//! Deployment and DaemonSet are stored, not started; the controller runs
//! as a process with the ServiceAccount's identity.)

mod harness;

use std::time::Duration;

use harness::*;
use serde_json::{json, Value};

const SA: &str = "system:serviceaccount:switchyard-system:switchyard-gateway";

/// Every document of every manifest of k8s/deploy/ (the kustomization
/// names them), in its order.
fn manifests() -> Vec<Value> {
    let dir = repo().join("k8s/deploy");
    let k: Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    let mut out = Vec::new();
    for f in k["resources"].as_array().unwrap() {
        let text = std::fs::read_to_string(dir.join(f.as_str().unwrap())).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            if !v.is_null() {
                out.push(v);
            }
        }
    }
    out
}

/// Whether the API server lets the ServiceAccount do `verb` on `resource`.
fn allowed(api: &Api, verb: &str, group: &str, resource: &str, sub: &str) -> bool {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": SA, "groups": ["system:serviceaccounts", "system:serviceaccounts:switchyard-system", "system:authenticated"],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "subresource": sub, "namespace": "default"}},
    });
    let (code, body) = api.call(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        "application/json",
        Some(&review.to_string()),
    );
    assert_eq!(code, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["status"]["allowed"] == true
}

#[test]
fn the_manifests_apply_and_their_role_is_enough_and_no_more() {
    let Some(mut c) = start("deploy", 2) else {
        return;
    };
    let objects = manifests();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    for k in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "StatefulSet",
        "Deployment",
        "DaemonSet",
        "Service",
        "GatewayClass",
        "IngressClass",
    ] {
        assert!(kinds.contains(&k), "k8s/deploy has no {k}: {kinds:?}");
    }
    // The node files of the ConfigMaps are [cluster] tables a node and
    // the controller take (read as they read them).
    let mut node_files = 0;
    for o in objects.iter().filter(|o| o["kind"] == "ConfigMap") {
        if let Some(text) = o["data"]["node.toml"].as_str() {
            let name = format!("ConfigMap {}", o["metadata"]["name"]);
            let settings = switchyard::config::cluster_settings(&name, text, &c.dir)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let s = settings.unwrap_or_else(|| panic!("{name}: no [cluster] table"));
            assert_eq!(
                s.endpoints,
                vec!["http://switchyard-etcd.switchyard-system.svc:2379".to_string()],
                "{name}"
            );
            node_files += 1;
        }
    }
    assert_eq!(node_files, 2, "the nodes' and the controller's node.toml");
    for o in &objects {
        apply(&c.api, o.clone());
    }
    // Minimal: no wildcard anywhere in the role.
    let role = objects.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    for rule in role["rules"].as_array().unwrap() {
        for field in ["apiGroups", "resources", "verbs"] {
            assert!(
                !rule[field].as_array().unwrap().iter().any(|v| v == "*"),
                "wildcard in {rule}"
            );
        }
    }
    let api = &c.api;
    assert!(allowed(api, "watch", "networking.k8s.io", "ingresses", ""));
    assert!(allowed(
        api,
        "patch",
        "networking.k8s.io",
        "ingresses",
        "status"
    ));
    for (verb, group, res, sub) in [
        ("get", "", "secrets", ""),
        ("update", "networking.k8s.io", "ingresses", ""),
        ("patch", "networking.k8s.io", "ingresses", ""),
        ("delete", "gateway.networking.k8s.io", "httproutes", ""),
        ("list", "", "pods", ""),
        ("create", "", "configmaps", ""),
    ] {
        assert!(
            !allowed(api, verb, group, res, sub),
            "{verb} {group}/{res} is allowed"
        );
    }

    // The controller as the ServiceAccount.
    let (code, body) = api.call(
        "POST",
        "/api/v1/namespaces/switchyard-system/serviceaccounts/switchyard-gateway/token",
        "application/json",
        Some(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let token = serde_json::from_str::<Value>(&body).unwrap()["status"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let kubeconfig = c.kubeconfig("sa-kubeconfig", &token);
    c.start_controller(&kubeconfig, &[]);
    let api = &c.api;
    apply(api, service("default", "web"));
    apply(
        api,
        endpoint_slice("default", "web", &[&c.pod_ip(10)], 3000),
    );
    apply(api, service("default", "app"));
    apply(
        api,
        endpoint_slice("default", "app", &[&c.pod_ip(11)], 3000),
    );
    apply(
        api,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "switchyard", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
    );
    apply(
        api,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["gw.example"],
                "rules": [{"backendRefs": [{"name": "web", "port": 8080}]}]}}),
    );
    // No class named: the default IngressClass of classes.yaml takes it.
    apply(
        api,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "app", "namespace": "default",
                "annotations": {"nginx.ingress.kubernetes.io/proxy-buffering": "off"}},
            "spec": {"rules": [{"host": "ing.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "app", "port": {"number": 8080}}}}]}}]}}),
    );
    let ok = eventually(Duration::from_secs(60), || {
        pod_of(&get(c.addr(80), "gw.example", "/", &[])) == "pod-10"
            && pod_of(&get(c.addr(80), "ing.example", "/", &[])) == "pod-11"
    });
    assert!(ok, "{}", c.context());
    // Statuses and an Event, written with the role's patch and create.
    let status_ok = eventually(Duration::from_secs(60), || {
        let gw = api.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/gateways/gw");
        let ing = api.get("/apis/networking.k8s.io/v1/namespaces/default/ingresses/app");
        let route = api.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/web");
        let events = api.get("/api/v1/namespaces/default/events");
        gw.is_some_and(|g| {
            g["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Programmed" && c["status"] == "True")
            })
        }) && ing.is_some_and(|i| i["status"]["loadBalancer"]["ingress"][0]["ip"] == "127.0.0.1")
            && route.is_some_and(|r| {
                r["status"]["parents"][0]["controllerName"] == "switchyard.dev/gateway-controller"
            })
            && events.is_some_and(|e| {
                e["items"].as_array().is_some_and(|items| {
                    items.iter().any(|e| {
                        e["reason"] == "UnsupportedAnnotation"
                            && e["involvedObject"]["name"] == "app"
                            && e["source"]["component"] == "switchyard-gateway"
                    })
                })
            })
    });
    assert!(status_ok, "{}", c.context());
    let log = c.log("controller");
    assert!(!log.contains("forbidden"), "the role is not enough:\n{log}");
}
