#!/usr/bin/env python3
"""Kubernetes propagation, measured (issue 37 item 6): a scenario, not a test.

Starts what crates/gateway/tests/e2e.rs starts (kube-apiserver v1.37.2 from
scripts/k8s-binaries.sh on its own etcd, the Gateway API v1.7 CRDs, an etcd
for the Switchyard cluster, one node, switchyard-gateway, echo "pods" in a
network namespace it makes), then grows the number of HTTPRoutes through
the sizes asked for (default 100 1000) and at each size times:

  route:    an HTTPRoute's path changed (server-side apply sent) -> the
            first request on the new path answered by its backend;
  endpoint: an EndpointSlice's only endpoint replaced by another (sent)
            -> requests answered by the new pod only (the new member used,
            the old one no longer picked);

SAMPLES times each (default 20), and reports p50/p99/max per size, with
the controller's and the node's resident memory (VmRSS, and VmHWM: the
peak). Root is needed (network namespace). Uses the debug binaries in
target/debug unless SWITCHYARD_BIN / SWITCHYARD_GATEWAY_BIN say otherwise
(an operator runs release builds: `cargo build --release -p switchyard -p
switchyard-gateway`, then point both at target/release).

usage: scripts/gateway-propagation.py [SIZE ...]   (env SAMPLES=20, PAUSE_MS=5, QUIET_S=10)
"""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "switchyard-bench-token"
SAMPLES = int(os.environ.get("SAMPLES", "20"))
# The prober's pause between two requests while it waits for a change, and
# the quiet time between growing to a size and timing changes there. Until
# 2026-12-04 (5cb89b5) both were 0: the prober asked in a busy loop
# (thousands of requests a second through the node, a core's worth of
# Python and node work on this 2-core machine, competing with the render
# and the build it timed), and the first changes met the status writes of
# the routes just added. A 5 ms pause adds at most 5 ms to a figure.
PAUSE = float(os.environ.get("PAUSE_MS", "5")) / 1000
QUIET = float(os.environ.get("QUIET_S", "10"))
DEADLINE = 120.0  # seconds any one wait may take before the run gives up


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def until(what, f, within=DEADLINE, pause=0.001):
    t = time.monotonic()
    while True:
        v = f()
        if v:
            return v
        if time.monotonic() - t > within:
            raise SystemExit(f"gave up after {within:.0f} s waiting for {what}")
        time.sleep(pause)


class Api:
    def __init__(self, url):
        self.url = url
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE

    def call(self, method, path, body=None, ctype="application/json"):
        req = urllib.request.Request(self.url + path, method=method, data=body)
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def apply(self, obj):
        code, body = self.call(
            "PATCH", path_of(obj) + "?fieldManager=bench&force=true",
            json.dumps(obj).encode(), "application/apply-patch+yaml")
        if code not in (200, 201):
            raise SystemExit(f"apply {path_of(obj)}: {code} {body[:300]!r}")


PLURAL = {"Namespace": "namespaces", "Service": "services",
          "EndpointSlice": "endpointslices", "GatewayClass": "gatewayclasses",
          "Gateway": "gateways", "HTTPRoute": "httproutes",
          "CustomResourceDefinition": "customresourcedefinitions"}


def path_of(o):
    v = o["apiVersion"]
    base = "/api/v1" if v == "v1" else f"/apis/{v}"
    ns = o["metadata"].get("namespace")
    name = o["metadata"]["name"]
    plural = PLURAL[o["kind"]]
    return f"{base}/namespaces/{ns}/{plural}/{name}" if ns else f"{base}/{plural}/{name}"


def service(name):
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 3000, "protocol": "TCP"}]}}


def slice_of(name, ips):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 3000, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


def route(name, path, backend):
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"parentRefs": [{"name": "gw", "namespace": "default"}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                                "backendRefs": [{"name": backend, "port": 8080}]}]}}


