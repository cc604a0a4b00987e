#!/usr/bin/env bash
# The summary study (docs/results.md), shortened: `longhaul bench summaries`
# on examples/recall.yaml with one seed, two conditions and 20 RL steps
# instead of 60: (b) the policy's summaries masked out of the loss against
# (c) summaries trained with the rollout's advantage, same warm start. The
# runs are deterministic (run.mode deterministic), so the figures do not
# depend on the machine's load. (c)'s success over its last 5 steps must
# beat (b)'s by at least 15 points; measured 30.6 % against 77.8 %
# (docs/results.md, "The CI check"). Two runs of 74-75 CPU-seconds side
# by side (mostly the warm start): about 80 s on two free cores; 496 s
# measured on a shared machine at load average above 20.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local

PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
timeout 300 go build -o "$work/longhaul" ./cmd/longhaul
timeout 600 "$work/longhaul" bench summaries --out "$work/study" --conditions b,c --seeds 1 --jobs 2 --window 5 \
  run.max_steps=20
timeout 10 "$PY" - "$work/study/summary.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
b, c = r["final_success"]["b-masked"]["mean"], r["final_success"]["c-rollout"]["mean"]
print("success over the last 5 of 20 steps: (b) masked summaries %.3f, (c) trained summaries %.3f" % (b, c))
assert c >= b + 0.15, "trained summaries did not beat untrained ones by 15 points: %.3f vs %.3f" % (c, b)
PYEOF
echo "summaries: ok"
