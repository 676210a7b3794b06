#!/bin/bash
# Issue 34's new-connection case counted on the wire: the datagrams and
# UDP payload bytes each way per connection, and the DUT's system calls
# per connection, for each target. These are deterministic where CPU time
# is not: a datagram the DUT sends is a sendmsg and the kernel's UDP
# output, one it receives is the softirq, the steering program and a
# recvmmsg slot, and on a second machine (or h3-veth-cpu.sh's veth pair)
# that work is the DUT's own.
#   scripts/h3-packets.sh REPORT_DIR/work
#   TARGETS="sy caddy envoy" (default "sy envoy"), MODE new|resume|0rtt
#   (h3load's, default 0rtt), N connections (1,000; 10 at a time, after
#   200 that warm the session cache), STRACE=1 adds the DUT's system calls
#   per connection (strace -c -f; it slows the DUT, so the packet counts of
#   that run are the ones to read, not its rate).
# One line per target; "shapes" lists the most common sequences of one
# connection's datagrams (">" to the DUT, "<" from it, UDP payload bytes).
# The configs of a `switchyard bench compare` work dir (--targets
# switchyard,caddy,envoy), with HTTP/2 and HTTP/3 as h3-bench.sh turns
# them on, 0-RTT on in every target (EARLY_DATA=1 for h3_configs.py).
set -u
W=${1:?usage: h3-packets.sh REPORT_DIR/work}
B=${SWITCHYARD:-target/release/switchyard}
N=${N:-1000}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
T=$(mktemp -d); CONF=$(mktemp -d); OUT=$(mktemp -d)
trap 'rm -rf "$T" "$CONF" "$OUT"' EXIT
. "$(dirname "$0")/dut-lib.sh"
h2_configs "$W" "$T"
EARLY_DATA=1 python3 "$(dirname "$0")/h3_configs.py" "$T" "$CONF" >/dev/null
start_origin
load() {
  taskset -c 1 h3load -url https://bench.switchyard.test:26084/size/128 -connect 127.0.0.1:26084 \
    -mode "${MODE:-0rtt}" -n "$1" -m 10
}
for t in ${TARGETS:-sy envoy}; do
  if [ "$t" != sy ] && [ ! -f "$CONF/$t/command" ]; then
    echo "$t: skipped (no recorded command line in $W/$t)"; continue
  fi
  start "$t"
  load 200 >/dev/null
  tcpdump --immediate-mode -i lo -n -s 96 -w "$OUT/$t.pcap" udp port 26084 2>/dev/null & D=$!
  sleep 0.5
  S=""
  if [ -n "${STRACE:-}" ]; then
    strace -c -f -o "$OUT/$t.strace" $(pids "$t" | sed 's/^/-p /') & S=$!
    sleep 0.5
  fi
  res=$(load "$N")
  [ -n "$S" ] && { kill -INT "$S"; wait "$S"; }
  sleep 0.3; kill "$D"; wait "$D" 2>/dev/null
  stop "$t"
  python3 - "$t" "$N" "$OUT" "$res" <<'PY'
import collections, json, re, subprocess, sys
t, n, out, res = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
dump = subprocess.run(["tcpdump", "-nn", "-r", f"{out}/{t}.pcap"], capture_output=True, text=True).stdout
count, size = collections.Counter(), collections.Counter()
conns = collections.defaultdict(list)
for line in dump.splitlines():
    f = line.split()
    m = re.search(r"UDP, length (\d+)", line)
    if not m:
        continue
    src, dst, length = f[2], f[4].rstrip(":"), int(m[1])
    to_dut = dst.endswith(".26084")
    way = "to the DUT" if to_dut else "from the DUT"
    count[way] += 1
    size[way] += length
    conns[src if to_dut else dst].append((">" if to_dut else "<") + str(length))
line = f"{t}: {res['ok']} ok, resumed {res.get('resumed')} early {res.get('early')}; per connection: "
line += ", ".join(f"{way} {count[way] / n:.2f} datagrams {size[way] / n:.0f} bytes" for way in ("from the DUT", "to the DUT"))
try:
    calls = {}
    for row in open(f"{out}/{t}.strace"):
        f = row.split()
        if len(f) >= 5 and f[-1].isidentifier() and f[3].isdigit():
            calls[f[-1]] = int(f[3])
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:6]
    line += "; system calls per connection " + ", ".join(f"{k} {v / n:.2f}" for k, v in top)
except FileNotFoundError:
    pass
print(line)
shapes = collections.Counter(" ".join(v) for v in conns.values())
for shape, k in shapes.most_common(3):
    print(f"  {k} connections: {shape}")
PY
done
kill $O
