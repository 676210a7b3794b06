#!/bin/bash
# Issue 35's `scripting` scenario: what a request script adds to the DUT's
# CPU per request, for Switchyard (Lua 5.4), HAProxy 2.6 (Lua 5.3) and 2.8
# (Lua 5.4), Envoy 1.40 (Lua filter; JWT by jwt_authn) and nginx 1.22 with
# njs 0.7. Each target runs one configuration (scripts/scripting_configs.py)
# with four listeners that differ only in their script: none, empty
# handler, header rewrite, JWT HS256 check (the load sends a valid token:
# the measured path is the one that passes). Before measuring, every target
# is checked to do what the scripts say (scripts/scripting_check.py).
# The DUT on CPU 0, the origin and the load on CPU 1; per round, target,
# load tool (wrk, oha) and listener: requests/s and the DUT's CPU
# (utime+stime of its processes, /proc) per request; the targets in turn,
# the listeners interleaved within each target's run. Then the summary
# (scripts/scripting_summary.py): per script, added CPU = listener - none,
# median of the rounds, and Switchyard's added CPU over the best peer's.
#   scripts/scripting-bench.sh [rounds]    (keeps its output in $OUT)
set -u
ROUNDS=${1:-3}
B=$(realpath "${SWITCHYARD:-target/release/switchyard}")
D=${SECONDS_PER_RUN:-6}; C=${CONNECTIONS:-50}
OUT=${OUT:-/tmp/scripting-bench.log}
HERE=$(cd "$(dirname "$0")" && pwd)
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
for tool in wrk oha envoy haproxy28 nginx haproxy; do
  command -v $tool >/dev/null || { echo "scripting-bench: $tool is missing (scripts/install-bench-peers.sh; apt-get install wrk haproxy nginx libnginx-mod-http-js)" >&2; exit 1; }
done
[ -f /usr/lib/nginx/modules/ngx_http_js_module.so ] || { echo "scripting-bench: njs is missing: apt-get install libnginx-mod-http-js" >&2; exit 1; }
CONF=$(mktemp -d)
TOKEN=$(python3 "$HERE/scripting_configs.py" "$CONF") || exit 1
. "$HERE/dut-lib.sh"
TARGETS=${TARGETS:-sy hp haproxy28 envoy ng}
HDRS=(-H "X-A: left" -H "X-B: right" -H "X-D: gone" -H "Authorization: Bearer $TOKEN")
port() { case $1 in none) echo 26080 ;; empty) echo 26081 ;; rewrite) echo 26082 ;; jwt) echo 26083 ;; esac; }
rss() { local t=0; for p in $(pids "$1"); do t=$((t + $(awk '/^VmRSS/ {print $2}' /proc/$p/status 2>/dev/null || echo 0))); done; echo $t; }
{
echo "# scripting-bench $(date -u +%FT%TZ) rounds $ROUNDS, $D s per run, $C connections, switchyard $B"
for t in $TARGETS; do
  start $t
  echo "check $t: $(python3 "$HERE/scripting_check.py" "$TOKEN" 2>&1)"
  stop $t
done
start_origin
for round in $(seq "$ROUNDS"); do for t in $TARGETS; do
  start $t
  for tool in wrk oha; do for case in none empty rewrite jwt; do
    url="http://127.0.0.1:$(port $case)/size/128"
    c0=$(sumcpu $t)
    if [ $tool = wrk ]; then
      out=$(taskset -c 1 wrk -t 1 -c "$C" -d "${D}s" "${HDRS[@]}" "$url" 2>&1)
      n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
      err=$(echo "$out" | sed -n 's/.*Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p')
    else
      out=$(taskset -c 1 oha -c "$C" -z "${D}s" --no-tui --output-format json "${HDRS[@]}" "$url" 2>/dev/null)
      read -r n err < <(echo "$out" | python3 -c "import json,sys; d=json.load(sys.stdin); s=d.get('statusCodeDistribution',{}); print(s.get('200',0), sum(v for k,v in s.items() if k!='200'))")
    fi
    c1=$(sumcpu $t)
    echo "round $round $t $tool $case: $(python3 -c "print(round(${n:-0}/$D))") req/s, ${n:-0} requests, errors ${err:-0}, DUT CPU $(python3 -c "print(round(($c1-$c0)*10000/max(1,${n:-0}),3))") us/request, RSS $(rss $t) KB"
  done; done
  stop $t
done; done
kill $O; wait $O 2>/dev/null
rm -r "$CONF"
} 2>&1 | tee "$OUT"
python3 "$HERE/scripting_summary.py" "$OUT"
