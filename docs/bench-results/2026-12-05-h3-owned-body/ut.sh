set -u
cd /work/main
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
W=/tmp/r004/work
T=$(mktemp -d); T3=$(mktemp -d)
. scripts/dut-lib.sh
h2_configs "$W" "$T"
python3 scripts/h3_configs.py "$T" "$T3" >/dev/null || exit 1
CONF="$T3"
B=/tmp/sy-base; start_origin
for i in 1 2 3 4 5 6; do for b in base new; do
  B=/tmp/sy-$b
  start sy
  u0=$(cpu $P '$14'); s0=$(cpu $P '$15')
  n=$(taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -z 8s --output-format json --connect-to "bench.switchyard.test:26084:127.0.0.1:26084" "https://bench.switchyard.test:26084/size/65536" 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['statusCodeDistribution'].get('200',0))")
  u1=$(cpu $P '$14'); s1=$(cpu $P '$15')
  stop sy
  python3 -c "n=$n; print('$i $b', n, 'user us/req %.1f' % (($u1-$u0)*1e4/n), 'sys us/req %.1f' % (($s1-$s0)*1e4/n))"
done; done
kill $O
