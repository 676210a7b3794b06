#!/bin/bash
# Issue 34's CPU per request with the client's receive path on the client's
# core, as it is when the client is another machine. On loopback the kernel
# delivers a sent packet to its receiver's socket in the sender's system
# call, so the DUT's CPU held the client's receive path too; quic-go
# (h3load) does not turn on UDP GRO, and the kernel cuts each 64 KB GSO
# batch into ~45 datagrams for it in the DUT's sendmsg
# (scripts/h3-receive-split.sh measured that share with perf and took it
# out; this script moves it instead).
#
# Two network namespaces that this script creates and removes: "dut" (the
# DUT on CPU 0, the origin on CPU 1, on its loopback) and "cli" (the load
# tool on CPU 1), joined by a veth pair with addresses inside them only.
# Receive Packet Steering sends what arrives on the client's end of the
# pair to CPU 1 and what arrives on the DUT's end to CPU 0: each side's
# receive path runs on its own core, as a NIC's interrupt would. The DUT's
# CPU is then CPU 0's busy time (user, system, irq and softirq from
# /proc/stat; nothing else runs there), which also counts the softirq work
# on the DUT's behalf that lands between its system calls; the DUT's own
# utime+stime is printed beside it.
#
#   scripts/h3-veth-cpu.sh REPORT_DIR/work [rounds]
#   SIZES="1024 65536" TOOLS="h3:oha h3:h3load h2:oha h2:h2load h2:h3load"
#   TARGETS="sy caddy envoy" (default sy)
#   SIZES=new: a new connection per request instead (NEWCONN, 2,000):
#   h3load full, resumed and 0-RTT handshakes (EARLY_DATA=1 for 0-RTT),
#   h2load full ones; NEW_RUNS picks among them ("h3:new h3:resume
#   h3:0rtt h2:h2load-new"), so that short rounds alternate the targets
#   closely on a machine whose speed drifts.
#   TARGETS may name sy-b: the build SWITCHYARD_B, for an A/B of two
#   builds interleaved in one run.
# (h2:h3load is HTTP/2 by h3load -proto h2, Go's client: both protocols by
# one client's code). The configs of a `switchyard bench compare` work dir
# (--targets switchyard,caddy,envoy for the peers) with HTTP/2 and HTTP/3
# turned on (h2_configs, h3_configs.py), each target's RSA TLS vserver
# moved to the veth address. Needs root (ip netns), oha, h3load and h2load
# (install-bench-peers.sh).
set -u
W=${1:?usage: h3-veth-cpu.sh REPORT_DIR/work [rounds]}
ROUNDS=${2:-2}
B=${SWITCHYARD:-target/release/switchyard}
C=${CLIENTS:-20}; M=${STREAMS:-10}; D=${SECONDS_PER_RUN:-6}; NEWCONN=${NEWCONN:-2000}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
HOST=bench.switchyard.test
NS_DUT=sy-veth-dut-$$; NS_CLI=sy-veth-cli-$$
DUT_IP=10.99.0.1; CLI_IP=10.99.0.2
URL="https://$HOST:26084"
for tool in ip oha h3load h2load; do
  command -v $tool >/dev/null || { echo "h3-veth-cpu: $tool is missing (install-bench-peers.sh oha h3load; apt-get install nghttp2-client iproute2)" >&2; exit 1; }
done
[ -x "$B" ] || { echo "h3-veth-cpu: no binary at $B (cargo build --release -p switchyard)" >&2; exit 1; }
# Everything but the DUT on the load's core, this script's own helpers
# (ip netns exec, the JSON readers) too: CPU 0's time is the figure.
taskset -cp 1 $$ >/dev/null || { echo "h3-veth-cpu: taskset failed" >&2; exit 1; }
T=$(mktemp -d); T3=$(mktemp -d)
. "$(dirname "$0")/dut-lib.sh"
h2_configs "$W" "$T"
python3 "$(dirname "$0")/h3_configs.py" "$T" "$T3" >/dev/null || exit 1
# Each target's RSA TLS vserver (TCP and UDP 26084) moves to the veth
# address; the rest of its config stays on the namespace's loopback.
python3 - "$T3" "$DUT_IP" <<'PY' || exit 1
import re, sys
conf, ip = sys.argv[1], sys.argv[2]
def edit(rel, old, new, count):
    path = f"{conf}/{rel}"
    try:
        text = open(path).read()
    except FileNotFoundError:
        return
    out, n = re.subn(old, new, text)
    if n != count:
        sys.exit(f"h3-veth-cpu: {path}: {n} of {count} places for the veth address")
    open(path, "w").write(out)
