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
# per connection (default 400, so 20,000 requests/s), SECS (default 20),
# LOAD (default fortio when it is installed, else h2load):
#   h2load  a timer per connection, each sending at RPS; the 50 timers'
#           phases fall where the connections happened to start, so how
#           many requests arrive at once differs from run to run (P50s of
#           one target varied 177 to 725 us over TLS 1.2 in five rounds);
#   fortio  the same rate with -uniform: each connection's start is
#           staggered, so arrivals are spread the same way for every
#           target (latency from when a request was due, no coordinated
#           omission); needs go install fortio.org/fortio@v1.63.0;
#   oha     one clock for all 50 connections (-q, --latency-correction).
# AWAKE=1 holds the CPUs out of their idle states for the whole run
# (/dev/cpu_dma_latency = 0, as tuned's latency-performance profile does;
# needs root): on a VM an idle vCPU halts and the host must wake it for
# the next packet, which adds to every request that finds the DUT asleep.
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
if [ "${AWAKE:-0}" = 1 ]; then
  # The request lasts while the descriptor is open: until the script ends.
  { exec 9>/dev/cpu_dma_latency && printf 0 >&9; } 2>/dev/null ||
    { echo "p99-fixed-rate: AWAKE=1 needs /dev/cpu_dma_latency (root)" >&2; exit 1; }
fi
start_origin
trap 'kill $O 2>/dev/null; rm -f "$LOG"' EXIT
FORTIO=${FORTIO:-$(command -v fortio || echo "$HOME/go/bin/fortio")}
if [ -z "${LOAD:-}" ]; then
  if [ -x "$FORTIO" ]; then LOAD=fortio; else
    LOAD=h2load
    echo "p99-fixed-rate: Fortio is missing (scripts/install-bench-peers.sh fortio): h2load --rps, whose arrivals differ run to run" >&2
  fi
fi
# A tool's figures (requests, 2xx, p50, p90, p99, p99.9, max in us) on
# stdin, as the summary line in $LOG.
summary() {
  read -r n ok p50 p90 p99 p999 max
  printf 'n %d ok %d p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f max %.0f us\n' "$n" "$ok" "$p50" "$p90" "$p99" "$p999" "$max" > "$LOG"
}
# One run at the fixed rate. h2load leaves its per-request log in $LOG;
# the others leave their summary line there.
load() {
  local url=${URL:-http://127.0.0.1:26080/size/128} rate=$((${RPS:-400} * 50)) secs=${SECS:-20}
  case $LOAD in
  h2load)
    taskset -c 1 h2load --h1 -c 50 --rps "${RPS:-400}" -D "$secs" --log-file="$LOG" "$url" >/dev/null 2>&1 ;;
  fortio)
    # X25519 for the key exchange, as the other tools offer.
    GODEBUG=tlsmlkem=0 taskset -c 1 "$FORTIO" load -quiet -qps "$rate" -c 50 -uniform -t "${secs}s" \
      -r 0.00001 -p 50,90,99,99.9 -k -json "$LOG.json" "$url" >/dev/null 2>&1
    python3 -c "
import json; d = json.load(open('$LOG.json')); h = d['DurationHistogram']
p = {x['Percentile']: x['Value'] * 1e6 for x in h['Percentiles']}
print(h['Count'], d['RetCodes'].get('200', 0), p[50], p[90], p[99], p[99.9], h['Max'] * 1e6)" | summary
    rm -f "$LOG.json" ;;
  oha)
    taskset -c 1 oha --insecure --no-tui -c 50 -z "${secs}s" -q "$rate" --latency-correction \
      --output-format json "$url" 2>/dev/null | python3 -c "
import json, sys; d = json.load(sys.stdin); p = d['latencyPercentiles']; s = d['summary']
print(sum(d['statusCodeDistribution'].values()), d['statusCodeDistribution'].get('200', 0), p['p50'] * 1e6, p['p90'] * 1e6, p['p99'] * 1e6, p['p99.9'] * 1e6, s['slowest'] * 1e6)" | summary ;;
  esac
}
# How often the DUT's threads went to sleep (voluntary context switches):
# each is a wake-up the next request may wait for.
sleeps() {
  local n=0 p
  for p in $(pids "$1"); do
    n=$((n + $(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {v += $2} END {print v + 0}')))
  done
  echo $n
}
for round in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    start "$t"
    c0=$(sumcpu "$t")
    s0=$(sleeps "$t")
    rm -f "$LOG"
    load
    c1=$(sumcpu "$t")
    s1=$(sleeps "$t")
    stop "$t"
    if [ "$LOAD" != h2load ]; then
      echo "round $round $t: cpu_ticks $((c1 - c0)) sleeps $((s1 - s0)) $(cat "$LOG")"
      continue
    fi
    pct=$(awk '{print $3}' "$LOG" | sort -n | awk '{a[NR]=$1} END {
      printf "n %d p50 %d p99 %d p99.9 %d max %d us", NR, a[int(NR*0.5)], a[int(NR*0.99)], a[int(NR*0.999)], a[NR]}')
    stalls=$(awk 'NR==1{t0=$1} $3>4000{s[int(($1-t0)/100000)]=1} END{print length(s)}' "$LOG")
    echo "round $round $t: cpu_ticks $((c1 - c0)) sleeps $((s1 - s0)) $pct; 100 ms windows with a request over 4 ms: $stalls"
  done
done
