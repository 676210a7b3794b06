//! A real cluster for the Ingress and deployment tests: kube-apiserver
//! v1.37.2 (scripts/k8s-binaries.sh) on its own etcd, a Switchyard node
//! following a second etcd, echo backends ("pods") on addresses of a
//! network namespace made here (EndpointSlices refuse loopback), and the
//! controller started as whoever the test says. The same setup as
//! tests/e2e.rs, as functions (that file keeps its own copy).
//!
//! `start` returns None, saying why, when kube-apiserver is not built or
//! the test is not root.

#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const TOKEN: &str = "switchyard-test-token";

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The ports the tests' Gateways and Ingresses listen on.
const LISTENER_PORTS: [std::ops::RangeInclusive<u16>; 3] = [80..=99, 443..=443, 8443..=8443];

/// A `--port-offset` for the node that puts every listener port of the
/// tests below the kernel's ephemeral range, and each of them free (TCP
/// and UDP) now. Below that range no outgoing connection's local port
/// can take one of them after this check: an offset of `free_port() - 80`
/// put port 443 inside the range, and on CI an outgoing connection took
/// it before the node listened (stop 41, "Address already in use").
pub fn free_offset() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let highest = 8443;
    let start = (std::process::id() % 97) as u16;
    for i in 0..97u16 {
        let offset = 10_000 + ((start + i) % 97) * 100;
        if offset + highest >= ephemeral_low {
            continue;
        }
        let all_free = LISTENER_PORTS.iter().cloned().flatten().all(|p| {
            TcpListener::bind(("127.0.0.1", p + offset)).is_ok()
                && std::net::UdpSocket::bind(("127.0.0.1", p + offset)).is_ok()
        });
        if all_free {
            return offset;
        }
    }
    panic!("no port offset leaves the listeners' ports free below {ephemeral_low}")
}

/// Polls `f` every 50 ms until it holds or `within` has passed.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr),
    )
}

pub struct Api {
    pub url: String,
    pub token: String,
}

impl Api {
    /// (HTTP status, body) of one call.
    pub fn call(&self, method: &str, path: &str, ctype: &str, body: Option<&str>) -> (u16, String) {
        let mut cmd = Command::new("curl");
        cmd.args(["-sk", "-o", "-", "-w", "\n%{http_code}", "-X", method])
            .args(["-H", &format!("Authorization: Bearer {}", self.token)])
            .args(["-H", &format!("Content-Type: {ctype}")])
            .arg(format!("{}{}", self.url, path));
        if body.is_some() {
            cmd.args(["--data-binary", "@-"]);
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut c = cmd.spawn().expect("curl");
        if let Some(b) = body {
            c.stdin.take().unwrap().write_all(b.as_bytes()).unwrap();
        } else {
            drop(c.stdin.take());
        }
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// Server-side apply of one object (JSON or YAML) at `path`.
    pub fn apply(&self, path: &str, doc: &str) -> Value {
        let (code, body) = self.call(
            "PATCH",
            &format!("{path}?fieldManager=switchyard-test&force=true"),
            "application/apply-patch+yaml",
            Some(doc),
        );
        assert!(code == 200 || code == 201, "apply {path}: {code} {body}");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        let (code, body) = self.call("GET", path, "application/json", None);
        (code == 200).then(|| serde_json::from_str(&body).unwrap())
    }

    pub fn delete(&self, path: &str) {
        let (code, body) = self.call("DELETE", path, "application/json", None);
        assert!(
            code == 200 || code == 202 || code == 404,
            "delete {path}: {code} {body}"
        );
    }
}

/// The URL path of an object.
pub fn path_of(v: &Value) -> String {
    let api_version = v["apiVersion"].as_str().unwrap();
    let kind = v["kind"].as_str().unwrap();
    let name = v["metadata"]["name"].as_str().unwrap();
    let plural = match kind {
        "Namespace" => "namespaces",
        "Service" => "services",
        "Secret" => "secrets",
        "EndpointSlice" => "endpointslices",
        "GatewayClass" => "gatewayclasses",
        "Gateway" => "gateways",
        "HTTPRoute" => "httproutes",
        "GRPCRoute" => "grpcroutes",
        "TLSRoute" => "tlsroutes",
        "TCPRoute" => "tcproutes",
        "UDPRoute" => "udproutes",
        "ReferenceGrant" => "referencegrants",
        "BackendTLSPolicy" => "backendtlspolicies",
        "Ingress" => "ingresses",
        "IngressClass" => "ingressclasses",
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "ConfigMap" => "configmaps",
        "Deployment" => "deployments",
        "DaemonSet" => "daemonsets",
        "StatefulSet" => "statefulsets",
        "NetworkPolicy" => "networkpolicies",
        "CustomResourceDefinition" => "customresourcedefinitions",
        k => panic!("no plural for {k}"),
    };
    let base = if api_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{api_version}")
    };
    match v["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}/{name}"),
        None => format!("{base}/{plural}/{name}"),
    }
}

