#!/bin/bash
# User-space instructions per request (callgrind `Ir`), deterministic where
# CPU time on this shared VM is not. Each DUT runs under valgrind's
# callgrind with instrumentation off while it starts (loading the CRS,
# building TLS contexts: billions of instructions whose count varies from
# run to run by more than a whole load's worth); `callgrind_control -i on`
# turns it on once the DUT answers, the load runs, `-i off` ends the
# window, and the instructions counted divided by the requests are the cost
# per request. N and then 2N requests in two runs: the difference divided
# by N leaves out what a window costs whatever its load (connection setup
# of the load's clients, TLS handshakes, timers), and both figures are
# printed. Kernel work (about 80 % of the CPU per request on loopback) is
# not counted: this compares the proxies' own code, not their syscalls.
#   scripts/callgrind-per-request.sh REPORT_DIR/work [N]
# Cases: h1 keep-alive 128 B (h2load --h1 -c 10), h1 one request per
# connection 128 B (h2load --h1 -c 10 with Connection: close), HTTP/2 over
# TLS 1 KB (h2load -c 4 -m 10, ALPN h2; handshakes are in both runs alike).
# Switchyard only (CASES=h3tls1k h2tls20): HTTP/3 1 KB on 20 connections x
# 10 streams (oha --http-version 3; [vserver.http3] added as h3_configs.py
# does) and HTTP/2 with the same shape (h2load -c 20 -m 10); h3tls64k and
# h2tls64k the same with 64 KB responses. h3rate and h2rate: 1 KB over
# HTTP/3 and HTTP/2 by the same client (oha, 20 x 10) at a fixed RATE (100
# requests/s unless set): each request arrives alone, so what a wake-up,
# a task poll or a timer costs per request counts in full, as it does at
# the fixed rates of the P99 target (scripts/h3-wire-p99.sh); the window
# of 2N lasts twice as long, so work per second counts too (the
# dashboard's sampler, about 700 instructions per request at 100/s, in
# both).
set -u
W=${1:?usage: callgrind-per-request.sh REPORT_DIR/work [N]}
N=${2:-2000}
B=${SWITCHYARD:-target/release/switchyard}
T=$(mktemp -d)
cp -r "$W"/switchyard "$W"/haproxy "$W"/nginx "$T"/
sed -i 's/^  resumption = true$/  resumption = true\n  alpn = ["h2", "http\/1.1"]/' "$T"/switchyard/switchyard.toml
sed -i 's/^\(    bind 127.0.0.1:2608[45] ssl .*\)$/\1 alpn h2,http\/1.1/' "$T"/haproxy/haproxy.cfg
sed -i 's/listen 127.0.0.1:\(2608[45]\) ssl;/listen 127.0.0.1:\1 ssl http2;/' "$T"/nginx/nginx.conf
sed -i 's/^master_process on;/master_process off;/' "$T"/nginx/nginx.conf
python3 -c "import sys; sys.path.insert(0, '$(dirname "$0")'); import h3_configs; h3_configs.switchyard('$T/switchyard/switchyard.toml')"
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
taskset -c 1 $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
sleep 0.3
size_of() { case $1 in *64k) echo 65536 ;; *) echo 1024 ;; esac; }
ir() { # target case n -> total Ir
  local out="$T/cg.$1.$2.$3"
  case $1 in
    sy) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" $B run -c "$T"/switchyard/switchyard.toml >/dev/null 2>&1 & ;;
    hp) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" haproxy -db -f "$T"/haproxy/haproxy.cfg >/dev/null 2>&1 & ;;
    ng) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" nginx -c "$T"/nginx/nginx.conf >/dev/null 2>&1 & ;;
  esac
  local P=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/26080) 2>/dev/null && break; sleep 0.2; done
  sleep 1
  callgrind_control -i on $P >/dev/null 2>&1
  case $2 in
    ka128) taskset -c 1 h2load --h1 -n "$3" -c 10 http://127.0.0.1:26080/size/128 >/dev/null 2>&1 ;;
    close128) taskset -c 1 h2load --h1 -n "$3" -c 10 -H "connection: close" http://127.0.0.1:26080/size/128 >/dev/null 2>&1 ;;
    h2tls1k) taskset -c 1 h2load -n "$3" -c 4 -m 10 https://127.0.0.1:26084/size/1024 >/dev/null 2>&1 ;;
    h2tls20) taskset -c 1 h2load -n "$3" -c 20 -m 10 https://127.0.0.1:26084/size/1024 >/dev/null 2>&1 ;;
    h3tls1k|h3tls64k) taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -n "$3" \
      --connect-to bench.switchyard.test:26084:127.0.0.1:26084 https://bench.switchyard.test:26084/size/$(size_of $2) >/dev/null 2>&1 ;;
    h2tls64k) taskset -c 1 h2load -n "$3" -c 20 -m 10 https://127.0.0.1:26084/size/$(size_of $2) >/dev/null 2>&1 ;;
    h3rate|h2rate) taskset -c 1 oha --http-version "${2:1:1}" --insecure --no-tui -c 20 -p 10 -q "${RATE:-100}" -n "$3" \
      --connect-to bench.switchyard.test:26084:127.0.0.1:26084 https://bench.switchyard.test:26084/size/1024 >/dev/null 2>&1 ;;
  esac
  callgrind_control -i off $P >/dev/null 2>&1
  kill -TERM $P 2>/dev/null
  if [ "$1" = ng ]; then sleep 1; kill -QUIT $P 2>/dev/null; fi
  wait $P 2>/dev/null
  # Sum the totals of every thread's file (valgrind writes one per process).
  cat "$out"* 2>/dev/null | awk '/^totals:/ {t+=$2} /^summary:/ {s+=$2} END {print (t ? t : s)+0}'
}
for t in ${TARGETS:-sy hp ng}; do for c in ${CASES:-ka128 close128 h2tls1k}; do
  a=$(ir $t $c "$N"); b=$(ir $t $c $((2*N)))
  echo "$t $c: $(python3 -c "print(round(($b-$a)/$N))") instructions/request (window N=$N: $a, $(python3 -c "print(round($a/$N))")/request; 2N: $b)"
done; done
kill $O
# KEEP=DIR keeps the callgrind files for callgrind_annotate.
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$T"/cg.* "$KEEP"/; fi
rm -rf "$T"
