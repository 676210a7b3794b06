#!/bin/bash
# TCP segments and DUT CPU per request, keep-alive and one request per
# connection (128 B, wrk -c 50 on CPU 1, the DUT on CPU 0), with the configs
# a `switchyard bench compare` run wrote (REPORT_DIR/work). Segments are the
# host's (`nstat`: the load's, the DUT's and the origin's together, all on
# loopback), so they compare DUTs under the same load and origin.
#   scripts/segments-per-request.sh REPORT_DIR/work
# TARGETS="sy hp ng" by default; SWITCHYARD=path picks the binary.
set -u
W=$(realpath "${1:?usage: segments-per-request.sh REPORT_DIR/work}")
B=${SWITCHYARD:-target/release/switchyard}
CONF="$W"
. "$(dirname "$0")/dut-lib.sh"
start_origin
for t in ${TARGETS:-sy hp ng}; do
  for hdr in "X-Bench: 1" "Connection: close"; do
    start "$t"
    nstat -n >/dev/null
    c0=$(sumcpu "$t")
    out=$(taskset -c 1 wrk -t 1 -c 50 -d "${SECONDS_PER_RUN:-4}s" -H "$hdr" http://127.0.0.1:26080/size/128 2>&1)
    c1=$(sumcpu "$t")
    n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
    st=$(nstat 2>/dev/null)
    stop "$t"
    echo "$t [$hdr] requests $n, DUT CPU $(python3 -c "print(round(($c1-$c0)*10000/max(1,${n:-0}),2))") us/request, per request: $(echo "$st" | awk -v n="${n:-1}" '/^(TcpOutSegs|TcpExtTCPPureAcks|TcpActiveOpens) / {printf "%s %.2f  ", $1, $2/n}')"
  done
done
kill $O
