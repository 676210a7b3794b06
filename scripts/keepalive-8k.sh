#!/bin/bash
# 8 KB keep-alive responses, Switchyard vs HAProxy vs nginx with the configs a
# `switchyard bench compare` run wrote (REPORT_DIR/work): closed-loop maximum
# (transactions in 5 s) and DUT CPU ticks for 60,000 requests at RATE req/s.
W=${1:?usage: keepalive-8k.sh REPORT_DIR/work (from a bench compare run)}; B=${SWITCHYARD:-target/release/switchyard}
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
taskset -c 1 $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
sleep 0.3
start() { case $1 in
  sy) taskset -c 0 $B run -c $W/switchyard/switchyard.toml 2>/dev/null & ;;
  hp) taskset -c 0 haproxy -f $W/haproxy/haproxy.cfg 2>/dev/null & ;;
  ng) taskset -c 0 nginx -c $W/nginx/nginx.conf 2>/dev/null & ;;
esac; P=$!; sleep 0.5; }
stop() { if [ $1 = ng ]; then nginx -c $W/nginx/nginx.conf -s stop 2>/dev/null; fi; kill $P 2>/dev/null; wait $P 2>/dev/null; sleep 0.3; }
pids() { if [ $1 = ng ]; then echo "$P $(pgrep -P $P)"; else echo $P; fi; }
sumcpu() { t=0; for p in $(pids $1); do t=$((t+$(cpu $p))); done; echo $t; }
RATE=${RATE:-12000}
for round in 1 2 3; do for t in sy hp ng; do
  start $t
  c0=$(sumcpu $t)
  R=$(taskset -c 1 $B bench load --url http://127.0.0.1:26080/size/8192 --connections 50 --duration 5s --quiet --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("ok") or d.get("transactions_ok") or d.get("steady",{}).get("ok") or json.dumps(d)[:300])')
  c1=$(sumcpu $t)
  c2=$(sumcpu $t)
  R2=$(taskset -c 1 $B bench load --url http://127.0.0.1:26080/size/8192 --connections 50 --duration 5s --rate $RATE --quiet --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("ok") or d.get("transactions_ok") or json.dumps(d)[:300])')
  c3=$(sumcpu $t)
  echo "$t closed-loop ok=$R cpu_ticks=$((c1-c0)) | rate $RATE ok=$R2 cpu_ticks=$((c3-c2))"
  stop $t
done; done
kill $O
