#!/bin/bash
# RSS per idle HTTP/3 connection (N connections, one GET each, held open), per target
cd /work/main
W=/tmp/s50/all/work; N=${N:-300}; B=${B:-target/release/switchyard}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
T=$(mktemp -d); T3=$(mktemp -d)
. scripts/dut-lib.sh
h2_configs "$W" "$T"; python3 scripts/h3_configs.py "$T" "$T3" >/dev/null || exit 1
CONF=$T3
start_origin
rss() { t=0; for p in $(pids "$1"); do t=$((t + $(awk '/VmRSS/ {print $2}' /proc/$p/status))); done; echo $t; }
for round in $(seq ${ROUNDS:-1}); do
for t in ${TARGETS:-sy caddy envoy}; do
  start $t; sleep 3
  r0=$(rss $t)
  coproc CL { taskset -c 1 target/pyvenv/bin/python /tmp/x/h3mem.py $N ${SIZEPATH:-/size/1024}; }
  read -r line <&"${CL[0]}"
  sleep 2
  r1=$(rss $t)
  echo "round $round $t ${SIZEPATH:-/size/1024}: $line; RSS $r0 -> $r1 kB: $(( (r1 - r0) * 1000 / N )) bytes per connection"
  echo >&"${CL[1]}"; wait $CL_PID 2>/dev/null
  stop $t
done; done
kill $O; rm -rf $T $T3
