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
for i in 1 2; do for b in base new; do
  B=/tmp/sy-$b
  start sy
  perf stat -e page-faults,syscalls:sys_enter_madvise,syscalls:sys_enter_brk,syscalls:sys_enter_mmap,syscalls:sys_enter_munmap -p $P -o /tmp/pf.$b.$i sleep 8 &
  PS=$!
  taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -z 8s --output-format json --connect-to "bench.switchyard.test:26084:127.0.0.1:26084" "https://bench.switchyard.test:26084/size/65536" >/dev/null 2>&1
  wait $PS
  stop sy
  echo "$i $b: $(grep -E 'page-faults|madvise|brk|mmap|munmap' /tmp/pf.$b.$i | awk '{printf "%s %s  ", $2, $1}')"
done; done
kill $O
