#!/bin/bash
# DUT CPU per worker wake-up by what woke it, HTTP/3 at a fixed rate
# (wake-classes.bt's classes read QUIC datagrams: HTTP/3 only).
# OHA=BINARY runs another oha build (2026-12-06-h3-ack-bundling/).
#   docs/bench-results/2026-12-06-late-h3-peers/wake-classes.sh
cd "$(dirname "$0")/../../.."
T=$(mktemp -d); . scripts/dut-lib.sh; h3_site "$T" 38543 38181
B=target/release/switchyard; export PATH=/opt/switchyard-bench-peers/bin:$PATH
taskset -c 1 chrt -f 1 $B bench origin --listen 127.0.0.1:38181 >/dev/null 2>&1 & O=$!
taskset -c 0 $B run -c $T/switchyard.toml > $T/dut.log 2>&1 & P=$!
sleep 2
W=$(ls /proc/$P/task | while read t; do [ "$(cat /proc/$P/task/$t/comm)" = worker-0 ] && echo $t; done)
for tool in ${TOOLS:-oha h3load}; do
  case $tool in
   oha) taskset -c 1 ${OHA:-oha} --http-version 3 --insecure --no-tui -c 20 -p 10 -z 12s -q ${RATE:-1000} --latency-correction --connect-to site.test:38543:127.0.0.1:38543 https://site.test:38543/size/1024 >/dev/null 2>&1 & L=$! ;;
   h3load) taskset -c 1 h3load -url https://site.test:38543/size/1024 -connect 127.0.0.1:38543 -mode rate -proto h3 -rate ${RATE:-1000} -c 20 -m 10 -d 10s -warmup 2s >/dev/null 2>&1 & L=$! ;;
  esac
  sleep 3
  echo "== $tool h3 ${RATE:-1000} req/s, 8 s, worker $W"
  bpftrace docs/bench-results/2026-12-06-late-h3-peers/wake-classes.bt $W 2>/dev/null | grep -v "^$\|Attaching"
  wait $L
done
kill $P $O; wait; rm -rf $T
