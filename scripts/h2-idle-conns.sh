#!/bin/bash
# RSS per idle HTTP/2-over-TLS client connection: N connections (ALPN h2),
# each after one GET of /size/1024, held open; the DUT's RSS (all its
# processes) before and 2 s after the last one opened. Uses the configs a
# `switchyard bench compare` run wrote (REPORT_DIR/work), h2 turned on in a
# copy as scripts/h2-bench.sh does.
#   scripts/h2-idle-conns.sh REPORT_DIR/work          (N=2000 TARGETS="sy hp ng")
set -u
W=${1:?usage: h2-idle-conns.sh REPORT_DIR/work}
N=${N:-2000}
B=${SWITCHYARD:-target/release/switchyard}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
CONF="$T"
. "$HERE/dut-lib.sh"
h2_configs "$W" "$T"
rss() { local t=0; for p in $(pgrep -f "$1"); do r=$(awk '/VmRSS/ {print $2}' /proc/$p/status 2>/dev/null); t=$((t + ${r:-0})); done; echo $t; }
ulimit -n 20000
start_origin
for t in ${TARGETS:-sy hp ng}; do
  start $t
  case $t in sy) pat="$B run";; hp) pat="haproxy -f $CONF";; ng) pat="nginx: ";; esac
  r0=$(rss "$pat")
  out="$T/client.txt"; : > "$out"
  taskset -c 1 python3 "$HERE/h2-idle-conns.py" 26084 "$N" 4 > "$out" 2>&1 &
  PY=$!
  for _ in $(seq 600); do grep -q open "$out" && break; sleep 0.2; done
  sleep 2
  r1=$(rss "$pat")
  echo "$t: $(head -1 "$out"), RSS $r0 -> $r1 kB, $(( (r1 - r0) * 1024 / N )) B per connection"
  wait $PY
  stop $t
done
kill $O
rm -rf "$T"
