#!/bin/bash
# User-space instructions per keep-alive request, HTTP/3 against HTTP/2 on
# the same TLS vserver (issue 34), under callgrind: deterministic where CPU
# time on this shared VM is not, so each change to the HTTP/3 path can be
# measured on a loaded machine. The DUT (one worker) runs under callgrind
# with instrumentation off while it starts; `callgrind_control -i on` opens
# the window once it answers, the load runs, `-i off` closes it. Two
# windows, N and 2N requests: the difference divided by N leaves out what a
# window costs whatever its load (handshakes, timers, the clients'
# connection setup). Load: 20 connections x 10 streams, h2load for HTTP/2,
# oha (quinn) for HTTP/3 (its connect timeout raised from 5 s: handshakes
# under callgrind on a loaded machine took longer, and a window with
# failed requests is flagged). Kernel work is not counted.
#
#   scripts/h3-callgrind.sh                  # h2 and h3, 1 KB, N=2000
#   SIZE=65536 N=1000 scripts/h3-callgrind.sh
#   PROTOS=h3 SWITCHYARD=/path/to/switchyard scripts/h3-callgrind.sh
#
# Env: SWITCHYARD (default target/release/switchyard), N, SIZE (response
# bytes), PROTOS ("h2 h3"), PORT (vserver, TCP and UDP; default 38443),
# ORIGIN_PORT (default 38081), KEEP=1 keeps the callgrind files (the
# directory is printed) for callgrind_annotate.
# The origin is `switchyard bench origin`, which runs switchyard-bench
# from beside the binary or from PATH (cargo build --release -p
# switchyard-bench). Needs valgrind, h2load and oha (/opt/switchyard-bench-peers/bin is added
# to PATH) and openssl.
set -u
cd "$(dirname "$0")/.."
B=${SWITCHYARD:-target/release/switchyard}
N=${N:-2000}
SIZE=${SIZE:-1024}
PORT=${PORT:-38443}
ORIGIN_PORT=${ORIGIN_PORT:-38081}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
[ -x "$B" ] || { echo "h3-callgrind: no binary at $B (cargo build --release -p switchyard)" >&2; exit 1; }
for p in "$PORT" "$ORIGIN_PORT"; do
  if (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
    echo "h3-callgrind: 127.0.0.1:$p is in use (set PORT / ORIGIN_PORT)" >&2; exit 1
  fi
done
T=$(mktemp -d /tmp/h3-callgrind.XXXXXX)
. scripts/dut-lib.sh
h3_site "$T" "$PORT" "$ORIGIN_PORT" || { echo "h3-callgrind: openssl failed" >&2; exit 1; }
taskset -c 1 "$B" bench origin --listen 127.0.0.1:"$ORIGIN_PORT" >/dev/null 2>&1 &
O=$!
cleanup() {
  kill "$O" 2>/dev/null; wait "$O" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "callgrind files kept in $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
up=0
# Bounded (60 s): a loaded machine can take seconds to start it.
for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/"$ORIGIN_PORT") 2>/dev/null && { up=1; break; }; sleep 0.1; done
[ $up = 1 ] || { echo "h3-callgrind: the origin did not start (switchyard-bench beside $B or on PATH?)" >&2; exit 1; }

ir() { # PROTO REQUESTS -> total user-space instructions of the DUT's window
  local out="$T/cg.$1.$2"
  taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
    "$B" run -c "$T"/switchyard.toml >"$T/dut.$1.$2.log" 2>&1 &
  local P=$!
  # Wait (bounded, 60 s) until the DUT accepts; valgrind starts it slowly.
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.2; done
  sleep 1 # the QUIC endpoint binds after the TCP listener
  callgrind_control -i on "$P" >/dev/null 2>&1
  case $1 in
    h2) taskset -c 1 h2load -n "$2" -c 20 -m 10 "https://127.0.0.1:$PORT/size/$SIZE" >"$T/load.$1.$2.out" 2>&1 ;;
    h3) taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -n "$2" --connect-timeout 60s \
          --connect-to "site.test:$PORT:127.0.0.1:$PORT" "https://site.test:$PORT/size/$SIZE" >"$T/load.$1.$2.out" 2>&1 ;;
  esac
  callgrind_control -i off "$P" >/dev/null 2>&1
  # A window with failed requests measures something else: say so.
  case $1 in
    h2) grep -q "status codes: $2 2xx" "$T/load.$1.$2.out" ;;
    h3) grep -q "\[200\] $2 responses" "$T/load.$1.$2.out" ;;
  esac || echo "h3-callgrind: $1 window of $2 had failures, see $T/load.$1.$2.out (KEEP=1)" >&2
  kill -TERM "$P" 2>/dev/null; wait "$P" 2>/dev/null
  # One file per thread: sum their totals.
  cat "$out"* 2>/dev/null | awk '/^totals:/ {t+=$2} /^summary:/ {s+=$2} END {print (t ? t : s)+0}'
}
for p in ${PROTOS:-h2 h3}; do
  a=$(ir "$p" "$N")
  b=$(ir "$p" $((2 * N)))
  echo "$p size $SIZE: $(( (b - a) / N )) instructions/request (N=$N: $a; 2N: $b)"
done
