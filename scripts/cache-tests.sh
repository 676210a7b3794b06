#!/usr/bin/env bash
# HTTP cache conformance: the http-tests/cache-tests suite (cache-tests.fyi)
# through Switchyard (or, for a sanity check, through nginx proxy_cache).
#
#   scripts/cache-tests.sh [--check | --update] [--peer nginx] [--id TEST-ID]
#
#   (none)       run the suite, print the score and the failing tests
#   --check      ... and exit 1 when a required test listed in
#                tests/cache-tests/baseline.json no longer passes
#   --update     ... and rewrite tests/cache-tests/baseline.json and docs/cache-tests.md
#   --peer nginx run against nginx (scripts/cache-tests/nginx.conf) instead of
#                Switchyard; results in target/cache-tests/results-nginx.json
#   --id ID      run one test and show its requests and responses
#
# Environment: SWITCHYARD_BIN (default target/debug/switchyard, which the
# caller builds: cargo build -p switchyard), CACHE_TESTS_DIR (the suite,
# default ../shared/cache-tests from the repo root), CACHE_TOML (a file whose
# contents replace the `# CACHE` line of scripts/cache-tests/switchyard.toml),
# CACHE_TESTS_TIMEOUT (seconds for the whole client run, default 300).
#
# The suite is copied to target/cache-tests/suite and its runtime dependencies
# are installed from tests/cache-tests/package-lock.json with `npm ci` into
# target/cache-tests/node_modules. Everything listens on 127.0.0.1 only; every
# process started here is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HARNESS=$ROOT/tests/cache-tests
WORK=$ROOT/target/cache-tests
SUITE_SRC=${CACHE_TESTS_DIR:-$ROOT/../shared/cache-tests}
BIN=${SWITCHYARD_BIN:-$ROOT/target/debug/switchyard}
RUN_TIMEOUT=${CACHE_TESTS_TIMEOUT:-300}

MODE=run PEER=switchyard TEST_ID=
while [ $# -gt 0 ]; do
  case $1 in
    --check) MODE=check ;;
    --update) MODE=update ;;
    --peer) [ $# -ge 2 ] || { echo "--peer needs a name (nginx)" >&2; exit 2; }; PEER=$2; shift ;;
    --peer=*) PEER=${1#--peer=} ;;
    --id) [ $# -ge 2 ] || { echo "--id needs a test id" >&2; exit 2; }; TEST_ID=$2; shift ;;
    --id=*) TEST_ID=${1#--id=} ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $PEER in switchyard|nginx) ;; *) echo "unknown peer: $PEER (switchyard, nginx)" >&2; exit 2 ;; esac
if [ "$PEER" != switchyard ] && [ "$MODE" != run ]; then
  echo "--check/--update apply to Switchyard only, not to --peer $PEER" >&2; exit 2
fi
if [ -n "$TEST_ID" ] && [ "$MODE" != run ]; then
  echo "--id runs one test; it does not go with --check/--update" >&2; exit 2
fi

command -v node >/dev/null || { echo "node is required (>= 20.18.1)" >&2; exit 2; }
command -v npm >/dev/null || { echo "npm is required" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is required" >&2; exit 2; }
[ -f "$SUITE_SRC/tests/index.mjs" ] || { echo "cache-tests suite not found at $SUITE_SRC (set CACHE_TESTS_DIR)" >&2; exit 2; }
if [ "$PEER" = switchyard ]; then
  [ -x "$BIN" ] || { echo "$BIN not found: build it first (cargo build -p switchyard) or set SWITCHYARD_BIN" >&2; exit 2; }
else
  command -v nginx >/dev/null || { echo "nginx not installed" >&2; exit 2; }
fi

# --- processes: every one started is recorded and stopped on exit ----------
PIDS=()
cleanup() {
  local pid i
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })'
}

# wait_http NAME PID URL: until URL answers anything over HTTP (10 s at most).
wait_http() {
  local i
  for i in $(seq 100); do
    kill -0 "$2" 2>/dev/null || { echo "$1 exited during start-up; see its log in $WORK" >&2; return 1; }
    if curl -s -o /dev/null -m 1 "$3"; then return 0; fi
    sleep 0.1
  done
  echo "$1 did not answer $3 within 10 s" >&2
  return 1
}

# --- the suite and its dependencies ------------------------------------------
mkdir -p "$WORK"
rm -rf "$WORK/suite"
cp -R "$SUITE_SRC" "$WORK/suite"
chmod -R u+w "$WORK/suite"
rm -rf "$WORK/suite/node_modules"   # ours are one level up, from our lockfile

