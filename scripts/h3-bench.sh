#!/bin/bash
# Issue 34's `h3` scenario: HTTP/3 against HTTP/2 on the same target in the
# same run, for Switchyard, Caddy 2.6 (quic-go) and Envoy 1.40 (QUICHE), with
# the configs of a `switchyard bench compare` run (REPORT_DIR/work; run it
# with --targets switchyard,caddy,envoy so their command lines are there),
# HTTP/2 and HTTP/3 turned on in copies of them (h2_configs in dut-lib.sh;
# scripts/h3_configs.py says what each target gets and why). The DUT on
# CPU 0, the origin and the load on CPU 1; per round, case, target,
# protocol and load tool: requests/s and the DUT's CPU (utime+stime) per
# request.
#   scripts/h3-bench.sh REPORT_DIR/work [rounds]
# Cases (CASES, default "ka new"):
#   ka   C connections x M streams (20 x 10) for D seconds, SIZE 1 KB and
#        64 KB (SIZES). HTTP/3 load: oha (quinn, --http-version 3) and
#        h3load (bench/peers/h3load, quic-go) as the cross-check; HTTP/2:
#        oha and h2load.
#   p99  a fixed rate (RATE req/s, default 5000) of 1 KB GETs on C x M for
#        D seconds, HTTP/3 against HTTP/2, each protocol by each of
#        P99_TOOLS (default "h3load oha"): h3load -mode rate (quic-go and
#        Go's HTTP/2; connections set up and 2 s at the rate before
#        anything counts) and oha -q --latency-correction, whose P99
#        counts the requests that fell due during its handshakes. Both
#        count latency from when each request was due, not when it left
#        (no coordinated omission): p50 and p99, and h3load's "service"
#        P99 from when a request was sent.
#   new  NEWCONN connections, one 128 B GET each, 10 at a time: HTTP/3 by
#        h3load with a full handshake, a resumed one (session ticket) and
#        a resumed one with the GET in 0-RTT ("resumed" and "early" say
#        how many connections the server took so); HTTP/2 (TCP + TLS 1.3,
#        full handshakes) by h2load, 10 clients at a time.
# Load tools: scripts/install-bench-peers.sh oha h3load.
# nginx 1.31/1.22 and HAProxy 2.6/2.8 here have no HTTP/3 (h3_configs.py):
# they are not targets of this script.
set -u
W=${1:?usage: h3-bench.sh REPORT_DIR/work [rounds]}
ROUNDS=${2:-3}
B=${SWITCHYARD:-target/release/switchyard}
C=${CLIENTS:-20}; M=${STREAMS:-10}; D=${SECONDS_PER_RUN:-8}; NEWCONN=${NEWCONN:-2000}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
HOST=bench.switchyard.test
URL="https://$HOST:26084"
for tool in oha h3load h2load; do
  command -v $tool >/dev/null || { echo "h3-bench: $tool is missing (scripts/install-bench-peers.sh oha h3load; apt-get install nghttp2-client)" >&2; exit 1; }
