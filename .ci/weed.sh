#!/usr/bin/env bash
# The S3 server the bucket tests run against (docs/storage.md): SeaweedFS
# (`weed`, Apache-2.0) built from its Go module, once per machine, into a
# cache outside the clone keyed by its version:
#   ${XDG_CACHE_HOME:-~/.cache}/longhaul/weed-VERSION/weed
# testkit/s3test finds it there (or through LONGHAUL_WEED). A cold build
# compiles ~1,400 packages: about 20-40 minutes on 2 busy cores (see
# docs/storage.md, "CI"); a machine that has it pays nothing.
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN-local} GOFLAGS=-buildvcs=false
unset GOEXPERIMENT # weed is not ours: a plain build
VERSION=v0.0.0-20261109003541-7506e5f91cd6
cache="${XDG_CACHE_HOME:-$HOME/.cache}/longhaul/weed-$VERSION"
if [ -x "$cache/weed" ] && "$cache/weed" version >/dev/null 2>&1; then
  echo "weed $VERSION: cached at $cache/weed"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Outside any module, so the download changes no go.mod.
dir=$(cd "$work" && timeout 900 go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
test -d "$dir/weed"
# The module cache is read-only; the build wants a writable tree.
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
start=$(date +%s)
# -trimpath and a stripped link cut the link and the binary; the
# compile is what it is.
(cd "$work/src/weed" && timeout 3000 go build -trimpath -ldflags='-s -w' -o "$cache/weed.tmp" .)
mv "$cache/weed.tmp" "$cache/weed"
echo "weed $VERSION: built in $(( $(date +%s) - start )) s into $cache/weed"
"$cache/weed" version