pub fn apply(api: &Api, v: Value) -> Value {
    api.apply(&path_of(&v), &v.to_string())
}

/// A request through the node: (status, the echo's JSON or the body as a
/// string, the head).
pub fn get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, Value, String)> {
    use std::io::Read;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((
        status,
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
        head.to_string(),
    ))
}

/// The pod that answered, or what happened instead.
pub fn pod_of(r: &Option<(u16, Value, String)>) -> String {
    match r {
        Some((200, v, _)) => v["pod"].as_str().unwrap_or("").to_string(),
        Some((code, _, _)) => format!("status {code}"),
        None => "no answer".into(),
    }
}

pub fn k8s_bin() -> Option<PathBuf> {
    let dir = std::env::var_os("SWITCHYARD_K8S_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/switchyard/k8s-v1.37.2")
        });
    dir.join("kube-apiserver").is_file().then_some(dir)
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn endpoint_slice(ns: &str, service: &str, ips: &[&str], port: u16) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-1"), "namespace": ns, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect::<Vec<_>>(),
    })
}

pub fn service(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 3000, "protocol": "TCP"}]},
    })
}
/// An etcd of its own on loopback ports, its data under `dir`: the
/// command to start, and its client port.
pub fn etcd(dir: &Path, name: &str) -> (Command, u16) {
    let (client, peer) = (free_port(), free_port());
    let mut cmd = Command::new("etcd");
    cmd.arg("--data-dir")
        .arg(dir.join(format!("etcd-{name}")))
        .args(["--name", name])
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args([
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster",
            &format!("{name}=http://127.0.0.1:{peer}"),
        ]);
    (cmd, client)
}

/// Waits until the etcd on client port `port` says it is healthy.
pub fn wait_for_etcd(port: u16) {
    assert!(
        eventually(Duration::from_secs(60), || run(
            "curl",
            &["-sf", &format!("http://127.0.0.1:{port}/health")]
        )
        .0),
        "etcd on {port} did not start"
    );
}

