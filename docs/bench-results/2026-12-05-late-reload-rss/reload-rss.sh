#!/bin/bash
# RSS of a switchyard process over reloads that change its WAF (paranoia
# 1 <-> 2 on both WAF vservers: a new rule program each time).
B=${B:-/work/main/target/release/switchyard}
W=/tmp/x/rr; rm -rf $W; cp -r /tmp/s52/all/work/switchyard $W
# An `after` exclusion file on both WAF vservers, changed on every reload:
# the rule set is compiled again each time (a new engine), as an
# operator's exclusion edit does.
echo "SecRuleRemoveById 920350" > $W/excl.conf
sed -i "s|^  paranoia = 1$|  paranoia = 1\n  after = [\"$W/excl.conf\"]|" $W/switchyard.toml
taskset -c 0 $B run -c $W/switchyard.toml >/tmp/x/rr.log 2>&1 & P=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/26080) 2>/dev/null && break; sleep 0.2; done
sleep 4
rss() { awk '/VmRSS/ {print $2}' /proc/$P/status; }
echo "start: $(rss) kB"
for i in $(seq ${N:-10}); do
  echo "SecRuleRemoveById $((920350 + i % 2))" > $W/excl.conf
  kill -HUP $P; sleep ${GAP:-4}
  echo "reload $i ($(cat $W/excl.conf)): $(rss) kB"
done
grep "is live\|error\|refused" /tmp/x/rr.log | tail -4
kill $P; wait $P
