#!/usr/bin/env bash
# Builds longhaul and runs the official OpenAI Node SDK against two servers
# on free loopback ports: the fake backend (test.mjs: exact values) and the
# real embedded model (model.mjs: streaming, top_logprobs, prompt_logprobs,
# stop_reason, refused parameters), then stops them.
# Needs node >= 20 and `npm install` (or `npm ci`) run in this directory first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
(cd "$root" && go build -o "$tmp/longhaul" ./cmd/longhaul)
freeport() { node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
port=$(freeport)
"$tmp/longhaul" serve --fake-backend --host 127.0.0.1 --port "$port" --api-key test-key --allow-path /tmp 2>"$tmp/server.log" &
pids+=($!)
mport=$(freeport)
"$tmp/longhaul" serve --host 127.0.0.1 --port "$mport" --allow-path "$tmp" 2>"$tmp/model.log" &
pids+=($!)
if ! LONGHAUL_URL="http://127.0.0.1:$port" LONGHAUL_API_KEY=test-key timeout 120 node "$here/test.mjs"; then
  echo "--- server log ---" >&2
  cat "$tmp/server.log" >&2
  exit 1
fi
if ! LONGHAUL_MODEL_URL="http://127.0.0.1:$mport" timeout 120 node "$here/model.mjs"; then
  echo "--- model server log ---" >&2
  cat "$tmp/model.log" >&2
  exit 1
fi