LOCKSUM=$(cat "$HARNESS/package.json" "$HARNESS/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ ! -d "$WORK/node_modules" ] || [ "$(cat "$WORK/.lock.sha256" 2>/dev/null)" != "$LOCKSUM" ]; then
  cp "$HARNESS/package.json" "$HARNESS/package-lock.json" "$WORK/"
  echo "npm ci (tests/cache-tests/package-lock.json) in $WORK" >&2
  (cd "$WORK" && timeout 180 npm ci --no-audit --no-fund --omit=dev --loglevel=error) >&2
  echo "$LOCKSUM" > "$WORK/.lock.sha256"
fi

# --- origin server -----------------------------------------------------------
ORIGIN_PORT=$(free_port)
(cd "$WORK/suite" && exec env npm_config_protocol=http npm_config_port="$ORIGIN_PORT" \
  npm_config_pidfile="$WORK/origin.pid" \
  node --import "file://$HARNESS/loopback.mjs" test-engine/server/server.mjs) \
  > "$WORK/origin.log" 2>&1 &
PIDS+=($!)
wait_http "origin server" "${PIDS[-1]}" "http://127.0.0.1:$ORIGIN_PORT/"

# --- the proxy -----------------------------------------------------------------
PROXY_PORT=$(free_port)
if [ "$PEER" = switchyard ]; then
  CONF=$WORK/switchyard.toml
  sed -e "s/@PROXY_PORT@/$PROXY_PORT/g" -e "s/@ORIGIN_PORT@/$ORIGIN_PORT/g" \
    "$ROOT/scripts/cache-tests/switchyard.toml" > "$CONF.tmp"
  if [ -n "${CACHE_TOML:-}" ]; then
    [ -f "$CACHE_TOML" ] || { echo "CACHE_TOML=$CACHE_TOML: no such file" >&2; exit 2; }
    awk -v f="$CACHE_TOML" '$0 == "# CACHE" { while ((getline l < f) > 0) print l; next } { print }' "$CONF.tmp" > "$CONF"
    rm -f "$CONF.tmp"
  else
    mv "$CONF.tmp" "$CONF"
  fi
  "$BIN" check -c "$CONF" >&2
  "$BIN" run -c "$CONF" > "$WORK/switchyard.log" 2>&1 &
  PIDS+=($!)
  LABEL="switchyard ($("$BIN" version 2>/dev/null | head -n1 || echo "$BIN"))"
  RESULTS=$WORK/results.json
else
  NGX=$WORK/nginx
  rm -rf "$NGX"; mkdir -p "$NGX/cache"
  sed -e "s#@WORK@#$NGX#g" -e "s/@PROXY_PORT@/$PROXY_PORT/g" -e "s/@ORIGIN_PORT@/$ORIGIN_PORT/g" \
    "$ROOT/scripts/cache-tests/nginx.conf" > "$NGX/nginx.conf"
  nginx -t -q -p "$NGX" -c "$NGX/nginx.conf" -e "$NGX/error.log" >&2
  nginx -p "$NGX" -c "$NGX/nginx.conf" -e "$NGX/error.log" > "$WORK/nginx.log" 2>&1 &
  PIDS+=($!)
  LABEL="nginx peer ($(nginx -v 2>&1 | sed 's/^nginx version: //'), proxy_cache)"
  RESULTS=$WORK/results-nginx.json
fi
wait_http "$PEER" "${PIDS[-1]}" "http://127.0.0.1:$PROXY_PORT/"
echo "origin 127.0.0.1:$ORIGIN_PORT, $PEER 127.0.0.1:$PROXY_PORT" >&2

# --- the client ------------------------------------------------------------------
cd "$WORK/suite"
if [ -n "$TEST_ID" ]; then
  npm_config_base="http://127.0.0.1:$PROXY_PORT" npm_config_id="$TEST_ID" \
    timeout --foreground 60 node --no-warnings test-engine/cli.mjs
  exit $?
fi

echo "running the suite through $PEER (at most ${RUN_TIMEOUT}s)..." >&2
START=$(date +%s)
rc=0
# In the background and waited for, so that a signal to this script runs the
# trap at once (bash defers traps until a foreground command ends).
npm_config_base="http://127.0.0.1:$PROXY_PORT" npm_config_id="" npm_package_config_id="" \
  timeout "$RUN_TIMEOUT" node --no-warnings test-engine/cli.mjs > "$RESULTS.tmp" 2> "$WORK/cli.log" &
PIDS+=($!)
wait "${PIDS[-1]}" || rc=$?
if [ $rc -ne 0 ] || ! node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$RESULTS.tmp" 2>/dev/null; then
  if [ $rc -eq 124 ]; then why="timed out after ${RUN_TIMEOUT}s"; else why="exit $rc"; fi
  echo "the cache-tests client failed ($why, or printed no JSON); see $WORK/cli.log" >&2
  tail -n 20 "$WORK/cli.log" >&2 || true
  exit 1
fi
mv "$RESULTS.tmp" "$RESULTS"
echo "done in $(( $(date +%s) - START ))s; raw results in ${RESULTS#"$ROOT"/}" >&2
cleanup   # the servers are no longer needed

SUMMARY=(node "$HARNESS/summary.mjs" --suite "$WORK/suite" --results "$RESULTS" --label "$LABEL")
case $MODE in
  run) "${SUMMARY[@]}" ;;
  check)
    # A lost test keeps its evidence: the next run overwrites these logs.
    if ! "${SUMMARY[@]}" --baseline "$HARNESS/baseline.json" --check; then
      KEPT="$WORK/failed-$(date +%Y%m%d-%H%M%S)"
      mkdir -p "$KEPT"
      cp "$RESULTS" "$WORK"/*.log "$CONF" "$KEPT"/ 2>/dev/null || true
      echo "the run's results and logs are kept in ${KEPT#"$ROOT"/}" >&2
      exit 1
    fi
    ;;
  update) "${SUMMARY[@]}" --baseline "$HARNESS/baseline.json" --update --doc "$ROOT/docs/cache-tests.md" ;;
esac
