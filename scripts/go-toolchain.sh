#!/usr/bin/env bash
# Prints the path of a `go` command of at least Go 1.26 (pebble v2.10.3
# needs 1.25, kubernetes v1.37 and quic-go v0.65 1.26), fetching one when
# the machine's is older. Debian 12's golang-go is 1.19, which can neither
# fetch a toolchain by itself (GOTOOLCHAIN came with 1.21) nor reach
# dl.google.com where only the module proxy is reachable; but every Go
# toolchain is also a module on the proxy (golang.org/toolchain, the one
# GOTOOLCHAIN itself downloads), which any go can fetch with `go mod
# download`. Its files come out of the module cache read-only and not
# executable, so it is copied to ~/.cache/switchyard/ and made so.
#   gocmd="$(scripts/go-toolchain.sh)"   # then: GOTOOLCHAIN=local "$gocmd" ...
set -euo pipefail
want=go1.26.8
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"
if command -v go >/dev/null 2>&1 && go version | grep -Eq 'go1\.(2[6-9]|[3-9][0-9])'; then
  command -v go
  exit 0
fi
dest="$HOME/.cache/switchyard/$want"
if [ -x "$dest/bin/go" ] && GOTOOLCHAIN=local "$dest/bin/go" version >/dev/null 2>&1; then
  echo "$dest/bin/go"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "go-toolchain: no go command to fetch $want with" >&2; exit 1; }
arch=$(go env GOARCH)
mod="golang.org/toolchain@v0.0.1-$want.linux-$arch"
echo "go-toolchain: fetching $want from the module proxy ($mod)" >&2
tmp=$(mktemp -d)
# Outside any module; bounded so that a proxy that is not there fails.
src=$(cd "$tmp" && GOFLAGS=-mod=mod timeout 600 go mod download -json "$mod" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
rmdir "$tmp"
[ -n "$src" ] && [ -f "$src/bin/go" ] || { echo "go-toolchain: $mod did not download" >&2; exit 1; }
rm -rf "$dest.new"
mkdir -p "$(dirname "$dest")"
cp -r "$src" "$dest.new"
chmod -R u+w "$dest.new"
chmod +x "$dest.new"/bin/* "$dest.new"/pkg/tool/*/*
rm -rf "$dest"
mv "$dest.new" "$dest"
GOTOOLCHAIN=local "$dest/bin/go" version >&2
echo "$dest/bin/go"
