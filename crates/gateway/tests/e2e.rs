//! The controller against a real API server: kube-apiserver v1.37.2 (built
//! from Go modules by scripts/k8s-binaries.sh, cached) on its own etcd,
//! the Gateway API v1.7 CRDs (k8s/crds), a real Switchyard node following
//! the cluster's etcd key, and echo backends ("pods") on addresses of a
//! network namespace this test makes (EndpointSlices refuse loopback).
//!
//! Skips, saying so, when kube-apiserver is not built or the test is not
//! root (namespaces). Objects are applied with server-side apply through
//! curl with a static token; statuses are read back as JSON.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

mod conformance;
mod harness;

use harness::{
    apply, endpoint_slice, eventually, free_port, get, k8s_bin, path_of, pod_of, repo, run,
    service, Api, TOKEN,
};

/// Processes killed (by PID) and namespaces deleted when the test ends.
struct Cleanup {
    children: Vec<(String, Child)>,
    netns: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn spawn(cl: &mut Cleanup, name: &str, cmd: &mut Command, log: &Path) {
    let f = std::fs::File::create(log).unwrap();
    let child = cmd
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    cl.children.push((name.to_string(), child));
}

/// A condition of a status's `conditions`: (status, reason).
fn condition(conds: &Value, kind: &str) -> Option<(String, String)> {
    conds
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
}

/// Which pods answer `n` requests.
fn pods(addr: SocketAddr, host: &str, path: &str, n: usize) -> std::collections::BTreeSet<String> {
    (0..n)
        .map(|_| pod_of(&get(addr, host, path, &[])))
        .collect()
}

fn route(ns: &str, name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}], "rules": rules},
    })
}

fn backend(name: &str) -> Value {
    json!({"name": name, "port": 8080})
}