/// kube-apiserver on 127.0.0.1:`port` over the etcd at `etcd_port`: a
/// throwaway service-account key and a static token in system:masters
/// (`TOKEN`) written under `dir`, its own serving certificate, loopback
/// only. The command to start.
pub fn kube_apiserver(bin: &Path, dir: &Path, etcd_port: u16, port: u16) -> Command {
    let key = dir.join("sa.key");
    let publ = dir.join("sa.pub");
    assert!(
        run(
            "openssl",
            &["genrsa", "-out", key.to_str().unwrap(), "2048"]
        )
        .0
    );
    assert!(
        run(
            "openssl",
            &[
                "rsa",
                "-in",
                key.to_str().unwrap(),
                "-pubout",
                "-out",
                publ.to_str().unwrap()
            ]
        )
        .0
    );
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{TOKEN},admin,admin,\"system:masters\"\n"),
    )
    .unwrap();
    let mut cmd = Command::new(bin.join("kube-apiserver"));
    cmd.args(["--etcd-servers", &format!("http://127.0.0.1:{etcd_port}")])
        .args([
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
        ])
        .args(["--secure-port", &port.to_string()])
        .arg(format!("--cert-dir={}", dir.join("certs").display()))
        .arg(format!("--service-account-key-file={}", publ.display()))
        .arg(format!(
            "--service-account-signing-key-file={}",
            key.display()
        ))
        .args(["--service-account-issuer", "https://kubernetes.default.svc"])
        .arg(format!(
            "--token-auth-file={}",
            dir.join("tokens.csv").display()
        ))
        .args(["--authorization-mode", "RBAC"])
        .args(["--service-cluster-ip-range", "10.96.0.0/24"])
        .args(["--disable-admission-plugins", "ServiceAccount"])
        // The "kubernetes" Service's endpoints would be 127.0.0.1, which
        // the reconciler refuses; no pod uses it here.
        .args(["--endpoint-reconciler-type", "none"]);
    cmd
}

/// Processes and namespaces of a test, killed (by PID) and deleted when
/// it ends.
pub struct Cluster {
    children: Vec<(String, Child)>,
    netns: Vec<String>,
    pub dir: PathBuf,
    pub api: Api,
    pub api_port: u16,
    /// The Switchyard cluster's etcd (client port).
    pub sy_etcd: u16,
    pub tag: u32,
    /// HTTP port 80 of the Ingresses is this + 80.
    pub offset: u16,
    /// One cluster at a time per test binary: the pods' namespace and
    /// addresses are named after the process (and two clusters would
    /// share two cores anyway). Released after the cleanup above.
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        // etcd's files take about 250 MB a cluster: kept only for a test
        // that failed (its logs say why).
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Cluster {
    pub fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let log = self.dir.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.children.push((name.to_string(), child));
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// The network namespace the pods live in.
    pub fn pods_netns(&self) -> &str {
        self.netns.first().map(String::as_str).unwrap_or_default()
    }

    pub fn pod_ip(&self, i: u8) -> String {
        format!("10.202.{}.{i}", self.tag)
    }

    /// The node's HTTP address for port `p` of the Ingresses (80, 443).
    pub fn addr(&self, p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p + self.offset))
    }

    /// A kubeconfig file for `token`.
    pub fn kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{}\n    insecure-skip-tls-verify: true\nusers:\n- name: t\n  user:\n    token: {token}\ncontexts:\n- name: t\n  context:\n    cluster: t\n    user: t\ncurrent-context: t\n",
                self.api_port
            ),
        )
        .unwrap();
        path
    }

    /// The controller, with `kubeconfig`, publishing to the node's cluster.
    pub fn start_controller(&mut self, kubeconfig: &Path, extra: &[&str]) {
        std::fs::create_dir_all(self.dir.join("controller")).unwrap();
        std::fs::write(
            self.dir.join("controller/node.toml"),
            format!("[cluster]\nendpoints = [\"http://127.0.0.1:{}\"]\nprefix = \"/gw\"\nnode = \"controller\"\n", self.sy_etcd),
        )
        .unwrap();
        let offset = self.offset.to_string();
        let node_config = self.dir.join("controller/node.toml");
        self.spawn(
            "controller",
            Command::new(env!("CARGO_BIN_EXE_switchyard-gateway"))
                .env("KUBECONFIG", kubeconfig)
                .arg("--node-config")
                .arg(node_config)
                .args(["--listen-address", "127.0.0.1", "--port-offset", &offset])
                .args(extra),
        );
    }

    pub fn context(&self) -> String {
        format!(
            "controller:\n{}\nnode:\n{}",
            self.log("controller"),
            self.log("node")
        )
    }
}

