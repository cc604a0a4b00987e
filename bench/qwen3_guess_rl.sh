#!/usr/bin/env bash
# What RL adds beyond the warm start on examples/qwen3-guess.yaml
# (docs/hf-models.md, "What RL adds"): a weaker warm start (35 steps
# instead of 60) and 20 GRPO steps instead of 5, for SEEDS seeds, with RL
# at optim.lr=1e-3 against a control whose RL learning rate is 1e-9 (the
# same prompts, seeds and sampling; weights effectively frozen after the
# warm start). Prints each run's success over its last 8 steps and, per
# arm, the mean with a 95% t interval over seeds and the paired
# difference. Runs are resumable: a finished run is not run again.
#
#   bench/qwen3_guess_rl.sh LONGHAUL_BINARY QWEN3_DIR OUT_DIR [SEEDS]
#
# QWEN3_DIR is the tiny Qwen3 of examples/qwen3-guess.yaml (longhaul
# init-model, see that file). Cost: docs/hf-models.md.
set -euo pipefail
bin=$1 model=$2 out=$3 seeds=${4:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
for seed in $(seq 1 "$seeds"); do
  for arm in control rl; do
    lr=1e-3
    [ "$arm" = control ] && lr=1e-9
    dir="$out/$arm-s$seed"
    if [ -f "$dir/metrics.jsonl" ] && [ "$(wc -l <"$dir/metrics.jsonl")" -ge 20 ]; then
      continue
    fi
    /usr/bin/time -f "%U %S %e" -o "$dir.time" "$bin" train --config "$root/examples/qwen3-guess.yaml" --run-dir "$dir" \
      --no-progress --progress-every 60s "model.path=$model" run.seed="$seed" warmstart.steps=35 run.max_steps=20 \
      optim.lr=$lr optim.min_lr=0 rollout_failure.max_skipped_prompts=1000 >"$dir.log" 2>&1
  done
done
python3 - "$out" "$seeds" <<'PYEOF'
import json, math, statistics, sys
out, seeds = sys.argv[1], int(sys.argv[2])
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}
def last(path, k=8):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return rows, sum(r["success_rate"] for r in rows[-k:]) / k
def ci(xs):
    m = statistics.mean(xs)
    h = T.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
    return "%.1f ± %.1f" % (100 * m, 100 * h)
finals, cpu = {"control": [], "rl": []}, 0.0
for seed in range(1, seeds + 1):
    for arm in ("control", "rl"):
        rows, f = last("%s/%s-s%d/metrics.jsonl" % (out, arm, seed))
        finals[arm].append(f)
        try:
            u, s, e = map(float, open("%s/%s-s%d.time" % (out, arm, seed)).read().split()[-3:])
            cpu += u + s
        except (OSError, ValueError):
            pass
        print("%s seed %d: success per step %s; last 8 steps %.3f" % (arm, seed, " ".join("%.2f" % r["success_rate"] for r in rows), f))
for arm in ("control", "rl"):
    print("%s: last 8 steps, mean over %d seeds: %s %%" % (arm, seeds, ci(finals[arm])))
print("rl - control (paired by seed): %s points" % ci([r - c for r, c in zip(finals["rl"], finals["control"])]))
print("cost: %.0f CPU-seconds" % cpu)
PYEOF
