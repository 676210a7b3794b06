#!/bin/bash
# usage: wake.sh proto tool rate
set -u
cd /work/main
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
PORT=38543; ORIGIN_PORT=38181
T=${T:-/tmp/w/site}; mkdir -p $T
. scripts/dut-lib.sh
[ -f $T/switchyard.toml ] || h3_site $T $PORT $ORIGIN_PORT
B=${SWITCHYARD:-target/release/switchyard}
taskset -c 1 $B bench origin --listen 127.0.0.1:$ORIGIN_PORT >/dev/null 2>&1 & O=$!
taskset -c 0 $B run -c $T/switchyard.toml >$T/dut.log 2>&1 & P=$!
trap 'kill $P $O 2>/dev/null; wait $P $O 2>/dev/null' EXIT
sleep 1.5
ps -L -o tid,comm -p $P | tail -n +2
URL="https://site.test:$PORT/size/1024"
for proto in ${PROTOS:-h3 h2}; do
  for tool in ${TOOLS:-oha}; do
  rate=${RATE:-1000}
  case $tool in
  oha) taskset -c 1 oha --http-version "${proto#h}" --insecure --no-tui -c 20 -p 10 -z 12s -q $rate --latency-correction --output-format json --connect-to "site.test:$PORT:127.0.0.1:$PORT" "$URL" > /tmp/w/out.$proto.$tool.json 2>/dev/null & L=$! ;;
  h3load) taskset -c 1 h3load -url "$URL" -connect 127.0.0.1:$PORT -mode rate -proto $proto -rate $rate -c 20 -m 10 -d 10s -warmup 2s > /tmp/w/out.$proto.$tool.json & L=$! ;;
  esac
  sleep 2.5
  echo "== $proto $tool $rate"
  bpftrace /tmp/w/wake.bt $P 2>&1 | grep -v "^Attaching" | grep -v "^$"
  wait $L
  done
done
