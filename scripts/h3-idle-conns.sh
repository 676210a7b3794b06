#!/bin/bash
# RSS per idle HTTP/3 connection: N connections from one aioquic process
# (scripts/h3-idle-conns.py, on CPU 1), each after one GET of SIZEPATH,
# held open; the DUT's RSS (all its processes) before and 2 s after the
# last response, divided by N. The DUTs and their HTTP/3 configs are
# scripts/h3-bench.sh's (REPORT_DIR/work of a `bench compare --targets
# switchyard,caddy,envoy` run).
#   scripts/h3-idle-conns.sh REPORT_DIR/work   (N=300 SIZEPATH=/size/1024 ROUNDS=1 TARGETS="sy caddy envoy")
# CHURN=1: then 3 s of other HTTP/3 traffic (h3load, 5 connections) and the
# RSS again (what the allocator kept for reuse rather than per connection).
set -u
W=${1:?usage: h3-idle-conns.sh REPORT_DIR/work}
N=${N:-300}
B=${SWITCHYARD:-target/release/switchyard}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$(cd "$HERE/.." && pwd)/target/pyvenv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" -c "import aioquic" 2>/dev/null || { echo "h3-idle-conns: needs aioquic (bash scripts/test.sh installs it into target/pyvenv)" >&2; exit 1; }
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
T=$(mktemp -d); T3=$(mktemp -d)
. "$HERE/dut-lib.sh"
h2_configs "$W" "$T"
python3 "$HERE/h3_configs.py" "$T" "$T3" >/dev/null || exit 1
CONF="$T3"
start_origin
rss() { local t=0; for p in $(pids "$1"); do t=$((t + $(awk '/VmRSS/ {print $2}' /proc/$p/status))); done; echo $t; }
for round in $(seq "${ROUNDS:-1}"); do
for t in ${TARGETS:-sy caddy envoy}; do
  start "$t"; sleep 3
  r0=$(rss "$t")
  coproc CL { taskset -c 1 "$PY" "$HERE/h3-idle-conns.py" "$N" "${SIZEPATH:-/size/1024}"; }
  read -r line <&"${CL[0]}"
  sleep 2
  r1=$(rss "$t")
  echo "round $round $t ${SIZEPATH:-/size/1024}: $line; RSS $r0 -> $r1 kB: $(( (r1 - r0) * 1000 / N )) bytes per connection"
  if [ -n "${CHURN:-}" ]; then
    taskset -c 1 h3load -url "https://bench.switchyard.test:26084/size/1024" -connect 127.0.0.1:26084 -mode ka -c 5 -m 2 -d 3s >/dev/null; sleep 2
    r2=$(rss "$t")
    echo "  after 3 s of other traffic: RSS $r2 kB: $(( (r2 - r0) * 1000 / N )) bytes per held connection"
  fi
  echo >&"${CL[1]}"; wait "$CL_PID" 2>/dev/null
  stop "$t"
done; done
kill $O
rm -rf "$T" "$T3"
