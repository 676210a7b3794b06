#!/bin/bash
# Issue 34's CPU per request, split: how much of the DUT's CPU is the
# receiving side of the packets it sends. On loopback the kernel delivers a
# sent packet to its receiver's socket in the sender's own system call
# (the softirq runs when the send enables bottom halves again), so the
# DUT's stime holds the client's and the origin's receive path: on a
# network that work is done by their machines. For UDP it is large when the
# client does not turn on UDP GRO: a 64 KB HTTP/3 response goes out as one
# GSO batch of ~45 datagrams, and for a socket without GRO the kernel cuts
# it up (skb_segment) and queues and wakes for each datagram, in the DUT's
# call. oha (quinn) turns GRO on; h3load (quic-go) does not; TCP receivers
# take the large segments whole.
#
# Per run: `perf record -C 0 -g` on the DUT's core for the load window, the
# DUT's utime+stime per request (as h3-bench.sh), and the share of the
# DUT's samples under net_rx_action (the receive path, run in its context).
# Prints the DUT CPU per request, the part under net_rx_action, and what is
# left: the DUT's own work, comparable between load tools and protocols.
#
#   scripts/h3-receive-split.sh REPORT_DIR/work [rounds]
#   SIZES="1024 65536" TOOLS="h3:oha h3:h3load h2:oha h2:h2load h2:h3load" TARGETS="sy caddy envoy"
# (h2:h3load: HTTP/2 by h3load -proto h2, Go's client: both protocols by one
# client's code and pace)
# REPORT_DIR/work: a `switchyard bench compare --targets switchyard[,caddy,envoy]`
# run's work folder. Needs perf, oha, h3load, h2load (install-bench-peers.sh).
set -u
W=${1:?usage: h3-receive-split.sh REPORT_DIR/work [rounds]}
ROUNDS=${2:-2}
B=${SWITCHYARD:-target/release/switchyard}
C=${CLIENTS:-20}; M=${STREAMS:-10}; D=${SECONDS_PER_RUN:-6}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
HOST=bench.switchyard.test
URL="https://$HOST:26084"
for tool in perf oha h3load h2load; do
  command -v $tool >/dev/null || { echo "h3-receive-split: $tool is missing" >&2; exit 1; }
done
T=$(mktemp -d); T3=$(mktemp -d); PD=$(mktemp -d)
. "$(dirname "$0")/dut-lib.sh"
h2_configs "$W" "$T"
python3 "$(dirname "$0")/h3_configs.py" "$T" "$T3" >/dev/null || exit 1
CONF="$T3"
# One load run of D seconds; prints the responses that came back whole.
load() { # proto tool size
  case "$2" in
  oha) taskset -c 1 oha --http-version "${1#h}" --insecure --no-tui -c "$C" -p "$M" -z "${D}s" \
         --output-format json --connect-to "$HOST:26084:127.0.0.1:26084" "$URL/size/$3" 2>/dev/null \
       | python3 -c "import json,sys; print(json.load(sys.stdin).get('statusCodeDistribution',{}).get('200',0))" ;;
  h3load) taskset -c 1 h3load -url "$URL/size/$3" -connect 127.0.0.1:26084 -mode ka -proto "$1" -c "$C" -m "$M" -d "${D}s" \
         | python3 -c "import json,sys; print(json.load(sys.stdin)['ok'])" ;;
  h2load) taskset -c 1 h2load -c "$C" -m "$M" -D "$D" --connect-to=127.0.0.1:26084 "$URL/size/$3" 2>&1 \
         | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' | head -1 ;;
  esac
}
# Percentage of all samples on CPU 0 taken in the DUT's processes, in total
# and under net_rx_action (perf's children: the symbol and what it calls).
share() { # perf.data pids
  local pids=${2// /,}
  local all rx
  all=$(perf report -i "$1" --pid "$pids" --percentage absolute --sort pid --stdio 2>/dev/null \
        | awk '/^ +[0-9.]+%/ {gsub("%","",$1); s+=$1} END {print s+0}')
  rx=$(perf report -i "$1" --pid "$pids" --percentage absolute --children --sort sym -g none --stdio 2>/dev/null \
        | awk '/\[k\] net_rx_action$/ {gsub("%","",$1); print $1; exit}')
  echo "$all ${rx:-0}"
}
start_origin
for round in $(seq "$ROUNDS"); do
for t in ${TARGETS:-sy}; do
  if [ "$t" != sy ] && [ ! -f "$CONF/$t/command" ]; then echo "$t: skipped (no command line in $W/$t)"; continue; fi
  for size in ${SIZES:-65536}; do
  for pt in ${TOOLS:-h3:oha h3:h3load h2:oha h2:h2load}; do
    IFS=: read -r proto tool <<<"$pt"
    # A process left on the port would share its SO_REUSEPORT group and
    # take part of every connection's datagrams (as in h3-bench.sh).
    if ! python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 26084))' 2>/dev/null; then
      echo "h3-receive-split: UDP 127.0.0.1:26084 is taken by another process; stop it first" >&2; exit 1
    fi
    start "$t"; sleep 1
    perf record -q -C 0 -g -o "$PD/perf.data" 2>/dev/null & R=$!
    c0=$(sumcpu "$t")
    ok=$(load "$proto" "$tool" "$size")
    c1=$(sumcpu "$t")
    kill -INT $R; wait $R 2>/dev/null
    read -r all rx <<<"$(share "$PD/perf.data" "$(pids "$t")")"
    stop "$t"
    python3 - "$round" "$t" "$proto" "$tool" "$size" "${ok:-0}" "$c0" "$c1" "$all" "$rx" <<'EOF'
import sys
r, t, proto, tool, size, ok, c0, c1, allp, rxp = sys.argv[1:]
ok = int(ok or 0); ticks = int(c1) - int(c0); allp = float(allp); rxp = float(rxp)
us = ticks * 10000 / max(1, ok)
part = rxp / allp if allp else 0.0
print(f"round {r} {t} {proto} {tool} {size} B: {ok} ok, DUT CPU {us:.1f} us/request, "
      f"of which receivers' path (net_rx_action) {us*part:.1f} ({100*part:.0f} % of the DUT's samples), "
      f"own {us*(1-part):.1f} us/request")
EOF
  done; done
done; done
kill $O
rm -rf "$T" "$T3" "$PD"