edit("switchyard/switchyard.toml", r'"127\.0\.0\.1:26084"', f'"{ip}:26084"', 1)
# Caddy: the bind line of the 26084 site.
edit("caddy/Caddyfile", r"(https://bench\.switchyard\.test:26084 \{\n\s*bind) 127\.0\.0\.1", rf"\1 {ip}", 1)
# Envoy: the TCP listener and the UDP one h3_configs.py added.
edit("envoy/envoy.yaml", r'address: "127\.0\.0\.1", port_value: 26084', f'address: "{ip}", port_value: 26084', 2)
PY
for t in ${TARGETS:-sy}; do
  [ "$t" = sy ] || [ "$t" = sy-b ] || [ -f "$T3/$t/command" ] || { echo "h3-veth-cpu: no $t in $W (bench compare --targets switchyard,caddy,envoy)" >&2; exit 1; }
done
in_dut() { ip netns exec "$NS_DUT" "$@"; }
in_cli() { ip netns exec "$NS_CLI" "$@"; }
# One target at a time in the DUT's namespace on CPU 0; a peer in a
# session of its own (its recorded command line, as dut-lib's start), so
# that stopping and counting reach every process it forks. Not through
# in_dut: the function's subshell would be $!, and killing it would leave
# the target behind.
target_start() {
  if [ "$1" = sy ] || [ "$1" = sy-b ]; then
    local bin=$B
    [ "$1" = sy-b ] && bin=${SWITCHYARD_B:?TARGETS has sy-b: set SWITCHYARD_B to the second build}
    ip netns exec "$NS_DUT" taskset -c 0 "$bin" run -c "$T3/switchyard/switchyard.toml" >"$T/dut.log" 2>&1 &
  else
    (cd "$T3/$1" && exec ip netns exec "$NS_DUT" taskset -c 0 setsid sh -c "exec $(cat "$T3/$1/command")") >"$T/dut.log" 2>&1 &
  fi
  P=$!
}
target_pids() { case $TARGET in sy|sy-b) echo "$P" ;; *) pgrep -s "$P" ;; esac; }
target_stop() {
  [ -n "${P:-}" ] || return 0
  kill $(target_pids) 2>/dev/null
  wait "$P" 2>/dev/null
  P=""
}
cleanup() {
  target_stop
  [ -n "${O:-}" ] && kill "$O" 2>/dev/null
  wait 2>/dev/null
  ip netns del "$NS_DUT" 2>/dev/null; ip netns del "$NS_CLI" 2>/dev/null
  rm -rf "$T" "$T3"
}
trap cleanup EXIT
ip netns add "$NS_DUT" && ip netns add "$NS_CLI" || { echo "h3-veth-cpu: ip netns add failed (root?)" >&2; exit 1; }
in_dut ip link set lo up
in_cli ip link set lo up
ip link add vd$$ netns "$NS_DUT" type veth peer name vc$$ netns "$NS_CLI" || exit 1
in_dut ip addr add $DUT_IP/30 dev vd$$
in_cli ip addr add $CLI_IP/30 dev vc$$
in_dut ip link set vd$$ up
in_cli ip link set vc$$ up
# Each end's receive path on its own side's core (bit 0: CPU 0, bit 1: CPU 1).
in_dut sh -c "echo 1 > /sys/class/net/vd$$/queues/rx-0/rps_cpus" || { echo "h3-veth-cpu: no RPS on this kernel" >&2; exit 1; }
in_cli sh -c "echo 2 > /sys/class/net/vc$$/queues/rx-0/rps_cpus" || exit 1
# The origin beside the DUT, on the load's core as in h3-bench.sh.
# Not through in_dut: the function's subshell would be $!, and killing it
# would leave the process behind.
ip netns exec "$NS_DUT" taskset -c 1 "$B" bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 &
O=$!
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null; }
# CPU 0's busy ticks: user, nice, system, irq, softirq, steal.
cpu0() { awk '$1 == "cpu0" { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
dut_ticks() {
  local t=0 p
  for p in $(target_pids); do t=$((t + $(awk '{print $14 + $15}' /proc/"$p"/stat 2>/dev/null || echo 0))); done
  echo $t
}
# One load run from the client's namespace: prints "OK".
load() { # proto tool size
  case "$1 $2" in
  "h3 oha"|"h2 oha")
    in_cli taskset -c 1 oha --http-version "${1#h}" --insecure --no-tui -c "$C" -p "$M" -z "${D}s" \
        --output-format json --connect-to "$HOST:26084:$DUT_IP:26084" "$URL/size/$3" 2>/dev/null \
      | json "d.get('statusCodeDistribution',{}).get('200',0)" ;;
  "h3 h3load"|"h2 h3load")
    in_cli taskset -c 1 h3load -url "$URL/size/$3" -connect $DUT_IP:26084 -mode ka -proto "$1" -c "$C" -m "$M" -d "${D}s" \
      | json 'd["ok"]' ;;
  "h2 h2load")
    in_cli taskset -c 1 h2load -c "$C" -m "$M" -D "$D" --warm-up-time=1 --connect-to=$DUT_IP:26084 "$URL/size/$3" 2>&1 \
      | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' | head -1 ;;
  # A new connection per request (SIZES "new"): NEWCONN connections, one
  # 128 B GET each, 10 at a time, as h3-bench.sh's `new` case.
  "h3 new"|"h3 resume"|"h3 0rtt")
    in_cli taskset -c 1 h3load -url "$URL/size/128" -connect $DUT_IP:26084 -mode "$2" -n "$NEWCONN" -m 10 \
      | json 'd["ok"], "resumed", d["resumed"], "early", d["early"]' | tr -d "(),'" ;;
  "h2 h2load-new")
    # h2load's clients each keep one connection: runs of 10 clients x 1
    # request, repeated.
    local ok=0 o
    for _ in $(seq $((NEWCONN / 10))); do
      o=$(in_cli taskset -c 1 h2load -c 10 -n 10 --connect-to=$DUT_IP:26084 "$URL/size/128" 2>&1 \
        | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' | head -1)
      ok=$((ok + ${o:-0}))
    done
    echo $ok ;;
  esac
}
# The runs of a size: the TOOLS, or for "new" the handshakes (full,
# resumed with a ticket, resumed with the GET in 0-RTT; EARLY_DATA=1 turns
# 0-RTT on in every target's config, h3_configs.py) and HTTP/2's full ones.
runs_for() {
  if [ "$1" = new ]; then echo "${NEW_RUNS:-h3:new h3:resume h3:0rtt h2:h2load-new}"; else echo "${TOOLS:-h3:oha h3:h3load h2:oha h2:h2load h2:h3load}"; fi
}
for round in $(seq "$ROUNDS"); do
  for TARGET in ${TARGETS:-sy}; do
    for size in ${SIZES:-1024 65536}; do
      for r in $(runs_for "$size"); do
        IFS=: read -r proto tool <<<"$r"
        target_start "$TARGET"
        up=0
        for _ in $(seq 100); do
          in_cli bash -c "exec 3<>/dev/tcp/$DUT_IP/26084" 2>/dev/null && in_dut bash -c "exec 3<>/dev/tcp/127.0.0.1/27081" 2>/dev/null && { up=1; break; }
          sleep 0.1
        done
        [ $up = 1 ] || { echo "h3-veth-cpu: $TARGET or the origin did not start ($T/dut.log)" >&2; exit 1; }
        # The UDP listener comes up beside the TCP one.
        sleep 1
        c0=$(cpu0); d0=$(dut_ticks)
        read -r ok extra <<<"$(load "$proto" "$tool" "$size")"
        c1=$(cpu0); d1=$(dut_ticks)
        target_stop
        # The next run binds the same ports.
        sleep 0.3
        # CPU 0 beyond the DUT's own time is the softirq work between its
        # calls (up to 11 % in quiet runs), or another process on CPU 0: a
        # run where it is over a quarter is flagged and not a result.
        echo "round $round $TARGET $proto $tool $size B: ${ok:-0} ok${extra:+ ($extra)}, $(python3 -c "
ok, hz = max(1, ${ok:-0}), $(getconf CLK_TCK)
core, dut = ($c1 - $c0) * 1e6 / hz / ok, ($d1 - $d0) * 1e6 / hz / ok
flag = ' (invalid: CPU 0 busy beyond the DUT by over a quarter, another process ran there)' if core > 0 and core - dut > core / 4 else ''
print(f'CPU 0 {core:.1f} us/request, the DUT\\'s utime+stime {dut:.1f}{flag}')")"
      done
    done
  done
done
