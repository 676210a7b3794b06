#!/bin/bash
# HTTP/2 over TLS (ALPN h2), Switchyard vs HAProxy vs nginx, with the configs a
# `switchyard bench compare` run wrote (REPORT_DIR/work), h2 turned on in a
# copy of them. h2load (nghttp2-client) on CPU 1 with the origin, the DUT on
# CPU 0; per round and target: requests/s with C clients x M streams for D
# seconds, and the DUT's CPU (utime+stime) per request over that run.
#   scripts/h2-bench.sh docs/bench-results/DATE/work [rounds]
# CLIENTS=2 STREAMS=100 is issue 33's case of HTTP/2 clients with 200
# streams in flight to one member: the line then shows how many member
# connections the DUT opened during the run (the machine's TCP active
# opens, less h2load's own), which a pool that closes what it needs
# drives up. TARGETS adds any target of the compare run (haproxy28,
# nginx131, envoy, caddy: dut-lib.sh starts it from its recorded command).
set -u
W=${1:?usage: h2-bench.sh REPORT_DIR/work [rounds]}
ROUNDS=${2:-3}
B=${SWITCHYARD:-target/release/switchyard}
C=${CLIENTS:-20}; M=${STREAMS:-10}; D=${SECONDS_PER_RUN:-8}; SIZE=${SIZE:-1024}
T=$(mktemp -d)
CONF="$T"
. "$(dirname "$0")/dut-lib.sh"
h2_configs "$W" "$T"
start_origin
for round in $(seq "$ROUNDS"); do for t in ${TARGETS:-sy hp ng}; do for proto in ${PROTOS:-h2 h1}; do
  start $t
  extra=""; [ $proto = h1 ] && extra="--h1"
  c0=$(sumcpu $t); o0=$(active_opens)
  out=$(taskset -c 1 h2load $extra -c "$C" -m "$M" -D "$D" --warm-up-time=1 \
        "https://127.0.0.1:26084/size/$SIZE" 2>&1)
  c1=$(sumcpu $t); o1=$(active_opens)
  rps=$(echo "$out" | sed -n 's/.* \([0-9.]*\) req\/s.*/\1/p' | head -1)
  ok=$(echo "$out" | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' | head -1)
  proto_seen=$(echo "$out" | sed -n 's/^Application protocol: //p')
  mean=$(echo "$out" | awk '/^time for request:/ {print $6}')
  us=$(python3 -c "print(round(($c1-$c0)*10000/max(1,${ok:-0}),1))")
  echo "round $round $t $proto_seen: $rps req/s, $ok ok, mean $mean, DUT CPU $us us/request, member connects $((o1 - o0 - C))"
  stop $t
done; done; done
kill $O
rm -rf "$T"
