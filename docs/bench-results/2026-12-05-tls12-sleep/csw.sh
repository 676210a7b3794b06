set -u
cd /work/main
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
CONF=/tmp/s48/lat4/work
B=/work/main/target/release/switchyard
. scripts/dut-lib.sh
start_origin
csw() { cat /proc/$1/task/*/status | awk '/^voluntary_ctxt/ {v+=$2} /^nonvoluntary/ {n+=$2} END {print v, n}'; }
for r in 1 2; do for t in ${TARGETS:-sy haproxy28}; do
  start $t; p=$(pids $t | awk '{print $1}')
  read v0 n0 <<<"$(csw $p)"; c0=$(sumcpu $t)
  GODEBUG=tlsmlkem=0 taskset -c 1 fortio load -quiet -qps 20000 -c 50 -uniform -t 10s -r 0.00001 -k -json /tmp/s48/f.json https://127.0.0.1:26088/size/128 >/dev/null 2>&1
  read v1 n1 <<<"$(csw $p)"; c1=$(sumcpu $t)
  stop $t
  python3 -c "
import json; d=json.load(open('/tmp/s48/f.json')); h=d['DurationHistogram']; p={x['Percentile']: x['Value']*1e6 for x in h['Percentiles']}
n=h['Count']; print('$r $t', n, 'vol csw/req %.3f' % (($v1-$v0)/n), 'invol %.4f' % (($n1-$n0)/n), 'cpu ticks', $c1-$c0, 'p99 %.0f' % p[99])"
done; done
kill $O
