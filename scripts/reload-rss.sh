#!/bin/bash
# RSS of one switchyard process over reloads that compile its rule set
# again: the bench's configuration (REPORT_DIR/work/switchyard: the CRS on
# two WAF vservers), an `after` exclusion file on both WAF vservers that
# changes before each SIGHUP (SecRuleRemoveById 920350 and 920351 in turn),
# as an operator's exclusion edit does. VmRSS 4 s after the start and GAP
# seconds after each of N reloads (GAP above 10 s lets runtime/trim.rs's
# tick run between them).
#   scripts/reload-rss.sh REPORT_DIR/work      (N=10 GAP=12)
set -u
W=${1:?usage: reload-rss.sh REPORT_DIR/work}
B=${SWITCHYARD:-target/release/switchyard}
C=$(mktemp -d)
cp -r "$W"/switchyard/. "$C"/
echo "SecRuleRemoveById 920350" > "$C"/excl.conf
sed -i "s|^  paranoia = 1$|  paranoia = 1\n  after = [\"$C/excl.conf\"]|" "$C"/switchyard.toml
grep -q "excl.conf" "$C"/switchyard.toml || { echo "reload-rss: no WAF vserver with paranoia = 1 in $W/switchyard" >&2; exit 1; }
taskset -c 0 "$B" run -c "$C"/switchyard.toml >"$C"/log 2>&1 & P=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/26080) 2>/dev/null && break; sleep 0.2; done
sleep 4
rss() { awk '/VmRSS/ {print $2}' /proc/$P/status; }
echo "start: $(rss) kB"
for i in $(seq "${N:-10}"); do
  echo "SecRuleRemoveById $((920350 + i % 2))" > "$C"/excl.conf
  kill -HUP $P; sleep "${GAP:-12}"
  echo "reload $i ($(cat "$C"/excl.conf)): $(rss) kB"
done
grep "is live\|error\|refused" "$C"/log | tail -3
kill $P; wait $P 2>/dev/null
rm -rf "$C"
