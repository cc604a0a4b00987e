#!/usr/bin/env bash
# Builds longhaul, serves the fake backend on a free loopback port, runs the
# OpenAI Node SDK against it (test.mjs), and stops the server.
# Needs node >= 20 and `npm install` (or `npm ci`) run in this directory first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
(cd "$root" && go build -o "$tmp/longhaul" ./cmd/longhaul)
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
"$tmp/longhaul" serve --fake-backend --host 127.0.0.1 --port "$port" --api-key test-key --allow-path /tmp 2>"$tmp/server.log" &
pid=$!
if ! LONGHAUL_URL="http://127.0.0.1:$port" LONGHAUL_API_KEY=test-key node "$here/test.mjs"; then
  echo "--- server log ---" >&2
  cat "$tmp/server.log" >&2
  exit 1
fi