/// etcd, kube-apiserver, the backends (`pods` echo servers on
/// pod_ip(10..10+pods), port 3000) and a Switchyard node; None (printed)
/// when this machine cannot run them.
pub fn start(test: &str, pods: u8) -> Option<Cluster> {
    let Some(bin) = k8s_bin() else {
        println!("SKIPPED: kube-apiserver is not built (scripts/k8s-binaries.sh builds it; SWITCHYARD_K8S_BIN names its directory)");
        return None;
    };
    if run("id", &["-u"]).1.trim() != "0" {
        println!("SKIPPED: not root (the backends live in a network namespace this test makes)");
        return None;
    }
    for cmd in ["etcd", "curl", "openssl", "python3"] {
        if !run("sh", &["-c", &format!("command -v {cmd}")]).0 {
            println!("SKIPPED: {cmd} is not installed");
            return None;
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
    let dir = std::env::temp_dir().join(format!("sy-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it left nothing behind (its
    // Cluster was dropped): the lock is usable.
    let guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let offset = free_offset();
    let mut c = Cluster {
        _one_at_a_time: guard,
        children: Vec::new(),
        netns: Vec::new(),
        dir: dir.clone(),
        api: Api {
            url: String::new(),
            token: TOKEN.into(),
        },
        api_port: free_port(),
        sy_etcd: 0,
        tag: std::process::id() % 200 + 20,
        offset,
    };
    let mut etcds = Vec::new();
    for name in ["k8s", "sy"] {
        let (mut cmd, client) = etcd(&dir, name);
        c.spawn(&format!("etcd-{name}"), &mut cmd);
        etcds.push(client);
    }
    for p in &etcds {
        wait_for_etcd(*p);
    }
    c.sy_etcd = etcds[1];
    let api_port = c.api_port;
    c.spawn(
        "kube-apiserver",
        &mut kube_apiserver(&bin, &dir, etcds[0], api_port),
    );
    c.api.url = format!("https://127.0.0.1:{api_port}");
    assert!(
        eventually(Duration::from_secs(60), || c
            .api
            .call("GET", "/readyz", "text/plain", None)
            .0
            == 200),
        "kube-apiserver not ready: {}",
        c.log("kube-apiserver")
    );
    // The Gateway API v1.7 standard CRDs (the controller watches them).
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
        let path = format!(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{f}.gateway.networking.k8s.io"
        );
        c.api.apply(&path, &text);
        assert!(eventually(Duration::from_secs(30), || {
            c.api.get(&path).is_some_and(|v| {
                v["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Established" && c["status"] == "True")
                })
            })
        }));
    }
    // Backends behind a veth in a namespace of this test.
    let ns = format!("syin{}", std::process::id() % 100_000);
    assert!(run("ip", &["netns", "add", &ns]).0);
    c.netns.push(ns.clone());
    let host_if = format!("syin{}h", std::process::id() % 100_000);
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
                &format!("10.202.{}.1/24", c.tag),
                "dev",
                &host_if
            ]
        )
        .0
    );
    assert!(run("ip", &["link", "set", &host_if, "up"]).0);
    assert!(run("ip", &["-n", &ns, "link", "set", "lo", "up"]).0);
    assert!(run("ip", &["-n", &ns, "link", "set", "eth0", "up"]).0);
    let mut echo_args = vec![
        "netns".to_string(),
        "exec".into(),
        ns.clone(),
        "python3".into(),
        repo()
            .join("crates/gateway/tests/echo.py")
            .display()
            .to_string(),
    ];
    for i in 10..10 + pods {
        let ip = c.pod_ip(i);
        assert!(
            run(
                "ip",
                &["-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"]
            )
            .0
        );
        echo_args.extend([ip, "3000".into(), format!("pod-{i}"), "default".into()]);
    }
    c.spawn("echo", Command::new("ip").args(&echo_args));
    let last: SocketAddr = format!("{}:3000", c.pod_ip(9 + pods)).parse().unwrap();
    assert!(eventually(Duration::from_secs(60), || {
        TcpStream::connect_timeout(&last, Duration::from_millis(200)).is_ok()
    }));
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
    c.spawn(
        "node",
        Command::new(&node_bin).args(["run", "-c"]).arg(&node_file),
    );
    Some(c)
}
