#!/usr/bin/env python3
"""Configs of issue 35's `scripting` bench scenario (scripts/scripting-bench.sh).

   scripts/scripting_configs.py DIR

Writes, for each target, one configuration with four HTTP listeners that
differ only in the script they run, all proxying to the bench origin
(127.0.0.1:27081, keep-alive to it):

  26080  none     no script (the baseline every other listener is
                  measured against: added CPU = listener - none)
  26081  empty    a request handler that does nothing
  26082  rewrite  sets x-c from x-a and x-b ("a,b"), deletes x-d
  26083  jwt      HS256 JWT in "Authorization: Bearer": a valid token
                  passes, anything else gets 401 (signature, alg, exp)

Targets: switchyard/, haproxy/ (Debian's 2.6, Lua 5.3), haproxy28/
(2.8, Lua 5.4), envoy/ (1.40: its Lua filter; the JWT through its native
jwt_authn filter with an HS256 `oct` key, as its Lua has no HMAC), nginx/
(Debian's 1.22 with njs 0.7.9, libnginx-mod-http-js). Each directory gets
a `command` file (dut-lib.sh's start() runs it) where dut-lib has no
built-in case. Why each script is the same work: docs/bench.md,
"Scripting".

Prints the valid token on stdout (the load sends it).
"""
import base64
import hashlib
import hmac
import json
import os
import sys

SECRET = "switchyard-bench-secret-0123456789abcdef"
ORIGIN = ("127.0.0.1", 27081)
PORTS = {"none": 26080, "empty": 26081, "rewrite": 26082, "jwt": 26083}
ADMIN = 26089
PEERS = "/opt/switchyard-bench-peers/bin"


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def token(secret=SECRET, exp=4102444800):
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = b64url(json.dumps({"sub": "bench", "exp": exp}, separators=(",", ":")).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(sig)}"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# ------------------------------------------------------------ Switchyard

SY_SCRIPTS = {
    "empty": "function on_request(r) end\n",
    "rewrite": """function on_request(r)
  r:set_header("x-c", (r:header("x-a") or "") .. "," .. (r:header("x-b") or ""))
  r:remove_header("x-d")
end
""",
    # sy.jwt_hs256 checks the signature (constant time), the header's alg
    # and exp/nbf.
    "jwt": f"""local secret = "{SECRET}"
function on_request(r)
  local auth = r:header("authorization")
  local tok = auth and auth:match("^Bearer (.+)$")
  if not tok or not sy.jwt_hs256(tok, secret) then
    r:respond(401, "")
  end
end
""",
}


def switchyard(d):
    s = f"""# scripts/scripting_configs.py: one worker, four listeners that differ
# only in their script.
[global]
workers = 1
pin_workers = false      # the bench pins with taskset instead

[admin]
listen = "127.0.0.1:{ADMIN}"
"""
    for case, port in PORTS.items():
        s += f"""
[[vserver]]
name = "{case}"
listen = ["127.0.0.1:{port}"]
default_pool = "web"
"""
        if case in SY_SCRIPTS:
            write(f"{d}/{case}.lua", SY_SCRIPTS[case])
            s += f'\n  [vserver.script]\n  file = "{case}.lua"\n'
    s += f"""
[[pool]]
name = "web"
idle_per_member = 256

[[pool.member]]
address = "{ORIGIN[0]}:{ORIGIN[1]}"
"""
    write(f"{d}/switchyard.toml", s)


# --------------------------------------------------------------- HAProxy

# HAProxy's Lua has no HMAC of its own; a Lua action reaches the
# jwt_verify converter (2.5+) through txn.c, as the HAProxy docs' own JWT
# example does, and reads exp with jwt_payload_query.
HP_LUA = f"""local secret = "{SECRET}"
core.register_action("empty", {{ "http-req" }}, function(txn) end)
core.register_action("rewrite", {{ "http-req" }}, function(txn)
  local a = txn.f:req_hdr("x-a") or ""
  local b = txn.f:req_hdr("x-b") or ""
  txn.http:req_set_header("x-c", a .. "," .. b)
  txn.http:req_del_header("x-d")
end)
core.register_action("jwt", {{ "http-req" }}, function(txn)
  local auth = txn.f:req_hdr("authorization")
  local tok = auth and auth:match("^Bearer (.+)$")
  local ok = tok and txn.c:jwt_verify(tok, "HS256", secret) == 1
  if ok then
    local exp = txn.c:jwt_payload_query(tok, "$.exp", "int")
    ok = exp and exp > os.time()
  end
  if not ok then
    local reply = txn:reply({{ status = 401 }})
    txn:done(reply)
  end
end)
"""


def haproxy(d):
    write(f"{d}/bench.lua", HP_LUA)
    s = f"""# scripts/scripting_configs.py: one thread, four frontends that differ
# only in their Lua action.
global
    nbthread 1
    maxconn 9800
    lua-load {d}/bench.lua

defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 120s
    http-reuse always

backend web
    server s1 {ORIGIN[0]}:{ORIGIN[1]}
"""
    for case, port in PORTS.items():
        s += f"\nfrontend {case}\n    bind 127.0.0.1:{port}\n"
        if case != "none":
            s += f"    http-request lua.{case}\n"
        s += "    default_backend web\n"
    write(f"{d}/haproxy.cfg", s)


