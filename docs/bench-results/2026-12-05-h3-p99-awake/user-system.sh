set -u
cd /work/main
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
W=/tmp/r004/work
T=$(mktemp -d); T3=$(mktemp -d)
. scripts/dut-lib.sh
h2_configs "$W" "$T"
python3 scripts/h3_configs.py "$T" "$T3" >/dev/null || exit 1
CONF="$T3"
B=${B:-/work/main/target/release/switchyard}; start_origin
SIZE=${SIZE:-65536}
for i in $(seq ${ROUNDS:-3}); do for v in 3 2; do
  start sy
  u0=$(cpu $P '$14'); s0=$(cpu $P '$15')
  n=$(taskset -c 1 oha --http-version $v --insecure --no-tui -c 20 -p 10 -z 8s --output-format json --connect-to "bench.switchyard.test:26084:127.0.0.1:26084" "https://bench.switchyard.test:26084/size/$SIZE" 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['statusCodeDistribution'].get('200',0))")
  u1=$(cpu $P '$14'); s1=$(cpu $P '$15')
  stop sy
  python3 -c "n=$n; print('$i h$v', n, 'user us/req %.1f' % (($u1-$u0)*1e4/n), 'sys us/req %.1f' % (($s1-$s0)*1e4/n))"
done; done
kill $O