#[test]
fn gateway_api_on_a_real_api_server() {
    let Some(bin) = k8s_bin() else {
        println!("SKIPPED: kube-apiserver is not built (scripts/k8s-binaries.sh builds it; SWITCHYARD_K8S_BIN names its directory)");
        return;
    };
    if run("id", &["-u"]).1.trim() != "0" {
        println!("SKIPPED: not root (the backends live in a network namespace this test makes)");
        return;
    }
    for cmd in ["etcd", "curl", "openssl", "python3"] {
        if !run("sh", &["-c", &format!("command -v {cmd}")]).0 {
            println!("SKIPPED: {cmd} is not installed");
            return;
        }
    }
    let node_bin = std::env::var_os("SWITCHYARD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_BIN_EXE_switchyard-gateway")).with_file_name("switchyard")
        });
    assert!(
        node_bin.is_file(),
        "{} is not built: run cargo test --workspace (or cargo build -p switchyard)",
        node_bin.display()
    );
    let dir = std::env::temp_dir().join(format!("sy-gateway-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cl = Cleanup {
        children: Vec::new(),
        netns: Vec::new(),
    };

    // etcd for the API server, and one for the Switchyard cluster.
    let mut etcds = Vec::new();
    for name in ["k8s", "sy"] {
        let (mut cmd, client) = harness::etcd(&dir, name);
        spawn(
            &mut cl,
            &format!("etcd-{name}"),
            &mut cmd,
            &dir.join(format!("etcd-{name}.log")),
        );
        etcds.push(client);
    }
    for p in &etcds {
        harness::wait_for_etcd(*p);
    }

    let api_port = free_port();
    spawn(
        &mut cl,
        "kube-apiserver",
        &mut harness::kube_apiserver(&bin, &dir, etcds[0], api_port),
        &dir.join("kube-apiserver.log"),
    );
    let api = Api {
        url: format!("https://127.0.0.1:{api_port}"),
        token: TOKEN.to_string(),
    };
    assert!(
        eventually(Duration::from_secs(60), || api
            .call("GET", "/readyz", "text/plain", None)
            .0
            == 200),
        "kube-apiserver not ready: {}",
        std::fs::read_to_string(dir.join("kube-apiserver.log"))
            .unwrap_or_default()
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The Gateway API v1.7 standard CRDs.
    let crds = repo().join("k8s/crds/gateway-api-v1.7.0");
    for f in [
        "gatewayclasses",
        "gateways",
        "httproutes",
        "referencegrants",
        "grpcroutes",
        "tlsroutes",
        "tcproutes",
        "udproutes",
        "backendtlspolicies",
    ] {
        let text =
            std::fs::read_to_string(crds.join(format!("gateway.networking.k8s.io_{f}.yaml")))
                .unwrap();
        let name = format!("{f}.gateway.networking.k8s.io");
        api.apply(
            &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"),
            &text,
        );
        assert!(eventually(Duration::from_secs(30), || {
            api.get(&format!(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            ))
            .is_some_and(|v| {
                condition(&v["status"]["conditions"], "Established").is_some_and(|c| c.0 == "True")
            })
        }));
    }

    // The backends: addresses 10.201.X.10.. in a namespace behind a veth.
    let tag = std::process::id() % 200 + 20;
    let ns = format!("sygw{}", std::process::id() % 100_000);
    assert!(run("ip", &["netns", "add", &ns]).0);
    cl.netns.push(ns.clone());
    let host_if = format!("sygw{}h", std::process::id() % 100_000);
    assert!(
        run(
            "ip",
            &["link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns", &ns]
        )
        .0
    );
    assert!(
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("10.201.{tag}.1/24"),
                "dev",
                &host_if
            ]
        )
        .0
    );
    assert!(run("ip", &["link", "set", &host_if, "up"]).0);
    assert!(run("ip", &["-n", &ns, "link", "set", "lo", "up"]).0);
    assert!(run("ip", &["-n", &ns, "link", "set", "eth0", "up"]).0);
    let pod_ip = |i: u8| format!("10.201.{tag}.{i}");
    let mut echo_args = vec![
        "netns".to_string(),
        "exec".into(),
        ns.clone(),
        "python3".into(),
    ];
    echo_args.push(
        repo()
            .join("crates/gateway/tests/echo.py")
            .display()
            .to_string(),
    );
    for i in 10..20u8 {
        assert!(
            run(
                "ip",
                &[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{}/24", pod_ip(i)),
                    "dev",
                    "eth0"
                ]
            )
            .0
        );
        echo_args.extend([
            pod_ip(i),
            "3000".into(),
            format!("pod-{i}"),
            "default".into(),
        ]);
    }
    // The conformance suite's backends, one pod each (conformance.rs).
    for (i, (svc, svc_ns)) in conformance::BACKENDS.iter().enumerate() {
        let ip = pod_ip(30 + i as u8);
        assert!(
            run(
                "ip",
                &["-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"]
            )
            .0
        );
        echo_args.extend([ip, "3000".into(), format!("{svc}-pod"), svc_ns.to_string()]);
    }
    spawn(
        &mut cl,
        "echo",
        Command::new("ip").args(&echo_args),
        &dir.join("echo.log"),
    );
    // The conformance suite's TLS backend (BackendTLSPolicy), port 8443,
    // logging into the same file.
    let (tls_cert, tls_key, tls_ca, tls_mismatch_ca) =
        conformance::tls_backend_files(&dir.join("tls-backend"));
    assert!(
        run(
            "ip",
            &[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", pod_ip(29)),
                "dev",
                "eth0"
            ]
        )
        .0
    );
    let tls_echo: Vec<String> = [
        "netns".to_string(),
        "exec".into(),
        ns.clone(),
        "python3".into(),
        repo()
            .join("crates/gateway/tests/echo.py")
            .display()
            .to_string(),
        "--tls".into(),
        tls_cert.display().to_string(),
        tls_key.display().to_string(),
        pod_ip(29),
        "8443".into(),
        "tls-backend-pod".into(),
        conformance::INFRA.into(),
    ]
    .into();
    spawn(
        &mut cl,
        "tls-echo",
        Command::new("ip").args(&tls_echo),
        &dir.join("tls-echo.log"),
    );
    assert!(eventually(Duration::from_secs(60), || {
        [(pod_ip(19), 3000), (pod_ip(29), 8443)]
            .iter()
            .all(|(ip, port)| {
                TcpStream::connect_timeout(
                    &format!("{ip}:{port}").parse().unwrap(),
                    Duration::from_millis(200),
                )
                .is_ok()
            })
    }));

    // A Switchyard node of cluster /gw, and the controller publishing to it.
    let admin = free_port();
    let node_file = dir.join("node.toml");
    std::fs::write(
        &node_file,
        format!(
            "[global]\nworkers = 1\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n[cluster]\nendpoints = [\"http://127.0.0.1:{}\"]\nprefix = \"/gw\"\nnode = \"n1\"\nstartup_wait = \"120s\"\nwatch_idle = \"2s\"\n",
            etcds[1]
        ),
    )
    .unwrap();
    spawn(
        &mut cl,
        "switchyard",
        Command::new(&node_bin).args(["run", "-c"]).arg(&node_file),
        &dir.join("node.log"),
    );
    std::fs::create_dir_all(dir.join("controller")).unwrap();
    std::fs::write(
        dir.join("controller/node.toml"),
        format!("[cluster]\nendpoints = [\"http://127.0.0.1:{}\"]\nprefix = \"/gw\"\nnode = \"controller\"\n", etcds[1]),
    )
    .unwrap();
    std::fs::write(
        dir.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{api_port}\n    insecure-skip-tls-verify: true\nusers:\n- name: t\n  user:\n    token: {TOKEN}\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: t\ncurrent-context: t\n"
        ),
    )
    .unwrap();
    let offset = harness::free_offset();
    let http_port = 80 + offset;
    spawn(
        &mut cl,
        "switchyard-gateway",
        Command::new(env!("CARGO_BIN_EXE_switchyard-gateway"))
            .env("KUBECONFIG", dir.join("kubeconfig"))
            .arg("--node-config")
            .arg(dir.join("controller/node.toml"))
            .args([
                "--listen-address",
                "127.0.0.1",
                "--port-offset",
                &offset.to_string(),
            ]),
        &dir.join("controller.log"),
    );
    let controller_log = || std::fs::read_to_string(dir.join("controller.log")).unwrap_or_default();
    let node_log = || std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
    let publishes = || controller_log().matches("published revision").count();
    let gw_addr: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();

    // The class, a Gateway in "infra" taking routes from every namespace,
    // a Service in "default" with two endpoints, a route to it.
    for n in ["infra", "default", "other"] {
        apply(
            &api,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}),
        );
    }
    apply(
        &api,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "switchyard"},
            "spec": {"controllerName": "switchyard.dev/gateway-controller"},
        }),
    );
    apply(
        &api,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "infra"},
            "spec": {"gatewayClassName": "switchyard", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
            ]},
        }),
    );
    apply(&api, service("default", "echo"));
    apply(
        &api,
        endpoint_slice("default", "echo", &[&pod_ip(10), &pod_ip(11)], 3000),
    );
    apply(
        &api,
        route(
            "default",
            "web",
            json!([{"backendRefs": [backend("echo")]}]),
        ),
    );

    let context = || format!("controller:\n{}\nnode:\n{}", controller_log(), node_log());
    assert!(
        eventually(Duration::from_secs(60), || pods(
            gw_addr,
            "a.example",
            "/",
            6
        ) == [
            "pod-10".to_string(),
            "pod-11".to_string()
        ]
        .into()),
        "traffic does not reach both endpoints: {:?}\n{}",
        pods(gw_addr, "a.example", "/", 6),
        context()
    );

    // Statuses.
    let class = api
        .get("/apis/gateway.networking.k8s.io/v1/gatewayclasses/switchyard")
        .unwrap();
    assert_eq!(
        condition(&class["status"]["conditions"], "Accepted"),
        Some(("True".into(), "Accepted".into())),
        "{class}"
    );
    let gw = api
        .get("/apis/gateway.networking.k8s.io/v1/namespaces/infra/gateways/gw")
        .unwrap();
    assert_eq!(
        condition(&gw["status"]["conditions"], "Programmed"),
        Some(("True".into(), "Programmed".into())),
        "{gw}"
    );
    assert_eq!(gw["status"]["addresses"][0]["value"], "127.0.0.1", "{gw}");
    assert_eq!(gw["status"]["listeners"][0]["attachedRoutes"], 1, "{gw}");
    let rt = api
        .get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/web")
        .unwrap();
    let parent = &rt["status"]["parents"][0];
    assert_eq!(
        parent["controllerName"], "switchyard.dev/gateway-controller",
        "{rt}"
    );
    assert_eq!(
        condition(&parent["conditions"], "Accepted"),
        Some(("True".into(), "Accepted".into())),
        "{rt}"
    );
    assert_eq!(
        condition(&parent["conditions"], "ResolvedRefs"),
        Some(("True".into(), "ResolvedRefs".into())),
        "{rt}"
    );
    assert_eq!(
        parent["conditions"][0]["observedGeneration"], rt["metadata"]["generation"],
        "{rt}"
    );

    // An endpoint added is used; one removed is not any more.
    apply(
        &api,
        endpoint_slice("default", "echo", &[&pod_ip(11), &pod_ip(12)], 3000),
    );
    assert!(
        eventually(Duration::from_secs(60), || pods(
            gw_addr,
            "a.example",
            "/",
            6
        ) == [
            "pod-11".to_string(),
            "pod-12".to_string()
        ]
        .into()),
        "endpoint change not followed: {:?}",
        pods(gw_addr, "a.example", "/", 6)
    );

    // Endpoint changes are run-time member changes on the node (issue 37
    // item 3): a scale-out from 1 to 3 endpoints and a scale-in publish
    // no configuration (the text and its revision stay), and a WebSocket
    // open through the endpoint that goes away is not dropped.
    apply(&api, service("default", "scale"));
    apply(
        &api,
        endpoint_slice("default", "scale", &[&pod_ip(17)], 3000),
    );
    apply(
        &api,
        route(
            "default",
            "scale",
            json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/scale"}}], "backendRefs": [backend("scale")]}]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || pods(
            gw_addr,
            "a.example",
            "/scale",
            3
        ) == ["pod-17".to_string()]
            .into()),
        "{}",
        context()
    );
    let applied = || {
        node_log()
            .matches("applied (configuration generation")
            .count()
    };
    // Every build of the configuration logs "configuration generation N
    // is live"; a run-time member change swaps one pool's members in
    // place and builds nothing.
    let builds = || node_log().matches(" is live").count();
    let (publishes_before, applied_before, builds_before) = (publishes(), applied(), builds());
    let mut ws = TcpStream::connect(gw_addr).unwrap();
    ws.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    ws.write_all(b"GET /scale/ws HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(ws.read(&mut byte).unwrap(), 1, "the upgrade got no answer");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(
        head.starts_with("http/1.1 101") && head.contains("x-pod: pod-17"),
        "{head}"
    );
    let echo = |ws: &mut TcpStream, msg: &[u8]| -> Result<Vec<u8>, String> {
        ws.write_all(msg).map_err(|e| e.to_string())?;
        let mut back = vec![0u8; msg.len()];
        ws.read_exact(&mut back).map_err(|e| e.to_string())?;
        Ok(back)
    };
    assert_eq!(echo(&mut ws, b"before").as_deref(), Ok(&b"before"[..]));
    // Scale out: 1 -> 3.
    apply(
        &api,
        endpoint_slice(
            "default",
            "scale",
            &[&pod_ip(17), &pod_ip(18), &pod_ip(19)],
            3000,
        ),
    );
    let three: std::collections::BTreeSet<String> =
        ["pod-17", "pod-18", "pod-19"].map(String::from).into();
    assert!(
        eventually(Duration::from_secs(60), || pods(
            gw_addr,
            "a.example",
            "/scale",
            9
        ) == three),
        "the scale-out was not followed: {:?}\n{}",
        pods(gw_addr, "a.example", "/scale", 9),
        context()
    );
    // Scale in: the WebSocket's endpoint goes.
    apply(
        &api,
        endpoint_slice("default", "scale", &[&pod_ip(18), &pod_ip(19)], 3000),
    );
    let two: std::collections::BTreeSet<String> = ["pod-18", "pod-19"].map(String::from).into();
    assert!(
        eventually(Duration::from_secs(60), || pods(
            gw_addr,
            "a.example",
            "/scale",
            6
        ) == two),
        "the scale-in was not followed: {:?}\n{}",
        pods(gw_addr, "a.example", "/scale", 6),
        context()
    );
    assert_eq!(
        echo(&mut ws, b"after the scale-in").as_deref(),
        Ok(&b"after the scale-in"[..]),
        "the WebSocket through the removed endpoint was dropped\n{}",
        context()
    );
    assert_eq!(
        (publishes(), applied()),
        (publishes_before, applied_before),
        "an endpoint change published or applied a configuration revision\n{}",
        context()
    );
    assert_eq!(
        builds(),
        builds_before,
        "an endpoint change built the whole configuration again\n{}",
        context()
    );
    // Not dropped by configuration changes either: 100 changes of an
    // unrelated route, each a new revision the node applies.
    let applied_then = applied();
    for i in 0..100 {
        apply(
            &api,
            route(
                "default",
                "churn",
                json!([{"matches": [{"path": {"type": "PathPrefix", "value": format!("/churn{i}")}}], "backendRefs": [backend("scale")]}]),
            ),
        );
        assert!(
            // "web" (pods 11, 12) takes the path until the change is live.
            eventually(Duration::from_secs(60), || two.contains(&pod_of(&get(
                gw_addr,
                "a.example",
                &format!("/churn{i}"),
                &[]
            )))),
            "change {i} not followed\n{}",
            context()
        );
    }
    assert!(
        eventually(Duration::from_secs(60), || applied() >= applied_then + 100),
        "{} revisions applied for 100 route changes",
        applied() - applied_then
    );
    assert_eq!(
        echo(&mut ws, b"after 100 route changes").as_deref(),
        Ok(&b"after 100 route changes"[..]),
        "the WebSocket was dropped by route changes\n{}",
        context()
    );
    drop(ws);
    let publishes_then = publishes();
    api.delete("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/churn");
    assert!(
        eventually(Duration::from_secs(60), || publishes() > publishes_then),
        "{}",
        controller_log()
    );
    let log = node_log();
    let change = |what: &str| {
        log.lines().any(|l| {
            l.contains("run-time member change")
                && l.contains(what)
                && l.contains("swapped in place")
                && l.contains("unchanged")
        })
    };
    assert!(
        change(&format!("+{}:3000", pod_ip(18))) && change(&format!("-{}:3000", pod_ip(17))),
        "the node did not log the run-time changes:\n{log}"
    );
    // Its route goes (and the next step counts publishes from there).
    let publishes_then = publishes();
    api.delete("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/scale");
    assert!(
        eventually(Duration::from_secs(60), || publishes() > publishes_then),
        "{}",
        controller_log()
    );

    // An unrelated change renders the same text: not published again.
    let before = publishes();
    let stored = apply(
        &api,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "unrelated", "namespace": "other"},
        "spec": {"ports": [{"port": 1, "protocol": "TCP"}]}}),
    );
    let rv: u64 = stored["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("resourceVersion");
    // The render that saw it said so.
    let render_of_it = || {
        controller_log()
            .lines()
            .find(|l| {
                l.split("resourceVersion ")
                    .nth(1)
                    .and_then(|r| r.split(')').next())
                    .and_then(|r| r.parse::<u64>().ok())
                    >= Some(rv)
            })
            .map(str::to_owned)
    };
    assert!(
        eventually(Duration::from_secs(60), || render_of_it().is_some()),
        "the controller did not render the change:\n{}",
        controller_log()
    );
    let line = render_of_it().unwrap_or_default();
    assert!(line.contains("unchanged, not published"), "{line}");
    assert_eq!(
        publishes(),
        before,
        "an unchanged render was published again:\n{}",
        controller_log()
    );

    // A route change: matches by path, header and method, header edits,
    // a second Service, and precedence (exact before prefix, more headers
    // first) across two routes.
    apply(&api, service("default", "v2"));
    apply(&api, endpoint_slice("default", "v2", &[&pod_ip(13)], 3000));
    apply(
        &api,
        route(
            "default",
            "web",
            json!([
                {"backendRefs": [backend("echo")]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/v2"}}],
                 "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X-Route", "value": "v2"}], "remove": ["X-Drop"]}},
                             {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "X-Served-By", "value": "switchyard"}]}}],
                 "backendRefs": [backend("v2")]},
                {"matches": [{"path": {"type": "Exact", "value": "/exact"}}, {"headers": [{"name": "version", "value": "two"}, {"name": "color", "value": "blue"}]}],
                 "backendRefs": [backend("v2")]},
            ]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || pod_of(&get(
            gw_addr,
            "a",
            "/v2/x",
            &[]
        )) == "pod-13"),
        "route change not followed: {}",
        controller_log()
    );
    let r = get(gw_addr, "a", "/v2/x", &[("X-Drop", "1")]).unwrap();
    assert_eq!(r.1["headers"]["X-Route"][0], "v2", "{:?}", r.1);
    assert!(r.1["headers"].get("X-Drop").is_none(), "{:?}", r.1);
    assert!(
        r.2.to_ascii_lowercase().contains("x-served-by: switchyard"),
        "{}",
        r.2
    );
    // "/v2" is a path prefix by segments: "/v2x" is not under it.
    assert_ne!(pod_of(&get(gw_addr, "a", "/v2x", &[])), "pod-13");
    assert_eq!(pod_of(&get(gw_addr, "a", "/exact", &[])), "pod-13");
    assert_ne!(pod_of(&get(gw_addr, "a", "/exact/no", &[])), "pod-13");
    assert_eq!(
        pod_of(&get(
            gw_addr,
            "a",
            "/any",
            &[("version", "two"), ("color", "blue")]
        )),
        "pod-13"
    );
    assert_ne!(
        pod_of(&get(gw_addr, "a", "/any", &[("version", "two")])),
        "pod-13"
    );

    // Weights: 3:1 between two Services (2 and 1 endpoints).
    apply(
        &api,
        route(
            "default",
            "weights",
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/weighted"}}],
                 "backendRefs": [{"name": "echo", "port": 8080, "weight": 3}, {"name": "v2", "port": 8080, "weight": 1}]},
            ]),
        ),
    );
    assert!(eventually(Duration::from_secs(60), || pod_of(&get(
        gw_addr,
        "a",
        "/weighted",
        &[]
    ))
    .starts_with("pod-")));
    let mut v2 = 0;
    for _ in 0..200 {
        if pod_of(&get(gw_addr, "a", "/weighted", &[])) == "pod-13" {
            v2 += 1;
        }
    }
    assert!(
        (30..=70).contains(&v2),
        "v2 took {v2} of 200 (25% expected)"
    );

    // A missing backend: ResolvedRefs False BackendNotFound, 500.
    apply(
        &api,
        route(
            "default",
            "broken",
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/broken"}}], "backendRefs": [backend("missing")]},
            ]),
        ),
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            api.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/broken")
                .is_some_and(|v| {
                    condition(&v["status"]["parents"][0]["conditions"], "ResolvedRefs")
                        == Some(("False".into(), "BackendNotFound".into()))
                })
        }),
        "{}",
        controller_log()
    );
    assert!(eventually(Duration::from_secs(60), || get(
        gw_addr,
        "a",
        "/broken",
        &[]
    )
    .is_some_and(|r| r.0 == 500)));

    // A cross-namespace backend without a ReferenceGrant: RefNotPermitted;
    // with one, it resolves.
    apply(&api, service("other", "there"));
    apply(&api, endpoint_slice("other", "there", &[&pod_ip(14)], 3000));
    apply(
        &api,
        route(
            "default",
            "cross",
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/cross"}}], "backendRefs": [{"name": "there", "namespace": "other", "port": 8080}]},
            ]),
        ),
    );
    let cross = || {
        api.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/cross")
            .and_then(|v| condition(&v["status"]["parents"][0]["conditions"], "ResolvedRefs"))
    };
    assert!(
        eventually(Duration::from_secs(60), || cross()
            == Some(("False".into(), "RefNotPermitted".into()))),
        "{:?}",
        cross()
    );
    assert_eq!(get(gw_addr, "a", "/cross", &[]).map(|r| r.0), Some(500));
    apply(
        &api,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
            "metadata": {"name": "allow-default", "namespace": "other"},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "default"}],
                     "to": [{"group": "", "kind": "Service"}]},
        }),
    );
    assert!(
        eventually(Duration::from_secs(60), || pod_of(&get(
            gw_addr,
            "a",
            "/cross",
            &[]
        )) == "pod-14"),
        "{:?}",
        cross()
    );
    assert_eq!(cross(), Some(("True".into(), "ResolvedRefs".into())));

    // A parentRef naming a listener the Gateway does not have.
    let mut bad = route(
        "default",
        "nolistener",
        json!([{"backendRefs": [backend("echo")]}]),
    );
    bad["spec"]["parentRefs"][0]["sectionName"] = json!("nope");
    apply(&api, bad);
    assert!(eventually(Duration::from_secs(60), || {
        api.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/nolistener")
            .is_some_and(|v| {
                condition(&v["status"]["parents"][0]["conditions"], "Accepted")
                    == Some(("False".into(), "NoMatchingParent".into()))
            })
    }));

    // Redirects (the conformance suite's HTTPRouteRedirectHostAndStatus,
    // RedirectPath and RedirectPortAndScheme cases): built from the
    // request, its query kept.
    apply(
        &api,
        route(
            "default",
            "redirects",
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/hostname-redirect"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org"}}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/status-code-301"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 301}}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/original-prefix"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/replacement-prefix"}}}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/full"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/full-path-replacement"}}}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/scheme-and-port"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "port": 8443}}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/scheme"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}]},
            ]),
        ),
    );
    let location = |path: &str| {
        get(gw_addr, "redir.example", path, &[]).map(|(code, _, head)| {
            let loc = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("location")
                    .then(|| v.trim().to_string())
            });
            (code, loc.unwrap_or_default())
        })
    };
    assert!(
        eventually(Duration::from_secs(60), || location("/hostname-redirect")
            .is_some_and(|r| r.0 == 302)),
        "{:?}\n{}",
        location("/hostname-redirect"),
        controller_log()
    );
    assert_eq!(
        location("/hostname-redirect"),
        Some((302, "http://example.org/hostname-redirect".into()))
    );
    assert_eq!(
        location("/status-code-301"),
        Some((301, "http://redir.example/status-code-301".into()))
    );
    assert_eq!(
        location("/original-prefix/lemon?x=1"),
        Some((
            302,
            "http://redir.example/replacement-prefix/lemon?x=1".into()
        ))
    );
    assert_eq!(
        location("/original-prefix"),
        Some((302, "http://redir.example/replacement-prefix".into()))
    );
    assert_eq!(
        location("/full/one"),
        Some((302, "http://redir.example/full-path-replacement".into()))
    );
    assert_eq!(
        location("/scheme-and-port"),
        Some((302, "https://redir.example:8443/scheme-and-port".into()))
    );
    assert_eq!(
        location("/scheme"),
        Some((302, "https://redir.example/scheme".into()))
    );

    // A second Gateway on the same port but its own address
    // (spec.addresses): its routes do not mix with the first's.
    apply(
        &api,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw2", "namespace": "infra"},
            "spec": {"gatewayClassName": "switchyard", "addresses": [{"type": "IPAddress", "value": "127.0.0.2"}],
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]},
        }),
    );
    let mut only2 = route(
        "default",
        "only-on-gw2",
        json!([{"backendRefs": [backend("there-v2")]}]),
    );
    only2["spec"]["parentRefs"][0]["name"] = json!("gw2");
    apply(&api, service("default", "there-v2"));
    apply(
        &api,
        endpoint_slice("default", "there-v2", &[&pod_ip(15)], 3000),
    );
    apply(&api, only2);
    let gw2_addr: SocketAddr = format!("127.0.0.2:{http_port}").parse().unwrap();
    assert!(
        eventually(Duration::from_secs(60), || pod_of(&get(
            gw2_addr,
            "a",
            "/",
            &[]
        )) == "pod-15"),
        "{:?}\n{}",
        get(gw2_addr, "a", "/", &[]),
        controller_log()
    );
    assert_ne!(pod_of(&get(gw_addr, "a", "/", &[])), "pod-15");
    // The first Gateway's "/v2" route is not on the second.
    assert_eq!(pod_of(&get(gw2_addr, "a", "/v2/x", &[])), "pod-15");
    let gw2 = api
        .get("/apis/gateway.networking.k8s.io/v1/namespaces/infra/gateways/gw2")
        .unwrap();
    assert_eq!(gw2["status"]["addresses"][0]["value"], "127.0.0.2", "{gw2}");

    // The conformance suite's GATEWAY-HTTP core cases ported here.
    let echo_log = || std::fs::read_to_string(dir.join("echo.log")).unwrap_or_default();
    let tls_backend = conformance::TlsBackend {
        ip: pod_ip(29),
        ca: tls_ca,
        mismatch_ca: tls_mismatch_ca,
    };
    let results = conformance::run(
        &api,
        &|i| pod_ip(30 + i as u8),
        http_port,
        &controller_log,
        &echo_log,
        &tls_backend,
    );
    let failed: Vec<_> = results.iter().filter(|r| r.2.is_err()).collect();
    assert!(
        failed.is_empty(),
        "conformance cases failed: {failed:#?}\n{}",
        controller_log()
    );

    // HTTPS: a listener with a TLS Secret (made here) terminates TLS on
    // the node with that certificate; one naming a missing Secret is not
    // programmed.
    let pem = |name: &str| dir.join(name).display().to_string();
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
                "/CN=secure.example",
                "-addext",
                "subjectAltName=DNS:secure.example",
                "-keyout",
                &pem("site.key"),
                "-out",
                &pem("site.crt"),
            ]
        )
        .0
    );
    apply(
        &api,
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "site-cert", "namespace": "infra"},
            "stringData": {
                "tls.crt": std::fs::read_to_string(pem("site.crt")).unwrap(),
                "tls.key": std::fs::read_to_string(pem("site.key")).unwrap(),
            },
        }),
    );
    apply(
        &api,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "infra"},
            "spec": {"gatewayClassName": "switchyard", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
                {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "secure.example",
                 "tls": {"certificateRefs": [{"name": "site-cert"}]}, "allowedRoutes": {"namespaces": {"from": "All"}}},
                {"name": "broken-tls", "port": 8443, "protocol": "HTTPS",
                 "tls": {"certificateRefs": [{"name": "no-such-secret"}]}, "allowedRoutes": {"namespaces": {"from": "All"}}},
            ]},
        }),
    );
    let mut secure = route(
        "default",
        "secure",
        json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/s"}}], "backendRefs": [backend("secure-svc")]}]),
    );
    secure["spec"]["parentRefs"][0]["sectionName"] = json!("https");
    apply(&api, service("default", "secure-svc"));
    apply(
        &api,
        endpoint_slice("default", "secure-svc", &[&pod_ip(16)], 3000),
    );
    apply(&api, secure);
    let https_port = 443 + offset;
    let https_get = || {
        let (ok, out) = run(
            "curl",
            &[
                "-s",
                "--cacert",
                &pem("site.crt"),
                "--resolve",
                &format!("secure.example:{https_port}:127.0.0.1"),
                // "/s": the older route "web" (no hostname) takes "/" here too.
                &format!("https://secure.example:{https_port}/s"),
            ],
        );
        let pod = serde_json::from_str::<Value>(&out)
            .ok()
            .and_then(|v| v["pod"].as_str().map(str::to_owned));
        match (ok, pod) {
            (true, Some(p)) => p,
            _ => out,
        }
    };
    assert!(
        eventually(Duration::from_secs(60), || https_get() == "pod-16"),
        "{}\n{}",
        https_get(),
        controller_log()
    );
    // The listeners' statuses, once written.
    let tls_statuses = || {
        let gw = api
            .get("/apis/gateway.networking.k8s.io/v1/namespaces/infra/gateways/gw")
            .unwrap_or_default();
        let listener = |name: &str| {
            gw["status"]["listeners"]
                .as_array()
                .and_then(|ls| ls.iter().find(|l| l["name"] == name).cloned())
                .unwrap_or_default()
        };
        (
            condition(&listener("https")["conditions"], "Programmed"),
            condition(&listener("broken-tls")["conditions"], "ResolvedRefs"),
            condition(&listener("broken-tls")["conditions"], "Programmed").map(|c| c.0),
        )
    };
    let want = (
        Some(("True".to_string(), "Programmed".to_string())),
        Some(("False".to_string(), "InvalidCertificateRef".to_string())),
        Some("False".to_string()),
    );
    assert!(
        eventually(Duration::from_secs(60), || tls_statuses() == want),
        "{:?}",
        tls_statuses()
    );

    // A route moved off our Gateway loses the status entry we wrote.
    let mut moved = route(
        "default",
        "nolistener",
        json!([{"backendRefs": [backend("echo")]}]),
    );
    moved["spec"]["parentRefs"][0]["name"] = json!("someone-elses");
    apply(&api, moved);
    assert!(
        eventually(Duration::from_secs(60), || {
            api.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/nolistener")
                .is_some_and(|v| {
                    v["status"]["parents"]
                        .as_array()
                        .is_none_or(|p| p.is_empty())
                })
        }),
        "{:?}",
        api.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/nolistener")
    );

    // Deleting a route takes its traffic away.
    api.delete("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/weights");
    assert!(eventually(Duration::from_secs(60), || pod_of(&get(
        gw_addr,
        "a",
        "/weighted",
        &[]
    )) != "pod-13"
        && pods(gw_addr, "a", "/weighted", 10)
            .iter()
            .all(|p| p != "pod-13")));

    // Renders follow each other in the order of the changes they saw,
    // deletions (the conformance cases delete what they applied, often
    // the object whose status was written last) included: a render never
    // reports, let alone publishes, an older view than the one before.
    let views: Vec<u64> = controller_log()
        .lines()
        .filter_map(|l| {
            l.split("resourceVersion ")
                .nth(1)?
                .split(')')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        views.windows(2).all(|w| w[0] <= w[1]),
        "a render saw an older view than the one before it:\n{}",
        controller_log()
    );
    assert!(
        !controller_log().contains("older view"),
        "{}",
        controller_log()
    );

    drop(cl);
    let _ = std::fs::remove_dir_all(&dir);
}
