#!/bin/bash
# Issue 34's P99 at a fixed rate, HTTP/3 against HTTP/2 on the same TLS
# vserver, split at the wire: the load tool's own P99 (from when each
# request was due to when the tool saw its response) and the DUT's
# turnaround (from the request's packet leaving the client to the
# response's packet leaving the DUT), read from a tcpdump of the
# vserver's port on loopback (scripts/wire_turnaround.py says how requests
# and responses are paired). What the tool measures beyond the turnaround
# is the client's: its scheduling of requests at the rate, its transport
# and its reading of the response. The HTTP/3 clients cost the load core
# about twice what their HTTP/2 costs at the same rate (BENCHMARKS.md), so
# the end-to-end P99 of the two protocols compares the clients as much
# as the server; the turnaround compares the server.
#
#   scripts/h3-wire-p99.sh [rounds]          # 3 rounds, 1,000 and 5,000 req/s, oha and h3load
#   RATES=5000 TOOLS=oha scripts/h3-wire-p99.sh 5
#
# Per round, rate and tool: h3 then h2 (alternating which goes first each
# round), 1 KB GETs on 20 connections x 10 streams (oha -q with latency
# correction; h3load -mode rate: quic-go's HTTP/3 and Go's HTTP/2) for
# SECONDS (8) after a 2 s warm-up the turnaround leaves out. One line per
# run: the tool's p50 and p99, the turnaround's p50, p99 and p99.9, the
# DUT's CPU per request, and tcpdump's drop count (a run with drops is
# flagged: its turnaround misses packets). The DUT (one worker) on CPU 0;
# the origin, the load tool and tcpdump on CPU 1.
#
# PAIRED=1: both protocols at once instead (see paired_run below): one
# line per protocol and run, the DUT's CPU over both.
#
# WORK=REPORT_DIR/work: the peers' run instead. Each of TARGETS ("sy caddy
# envoy") with the configs of a `switchyard bench compare` work dir (run it
# with --targets switchyard,caddy,envoy), HTTP/2 and HTTP/3 turned on in
# copies of them as h3-bench.sh does (h2_configs, h3_configs.py): the RSA
# TLS vserver on 26084, the origin on 27081. Each round starts each target
# in turn (the order rotates by round) and runs every rate and tool on it,
# so the peers' ratios come from the same minutes as Switchyard's. Lines
# end with the target's name.
#
# Env: ORIGIN_RT (1: the origin at real-time priority, see below),
# SWITCHYARD (target/release/switchyard), RATES ("1000 5000"), TOOLS
# ("oha h3load"), SECONDS (8), PORT (38543), ORIGIN_PORT (38181), KEEP=1
# keeps the captures (the directory is printed). Needs tcpdump, openssl,
# oha and h3load (scripts/install-bench-peers.sh oha h3load), and
# switchyard-bench beside the binary for the origin.
set -u
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
B=${SWITCHYARD:-target/release/switchyard}
WORK=${WORK:-}
if [ -n "$WORK" ]; then
  PORT=26084; ORIGIN_PORT=27081; HOST=bench.switchyard.test
  TARGET_LIST=${TARGETS:-sy caddy envoy}
else
  PORT=${PORT:-38543}; ORIGIN_PORT=${ORIGIN_PORT:-38181}; HOST=site.test
  TARGET_LIST=site
fi
D=${SECONDS_PER_RUN:-${SECONDS_RUN:-8}}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
[ -x "$B" ] || { echo "h3-wire-p99: no binary at $B (cargo build --release -p switchyard)" >&2; exit 1; }
for tool in tcpdump openssl ${TOOLS:-oha h3load}; do
  command -v "$tool" >/dev/null || { echo "h3-wire-p99: $tool is missing (apt-get install tcpdump; scripts/install-bench-peers.sh oha h3load)" >&2; exit 1; }
