#!/bin/bash
# System calls per request of users who come back after a long think:
# `strace -c -f` of the DUT over 15 s of scripts/parked-requests.py's
# trickle (2,000 connections, 8 s to settle, 20 s idle, 33 requests/s),
# with the configs of a `switchyard bench compare` work dir.
#   scripts/parked-syscalls.sh WORK sy|hp [SWITCHYARD_BINARY]
# Prints the script's CPU line and strace's table; divide the calls by
# about 495 (15 s at 33 requests/s). strace slows the DUT: read the CPU
# from parked-requests.py runs without it.
set -u
CONF=$(realpath "${1:?usage: parked-syscalls.sh WORK sy|hp [BINARY]}")
T=${2:?usage: parked-syscalls.sh WORK sy|hp [BINARY]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${3:-$ROOT/target/release/switchyard}
ulimit -n 20000
source "$ROOT/scripts/dut-lib.sh"
start_origin
start "$T"
OUT=$(mktemp)
taskset -c 1 python3 "$ROOT/scripts/parked-requests.py" 26080 "$P" 2000 8 20 33 >"$OUT" 2>&1 &
S=$!
# Opening 2,000 connections (2-3 s), 8 s to settle and 20 s idle, then
# 15 s inside the 20 s trickle.
sleep 33
args=""; for p in $(pids "$T"); do args="$args -p $p"; done
timeout -s INT 15 strace -c -f $args -o "$OUT.strace"
wait $S
stop "$T"; kill $O
cat "$OUT" "$OUT.strace"; rm -f "$OUT" "$OUT.strace"
