#!/bin/bash
# Many users with a think time between requests (each request on a
# connection idle for THINK): DUT CPU, P50 and P99 per target, interleaved
# rounds, with the configs of a `switchyard bench compare` work dir.
#
#   scripts/think-users.sh WORK [ROUNDS] [USERS] [THINK]
#   TARGETS="sy hp" (default); SY_BINS="old=/path/a new=/path/b" runs
#   Switchyard once per binary (default: target/release/switchyard).
#
# The DUT runs on CPU 0, the origin and `switchyard bench load` on CPU 1.
# CPU is in clock ticks (1/100 s) of the DUT over the whole load (ramp
# included), so compare targets within one run only.
set -u
WORK=${1:?usage: think-users.sh WORK [ROUNDS] [USERS] [THINK]}
ROUNDS=${2:-3}
USERS=${3:-2000}
THINK=${4:-3s}
TARGETS=${TARGETS:-"sy hp"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SY_BINS=${SY_BINS:-"sy=$ROOT/target/release/switchyard"}
CONF=$WORK
LOAD=$(echo "$SY_BINS" | awk '{print $1}' | cut -d= -f2)
B=$LOAD
ulimit -n 20000
source "$ROOT/scripts/dut-lib.sh"
start_origin
trap 'kill $O 2>/dev/null' EXIT
for round in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    if [ "$t" = sy ]; then runs=$SY_BINS; else runs="$t="; fi
    for r in $runs; do
      name=${r%%=*}
      [ "$t" = sy ] && B=${r#*=}
      start "$t"
      c0=$(sumcpu "$t")
      out=$(taskset -c 1 "$LOAD" bench load --url http://127.0.0.1:26080/size/128 \
        --connections "$USERS" --think "$THINK" --ramp-up 5s --duration 20s --json --quiet)
      c1=$(sumcpu "$t")
      stop "$t"
      echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
l = d["latency"]
print("round %s %6s: ok %d errors %d cpu_ticks %s p50 %d us p99 %d us" % (sys.argv[1], sys.argv[2], d["ok"], d["errors_all_phases"], sys.argv[3], l["p50_us"], l["p99_us"]))
' "$round" "$name" "$((c1 - c0))"
    done
  done
done
