#!/bin/bash
# DUT CPU per request, Switchyard vs HAProxy vs nginx, with the configs a
# `switchyard bench compare` run wrote (REPORT_DIR/work): wrk (one thread) and
# the origin on CPU 1, the DUT on CPU 0; interleaved rounds; per round, target
# and case: requests/s and the DUT's CPU (utime+stime from /proc) per request.
#   scripts/cpu-per-request.sh REPORT_DIR/work [rounds]
# Cases: keep-alive 128 B (wrk -c 50), one request per connection 128 B
# (wrk -c 50 with "Connection: close"), keep-alive 1 KB (wrk -c 20).
set -u
W=$(realpath "${1:?usage: cpu-per-request.sh REPORT_DIR/work [rounds]}")
ROUNDS=${2:-3}
B=${SWITCHYARD:-target/release/switchyard}
D=${SECONDS_PER_RUN:-8}
cpu() { awk '{print $14+$15}' /proc/$1/stat 2>/dev/null || echo 0; }
taskset -c 1 $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
sleep 0.3
start() { case $1 in
  sy) taskset -c 0 $B run -c "$W"/switchyard/switchyard.toml 2>/dev/null & ;;
  hp) taskset -c 0 haproxy -f "$W"/haproxy/haproxy.cfg 2>/dev/null & ;;
  ng) taskset -c 0 nginx -c "$W"/nginx/nginx.conf 2>/dev/null & ;;
esac; P=$!; sleep 0.7; }
stop() { if [ "$1" = ng ]; then nginx -c "$W"/nginx/nginx.conf -s stop 2>/dev/null; fi; kill $P 2>/dev/null; wait $P 2>/dev/null; sleep 0.3; }
pids() { if [ "$1" = ng ]; then echo "$P $(pgrep -P $P)"; else echo $P; fi; }
sumcpu() { t=0; for p in $(pids "$1"); do t=$((t+$(cpu $p))); done; echo $t; }
run_case() { # target case
  local args
  case $2 in
    ka128) args="-c 50 http://127.0.0.1:26080/size/128" ;;
    close128) args="-c 50 -H Connection:close http://127.0.0.1:26080/size/128" ;;
    ka1k) args="-c 20 http://127.0.0.1:26080/size/1024" ;;
  esac
  local c0 c1 out n rps
  c0=$(sumcpu "$1")
  out=$(taskset -c 1 wrk -t 1 -d "${D}s" $args 2>&1)
  c1=$(sumcpu "$1")
  n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
  rps=$(echo "$out" | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p')
  err=$(echo "$out" | sed -n 's/.*Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p')
  echo "round $3 $1 $2: $rps req/s, $n requests, errors ${err:-0}, DUT CPU $(python3 -c "print(round(($c1-$c0)*10000/max(1,${n:-0}),2))") us/request"
}
for round in $(seq "$ROUNDS"); do for t in ${TARGETS:-sy hp ng}; do
  start $t
  for c in ${CASES:-ka128 close128 ka1k}; do run_case $t $c $round; done
  stop $t
done; done
kill $O
