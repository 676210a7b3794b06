#!/bin/bash
# idle.sh QPS SECS: CPU ticks and context switches of each DUT over SECS at QPS (0: no load)
W=/tmp/s48/all/report/work
QPS=$1; SECS=$2
export PATH=/opt/switchyard-bench-peers/bin:$PATH
taskset -c 1 /work/main/target/release/switchyard-bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
sleep 0.5
flt() { local t=0; for p in $(pgrep -P $1) $1; do s=$(cut -d" " -f10 /proc/$p/stat); t=$((t+s)); done; echo $t; }
ns() { local t=0; for p in $(pgrep -P $1) $1; do for tid in /proc/$p/task/*; do v=$(cut -d" " -f1 $tid/schedstat); t=$((t+v)); done; done; echo $t; }
cpu() { # pids -> ticks
  local t=0; for p in $(pgrep -P $1) $1; do s=($(cut -d' ' -f14,15 /proc/$p/stat)); t=$((t+s[0]+s[1])); done; echo $t; }
csw() { local t=0; for p in $(pgrep -P $1) $1; do for tid in /proc/$p/task/*; do v=$(awk '/^voluntary_ctxt/{print $2}' $tid/status); t=$((t+v)); done; done; echo $t; }
for tgt in sy hp28 ng; do
  case $tgt in
    sy) taskset -c 0 /work/main/target/release/switchyard run -c $W/switchyard/switchyard.toml >/dev/null 2>&1 & P=$!;;
    hp28) taskset -c 0 haproxy28 -db -f $W/haproxy28/haproxy.cfg >/dev/null 2>&1 & P=$!;;
    ng) sed 's/^master_process on;/master_process off;/' $W/nginx/nginx.conf > /tmp/ng-idle.conf; taskset -c 0 nginx -c /tmp/ng-idle.conf >/dev/null 2>&1 & P=$!;;
  esac
  sleep 4
  c0=$(cpu $P); s0=$(csw $P); f0=$(flt $P); n0=$(ns $P)
  if [ "$QPS" = 0 ]; then sleep $SECS; else taskset -c 1 fortio load -qps $QPS -c 1 -t ${SECS}s -uniform http://127.0.0.1:26080/ > /tmp/fortio-$tgt.log 2>&1; fi
  c1=$(cpu $P); s1=$(csw $P); f1=$(flt $P); n1=$(ns $P)
  p99=$(grep -o "# target 99% [0-9.]*" /tmp/fortio-$tgt.log 2>/dev/null | awk '{print $4*1000}')
  echo "$tgt qps=$QPS secs=$SECS ticks=$((c1-c0)) wakeups=$((s1-s0)) minflt=$((f1-f0)) cpu_us_per_req=$(( (n1-n0)/1000/(QPS*SECS) )) p99_ms=${p99:-}"
  kill $P; wait $P 2>/dev/null
done
kill $O
