#!/bin/bash
# The `scripting` scenario (scripts/scripting-bench.sh) counted in
# user-space instructions per request (callgrind `Ir`): deterministic
# where CPU time on a shared VM is not. Each target runs once under
# callgrind with instrumentation off while it starts; per listener (none,
# empty, rewrite, jwt) and window size (N, then 2N requests of h2load --h1,
# 10 connections, the same headers and token as the CPU run):
# `callgrind_control -i on`, the load, `-i off`, `-d` (a dump holds what
# was counted since the last one). (2N - N) / N leaves out what a window
# costs whatever its load (the clients' connection setup); the script's
# added instructions are its listener's minus none's. Kernel work is not
# counted: this compares the proxies' own code.
#   scripts/scripting-callgrind.sh [N]
set -u
N=${1:-4000}
B=$(realpath "${SWITCHYARD:-target/release/switchyard}")
HERE=$(cd "$(dirname "$0")" && pwd)
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
T=$(mktemp -d)
TOKEN=$(python3 "$HERE/scripting_configs.py" "$T") || exit 1
sed -i 's/^master_process on;/master_process off;/' "$T"/nginx/nginx.conf
taskset -c 1 $B bench origin --listen 127.0.0.1:27081 >/dev/null 2>&1 & O=$!
sleep 0.3
port() { case $1 in none) echo 26080 ;; empty) echo 26081 ;; rewrite) echo 26082 ;; jwt) echo 26083 ;; esac; }
for t in ${TARGETS:-sy hp haproxy28 envoy ng}; do
  out="$T/cg.$t"
  vg="valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out"
  case $t in
    sy) taskset -c 0 $vg $B run -c "$T"/switchyard/switchyard.toml >/dev/null 2>&1 & ;;
    hp) taskset -c 0 $vg haproxy -db -f "$T"/haproxy/haproxy.cfg >/dev/null 2>&1 & ;;
    haproxy28) taskset -c 0 $vg haproxy28 -db -f "$T"/haproxy28/haproxy.cfg >/dev/null 2>&1 & ;;
    envoy) taskset -c 0 $vg envoy -c "$T"/envoy/envoy.yaml --concurrency 1 --disable-hot-restart --log-level warn >/dev/null 2>&1 & ;;
    ng) taskset -c 0 $vg nginx -c "$T"/nginx/nginx.conf >/dev/null 2>&1 & ;;
  esac
  P=$!
  for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/26083) 2>/dev/null && break; sleep 0.2; done
  sleep 2
  dumps=0
  for case in none empty rewrite jwt; do
    declare -A ir=()
    for n in "$N" $((2 * N)); do
      callgrind_control -i on $P >/dev/null 2>&1
      res=$(taskset -c 1 h2load --h1 -n "$n" -c 10 -H "X-A: left" -H "X-B: right" -H "X-D: gone" \
        -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$(port $case)/size/128" 2>&1 | sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p')
      callgrind_control -i off $P >/dev/null 2>&1
      callgrind_control -d $P >/dev/null 2>&1
      dumps=$((dumps + 1))
      f=$(ls -t "$out"* 2>/dev/null | head -1)
      ir[$n]=$(awk '/^totals:/ {t+=$2} /^summary:/ {s+=$2} END {print (t ? t : s)+0}' "$f")
      [ "$res" = "$n" ] || echo "$t $case: only ${res:-0} of $n answered 2xx"
    done
    echo "cg $t $case: $(python3 -c "print(round((${ir[$((2*N))]}-${ir[$N]})/$N))") instructions/request (N=$N: ${ir[$N]}, 2N: ${ir[$((2*N))]})"
    unset ir
  done
  kill -TERM $P 2>/dev/null; sleep 1; kill -KILL $P 2>/dev/null
  wait $P 2>/dev/null
  rm -f "$out"*
done
kill $O; wait $O 2>/dev/null
rm -rf "$T"