done
for p in "$PORT" "$ORIGIN_PORT"; do
  if (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
    echo "h3-wire-p99: 127.0.0.1:$p is in use (set PORT / ORIGIN_PORT, or stop what holds it)" >&2; exit 1
  fi
done
T=$(mktemp -d /tmp/h3-wire-p99.XXXXXX)
. scripts/dut-lib.sh
if [ -n "$WORK" ]; then
  [ -d "$WORK/switchyard" ] || { echo "h3-wire-p99: $WORK is not a bench work dir (switchyard bench compare)" >&2; exit 1; }
  mkdir -p "$T/h2" "$T/conf"
  h2_configs "$WORK" "$T/h2"
  python3 scripts/h3_configs.py "$T/h2" "$T/conf" || exit 1
  CONF="$T/conf"
  for target in $TARGET_LIST; do
    [ "$target" = sy ] || [ -f "$CONF/$target/command" ] \
      || { echo "h3-wire-p99: no $target in $WORK (bench compare --targets switchyard,caddy,envoy)" >&2; exit 1; }
  done
else
  h3_site "$T" "$PORT" "$ORIGIN_PORT" || { echo "h3-wire-p99: openssl failed" >&2; exit 1; }
fi
# The origin stands for a member on a machine of its own, but shares the
# load core with the tool, and an HTTP/3 client keeps that core about
# twice as busy as an HTTP/2 one: the member's own turnaround, inside the
# DUT's, was then 2x longer at P99 in the HTTP/3 runs (h3load, 5,000/s).
# Real-time priority lets it run the moment a request reaches it, for both
# protocols alike (ORIGIN_RT=0: an ordinary process).
rt=""; [ "${ORIGIN_RT:-1}" = 1 ] && chrt -f 1 true 2>/dev/null && rt="chrt -f 1"
origins="--listen 127.0.0.1:$ORIGIN_PORT"; [ -n "$WORK" ] && origins="$origins --listen 127.0.0.1:27082"
taskset -c 1 $rt "$B" bench origin $origins >/dev/null 2>&1 &
O=$!
P=""; RUNNING=""
# One target at a time: target_start NAME (site: h3_site's Switchyard;
# sy, caddy, envoy: dut-lib's start with the work dir's configs).
target_start() {
  if [ "$1" = site ]; then
    taskset -c 0 "$B" run -c "$T"/switchyard.toml >"$T"/dut.log 2>&1 &
    P=$!
  else
    start "$1"
  fi
  RUNNING=$1
  local up=0
  # Bounded (60 s): a loaded machine can take seconds to start them.
  for _ in $(seq 600); do
    (exec 3<>/dev/tcp/127.0.0.1/"$ORIGIN_PORT") 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && { up=1; break; }
    sleep 0.1
  done
  [ $up = 1 ] || { echo "h3-wire-p99: $1 or the origin did not start ($T/dut.log; switchyard-bench beside $B?)" >&2; exit 1; }
  # The UDP listener comes up beside the TCP one; give it a moment.
  sleep 1
}
target_stop() {
  [ -n "$RUNNING" ] || return 0
  if [ "$RUNNING" = site ]; then kill "$P" 2>/dev/null; wait "$P" 2>/dev/null; else stop "$RUNNING"; fi
  RUNNING=""
}
cleanup() {
  target_stop
  kill "$O" 2>/dev/null; wait "$O" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "captures kept in $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
cpu_ticks() { if [ "$RUNNING" = site ]; then awk '{print $14 + $15}' /proc/"$P"/stat; else sumcpu "$RUNNING"; fi; }
URL="https://$HOST:$PORT/size/1024"
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null; }
# One run: prints "ok p50_ms p99_ms" from the tool.
load() { # proto tool rate
  case $2 in
  oha)
    taskset -c 1 oha --http-version "${1#h}" --insecure --no-tui -c 20 -p 10 -z "$((D + 2))s" \
        -q "$3" --latency-correction --output-format json \
        --connect-to "$HOST:$PORT:127.0.0.1:$PORT" "$URL" 2>/dev/null \
      | json "d.get('statusCodeDistribution',{}).get('200',0), round(d['latencyPercentiles']['p50']*1000,3), round(d['latencyPercentiles']['p99']*1000,3)" | tr -d '(),' ;;
  h3load)
    taskset -c 1 h3load -url "$URL" -connect 127.0.0.1:"$PORT" -mode rate -proto "$1" -rate "$3" \
        -c 20 -m 10 -d "${D}s" -warmup 2s \
      | json 'd["all_ok"], round(d["p50_us"]/1000,3), round(d["p99_us"]/1000,3)' | tr -d '(),' ;;
  esac
}
# The member's port too: its own turnaround (request to response on the
# member connection) is inside the DUT's, and the origin shares the load
# tool's core.
proto_filter() { echo "$([ "$1" = h3 ] && echo udp || echo tcp) port $PORT or tcp port $ORIGIN_PORT"; }
# A capture of the load window on the load core: capture_start CAP FILTER,
# then capture_stop CAP writes CAP.txt (tcpdump's text) and prints the
# flag for a capture with drops.
capture_start() {
  taskset -c 1 tcpdump -i lo -n -s 96 -B 65536 -w "$1.pcap" $2 2>"$1.err" &
  TD=$!
  sleep 1
}
capture_stop() {
  sleep 0.5
  kill -INT "$TD" 2>/dev/null; wait "$TD" 2>/dev/null
  local dropped; dropped=$(sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$1.err")
  tcpdump -r "$1.pcap" -n -tt 2>/dev/null > "$1.txt"
  [ "${dropped:-0}" != 0 ] && echo " (tcpdump dropped $dropped: turnaround incomplete)"
}
# The DUT's turnaround on the vserver's port, and the member's on the
# origin's, in a capture's text.
turnaround() {
  python3 scripts/wire_turnaround.py "$1" "$PORT" 2 \
    | json '"turnaround_p50_ms", d["p50_ms"], "p99_ms", d["p99_ms"], "p99.9_ms", d["p999_ms"], "responses", d["responses"]' | tr -d "(),'"
}
member_turnaround() {
  python3 scripts/wire_turnaround.py "$1" "$ORIGIN_PORT" 2 \
    | json '"member_p50_ms", d["p50_ms"], "p99_ms", d["p99_ms"]' | tr -d "(),'"
}
# The DUT's CPU per request between the ticks $c0 and $c1, over $1 requests.
cpu_per_request() {
  python3 -c "ok=float('${1}' or 0); print(round(($c1-$c0)*1e6/$(getconf CLK_TCK)/ok,1) if ok>0 else '-')" 2>/dev/null
}
# A turnaround is inside the tool's latency: a turnaround P99 above the
# tool's own P99 means requests and responses were paired wrongly, which
# happened when the load core could not keep up (5,000 requests/s of
# each protocol under h3load, two Go clients beside the origin and
# tcpdump on one core: 16 to 194 ms against the tool's 8 to 48). Such a
# round is flagged, and its ratio is not a result.
overloaded() { # turnaround's line, tool's p99_ms
  python3 -c "
import re, sys
m = re.search(r' p99_ms ([0-9.]+)', sys.argv[1])
tool = float(sys.argv[2]) if sys.argv[2] not in ('', '-') else None
if m and tool is not None and float(m.group(1)) > tool:
    print(' (invalid: turnaround P99 above the tool\'s, the load core is overloaded)', end='')
" "$1" "${2:--}"
}
# PAIRED=1: both protocols at once, each at the rate, through the same
# worker, and the turnaround of each read from one capture. Run one after
# the other, the two protocols met a machine whose speed drifts by 30 to
# 40 % between minutes (docs/bench-results/2026-12-07-h3-fixed-rate-wakes):
# paired, every pause and every slow minute falls on both alike, and the
# ratio of their P99s compares the protocols, not the minutes they ran
# in. The worker then serves twice the rate, and its CPU per request is
# over both protocols' requests.
paired_run() { # round rate tool
  local round=$1 rate=$2 tool=$3
  local cap="$T/cap.$round.$RUNNING.$rate.$tool.paired"
  capture_start "$cap" "port $PORT or tcp port $ORIGIN_PORT"
  c0=$(cpu_ticks)
  load h3 "$tool" "$rate" >"$cap.h3.out" &
  local L3=$!
  load h2 "$tool" "$rate" >"$cap.h2.out"
  wait "$L3"
  c1=$(cpu_ticks)
  local flag; flag=$(capture_stop "$cap")
  grep "UDP," "$cap.txt" > "$cap.h3.txt"
  grep "Flags \[" "$cap.txt" > "$cap.h2.txt"
  local ok3 ok2 cpu member
  read -r ok3 _ < "$cap.h3.out"; read -r ok2 _ < "$cap.h2.out"
  cpu=$(cpu_per_request $(( ${ok3:-0} + ${ok2:-0} )))
  member=$(member_turnaround "$cap.h2.txt")
  local proto ok p50 p99 wire
  for proto in h3 h2; do
    read -r ok p50 p99 < "$cap.$proto.out"
    wire=$(turnaround "$cap.$proto.txt")
    echo "round $round $proto $tool $rate req/s paired: ok ${ok:-0}, tool p50_ms ${p50:--} p99_ms ${p99:--}, $wire, $member, DUT CPU $cpu us/request over both$flag$(overloaded "$wire" "$p99")$(target_word)"
  done
  [ "${KEEP:-0}" = 1 ] || rm -f "$cap".*
}
# The peers' run names the target at the end of each line.
target_word() { [ "$RUNNING" = site ] || echo ", target $RUNNING"; }
# A rotation of the targets' list by the round, so no target always runs
# first (or always right after another).
rotated() { # round
  local list=($TARGET_LIST) n i
  n=${#list[@]}
  for ((i = 0; i < n; i++)); do echo "${list[$(( (i + $1) % n ))]}"; done
}
for round in $(seq "$ROUNDS"); do
  for target in $(rotated "$round"); do
    target_start "$target"
    for rate in ${RATES:-1000 5000}; do
      for tool in ${TOOLS:-oha h3load}; do
        if [ "${PAIRED:-0}" = 1 ]; then paired_run "$round" "$rate" "$tool"; continue; fi
        order="h3 h2"; [ $((round % 2)) = 0 ] && order="h2 h3"
        for proto in $order; do
          cap="$T/cap.$round.$RUNNING.$rate.$tool.$proto"
          capture_start "$cap" "$(proto_filter "$proto")"
          c0=$(cpu_ticks)
          out=$(load "$proto" "$tool" "$rate")
          c1=$(cpu_ticks)
          flag=$(capture_stop "$cap")
          wire=$(turnaround "$cap.txt")
          member=$(member_turnaround "$cap.txt")
          set -- $out
          ok=${1:-0}
          cpu=$(cpu_per_request "$ok")
          echo "round $round $proto $tool $rate req/s: ok $ok, tool p50_ms ${2:--} p99_ms ${3:--}, $wire, $member, DUT CPU $cpu us/request$flag$(overloaded "$wire" "${3:--}")$(target_word)"
          [ "${KEEP:-0}" = 1 ] || rm -f "$cap.pcap" "$cap.txt"
        done
      done
    done
    target_stop
  done
done
