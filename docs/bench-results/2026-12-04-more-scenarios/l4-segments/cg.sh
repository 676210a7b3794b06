#!/bin/bash
# user-space instructions per L4 connection: cg.sh TARGET N
cd /work/main
CONF=/tmp/q33/out/work; B=${B:-/work/main/target/release/switchyard}
export PATH=/opt/switchyard-bench-peers/bin:$PATH
taskset -c 1 $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
sleep 0.3
ir() {
  out=/tmp/l4s/cg.$1.$2.$$; rm -f $out*
  case $1 in
    sy) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out $B run -c $CONF/switchyard/switchyard.toml >/dev/null 2>&1 & ;;
    haproxy28) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out haproxy28 -db -f $CONF/haproxy28/haproxy.cfg >/dev/null 2>&1 & ;;
  esac
  P=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/26081) 2>/dev/null && break; sleep 0.2; done
  sleep 1
  callgrind_control -i on $P >/dev/null 2>&1
  taskset -c 1 h2load --h1 -c 10 -n $2 -H 'Connection: close' http://127.0.0.1:26081/size/128 2>&1 | grep "^requests:" >&2
  callgrind_control -i off $P >/dev/null 2>&1
  kill -TERM $P; wait $P 2>/dev/null
  cat $out* | awk '/^totals:/ {t+=$2} /^summary:/ {s+=$2} END {print (t ? t : s)+0}'
  [ -n "${KEEP:-}" ] || rm -f $out*
}
N=$2
a=$(ir $1 $N); b=$(ir $1 $((2*N)))
echo "$1: $(python3 -c "print(round(($b-$a)/$N))") instructions/connection (N=$N: $a; 2N: $b)"
kill $O
