#!/bin/bash
# machine-wide TCP OutSegs per connection through each DUT's L4 listener (2000 sequential connections)
cd /work/main
CONF=/tmp/q33/out/work; B=${B:-/work/main/target/release/switchyard}
source scripts/dut-lib.sh
export PATH=/opt/switchyard-bench-peers/bin:$PATH
start_origin
outsegs() { awk '/^Tcp:/ { if (n++) print $12 }' /proc/net/snmp; }
for t in $TARGETS; do
  start $t; sleep 3
  c0=$(sumcpu $t); s0=$(outsegs)
  taskset -c 1 python3 docs/bench-results/2026-12-03-all-peers/l4-syscalls/client.py ${PORT:-26081} 2000 >/dev/null
  s1=$(outsegs); c1=$(sumcpu $t)
  stop $t
  echo "$t: $(( (s1-s0) ))/2000 segments, cpu ticks $((c1-c0))"
done
kill $O
