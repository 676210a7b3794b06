#!/bin/bash
# P99 at one fixed offered rate (issue 8: h2load --h1 -c 50 --rps 400, that
# is 20,000 requests/s), interleaved rounds, with the configs of a
# `switchyard bench compare` work dir; the DUT on CPU 0, h2load and the
# origin on CPU 1. Per round and target: DUT CPU ticks, latency
# percentiles from h2load's per-request log, and how many 100 ms windows
# held a request slower than 4 ms (stalls that hit every connection at
# once come from outside the DUT when every target shows them).
#
#   scripts/p99-fixed-rate.sh WORK [ROUNDS] [TARGETS]   (TARGETS "sy hp")
# Environment: URL (default http://127.0.0.1:26080/size/128; the work
# dir's HTTPS listeners: 26084 TLS 1.2 and 1.3, 26088 TLS 1.2 only), RPS
# per connection (default 400, so 20,000 requests/s), SECS (default 20).
set -u
WORK=${1:?usage: p99-fixed-rate.sh WORK [ROUNDS] [TARGETS]}
ROUNDS=${2:-3}
TARGETS=${3:-"sy hp"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONF=$WORK
B=${B:-$ROOT/target/release/switchyard}
LOG=$(mktemp)
ulimit -n 20000
source "$ROOT/scripts/dut-lib.sh"
start_origin
trap 'kill $O 2>/dev/null; rm -f "$LOG"' EXIT
for round in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    start "$t"
    c0=$(sumcpu "$t")
    rm -f "$LOG"
    taskset -c 1 h2load --h1 -c 50 --rps "${RPS:-400}" -D "${SECS:-20}" --log-file="$LOG" \
      "${URL:-http://127.0.0.1:26080/size/128}" >/dev/null 2>&1
    c1=$(sumcpu "$t")
    stop "$t"
    pct=$(awk '{print $3}' "$LOG" | sort -n | awk '{a[NR]=$1} END {
      printf "n %d p50 %d p99 %d p99.9 %d max %d us", NR, a[int(NR*0.5)], a[int(NR*0.99)], a[int(NR*0.999)], a[NR]}')
    stalls=$(awk 'NR==1{t0=$1} $3>4000{s[int(($1-t0)/100000)]=1} END{print length(s)}' "$LOG")
    echo "round $round $t: cpu_ticks $((c1 - c0)) $pct; 100 ms windows with a request over 4 ms: $stalls"
  done
done
