#!/bin/bash
W=/tmp/s48/all/report/work
export PATH=/opt/switchyard-bench-peers/bin:$PATH
taskset -c 1 /work/main/target/release/switchyard-bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
sleep 0.5
sed 's/^master_process on;/master_process off;/' $W/nginx/nginx.conf > /tmp/ng-idle.conf
mkdir -p /tmp/cgidle; rm -f /tmp/cgidle/*
for tgt in ${TGTS:-sy hp28 ng}; do
  out=/tmp/cgidle/cg.$tgt
  case $tgt in
    sy) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out /work/main/target/release/switchyard run -c $W/switchyard/switchyard.toml >/dev/null 2>&1 & P=$!;;
    hp28) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out haproxy28 -db -f $W/haproxy28/haproxy.cfg >/dev/null 2>&1 & P=$!;;
    ng) taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out nginx -c /tmp/ng-idle.conf >/dev/null 2>&1 & P=$!;;
  esac
  for i in $(seq 90); do curl -s -o /dev/null http://127.0.0.1:26080/ && break; sleep 1; done
  sleep 2
  callgrind_control -i on $P >/dev/null
  taskset -c 1 fortio load -qps 100 -c 1 -n ${N:-500} -uniform http://127.0.0.1:26080/ > /dev/null 2>&1
  callgrind_control -i off $P >/dev/null
  kill $P; wait $P 2>/dev/null; sleep 1
  tot=$(cat $out* 2>/dev/null | grep -h "^summary:\|^totals:" | awk '{s+=$2} END {print s}')
  echo "$tgt: $tot instructions, $((tot/${N:-500})) per request"
done
kill $O
