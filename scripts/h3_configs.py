#!/usr/bin/env python3
"""Turns on HTTP/3 (QUIC on UDP 26084, beside TCP) in copies of the bench
configs that `switchyard bench compare` wrote, for scripts/h3-bench.sh.

    h3_configs.py SRC_WORK DST

Each target gets what an expert would write for HTTP/3 on the RSA TLS
vserver, with nothing else changed (docs/bench.md, "HTTP/3"):
- Switchyard: `[vserver.http3]` with its defaults on the 26084 vserver
  (0-RTT off, its default: see HTTP3 below), and
  TLS_AES_128_GCM_SHA256 added to its TLS 1.3 suites (QUIC's Initial suite,
  which Switchyard insists on; every QUIC stack negotiates AES-128-GCM
  first, so TCP then uses it too: HTTP/2 and HTTP/3 of one run use the
  same cipher);
- Caddy: `protocols h1 h2 h3` (its HTTP/3 is quic-go's);
- Envoy: a UDP listener on the same address with the TLS listener's
  routes and certificate (codec HTTP3, QUIC transport socket), as Envoy's
  own "downstream HTTP/3" example does; GRO preferred on its UDP socket;
- nginx 1.31 and 1.22 and HAProxy 2.6/2.8 of this machine were built
  without HTTP/3 (nginx -V lists no http_v3_module; HAProxy's QUIC needs
  a QUIC-capable TLS library, Debian's OpenSSL 3.0 is not): h3-bench.sh
  skips them and says so.
Recorded command lines are pointed at the copies, as h2_configs does.
"""
import os
import re
import shutil
import sys


# Its defaults: 0-RTT off. EARLY_DATA=1 turns it on (the 0-RTT row
# then measures early requests on every target; the stall it met before
# 2026-12-03's fix is in BENCHMARKS.md, "HTTP/3").
HTTP3 = ["[vserver.http3]"] + (["early_data = true"] if os.environ.get("EARLY_DATA") else []) + [""]


def switchyard(path):
    text = open(path).read()
    out, in_rsa = [], False
    for line in text.splitlines():
        if in_rsa and line.startswith("[[") and not line.startswith("[[vserver."):
            out.extend(HTTP3)
            in_rsa = False
        if line.startswith("listen = "):
            in_rsa = '"127.0.0.1:26084"' in line
        if in_rsa and line.strip().startswith("ciphers = ["):
            line = line.replace("[", '["TLS13_AES_128_GCM_SHA256", ', 1)
        out.append(line)
    if in_rsa:
        out.extend(HTTP3)
    new = "\n".join(out) + "\n"
    if "[vserver.http3]" not in new:
        sys.exit(f"{path}: no TLS vserver on 127.0.0.1:26084 to add HTTP/3 to")
    open(path, "w").write(new)


def caddy(path):
    text = open(path).read()
    new = text.replace("protocols h1 h2\n", "protocols h1 h2 h3\n", 1)
    if new == text:
        sys.exit(f"{path}: no 'protocols h1 h2' line")
    open(path, "w").write(new)


def envoy(path):
    text = open(path).read()
    m = re.search(r"^  - name: tls_rsa\n(.*?)(?=^  - name: |^  clusters:)", text,
                  re.S | re.M)
    if not m:
        sys.exit(f"{path}: no tls_rsa listener")
    block = m.group(0)
    h3 = block.replace("  - name: tls_rsa\n", "  - name: h3_rsa\n", 1)
    h3 = h3.replace('socket_address: { address: "127.0.0.1", port_value: 26084 }',
                    'socket_address: { protocol: UDP, address: "127.0.0.1", port_value: 26084 }', 1)
    h3 = h3.replace("    per_connection_buffer_limit_bytes:",
                    "    udp_listener_config:\n"
                    "      quic_options: {}\n"
                    "      downstream_socket_config: { prefer_gro: true }\n"
                    "    per_connection_buffer_limit_bytes:", 1)
    h3 = h3.replace("codec_type: AUTO", "codec_type: HTTP3", 1)
    h3 = h3.replace("stat_prefix: tls_rsa", "stat_prefix: h3_rsa\n          http3_protocol_options: {}", 1)
    h3 = h3.replace("        name: envoy.transport_sockets.tls\n",
                    "        name: envoy.transport_sockets.quic\n", 1)
    h3 = h3.replace(
        '"@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext\n',
        '"@type": type.googleapis.com/envoy.extensions.transport_sockets.quic.v3.QuicDownstreamTransport\n'
        "          downstream_tls_context:\n", 1)
    # Everything under the transport socket's typed_config moves two
    # columns right, under downstream_tls_context.
    lines, shifted, inside = h3.splitlines(), [], False
    for line in lines:
        if line.strip() == "downstream_tls_context:":
            inside = True
            shifted.append(line)
            continue
        if inside and line.startswith("          "):
            line = "  " + line
        shifted.append(line)
    h3 = "\n".join(shifted) + "\n"
    h3 = h3.replace("tls_minimum_protocol_version: TLSv1_2", "tls_minimum_protocol_version: TLSv1_3")
    # QUIC's ALPN is h3, which Envoy's QUIC transport sets itself; the TCP
    # listener's list (h2, http/1.1, from h2_configs) must not follow.
    h3 = re.sub(r"^ *alpn_protocols: .*\n", "", h3, flags=re.M)
    open(path, "w").write(text.replace(block, block + h3, 1))


def main():
    src, dst = sys.argv[1], sys.argv[2]
    for name in os.listdir(src):
        s = os.path.join(src, name)
        if os.path.isdir(s):
            shutil.copytree(s, os.path.join(dst, name), dirs_exist_ok=True)
    edits = {"switchyard/switchyard.toml": switchyard, "caddy/Caddyfile": caddy,
             "envoy/envoy.yaml": envoy}
    for rel, edit in edits.items():
        p = os.path.join(dst, rel)
        if os.path.exists(p):
            edit(p)
    real = os.path.realpath(src) + "/"
    for name in os.listdir(dst):
        cmd = os.path.join(dst, name, "command")
        if os.path.exists(cmd):
            c = open(cmd).read().replace(real, dst.rstrip("/") + "/")
            open(cmd, "w").write(c)


if __name__ == "__main__":
    main()