# ----------------------------------------------------------------- Envoy

ENVOY_LUA = {
    "empty": "function envoy_on_request(h) end",
    "rewrite": """function envoy_on_request(h)
  local hs = h:headers()
  hs:replace("x-c", (hs:get("x-a") or "") .. "," .. (hs:get("x-b") or ""))
  hs:remove("x-d")
end""",
}


def envoy_filter(case):
    if case in ENVOY_LUA:
        code = "\n".join("                  " + l for l in ENVOY_LUA[case].splitlines())
        return f"""
          - name: envoy.filters.http.lua
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
              default_source_code:
                inline_string: |
{code}"""
    if case == "jwt":
        jwks = json.dumps({"keys": [{"kty": "oct", "alg": "HS256", "k": b64url(SECRET.encode())}]})
        return f"""
          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                bench:
                  local_jwks:
                    inline_string: '{jwks}'
                  forward: true
              rules:
              - match: {{ prefix: "/" }}
                requires: {{ provider_name: bench }}"""
    return ""


def envoy(d):
    s = f"""# scripts/scripting_configs.py: one worker, four listeners that differ
# only in their first HTTP filter.
admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {ADMIN} }} }}
static_resources:
  listeners:"""
    for case, port in PORTS.items():
        s += f"""
  - name: {case}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {case}
          generate_request_id: false
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: web }}
          http_filters:{envoy_filter(case)}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
              dynamic_stats: false"""
    s += f"""
  clusters:
  - name: web
    type: STATIC
    circuit_breakers:
      thresholds:
      - {{ max_connections: 1000000, max_pending_requests: 1000000, max_requests: 1000000 }}
    load_assignment:
      cluster_name: web
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: {{ socket_address: {{ address: {ORIGIN[0]}, port_value: {ORIGIN[1]} }} }}
"""
    write(f"{d}/envoy.yaml", s)
    write(f"{d}/command", f"{PEERS}/envoy -c {d}/envoy.yaml --concurrency 1 --disable-hot-restart --log-level warn\n")


# ----------------------------------------------------------- nginx + njs

# njs 0.7 has no request-phase handler that may answer but js_content;
# js_set is evaluated where its variable is used: in proxy_set_header
# (empty, rewrite) and in an `if` of the rewrite phase (jwt), once per
# request. The jwt check decodes the header (alg), compares the HMAC
# (crypto.createHmac) and reads exp, as sy.jwt_hs256.
NJS = f"""import crypto from 'crypto';
const secret = "{SECRET}";
function empty(r) {{ return ""; }}
function rewrite(r) {{ return (r.headersIn["X-A"] || "") + "," + (r.headersIn["X-B"] || ""); }}
function jwt(r) {{
  const auth = r.headersIn["Authorization"] || "";
  if (!auth.startsWith("Bearer ")) return "";
  const parts = auth.slice(7).split(".");
  if (parts.length != 3) return "";
  try {{
    const head = JSON.parse(Buffer.from(parts[0], "base64url").toString());
    if (head.alg !== "HS256") return "";
    const mac = crypto.createHmac("sha256", secret).update(parts[0] + "." + parts[1]).digest("base64url");
    if (mac !== parts[2]) return "";
    const claims = JSON.parse(Buffer.from(parts[1], "base64url").toString());
    if (typeof claims.exp !== "number" || claims.exp <= Date.now() / 1000) return "";
  }} catch (e) {{ return ""; }}
  return "1";
}}
export default {{ empty, rewrite, jwt }};
"""


def nginx(d):
    write(f"{d}/bench.js", NJS)
    proxy = """proxy_pass http://web;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;"""
    extra = {
        "none": "",
        "empty": "proxy_set_header X-E $sy_empty;",
        # An empty value removes the field in nginx.
        "rewrite": "proxy_set_header X-C $sy_rewrite;\n            proxy_set_header X-D \"\";",
        "jwt": "if ($sy_jwt = \"\") { return 401; }",
    }
    servers = ""
    for case, port in PORTS.items():
        servers += f"""
    server {{
        listen 127.0.0.1:{port};
        location / {{
            {extra[case]}
            {proxy}
        }}
    }}
"""
    s = f"""# scripts/scripting_configs.py: one worker, four servers that differ
# only in their njs handler.
load_module /usr/lib/nginx/modules/ngx_http_js_module.so;
daemon off;
master_process on;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
    js_import main from {d}/bench.js;
    js_set $sy_empty main.empty;
    js_set $sy_rewrite main.rewrite;
    js_set $sy_jwt main.jwt;

    upstream web {{
        server {ORIGIN[0]}:{ORIGIN[1]};
        keepalive 256;
    }}
{servers}}}
"""
    write(f"{d}/nginx.conf", s)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripting_configs.py DIR")
    d = os.path.realpath(sys.argv[1])
    switchyard(f"{d}/switchyard")
    haproxy(f"{d}/haproxy")
    haproxy(f"{d}/haproxy28")
    write(f"{d}/haproxy28/command", f"{PEERS}/haproxy28 -f {d}/haproxy28/haproxy.cfg\n")
    envoy(f"{d}/envoy")
    nginx(f"{d}/nginx")
    print(token())


if __name__ == "__main__":
    main()
