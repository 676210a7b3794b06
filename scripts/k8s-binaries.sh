#!/usr/bin/env bash
# Builds the Kubernetes API server that crates/gateway's tests run
# (kube-apiserver v1.37.2, from the wrapper module in k8s/apiserver) into a
# cache directory kept across runs, and prints that directory. No package
# ships kube-apiserver; it builds from Go modules (Go 1.26+). Only a fresh
# machine pays the build (about 6 minutes on 2 idle cores, 2.8 GB peak
# memory; over 25 minutes on a machine busy with other builds). Go keeps
# its compile cache: a build cut short resumes where it was.
#
# Usage: scripts/k8s-binaries.sh            build if missing, print the dir
#        K8S_BIN_DIR=/somewhere scripts/k8s-binaries.sh
# The tests read the directory from SWITCHYARD_K8S_BIN (scripts/test.sh
# exports it) and skip, saying so, when kube-apiserver is not there.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v1.37.2
dir="${K8S_BIN_DIR:-$HOME/.cache/switchyard/k8s-$version}"
mkdir -p "$dir"
# The module's content decides whether the cached binary is current.
stamp="$(cat k8s/apiserver/go.mod k8s/apiserver/go.sum k8s/apiserver/tools.go | sha256sum | cut -c1-16)"
if [ -x "$dir/kube-apiserver" ] && [ "$(cat "$dir/kube-apiserver.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$dir"
  exit 0
fi
# kubernetes v1.37 needs Go 1.26: the machine's, or one fetched from the
# module proxy (scripts/go-toolchain.sh); without it the tests skip.
gocmd="$(scripts/go-toolchain.sh)" || { echo "k8s-binaries: no Go 1.26 to build with" >&2; exit 1; }
export GOTOOLCHAIN=local
echo "k8s-binaries: building kube-apiserver $version into $dir (once per machine)" >&2
log="$dir/build.log"
(
  cd k8s/apiserver
  # -trimpath and no debug information: a smaller binary, the same code.
  GOFLAGS=-mod=mod timeout 3600 "$gocmd" build -trimpath -ldflags='-s -w' \
    -o "$dir/kube-apiserver.new" k8s.io/kubernetes/cmd/kube-apiserver
) >"$log" 2>&1 || { echo "k8s-binaries: build failed, see $log:" >&2; tail -20 "$log" >&2; exit 1; }
mv "$dir/kube-apiserver.new" "$dir/kube-apiserver"
echo "$stamp" >"$dir/kube-apiserver.stamp"
echo "$dir"
