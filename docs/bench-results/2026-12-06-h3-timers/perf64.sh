#!/bin/bash
cd /work/main
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
PORT=38543; ORIGIN_PORT=38181; T=/tmp/w/site
B=/tmp/bin-new/switchyard
taskset -c 1 $B bench origin --listen 127.0.0.1:$ORIGIN_PORT >/dev/null 2>&1 & O=$!
taskset -c 0 $B run -c $T/switchyard.toml >$T/dut.log 2>&1 & P=$!
trap 'kill $P $O 2>/dev/null; wait $P $O 2>/dev/null' EXIT
sleep 1.5
URL="https://site.test:$PORT/size/65536"
for tool in oha h3load; do
  case $tool in
  oha) taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -z 10s --output-format json --connect-to "site.test:$PORT:127.0.0.1:$PORT" "$URL" > /tmp/w/p64.$tool.json 2>/dev/null & L=$! ;;
  h3load) taskset -c 1 h3load -url "$URL" -connect 127.0.0.1:$PORT -proto h3 -c 20 -m 10 -d 10s -warmup 1s > /tmp/w/p64.$tool.json & L=$! ;;
  esac
  sleep 2
  c0=$(awk '{print $14+$15}' /proc/$P/stat)
  perf record -q -C 0 -F 5000 -o /tmp/w/p64.$tool.data -- sleep 6 2>/dev/null
  c1=$(awk '{print $14+$15}' /proc/$P/stat)
  wait $L
  echo "$tool cpu_ticks $((c1-c0))"
done
