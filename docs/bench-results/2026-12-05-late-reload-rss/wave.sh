#!/bin/bash
# RSS after a wave of connections ends (does the process give memory back?)
cd /work/main
B=${B:-target/release/switchyard}
W=/tmp/x/wv; rm -rf $W; cp -r /tmp/s52/all/work/switchyard $W
taskset -c 1 $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
taskset -c 0 $B run -c $W/switchyard.toml >/tmp/x/wv.log 2>&1 & P=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/26080) 2>/dev/null && break; sleep 0.2; done
sleep 3
rss() { awk '/VmRSS/ {print $2}' /proc/$P/status; }
echo "idle: $(rss) kB"
ulimit -n 20000
taskset -c 1 wrk -t1 -c ${C:-4000} -d4s ${URL:-http://127.0.0.1:26080/size/16384} >/tmp/x/wrk.out 2>&1 &
W1=$!; sleep 3; echo "during: $(rss) kB"; wait $W1; grep "Requests/sec\|Socket errors" /tmp/x/wrk.out
[ -n "${STRACE:-}" ] && { strace -f -tt -e trace=madvise,munmap -p $P -o /tmp/x/wave.strace 2>/dev/null & S=$!; }
for t in 1 5 12 25; do sleep $((t - ${prev:-0})); prev=$t; echo "after ${t}s: $(rss) kB"; done
[ -n "${STRACE:-}" ] && kill $S
kill $P $O; wait $P 2>/dev/null
