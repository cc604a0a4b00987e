#!/usr/bin/env bash
# The example HTTP environment (examples/envs/notebook_env.py, Python
# standard library only) on 127.0.0.1, and two short bounded `longhaul
# train` runs against it from examples/envs/notebook.yaml: one from the
# untrained model (warmstart.enabled=false) and one warm-started on the
# demonstrations (warmstart.data). The warm-started run must learn the
# task's procedure: its mean reward over its RL steps (partial credit,
# examples/envs/notebook_env.py) at least 0.05 and 0.05 above the untrained
# run's (measured on the shared 2-core Xeon: 0.13 against 0.00). Then the
# environment's journal must hold no effect twice. The SIGKILL scenarios (environment
# and trainer killed mid-run) are Go tests in testkit/crashtest
# (TestPythonEnvKilledMidRun, TestEnvEffectsOnceUnderKills).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
work=$(mktemp -d)
bin="$work/longhaul"
timeout 300 go build -o "$bin" ./cmd/longhaul

port=$(timeout 10 "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 600 "$PY" examples/envs/notebook_env.py --port "$port" --journal "$work/journal.jsonl" >"$work/env.log" 2>&1 &
envpid=$!
trap 'kill "$envpid" 2>/dev/null || true; rm -rf "$work"' EXIT
# Python, not curl: a new machine may not have curl.
stats() { timeout 5 "$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' "http://127.0.0.1:$port/stats"; }
for _ in $(seq 100); do
  stats >/dev/null 2>&1 && break
  sleep 0.1
done

timeout 300 "$bin" train --config examples/envs/notebook.yaml --run-dir "$work/cold" --no-progress --log-level warn \
  "env.url=http://127.0.0.1:$port" run.max_steps=3 warmstart.enabled=false
timeout 300 "$bin" train --config examples/envs/notebook.yaml --run-dir "$work/warm" --no-progress --log-level warn \
  "env.url=http://127.0.0.1:$port" run.max_steps=4

timeout 10 "$PY" - "$work/cold/metrics.jsonl" "$work/warm/metrics.jsonl" <<'PYEOF'
import json, sys
def rewards(path):
    return [json.loads(l)["reward_mean"] for l in open(path) if l.strip()]
cold, warm = rewards(sys.argv[1]), rewards(sys.argv[2])
mc, mw = sum(cold) / len(cold), sum(warm) / len(warm)
print("reward per step: untrained %s (mean %.3f), warm-started %s (mean %.3f)"
      % ([round(r, 3) for r in cold], mc, [round(r, 3) for r in warm], mw))
assert mw >= 0.05 and mw >= mc + 0.05, "the warm-started run did not learn: mean reward %.3f vs %.3f untrained" % (mw, mc)
PYEOF

out=$(stats)
echo "environment: $out"
timeout 10 "$PY" - "$out" <<'PYEOF'
import json, sys
s = json.loads(sys.argv[1])
assert s["effects"] > 0, "the run made no environment steps"
assert not s["repeated"], "effects repeated: %s" % s["repeated"][:5]
PYEOF
kill "$envpid"
wait "$envpid" 2>/dev/null || true
echo "example environment: ok"
