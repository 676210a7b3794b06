#!/bin/bash
# One target (sy, hp = HAProxy 2.8, ng = nginx 1.31) behind an L4 vserver, the
# origin and `switchyard bench load` at a fixed rate on CPU 1, nstat around it.
#   rep.sh TARGET [rate] [duration]; SIZE=128 RPC=1 for l4-cps, CONNS=N,
#   FORTIO=1 for Fortio instead of the harness generator, WARM=5s for a
#   maximum-rate phase first, LB=BIN for another generator build (slow-log.diff).
cd /work/main
B=${SWITCHYARD:-target/release/switchyard}
# The configs of a `switchyard bench compare --targets switchyard,haproxy28,nginx131` run.
W=${W:-/tmp/p33/st/work}
if ss -ltn | grep -qE ":2608[0-9] |:2708[12] "; then echo "rep: ports busy"; ss -ltnp | grep -E ":2608|:2708"; exit 1; fi
RATE=${2:-2250}; DUR=${3:-10s}
taskset -c 1 ${OB:-$B bench} origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
case $1 in
  sy) taskset -c 0 $B run -c ${SYCONF:-$W/switchyard/switchyard.toml} >/tmp/p33/dut.log 2>&1 & P=$! ;;
  ng) eval taskset -c 0 $(cat /tmp/p33/ng131/command) >/tmp/p33/dut.log 2>&1 & P=$! ;;
  hp) taskset -c 0 /opt/switchyard-bench-peers/bin/haproxy28 -db -f $W/haproxy28/haproxy.cfg >/tmp/p33/dut.log 2>&1 & P=$! ;;
esac
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/26081) 2>/dev/null && break; sleep 0.1; done; sleep 0.5
[ -n "${WARM:-}" ] && taskset -c 1 $B bench load --url http://127.0.0.1:26081/size/${WARMSIZE:-524288} --connections 50 --duration ${WARM} --src-ips 127.0.0.1-127.0.0.250 --json --quiet >/dev/null 2>&1
nstat -n >/dev/null
${PRE:-true}
LB=${LB:-$B bench}
if [ -n "${FORTIO:-}" ]; then taskset -c 1 /opt/switchyard-bench-peers/bin/fortio load -qps $RATE -c 50 -t $DUR -json /tmp/p33/fortio.json -quiet http://127.0.0.1:26081/size/524288 >/dev/null 2>&1; python3 -c "import json; d=json.load(open(\"/tmp/p33/fortio.json\")); h=d[\"DurationHistogram\"]; print(\"fortio\", \"$1\", round(d[\"ActualQPS\"]), [(p[\"Percentile\"], round(p[\"Value\"]*1000,2)) for p in h[\"Percentiles\"]], \"max\", round(h[\"Max\"]*1000,1))"; kill $P; kill $O; pkill -f nginx131; sleep 0.3; exit; fi
taskset -c 1 $LB load --url http://127.0.0.1:26081/size/${SIZE:-524288} ${RPC:+--requests-per-conn $RPC} --connections ${CONNS:-50} --duration $DUR --rate $RATE ${SRCIPS---src-ips 127.0.0.1-127.0.0.250} --json --quiet > /tmp/p33/load.json 2>/tmp/p33/slow.log
nstat 2>/dev/null > /tmp/p33/nstat.$1.txt
python3 -c "
import json; d=json.load(open('/tmp/p33/load.json')); l=d['latency']; t=d['ttfb']
print('$1', 'rps', d['rps'], 'p50', l['p50_us'], 'p90', l['p90_us'], 'p99', l['p99_us'], 'p99.9', l['p99_9_us'], 'max', l['max_us'], 'ttfb p99', t['p99_us'], 'gen cpu', round(d['generator_cpu_secs'],2))
"
kill $P 2>/dev/null; wait $P 2>/dev/null; kill $O 2>/dev/null; wait $O 2>/dev/null; pkill -f nginx131; pkill -f "haproxy28 -db"; sleep 0.3
