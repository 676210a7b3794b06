#!/bin/bash
# DUT CPU per request, Switchyard vs HAProxy vs nginx, with the configs a
# `switchyard bench compare` run wrote (REPORT_DIR/work): wrk (one thread) and
# the origin on CPU 1, the DUT on CPU 0; interleaved rounds; per round, target
# and case: requests/s and the DUT's CPU (utime+stime from /proc) per request.
#   scripts/cpu-per-request.sh REPORT_DIR/work [rounds]
# Cases: keep-alive 128 B (wrk -c 50), one request per connection 128 B
# (wrk -c 50 with "Connection: close"), keep-alive 1 KB (wrk -c 20), each
# with its user-space share in brackets; with
# CASES="gz2k gz8k gz64k gz512k id2k hit2k hit64k": gzip of the bench's HTML
# at 2 KB to 512 KB (id2k: 2 KB not compressed) on the compress listener,
# and cache hits of 2 KB and 64 KB on the cache listener (keep-alive, wrk -c 20);
# CASES="l4close128 l4close1k": a connection per request through the L4
# (TCP) listener (wrk -c 50, "Connection: close"). TARGETS="sy hp ng" by default.
set -u
W=$(realpath "${1:?usage: cpu-per-request.sh REPORT_DIR/work [rounds]}")
ROUNDS=${2:-3}
B=${SWITCHYARD:-target/release/switchyard}
D=${SECONDS_PER_RUN:-8}
CONF="$W"
. "$(dirname "$0")/dut-lib.sh"
start_origin
run_case() { # target case
  local args hdr="X-Bench: 1"
  case $2 in
    ka128) args="-c 50 http://127.0.0.1:26080/size/128" ;;
    close128) args="-c 50 http://127.0.0.1:26080/size/128"; hdr="Connection: close" ;;
    ka1k) args="-c 20 http://127.0.0.1:26080/size/1024" ;;
    # wrk sends a header only when written "Name: value" (with the space).
    gz2k) args="-c 20 http://127.0.0.1:26082/html/2048"; hdr="Accept-Encoding: gzip" ;;
    gz8k) args="-c 20 http://127.0.0.1:26082/html/8192"; hdr="Accept-Encoding: gzip" ;;
    gz64k) args="-c 20 http://127.0.0.1:26082/html/65536"; hdr="Accept-Encoding: gzip" ;;
    gz512k) args="-c 20 http://127.0.0.1:26082/html/524288"; hdr="Accept-Encoding: gzip" ;;
    # The same 2 KB HTML through the same listener, not compressed: what
    # the proxying alone costs.
    id2k) args="-c 20 http://127.0.0.1:26082/html/2048" ;;
    # Through the L4 (TCP) listener, a connection per request.
    l4close128) args="-c 50 http://127.0.0.1:26081/size/128"; hdr="Connection: close" ;;
    l4close1k) args="-c 50 http://127.0.0.1:26081/size/1024"; hdr="Connection: close" ;;
    hit2k) args="-c 20 http://127.0.0.1:26083/size/2048" ;;
    hit64k) args="-c 20 http://127.0.0.1:26083/size/65536" ;;
  esac
  local c0 c1 u0 u1 out n rps
  c0=$(sumcpu "$1"); u0=$(sumcpu "$1" '$14')
  out=$(taskset -c 1 wrk -t 1 -d "${D}s" -H "$hdr" $args 2>&1)
  c1=$(sumcpu "$1"); u1=$(sumcpu "$1" '$14')
  n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
  rps=$(echo "$out" | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p')
  err=$(echo "$out" | sed -n 's/.*Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p')
  echo "round $3 $1 $2: $rps req/s, $n requests, errors ${err:-0}, DUT CPU $(python3 -c "print(round(($c1-$c0)*10000/max(1,${n:-0}),2))") us/request (user $(python3 -c "print(round(($u1-$u0)*10000/max(1,${n:-0}),2))"))"
}
for round in $(seq "$ROUNDS"); do for t in ${TARGETS:-sy hp ng}; do
  start $t
  for c in ${CASES:-ka128 close128 ka1k}; do run_case $t $c $round; done
  stop $t
done; done
kill $O
