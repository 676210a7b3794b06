#!/bin/bash
# A policy `mirror` beside nginx's `mirror` module, in one run: keep-alive
# throughput and latency of the clients while every request is also copied
# to a member that answers 200 ms late, and the same without a mirror.
# Switchyard sends its copies from tasks of their own (docs: README
# "mirror"); nginx runs its mirror subrequests inside the request, so the
# next request on a keep-alive connection waits for them.
#
# DUT on core 0 (one worker / one worker process), load (wrk) and the two
# origins (`switchyard bench origin`) on core 1. Both proxies keep idle
# member connections (nginx: `keepalive 64`), access logs off.
#
# usage: scripts/mirror-bench.sh [ROUNDS]   (env SECONDS_PER_RUN=8, CONNS=20)
set -u
B=${SWITCHYARD:-target/release/switchyard}
ROUNDS=${1:-3}
SECS=${SECONDS_PER_RUN:-8}
CONNS=${CONNS:-20}
W=$(mktemp -d /tmp/mirror-bench.XXXXXX)
trap 'kill $O1 $O2 2>/dev/null; nginx -p "$W" -c "$W/nginx.conf" -s stop 2>/dev/null; rm -rf "$W"' EXIT

taskset -c 1 "$B" bench origin --listen 127.0.0.1:27181 >/dev/null 2>&1 & O1=$!
taskset -c 1 "$B" bench origin --listen 127.0.0.1:27182 --delay-ms 200 --threads 64 >/dev/null 2>&1 & O2=$!

cat > "$W/switchyard.toml" <<EOF
[global]
workers = 1
[admin]
listen = "127.0.0.1:27199"
[[vserver]]
name = "m"
listen = ["127.0.0.1:27100"]
default_pool = "main"
[[vserver.policy]]
match = { path_prefix = "/m/" }
action = { pool = "main" }
mirror = [{ pool = "slow" }]
[[pool]]
name = "main"
[[pool.member]]
address = "127.0.0.1:27181"
[[pool]]
name = "slow"
[[pool.member]]
address = "127.0.0.1:27182"
EOF

cat > "$W/nginx.conf" <<EOF
worker_processes 1;
pid $W/nginx.pid;
error_log $W/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  upstream main { server 127.0.0.1:27181; keepalive 64; }
  upstream slow { server 127.0.0.1:27182; keepalive 64; }
  server {
    listen 127.0.0.1:27200;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /m/ { mirror /_mirror; proxy_pass http://main; }
    location / { proxy_pass http://main; }
    location = /_mirror { internal; proxy_pass http://slow\$request_uri; }
  }
}
EOF

# wrk's "Requests/sec" and its 99th percentile latency.
load() {
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${SECS}s" --latency "$1" 2>/dev/null |
    awk '/Requests\/sec/ {r=$2} /^ +99%/ {p=$2} END {printf "%s req/s, p99 %s", r, p}'
}

sleep 0.3
for round in $(seq 1 "$ROUNDS"); do
  for t in switchyard nginx; do
    if [ $t = switchyard ]; then
      taskset -c 0 "$B" run -c "$W/switchyard.toml" 2>"$W/sy.log" & P=$!
      port=27100
    else
      taskset -c 0 nginx -p "$W" -c "$W/nginx.conf" 2>/dev/null
      port=27200
    fi
    sleep 0.5
    echo "round $round $t no mirror: $(load http://127.0.0.1:$port/plain/size/128)"
    echo "round $round $t mirror:    $(load http://127.0.0.1:$port/m/size/128)"
    if [ $t = switchyard ]; then
      curl -s http://127.0.0.1:27199/stats.json | python3 -c 'import json,sys; v=json.load(sys.stdin)["vservers"][0]; print("  copies sent %d, dropped %d (max_in_flight)" % (v["mirrored"], v["mirror_dropped"]))'
      kill $P; wait $P 2>/dev/null
    else
      nginx -p "$W" -c "$W/nginx.conf" -s stop; sleep 0.5
    fi
  done
done