def pod_at(port, path):
    """The pod that answers GET path (None: no 200)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: bench.example\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return None
        return json.loads(body).get("pod")
    except (OSError, ValueError):
        return None


def rss(pid):
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) // 1024
    except OSError:
        pass
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    # timeout(1) and ^C: the finally below still stops what was started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sizes = [int(a) for a in sys.argv[1:]] or [100, 1000]
    if os.geteuid() != 0:
        raise SystemExit("root is needed (a network namespace for the pods)")
    k8s = os.environ.get("SWITCHYARD_K8S_BIN") or os.path.expanduser("~/.cache/switchyard/k8s-v1.37.2")
    node_bin = os.environ.get("SWITCHYARD_BIN", os.path.join(REPO, "target/debug/switchyard"))
    gw_bin = os.environ.get("SWITCHYARD_GATEWAY_BIN", os.path.join(REPO, "target/debug/switchyard-gateway"))
    for f in (os.path.join(k8s, "kube-apiserver"), node_bin, gw_bin):
        if not os.path.isfile(f):
            raise SystemExit(f"{f} is missing (scripts/k8s-binaries.sh; cargo build -p switchyard -p switchyard-gateway)")
    d = tempfile.mkdtemp(prefix="sy-propagation-")
    procs, netns = [], None

    def spawn(name, args, **kw):
        p = subprocess.Popen(args, stdout=open(os.path.join(d, name + ".log"), "w"),
                             stderr=subprocess.STDOUT, **kw)
        procs.append(p)
        return p

    try:
        etcds = []
        for name in ("k8s", "sy"):
            c, p = free_port(), free_port()
            # The cluster's: a 10,000-route text is about 3.3 MB, past
            # etcd's default 1.5 MiB request limit.
            spawn(f"etcd-{name}", ["etcd", "--max-request-bytes", str(32 << 20), "--data-dir", os.path.join(d, f"etcd-{name}"), "--name", name,
                                   "--listen-client-urls", f"http://127.0.0.1:{c}",
                                   "--advertise-client-urls", f"http://127.0.0.1:{c}",
                                   "--listen-peer-urls", f"http://127.0.0.1:{p}",
                                   "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                                   "--initial-cluster", f"{name}=http://127.0.0.1:{p}"])
            etcds.append(c)
        key, pub = os.path.join(d, "sa.key"), os.path.join(d, "sa.pub")
        subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", key, "-pubout", "-out", pub], check=True, capture_output=True)
        open(os.path.join(d, "tokens.csv"), "w").write(f'{TOKEN},admin,admin,"system:masters"\n')
        api_port = free_port()
        spawn("kube-apiserver", [os.path.join(k8s, "kube-apiserver"),
                                 "--etcd-servers", f"http://127.0.0.1:{etcds[0]}",
                                 "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                                 "--secure-port", str(api_port), f"--cert-dir={d}/certs",
                                 f"--service-account-key-file={pub}", f"--service-account-signing-key-file={key}",
                                 "--service-account-issuer", "https://kubernetes.default.svc",
                                 f"--token-auth-file={d}/tokens.csv", "--authorization-mode", "RBAC",
                                 "--service-cluster-ip-range", "10.96.0.0/24",
                                 "--disable-admission-plugins", "ServiceAccount",
                                 "--endpoint-reconciler-type", "none"])
        api = Api(f"https://127.0.0.1:{api_port}")
        until("kube-apiserver", lambda: api.call("GET", "/readyz")[0] == 200, pause=0.2)
        crds = os.path.join(REPO, "k8s/crds/gateway-api-v1.7.0")
        # Every route kind the controller watches: it waits for each
        # watch's first list before it renders anything.
        for f in ("gatewayclasses", "gateways", "httproutes", "referencegrants",
                  "grpcroutes", "tlsroutes", "tcproutes", "udproutes",
                  "backendtlspolicies"):
            text = open(os.path.join(crds, f"gateway.networking.k8s.io_{f}.yaml"), "rb").read()
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{f}.gateway.networking.k8s.io"
            code, body = api.call("PATCH", path + "?fieldManager=bench&force=true", text,
                                  "application/apply-patch+yaml")
            if code not in (200, 201):
                raise SystemExit(f"CRD {f}: {code} {body[:200]!r}")

            def established(path=path):
                code, body = api.call("GET", path)
                return code == 200 and any(c["type"] == "Established" and c["status"] == "True"
                                           for c in (json.loads(body).get("status") or {}).get("conditions") or [])
            until(f"CRD {f}", established, pause=0.2)

        # Pods: 10.202.T.10-13 in a namespace behind a veth.
        tag = os.getpid() % 200 + 20
        netns = f"syprop{os.getpid() % 100000}"
        host_if = f"syprop{os.getpid() % 100000}h"
        sh = lambda *a: subprocess.run(a, check=True, capture_output=True)
        sh("ip", "netns", "add", netns)
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", netns)
        sh("ip", "addr", "add", f"10.202.{tag}.1/24", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        sh("ip", "-n", netns, "link", "set", "eth0", "up")
        ip = lambda i: f"10.202.{tag}.{i}"
        echo = ["ip", "netns", "exec", netns, "python3", os.path.join(REPO, "crates/gateway/tests/echo.py")]
        for i in range(10, 14):
            sh("ip", "-n", netns, "addr", "add", f"{ip(i)}/24", "dev", "eth0")
            echo += [ip(i), "3000", f"pod-{i}", "default"]
        spawn("echo", echo)
        def listening(addr):
            try:
                socket.create_connection(addr, timeout=0.2).close()
                return True
            except OSError:
                return False
        until("echo pods", lambda: listening((ip(13), 3000)), pause=0.1)

        admin = free_port()
        node_toml = os.path.join(d, "node.toml")
        open(node_toml, "w").write(
            f'[global]\nworkers = 1\n[admin]\nlisten = "127.0.0.1:{admin}"\n[cluster]\n'
            f'endpoints = ["http://127.0.0.1:{etcds[1]}"]\nprefix = "/bench"\nnode = "n1"\n'
            f'startup_wait = "300s"\nwatch_idle = "2s"\n')
        node = spawn("node", [node_bin, "run", "-c", node_toml])
        os.makedirs(os.path.join(d, "controller"))
        open(os.path.join(d, "controller/node.toml"), "w").write(
            f'[cluster]\nendpoints = ["http://127.0.0.1:{etcds[1]}"]\nprefix = "/bench"\nnode = "controller"\n')
        open(os.path.join(d, "kubeconfig"), "w").write(
            f"apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: https://127.0.0.1:{api_port}\n"
            f"    insecure-skip-tls-verify: true\nusers:\n- name: t\n  user:\n    token: {TOKEN}\n"
            "contexts:\n- name: t\n  context:\n    cluster: t\n    user: t\ncurrent-context: t\n")
        port = free_port()
        gw = spawn("controller", [gw_bin, "--node-config", os.path.join(d, "controller/node.toml"),
                                  "--listen-address", "127.0.0.1", "--port-offset", str(port - 80)],
                   env=dict(os.environ, KUBECONFIG=os.path.join(d, "kubeconfig")))

        api.apply({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                   "metadata": {"name": "switchyard"},
                   "spec": {"controllerName": "switchyard.dev/gateway-controller"}})
        api.apply({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                   "metadata": {"name": "gw", "namespace": "default"},
                   "spec": {"gatewayClassName": "switchyard", "listeners": [
                       {"name": "http", "port": 80, "protocol": "HTTP"}]}})
        for name, pod in (("app", 10), ("probe", 11)):
            api.apply(service(name))
            api.apply(slice_of(name, [ip(pod)]))
        api.apply(route("probe", "/probe", "probe"))
        until("the probe route", lambda: pod_at(port, "/probe") == "pod-11", pause=0.05)

        results = []
        have = 0
        for size in sizes:
            t = time.monotonic()
            with ThreadPoolExecutor(8) as ex:
                list(ex.map(lambda i: api.apply(route(f"r{i}", f"/r{i}", "app")), range(have, size)))
            have = size
            until(f"{size} routes live", lambda: pod_at(port, f"/r{size - 1}") == "pod-10", within=1800, pause=0.2)
            settle = time.monotonic() - t
            time.sleep(QUIET)
            route_ms, ep_ms = [], []
            for k in range(SAMPLES):
                j = (k * 7919) % size
                path = f"/r{j}-g{k}"
                t0 = time.monotonic()
                api.apply(route(f"r{j}", path, "app"))
                until(f"route r{j} to {path}", lambda: pod_at(port, path) == "pod-10", pause=PAUSE)
                route_ms.append((time.monotonic() - t0) * 1000)
            old = 11
            for k in range(SAMPLES):
                new = 12 if old == 11 else 11
                t0 = time.monotonic()
                api.apply(slice_of("probe", [ip(new)]))
                until(f"probe on pod-{new}",
                      lambda: all(pod_at(port, "/probe") == f"pod-{new}" for _ in range(3)), pause=PAUSE)
                ep_ms.append((time.monotonic() - t0) * 1000)
                old = new
            row = {"routes": size, "settle_s": round(settle, 1), "pause_ms": PAUSE * 1000, "quiet_s": QUIET,
                   "route_samples_ms": [round(x) for x in route_ms],
                   "route_ms": {"p50": round(pct(route_ms, 0.5)), "p99": round(pct(route_ms, 0.99)),
                                "max": round(max(route_ms))},
                   "endpoint_ms": {"p50": round(pct(ep_ms, 0.5)), "p99": round(pct(ep_ms, 0.99)),
                                   "max": round(max(ep_ms))},
                   "controller_mb": rss(gw.pid), "node_mb": rss(node.pid),
                   "config_bytes": None}
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/api/v1/config", timeout=10) as r:
                    row["config_bytes"] = len(r.read())
            except OSError:
                pass
            results.append(row)
            print(json.dumps(row), flush=True)
        print(f"{SAMPLES} samples each; logs in {d}", flush=True)
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()
        if netns:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        if os.environ.get("KEEP") != "1":
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
