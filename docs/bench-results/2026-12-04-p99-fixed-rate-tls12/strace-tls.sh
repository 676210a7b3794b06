#!/bin/bash
# syscalls per request over TLS 1.2 at a fixed rate: Switchyard and nginx.
export PATH=/opt/switchyard-bench-peers/bin:$PATH
CONF=/tmp/cmp33/work
cd /work/main
B=target/release/switchyard
source scripts/dut-lib.sh
start_origin
for t in ng; do
  start $t
  sleep 1
  pid=$(pids $t | tr ' ' '\n' | tail -1)
  ps=$(pids $t); timeout 12 strace -c -f $(for p in $ps; do echo -n "-p $p "; done) -o /tmp/strace.$t 2>/dev/null &
  S=$!
  sleep 1
  taskset -c 1 h2load --h1 -c 50 --rps 100 -D 8 https://127.0.0.1:26088/size/128 2>&1 | grep -E "^requests:|finished in"
  wait $S
  stop $t
  echo "== $t"; head -20 /tmp/strace.$t
done
kill $O
