# Shared by the benchmark scripts: start, stop and measure one DUT on CPU 0
# with the configs of a `switchyard bench compare` work dir, the origin on
# CPU 1. Source it after setting CONF (the config dir) and B (switchyard).
# cpu PID [FIELDS]: utime+stime in ticks, or one of them ('$14' user, '$15' system).
cpu() { awk "{print ${2:-\$14+\$15}}" /proc/$1/stat 2>/dev/null || echo 0; }
start_origin() { taskset -c 1 $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!; sleep 0.3; }
start() { case $1 in
  sy) taskset -c 0 $B run -c "$CONF"/switchyard/switchyard.toml 2>/dev/null & ;;
  hp) taskset -c 0 haproxy -f "$CONF"/haproxy/haproxy.cfg 2>/dev/null & ;;
  ng) taskset -c 0 nginx -c "$CONF"/nginx/nginx.conf 2>/dev/null & ;;
esac; P=$!; sleep 0.3
  # Every bench config listens on 26080: wait until it accepts (5 s at most).
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/26080) 2>/dev/null && break; sleep 0.1; done; }
stop() { if [ "$1" = ng ]; then nginx -c "$CONF"/nginx/nginx.conf -s stop 2>/dev/null; fi; kill $P 2>/dev/null; wait $P 2>/dev/null; sleep 0.3; }
pids() { if [ "$1" = ng ]; then echo "$P $(pgrep -P $P)"; else echo $P; fi; }
sumcpu() { t=0; for p in $(pids "$1"); do t=$((t+$(cpu $p "${2:-}"))); done; echo $t; }
# Copies the bench configs of $1 (REPORT_DIR/work) to $2 with HTTP/2 turned
# on the TLS listeners (ALPN h2 first) of all three DUTs.
h2_configs() {
  cp -r "$1"/switchyard "$1"/haproxy "$1"/nginx "$2"/
  sed -i 's/^  resumption = true$/  resumption = true\n  alpn = ["h2", "http\/1.1"]/' "$2"/switchyard/switchyard.toml
  sed -i 's/^\(    bind 127.0.0.1:2608[45] ssl .*\)$/\1 alpn h2,http\/1.1/' "$2"/haproxy/haproxy.cfg
  sed -i 's/listen 127.0.0.1:\(2608[45]\) ssl;/listen 127.0.0.1:\1 ssl http2;/' "$2"/nginx/nginx.conf
}