done
T=$(mktemp -d); T3=$(mktemp -d)
. "$(dirname "$0")/dut-lib.sh"
h2_configs "$W" "$T"
python3 "$(dirname "$0")/h3_configs.py" "$T" "$T3" || exit 1
CONF="$T3"
name() { case $1 in sy) echo switchyard ;; *) echo "$1" ;; esac; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null; }
# One load run; prints "OK RPS ERRORS [EXTRA]". h3load offers X25519
# only, as the harness's other loads do (its -groups says why).
load() { # case proto tool size|mode
  local out
  case "$1 $2 $3" in
  "ka h3 oha"|"ka h2 oha")
    out=$(taskset -c 1 oha --http-version "${2#h}" --insecure --no-tui -c "$C" -p "$M" -z "${D}s" \
          --output-format json --connect-to "$HOST:26084:127.0.0.1:26084" "$URL/size/$4" 2>/dev/null)
    # oha aborts the requests in flight at the deadline: not errors. Its
    # requestsPerSec counts over more than the -z window: the rate is the
    # successes over D.
    echo "$out" | json "d.get('statusCodeDistribution',{}).get('200',0), round(d.get('statusCodeDistribution',{}).get('200',0)/$D), sum(v for k,v in d.get('errorDistribution',{}).items() if 'deadline' not in k)" | tr -d '(),' ;;
  "p99 h3 oha"|"p99 h2 oha")
    out=$(taskset -c 1 oha --http-version "${2#h}" --insecure --no-tui -c "$C" -p "$M" -z "${D}s" \
          -q "$4" --latency-correction \
          --output-format json --connect-to "$HOST:26084:127.0.0.1:26084" "$URL/size/1024" 2>/dev/null)
    echo "$out" | json "d.get('statusCodeDistribution',{}).get('200',0), round(d.get('statusCodeDistribution',{}).get('200',0)/$D), sum(v for k,v in d.get('errorDistribution',{}).items() if 'deadline' not in k), 'p50_ms', round(d['latencyPercentiles']['p50']*1000,3), 'p99_ms', round(d['latencyPercentiles']['p99']*1000,3)" | tr -d "(),'" ;;
  "p99 h3 h3load"|"p99 h2 h3load")
    taskset -c 1 h3load -url "$URL/size/1024" -connect 127.0.0.1:26084 -mode rate -proto "$2" -rate "$4" \
        -c "$C" -m "$M" -d "${D}s" -warmup 2s \
      | json 'd["all_ok"], round(d["rps"]), d["errors"], "p50_ms", round(d["p50_us"]/1000,3), "p99_ms", round(d["p99_us"]/1000,3), "service_p99_ms", round(d["service_p99_us"]/1000,3), "late", d["late"]' | tr -d "(),'" ;;
  "ka h3 h3load")
    taskset -c 1 h3load -url "$URL/size/$4" -connect 127.0.0.1:26084 -mode ka -c "$C" -m "$M" -d "${D}s" \
      | json 'd["ok"], round(d["rps"]), d["errors"]' | tr -d '(),' ;;
  "new h3 h3load")
    taskset -c 1 h3load -url "$URL/size/128" -connect 127.0.0.1:26084 -mode "$4" -n "$NEWCONN" -m 10 \
      | json 'd["ok"], round(d["rps"]), d["errors"], "resumed", d["resumed"], "early", d["early"]' | tr -d '(),' ;;
  "ka h2 h2load"|"new h2 h2load")
    if [ "$1" = ka ]; then
      out=$(taskset -c 1 h2load -c "$C" -m "$M" -D "$D" --warm-up-time=1 --connect-to=127.0.0.1:26084 "$URL/size/$4" 2>&1)
    else
      # h2load's clients each keep one connection: one request per
      # connection is a run of 10 clients x 1 request, repeated.
      ok=0; t0=$(date +%s.%N)
      for _ in $(seq $((NEWCONN / 10))); do
        o=$(taskset -c 1 h2load -c 10 -n 10 --connect-to=127.0.0.1:26084 "$URL/size/128" 2>&1)
        ok=$((ok + $(echo "$o" | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' | head -1)))
      done
      echo "$ok $(python3 -c "import time; print(round($ok/(time.time()-$t0)))") $((NEWCONN - ok))"
      return
    fi
    echo "$(echo "$out" | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' | head -1) $(echo "$out" | sed -n 's/.* \([0-9.]*\) req\/s.*/\1/p' | head -1) $(echo "$out" | sed -n 's/^requests: .* \([0-9]*\) errored.*/\1/p' | head -1)" ;;
  esac
}
start_origin
for round in $(seq "$ROUNDS"); do
for case in ${CASES:-ka new}; do
for t in ${TARGETS:-sy caddy envoy}; do
  if [ "$t" != sy ] && [ ! -f "$CONF/$t/command" ]; then
    echo "round $round $t: skipped (no recorded command line in $W/$t; bench compare --targets ...,$t)"; continue
  fi
  if [ "$case" = ka ]; then
    runs=""; for size in ${SIZES:-1024 65536}; do runs="$runs h3:oha:$size h3:h3load:$size h2:oha:$size h2:h2load:$size"; done
  elif [ "$case" = p99 ]; then
    runs=""; for tool in ${P99_TOOLS:-h3load oha}; do runs="$runs h3:$tool:${RATE:-5000} h2:$tool:${RATE:-5000}"; done
  else
    runs="h3:h3load:new h3:h3load:resume h3:h3load:0rtt h2:h2load:new"
  fi
  for r in $runs; do
    IFS=: read -r proto tool arg <<<"$r"
    # A process left on the port would share its SO_REUSEPORT group (and
    # take some of the datagrams of every connection): refuse to measure.
    if ! python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 26084))' 2>/dev/null; then
      echo "h3-bench: UDP 127.0.0.1:26084 is taken by another process; stop it first" >&2; exit 1
    fi
    start "$t"
    c0=$(sumcpu "$t")
    res=$(load "$case" "$proto" "$tool" "$arg")
    c1=$(sumcpu "$t")
    stop "$t"
    read -r ok rps err extra <<<"$res"
    us=$(python3 -c "print(round(($c1-$c0)*10000/max(1,${ok:-0}),1))")
    case $case in
      ka) what="ka ${C}x$M $arg B" ;;
      p99) what="p99 ${C}x$M $arg req/s 1024 B" ;;
      *) what="new $arg 128 B" ;;
    esac
    echo "round $round $(name "$t") $proto $tool $what: $rps req/s, ${ok:-0} ok, ${err:-?} errors${extra:+, $extra}, DUT CPU $us us/request"
  done
done; done; done
kill $O
rm -rf "$T" "$T3"
