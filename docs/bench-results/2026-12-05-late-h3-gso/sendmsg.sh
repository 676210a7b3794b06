#!/bin/bash
# sendmsg calls of the DUT per 64 KB HTTP/3 response, oha against h3load
cd /work/main
W=/tmp/s52/all/work; B=${B:-/tmp/x/gso/switchyard}
export PATH="/opt/switchyard-bench-peers/bin:$PATH"
T=$(mktemp -d); T3=$(mktemp -d)
. scripts/dut-lib.sh
h2_configs "$W" "$T"; python3 scripts/h3_configs.py "$T" "$T3" >/dev/null || exit 1
CONF=$T3
start_origin
HOST=bench.switchyard.test; URL="https://$HOST:26084"
for tool in oha h3load; do
  start sy
  bpftrace -e "tracepoint:syscalls:sys_enter_sendmsg /pid == $P/ { @s = count(); } tracepoint:syscalls:sys_exit_sendmsg /pid == $P/ { @bytes = sum(args->ret); } tracepoint:syscalls:sys_enter_recvmmsg /pid == $P/ { @r = count(); } tracepoint:syscalls:sys_exit_recvmmsg /pid == $P && args->ret > 0/ { @dgrams = sum(args->ret); } tracepoint:udp:udp_fail_queue_rcv_skb { @drops = count(); }" > /tmp/x/bt.$tool 2>&1 & S=$!
  sleep 3
  case $tool in
    oha) ok=$(taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -z 5s --output-format json --connect-to "$HOST:26084:127.0.0.1:26084" "$URL/size/65536" 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['statusCodeDistribution']['200'])") ;;
    h3load) ok=$(taskset -c 1 h3load -url "$URL/size/65536" -connect 127.0.0.1:26084 -mode ka -c 20 -m 10 -d 5s | python3 -c "import json,sys; print(json.load(sys.stdin)['ok'])") ;;
  esac
  kill -INT $S; wait $S
  stop sy
  echo "$tool: $ok responses"; python3 - $ok /tmp/x/bt.$tool <<'PY'
import sys,re
ok=int(sys.argv[1]); t=open(sys.argv[2]).read()
v={m.group(1):int(m.group(2)) for m in re.finditer(r'@(\w+): (\d+)',t)}
print({k: round(x/ok,2) for k,x in v.items()}, 'bytes per sendmsg', round(v.get('bytes',0)/max(1,v.get('s',1))))
PY
done
kill $O; rm -rf $T $T3
