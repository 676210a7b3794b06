# Shared by the benchmark scripts: start, stop and measure one DUT on CPU 0
# with the configs of a `switchyard bench compare` work dir, the origin on
# CPU 1 (ORIGIN_CPU moves it: 0 keeps the load core for the client alone,
# when the client's own cost differs by protocol). Source it after setting
# CONF (the config dir) and B (switchyard).
# cpu PID [FIELDS]: utime+stime in ticks, or one of them ('$14' user, '$15' system).
cpu() { awk "{print ${2:-\$14+\$15}}" /proc/$1/stat 2>/dev/null || echo 0; }
# It must answer before anything is measured: `switchyard bench` runs the
# switchyard-bench binary beside `$B`, and a copy of the binary alone (an
# A/B with SWITCHYARD=) would measure errors against no origin.
start_origin() { taskset -c "${ORIGIN_CPU:-1}" $B bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!; sleep 0.3
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/27081) 2>/dev/null && return 0; sleep 0.1; done
  echo "the origin ($B bench origin) does not answer on 127.0.0.1:27081: is switchyard-bench beside $B?" >&2; exit 1; }
# Any other target name (haproxy28, nginx131, envoy, pingora, caddy, ...)
# starts with the command line the harness recorded for it in
# "$CONF"/NAME/command, in a session of its own so that stop and pids
# reach every process it forks.
start() { case $1 in
  sy) taskset -c 0 $B run -c "$CONF"/switchyard/switchyard.toml 2>/dev/null & ;;
  hp) taskset -c 0 haproxy -f "$CONF"/haproxy/haproxy.cfg 2>/dev/null & ;;
  ng) taskset -c 0 nginx -c "$CONF"/nginx/nginx.conf 2>/dev/null & ;;
  *) (cd "$CONF/$1" && exec taskset -c 0 setsid sh -c "exec $(cat "$CONF/$1/command")") >/dev/null 2>&1 & ;;
esac; P=$!; sleep 0.3
  # Every bench config listens on 26080: wait until it accepts (5 s at most).
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/26080) 2>/dev/null && break; sleep 0.1; done; }
stop() { case $1 in
  ng) nginx -c "$CONF"/nginx/nginx.conf -s stop 2>/dev/null ;;
  sy|hp) ;;
  *) kill -- $(pgrep -s $P) 2>/dev/null ;;
esac; kill $P 2>/dev/null; wait $P 2>/dev/null; sleep 0.3; }
pids() { case $1 in
  ng) echo "$P $(pgrep -P $P)" ;;
  sy|hp) echo $P ;;
  *) pgrep -s $P ;;
esac; }
# The machine's TCP active opens (connect() calls that reached SYN-SENT).
active_opens() { awk '/^Tcp:/ { if (n++) print $6 }' /proc/net/snmp; }
sumcpu() { t=0; for p in $(pids "$1"); do t=$((t+$(cpu $p "${2:-}"))); done; echo $t; }
# Copies the bench configs of $1 (REPORT_DIR/work) to $2 with HTTP/2 turned
# on the TLS listeners (ALPN h2 first) of every DUT there: Switchyard,
# HAProxy and nginx (any build: haproxy28 and nginx131 have the same
# files), Envoy (alpn_protocols on each TLS context); Caddy offers h2 as
# written; the Pingora peer has no HTTP/2. Recorded command lines are
# pointed at the copies.
h2_configs() {
  for d in "$1"/*/; do cp -r "$d" "$2"/; done
  sed -i 's/^  resumption = true$/  resumption = true\n  alpn = ["h2", "http\/1.1"]/' "$2"/switchyard/switchyard.toml
  for f in "$2"/*/haproxy.cfg; do [ -f "$f" ] && sed -i 's/^\(    bind 127.0.0.1:2608[45] ssl .*\)$/\1 alpn h2,http\/1.1/' "$f"; done
  for f in "$2"/*/nginx.conf; do [ -f "$f" ] && sed -i 's/listen 127.0.0.1:\(2608[45]\) ssl;/listen 127.0.0.1:\1 ssl http2;/' "$f"; done
  for f in "$2"/*/envoy.yaml; do [ -f "$f" ] && sed -i 's/^\( *\)common_tls_context:$/&\n\1  alpn_protocols: ["h2", "http\/1.1"]/' "$f"; done
  for f in "$2"/*/command; do [ -f "$f" ] && sed -i "s#$(realpath "$1")/#$2/#g" "$f"; done
}
# h3_site DIR PORT ORIGIN_PORT: a self-signed certificate for site.test and
# DIR/switchyard.toml, one worker with a TLS vserver on PORT (TCP and
# QUIC, ALPN h2 and http/1.1) in front of an origin on ORIGIN_PORT: the
# single-DUT HTTP/3 scripts' target (h3-callgrind.sh, h3-wire-p99.sh).
h3_site() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=site.test -addext subjectAltName=DNS:site.test \
    -keyout "$1"/key.pem -out "$1"/cert.pem >/dev/null 2>&1 || return 1
  cat > "$1"/switchyard.toml <<TOML
[global]
workers = 1
[[vserver]]
name = "secure"
listen = ["127.0.0.1:$2"]
default_pool = "p"
[vserver.tls]
certificates = [{ cert = "$1/cert.pem", key = "$1/key.pem" }]
alpn = ["h2", "http/1.1"]
[vserver.http3]
[[pool]]
name = "p"
idle_per_member = 256
[[pool.member]]
address = "127.0.0.1:$3"
TOML
}
