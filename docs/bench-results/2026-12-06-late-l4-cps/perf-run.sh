#!/bin/bash
# perf of the DUT's core during l4-cps (128 B, new connection per request), per target.
# perf-run.sh WORK OUT: WORK from `switchyard bench compare --targets
# switchyard,haproxy28,nginx131 --scenario l4-cps --out DIR` (DIR/work).
W=${1:?usage: perf-run.sh WORK OUT}
B=${SWITCHYARD:-$(cd "$(dirname "$0")/../../.." && pwd)/target/release/switchyard}
OUT=${2:?usage: perf-run.sh WORK OUT}
export PATH=/opt/switchyard-bench-peers/bin:$PATH
taskset -c 1 $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 &
O=$!
sleep 0.5
for t in ${TARGETS:-switchyard haproxy28 nginx131}; do
  eval "taskset -c 0 $(cat $W/$t/command)" > $OUT/$t.dut.log 2>&1 &
  D=$!
  sleep 1.5
  taskset -c 1 $B bench load --url http://127.0.0.1:26081/size/128 --connections 50 --requests-per-conn 1 --duration 7s --cpus 1 --json --quiet > $OUT/$t.load.json 2>&1 &
  L=$!
  sleep 2
  perf record -C 0 -o $OUT/$t.perf.data -- sleep 4 2>/dev/null
  wait $L
  pkill -P $D 2>/dev/null; kill $D; wait $D 2>/dev/null
  sleep 1
  python3 -c "import json;d=json.load(open('$OUT/$t.load.json'));print('$t', d.get('rps') or d)" 2>&1 | head -c 300; echo
done
kill $O
