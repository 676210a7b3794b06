#!/bin/bash
# Splits each keep-alive request's latency into the DUT's event-loop wait,
# the DUT's own work and the client's wait (scripts/request-split.bt,
# bpftrace on socket tracepoints), at one fixed rate with Fortio, beside
# Fortio's own percentiles; interleaved rounds with the configs of a
# `switchyard bench compare` work dir, the DUT on CPU 0, Fortio, bpftrace
# and the origin on CPU 1. Needs root, bpftrace (apt) and Fortio
# (scripts/install-bench-peers.sh fortio).
#
#   scripts/request-split.sh WORK OUT [ROUNDS] [TARGETS]
#
# TARGETS as scripts/dut-lib.sh names them ("sy haproxy28"), plus
# `syidle`: Switchyard with every thread but its worker at SCHED_IDLE (the
# control thread's dashboard sample and malloc_trim then never take the
# worker's core from it). Environment: PORT (default 26088, the work dir's
# TLS 1.2-only listener; 26084 TLS 1.2 and 1.3, 26080 plain), URL (default
# https://127.0.0.1:PORT/size/128), RATE (default 20000 requests/s over
# 50 connections), SECS (default 20).
set -u
WORK=${1:?usage: request-split.sh WORK OUT [ROUNDS] [TARGETS]}
OUT=${2:?usage: request-split.sh WORK OUT [ROUNDS] [TARGETS]}
ROUNDS=${3:-3}
TARGETS=${4:-"sy haproxy28"}
PORT=${PORT:-26088}
RATE=${RATE:-20000}
SECS=${SECS:-20}
if [ "$PORT" = 26080 ]; then scheme=http; else scheme=https; fi
URL=${URL:-$scheme://127.0.0.1:$PORT/size/128}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONF=$WORK
B=${B:-$ROOT/target/release/switchyard}
FORTIO=${FORTIO:-$(command -v fortio || echo /opt/switchyard-bench-peers/bin/fortio)}
command -v bpftrace >/dev/null || { echo "request-split: bpftrace is missing (apt-get install bpftrace)" >&2; exit 1; }
[ -x "$FORTIO" ] || { echo "request-split: Fortio is missing (scripts/install-bench-peers.sh fortio)" >&2; exit 1; }
mkdir -p "$OUT"
ulimit -n 20000
source "$ROOT/scripts/dut-lib.sh"
start_origin
trap 'kill $O 2>/dev/null' EXIT
for round in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    dut=${t/syidle/sy}
    start "$dut"
    if [ "$t" = syidle ]; then
      for tid in $(ls "/proc/$P/task"); do
        case "$(cat "/proc/$P/task/$tid/comm")" in worker-*) ;; *) chrt -i -p 0 "$tid" ;; esac
      done
    fi
    # bpftrace learns the sockets as they connect: it starts first.
    taskset -c 1 bpftrace "$ROOT/scripts/request-split.bt" "$PORT" > "$OUT/$t.$round.bt" 2>&1 &
    BT=$!
    sleep 4
    c0=$(sumcpu "$dut")
    GODEBUG=tlsmlkem=0 taskset -c 1 "$FORTIO" load -quiet -qps "$RATE" -c 50 -uniform -t "${SECS}s" \
      -r 0.00001 -p 50,90,99,99.9 -k -json "$OUT/$t.$round.json" "$URL" >/dev/null 2>&1
    c1=$(sumcpu "$dut")
    kill -INT $BT
    wait $BT
    stop "$dut"
    p=$(python3 -c "
import json; d = json.load(open('$OUT/$t.$round.json')); h = d['DurationHistogram']
p = {x['Percentile']: x['Value'] * 1e6 for x in h['Percentiles']}
print('n %d p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f us' % (h['Count'], p[50], p[90], p[99], p[99.9]))")
    echo "round $round $t: cpu_ticks $((c1 - c0)) fortio $p"
    python3 "$ROOT/scripts/hist-percentiles.py" "$OUT/$t.$round.bt" | sed 's/^/    /'
  done
done
