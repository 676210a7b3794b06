#!/bin/bash
# goodput (100 clients, 1 MB) at the maximum, standalone: P50/P99, TTFB
cd /work/main
W=/tmp/s52/all/work; B=target/release/switchyard
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
CONF=$W
. scripts/dut-lib.sh
start_origin
for r in $(seq ${ROUNDS:-2}); do for t in ${TARGETS:-sy haproxy28}; do
  start $t; sleep 0.5
  nstat -n >/dev/null
  taskset -c 1 $B bench load --url http://127.0.0.1:26080/size/1048576 --url http://127.0.0.1:26080/images/size/1048576 --connections 100 --duration ${D:-5s} --json --quiet > /tmp/x/gp.$t.$r.json 2>/dev/null
  nstat | grep -E "Retrans|Timeout|ZeroWindow|LossProbe|Drop|Prune|Collapse|Persist|OFO|SACK|DSACK|Spurious" | awk '{printf "  %s %s\n", $1, $2}' > /tmp/x/gp.$t.$r.nstat
  stop $t
  cat /tmp/x/gp.$t.$r.nstat
  python3 - /tmp/x/gp.$t.$r.json $t $r <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
def f(o,p=''):
    for k,v in o.items():
        if isinstance(v,dict): f(v,p+k+'.')
        elif p.startswith('ttlb') or k=='rps': print(' ',p+k,v)
print(sys.argv[2], 'round', sys.argv[3]); f(d)
PY
done; done
kill $O
