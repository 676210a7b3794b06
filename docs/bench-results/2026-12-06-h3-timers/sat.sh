#!/bin/bash
cd /work/main
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
PORT=38543; ORIGIN_PORT=38181; T=/tmp/w/site
B=$1
taskset -c 1 $B bench origin --listen 127.0.0.1:$ORIGIN_PORT >/dev/null 2>&1 & O=$!
taskset -c 0 $B run -c $T/switchyard.toml >$T/dut.log 2>&1 & P=$!
trap 'kill $P $O 2>/dev/null; wait $P $O 2>/dev/null' EXIT
sleep 1.5
URL="https://site.test:$PORT/size/${SIZE:-1024}"
taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -z 8s --output-format json --connect-to "site.test:$PORT:127.0.0.1:$PORT" "$URL" > /tmp/w/sat.json 2>/dev/null & L=$!
sleep 2
bpftrace $2 $P 2>&1 | grep "^@"
wait $L
python3 -c "import json; d=json.load(open('/tmp/w/sat.json')); print('rps', d['summary']['requestsPerSec'])"
