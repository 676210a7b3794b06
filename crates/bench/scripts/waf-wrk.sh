#!/usr/bin/env bash
# Cross-check of the waf scenario with wrk (docs/bench.md, "WAF").
#
# After `switchyard bench compare --scenario waf --out DIR`, runs each WAF
# target again from the configuration the harness wrote (DIR/work/<target>/),
# pinned to CPU 0 as the harness pins it, with `switchyard bench origin` and
# wrk on CPU 1, and the same 80 % GET / 20 % POST mix (waf-mix.lua) over
# HTTPS keep-alive. Prints wrk's req/s and non-2xx count and the DUT's CPU
# (utime + stime of its process group, /proc) per request and per core.
#
#   crates/bench/scripts/waf-wrk.sh DIR [PORT_BASE] [OBJECT] [SECONDS] [LISTENER]
#   OBJECT: /size/30720 (volume, default) or /size/1; LISTENER: waf (100 %,
#   default) or waf33.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${1:?usage: waf-wrk.sh REPORT_DIR [PORT_BASE] [OBJECT] [SECONDS] [LISTENER]}"
base="${2:-26080}"
object="${3:-/size/30720}"
secs="${4:-10}"
listener="${5:-waf}"
port=$((base + 6))
[ "$listener" = waf33 ] && port=$((base + 7))
sy="$root/target/release/switchyard"
tck=$(getconf CLK_TCK)

# CPU ticks (utime + stime) of every process in process group $1.
group_ticks() {
  local t=0 p
  for p in $(pgrep -g "$1" || true); do
    # Fields 14 and 15 after the "(comm)" field, which may hold spaces.
    t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0)))
  done
  echo "$t"
}

taskset -c 1 "$sy" bench origin --listen "127.0.0.1:$((base + 1001))" --listen "127.0.0.1:$((base + 1002))" >/dev/null 2>&1 &
origin=$!
trap 'kill $origin 2>/dev/null || true' EXIT
sleep 0.5

for target in switchyard nginx; do
  d="$out/work/$target"
  case "$target" in
    switchyard) [ -f "$d/switchyard.toml" ] || continue
      cmd=("$sy" run -c "$d/switchyard.toml") ;;
    nginx) [ -f "$d/nginx.conf" ] || continue
      cmd=(nginx -p "$d" -e "$d/error.log" -c "$d/nginx.conf") ;;
  esac
  # Its own session (process group): the CPU of nginx's worker counts too.
  (cd "$d" && exec setsid taskset -c 0 "${cmd[@]}" >"$d/wrk-dut.log" 2>&1) &
  dut=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  sleep 0.3
  pg=$(ps -o pgid= -p "$dut" | tr -d ' ')
  # Warm-up (connections, TLS sessions, the WAF's first requests), then measure.
  OBJECT="$object" taskset -c 1 wrk -t1 -c50 -d2s -s "$here/waf-mix.lua" "https://127.0.0.1:$port" >/dev/null
  c0=$(group_ticks "$pg")
  res=$(OBJECT="$object" taskset -c 1 wrk -t1 -c50 -d"${secs}s" -s "$here/waf-mix.lua" "https://127.0.0.1:$port")
  c1=$(group_ticks "$pg")
  kill -TERM -- "-$pg" 2>/dev/null || true
  wait "$dut" 2>/dev/null || true
  rps=$(echo "$res" | awk '/Requests\/sec/ {print $2}')
  reqs=$(echo "$res" | awk '/requests in/ {print $1}')
  non2xx=$(echo "$res" | awk '/Non-2xx/ {print $5}')
  cpu=$(awk -v a="$c0" -v b="$c1" -v t="$tck" 'BEGIN {print (b - a) / t}')
  awk -v tg="$target" -v rps="$rps" -v n="$reqs" -v cpu="$cpu" -v s="$secs" -v bad="${non2xx:-0}" -v l="$listener" -v o="$object" 'BEGIN {
    printf "%-10s %s %s: wrk %.0f req/s, non-2xx %d, DUT CPU %.0f %%, %.1f us/req, %.0f req/s per DUT core\n",
      tg, l, o, rps, bad, 100 * cpu / s, 1e6 * cpu / n, n / cpu }'
done
