#!/bin/bash
# Where the tail of HTTP/3 at a fixed rate is (issue 34): Switchyard's own
# time per request (its access log's total_us: from the request head to the
# response's last byte handed to the transport) against the latency oha
# sees (-q RATE --latency-correction), HTTP/3 then HTTP/2, 1 KB GETs on 20
# connections x 10 streams for 10 s; the DUT on CPU 0, oha and the origin
# on CPU 1. What is outside the server's window is the transport (QUIC's
# or TCP's, on both ends) and the client.
#   RATE=5000 bash scripts/h3-tail.sh REPORT_DIR/work
# REPORT_DIR/work: a `switchyard bench compare` run's configs (as for
# scripts/h3-bench.sh).
set -u
W=${1:?usage: RATE=N bash scripts/h3-tail.sh REPORT_DIR/work}
B=${SWITCHYARD:-target/release/switchyard}
export PATH=/opt/switchyard-bench-peers/bin:$PATH
D=$(mktemp -d); T=$(mktemp -d); T3=$(mktemp -d)
. "$(dirname "$0")/dut-lib.sh"
h2_configs "$W" "$T"
python3 "$(dirname "$0")/h3_configs.py" "$T" "$T3" || exit 1
CFG="$T3/switchyard/switchyard.toml"
# The TLS vserver (HTTP/2 and HTTP/3) gets a JSON access log.
python3 - "$CFG" "$D" <<'PY'
import sys
p, d = sys.argv[1], sys.argv[2]
s = open(p).read()
i = s.index('name = "tls-rsa"')
j = s.find('\n[[', i + 1)
j = len(s) if j < 0 else j
s = s[:j] + f'\n[vserver.access_log]\nformat = "json"\nto = "file:{d}/access.json"\n' + s[j:]
open(p, 'w').write(s)
PY
RATE=${RATE:-5000}
taskset -c 1 "$B" bench origin --listen 127.0.0.1:27081 >/dev/null 2>&1 & O=$!
for proto in 3 2; do
  rm -f "$D/access.json"
  taskset -c 0 "$B" run -c "$CFG" > "$D/dut.log" 2>&1 & P=$!
  sleep 1
  taskset -c 1 oha --http-version $proto --insecure --no-tui -c 20 -p 10 -z 10s -q "$RATE" --latency-correction \
    --output-format json --connect-to "bench.switchyard.test:26084:127.0.0.1:26084" \
    "https://bench.switchyard.test:26084/size/1024" > "$D/oha$proto.json" 2>/dev/null
  kill $P; wait $P 2>/dev/null
  python3 - "$proto" "$D" "$RATE" <<'PY'
import json, sys
proto, d, rate = sys.argv[1], sys.argv[2], sys.argv[3]
lat = json.load(open(f"{d}/oha{proto}.json"))["latencyPercentiles"]
t = sorted(json.loads(l)["total_us"] for l in open(f"{d}/access.json"))
q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
print(f"h{proto} at {rate} req/s: client p50 {lat['p50']*1000:.2f} p99 {lat['p99']*1000:.2f} "
      f"p99.9 {lat.get('p99.9', 0)*1000:.2f} ms; server total_us p50 {q(.5)} p99 {q(.99)} "
      f"p99.9 {q(.999)} max {t[-1]} (n={len(t)})")
PY
done
kill $O
[ -n "${KEEP:-}" ] && echo "kept $D" || rm -rf "$D" "$T" "$T3"
