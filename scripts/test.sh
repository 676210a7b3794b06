#!/usr/bin/env bash
# Installs what the tests need and runs every test. This is the README's
# test command; CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every temporary file of the run (test directories, etcd data, logs of the
# processes the tests start) lives under one directory that goes when the
# run ends, pass or fail: a machine that runs the suite again and again
# must not fill its disk. Readable by all: peers started as root drop to
# other users and read their configs from it.
TMPDIR="$(mktemp -d "${TMPDIR:-/tmp}/switchyard-tests.XXXXXX")"
chmod 755 "$TMPDIR"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

# openssl: the TLS tests make their certificates with it and handshake with
# `openssl s_client`; aws-lc-sys (rustls' crypto) builds with cmake and gcc.
# h2load (the bench's latency agreement test) and nghttp (tests/h2.rs) come
# from nghttp2-client.
need=()
# etcd and etcdctl (tests/cluster.rs runs cluster nodes on a real etcd)
# come from etcd-server and etcd-client; keepalived moves the VIP of
# tests/vip.rs between network namespaces; bird2 announces it over BGP in
# tests/ecmp.rs. gtlsclient (ngtcp2-client) is tests/http3.rs's second
# QUIC client, with packet loss, key updates and NAT rebinding.
for cmd in wrk curl openssl cmake gcc gzip h2load nghttp etcd etcdctl keepalived bird gtlsclient; do
  case "$cmd" in
    gtlsclient) pkg=ngtcp2-client ;;
    h2load|nghttp) pkg=nghttp2-client ;;
    etcd) pkg=etcd-server ;;
    etcdctl) pkg=etcd-client ;;
    bird) pkg=bird2 ;;
    *) pkg="$cmd" ;;
  esac
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# The shield's XDP program (crates/switchyard/build.rs) is compiled with
# clang against libbpf-dev's headers; tests/xdp.rs floods SYNs with hping3.
for cmd in clang hping3; do command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd"); done
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
# ISA-L's igzip serves gzip level 1 (crates/switchyard/build.rs links it
# when its header is there; compress::isal's tests insist on it then).
[ -f /usr/include/isa-l/igzip_lib.h ] || need+=(libisal-dev)
# Python's jsonschema validates every admin API answer against the OpenAPI
# document (tests/admin_api.rs runs tests/openapi_validate.py). Debian's
# package, not pip: Debian 12's python3 refuses a system-wide pip install.
python3 -c 'import jsonschema' >/dev/null 2>&1 || need+=(python3-jsonschema)
# tests/http3.rs speaks HTTP/3 with aioquic (PyPI only), installed into a
# venv under target/ (kept between runs) with Debian's python3-venv.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The bench's peers (crates/bench/tests/peer_configs.rs checks and starts
# the configs it writes for them) and promtool from Debian's prometheus
# (tests/metrics.rs lints /metrics and the Grafana dashboard's queries
# with it): installed without starting their services; when that fails
# their tests skip and say so.
peers=()
command -v haproxy >/dev/null 2>&1 || peers+=(haproxy)
command -v nginx >/dev/null 2>&1 || peers+=(nginx)
command -v varnishd >/dev/null 2>&1 || peers+=(varnish)
# ModSecurity for nginx: the bench's waf scenario runs nginx+ModSecurity
# with the project's CRS (../shared/crs), not Debian's modsecurity-crs.
[ -e /usr/lib/nginx/modules/ngx_http_modsecurity_module.so ] || peers+=(libnginx-mod-http-modsecurity)
command -v promtool >/dev/null 2>&1 || peers+=(prometheus)
if [ ${#peers[@]} -gt 0 ]; then
  echo "== installing ${peers[*]} (bench peers, promtool)"
  (
    set -e
    made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
      $SUDO chmod +x /usr/sbin/policy-rc.d
      made_policy=1
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${peers[@]}" >/dev/null || status=$?
    if [ "$made_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
    exit "${status:-0}"
  ) || echo "== could not install ${peers[*]}: the tests that use them skip" >&2
fi
# h2spec (HTTP/2 conformance, tests/h2.rs) is a Go program: go install.
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"
if ! command -v h2spec >/dev/null 2>&1; then
  if ! command -v go >/dev/null 2>&1; then
    echo "== installing golang-go"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq golang-go >/dev/null
  fi
  echo "== go install h2spec"
  go install github.com/summerwind/h2spec/cmd/h2spec@latest
fi
export H2SPEC="$(command -v h2spec)"
# pebble and pebble-challtestsrv (tests/acme.rs: a real ACME CA and its
# DNS). v2.10.3 needs Go 1.25 (its go.mod): scripts/go-toolchain.sh finds
# or fetches a Go 1.26 (Debian 12's golang-go is 1.19); when it cannot,
# the ACME tests skip and say so.
if ! command -v pebble >/dev/null 2>&1 || ! command -v pebble-challtestsrv >/dev/null 2>&1; then
  echo "== go install pebble v2.10.3"
  (
    set -e
    gocmd="$(scripts/go-toolchain.sh)"
    export GOTOOLCHAIN=local
    timeout 600 "$gocmd" install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3
    timeout 600 "$gocmd" install github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@v2.10.3
  ) || echo "== could not install pebble: tests/acme.rs skips" >&2
fi
# kube-apiserver v1.37.2 for crates/gateway's tests (a real API server):
# built from Go modules (k8s/apiserver) once per machine into a cache
# directory and reused; when it cannot be built the tests skip and say so.
if k8s_bin="$(scripts/k8s-binaries.sh)"; then
  export SWITCHYARD_K8S_BIN="$k8s_bin"
else
  echo "== could not build kube-apiserver: crates/gateway's API server tests skip" >&2
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install a Rust toolchain (rustup, or Debian's cargo)" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Tests open many sockets; this machine allows 20,000 open files.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# The dashboard's browser test (crates/switchyard/tests/dashboard.rs, run
# by cargo test below) drives Debian's chromium with playwright-core from
# tests/browser (npm ci; no browser download). When they cannot be
# installed the test skips and says so.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "== installing nodejs npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "== installing chromium (dashboard browser test)"
  (
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  ) || echo "== could not install chromium: the dashboard browser test skips" >&2
fi
want_pw=$(node -p 'require("./tests/browser/package-lock.json").packages["node_modules/playwright-core"].version')
have_pw=$(node -p 'require("./tests/browser/node_modules/playwright-core/package.json").version' 2>/dev/null || true)
if [ "$want_pw" != "$have_pw" ]; then
  echo "== npm ci in tests/browser (playwright-core $want_pw)"
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error) \
    || echo "== npm ci in tests/browser failed: the dashboard browser test skips" >&2
fi

AIOQUIC=1.7.2
if ! target/pyvenv/bin/python -c "import aioquic, sys; sys.exit(aioquic.__version__ != '$AIOQUIC')" >/dev/null 2>&1; then
  echo "== aioquic $AIOQUIC into target/pyvenv (HTTP/3 tests)"
  ( rm -rf target/pyvenv && python3 -m venv target/pyvenv \
      && target/pyvenv/bin/pip install -q --disable-pip-version-check "aioquic==$AIOQUIC" ) \
    || echo "== could not install aioquic: the HTTP/3 tests skip" >&2
fi
# tests/websocket.rs runs Hypercorn (an ASGI server that takes WebSocket
# over HTTP/2, RFC 8441) as an h2 member, from the same venv.
HYPERCORN=0.18.0
if [ -x target/pyvenv/bin/python ] && ! target/pyvenv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('hypercorn') != '$HYPERCORN')" >/dev/null 2>&1; then
  echo "== hypercorn $HYPERCORN into target/pyvenv (WebSocket to an h2 member)"
  target/pyvenv/bin/python -m pip install -q --disable-pip-version-check "hypercorn==$HYPERCORN" \
    || echo "== could not install hypercorn: its WebSocket test skips" >&2
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
# The fuzz targets are their own project outside the workspace (cargo-fuzz
# wants that): clippy and the tests above never compile them, so a change
# to an API they call went unseen until the nightly fuzz step at the end
# (twice in one stop). Checked here, on stable, nightly or not.
echo "== cargo check (fuzz targets)"
cargo check --manifest-path fuzz/Cargo.toml --bins
echo "== cargo test"
cargo test --workspace
# The OWASP CRS regression suite (go-ftw YAML, ~4,100 tests) through the
# debug binary cargo test just built, in front of its own echo origin:
# every test passes or is in tests/waf/overrides.yaml with its reason.
# About half a minute. The CRS lives beside the checkout, as for the WAF's
# cargo tests.
if [ -d ../shared/crs/tests/regression ]; then
  echo "== switchyard waf test (CRS regression suite)"
  "${CARGO_TARGET_DIR:-target}/debug/switchyard" waf test \
    --tests ../shared/crs/tests/regression --crs ../shared/crs \
    --overrides tests/waf/overrides.yaml
else
  echo "== CRS regression suite SKIPPED: no ../shared/crs beside the checkout" >&2
fi
# The HTTP cache against the http-tests/cache-tests suite (node 20.18+ for
# its undici client): a required test that passed before must still pass.
if ! command -v node >/dev/null 2>&1; then
  echo "== installing nodejs npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
# The suite lives beside the checkout, as the CRS does: a clone on its own
# skips it (and says so) instead of failing.
if [ ! -d "${CACHE_TESTS_DIR:-../shared/cache-tests}" ]; then
  echo "== cache-tests SKIPPED: no ../shared/cache-tests beside the checkout (or set CACHE_TESTS_DIR)" >&2
elif node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&b>=18)?0:1)'; then
  echo "== cache-tests (RFC 9111 conformance)"
  bash scripts/cache-tests.sh --check
else
  echo "== cache-tests SKIPPED: node $(node --version) is older than 20.18 (the suite's undici needs it)" >&2
fi
# The load generator's agreement with wrk is only meaningful optimised.
echo "== cargo test --release (bench harness)"
cargo test --release -p switchyard-bench

if [ "${SKIP_FUZZ:-0}" != 1 ] && rustup toolchain list 2>/dev/null | grep -q nightly; then
  echo "== fuzzing the parsers (${FUZZ_SECONDS:-20}s per target)"
  if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked -q || cargo install cargo-fuzz -q
  fi
  for t in request_head response_head chunked_body x509_subject h2_flood h2_head h3_head qpack_decode h3_frames proxy_protocol client_hello waf_transform seclang waf_body hpack_decode h2_server; do
    (cd fuzz && cargo +nightly fuzz run "$t" -- -max_total_time="${FUZZ_SECONDS:-20}" -rss_limit_mb=2048 2>&1 | tail -n 40)
  done
else
  echo "== fuzzing skipped (no nightly toolchain or SKIP_FUZZ=1)"
fi
echo "== all tests passed"
