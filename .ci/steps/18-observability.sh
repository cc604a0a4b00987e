#!/usr/bin/env bash
# Observability end to end, as a user sees it: a tiny run piped (plain
# progress lines), scraped over Prometheus while it trains, stopped with
# SIGINT (exit 0, resume command), resumed, then TensorBoard events,
# metrics rows, plots and inspect checked. Run from the repository root.
set -euo pipefail

export GOEXPERIMENT=${GOEXPERIMENT-simd} GOFLAGS=${GOFLAGS--buildvcs=false} GOAMD64=${GOAMD64-v1} GOTOOLCHAIN=${GOTOOLCHAIN-local}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/longhaul
timeout 300 go build -o "$bin" ./cmd/longhaul
timeout 10 "$bin" --version >"$work/version"
grep -q '^longhaul version ' "$work/version"

run=$work/run
port=$(( 20000 + RANDOM % 20000 ))
# 2000 steps, so that a fast machine is still training when the 1 s progress
# line and the scrape come (the tiny config's 20 steps take ~1 s there); the
# run is interrupted long before its end.
timeout 300 "$bin" train --config examples/ledger-tiny.yaml --run-dir "$run" --log-level warn \
  --progress-every 1s --metrics-addr "127.0.0.1:$port" run.max_steps=2000 >"$work/out1" 2>&1 &
pid=$!
step=0
for _ in $(seq 1 600); do
  step=$(timeout 5 curl -sf "http://127.0.0.1:$port/metrics" | awk '$1 == "longhaul_train_step" {print int($2)}' || true)
  # step 3 reached and at least one plain progress line printed (1 s clock)
  [ "${step:-0}" -ge 3 ] && grep -q '^progress: ' "$work/out1" && break
  sleep 0.2
done
[ "${step:-0}" -ge 3 ] || { echo "no step 3 on /metrics"; cat "$work/out1"; exit 1; }
timeout 5 curl -sf "http://127.0.0.1:$port/metrics" >"$work/scrape"
for m in longhaul_rollouts_in_flight longhaul_runlog_append_duration_seconds_count \
         'longhaul_generator_call_duration_seconds_count{server="embedded"}' longhaul_train_entropy; do
  grep -q "^$m" "$work/scrape" || { echo "scrape lacks $m"; exit 1; }
done
# The signal goes to train itself: timeout(1) would pass it on to train
# and then to its whole process group, a second interrupt.
pkill -INT -P "$pid"
wait "$pid" || { echo "SIGINT: exit $?, want 0"; cat "$work/out1"; exit 1; }
grep -q 'resume with:' "$work/out1" || { echo "no resume command"; cat "$work/out1"; exit 1; }
grep -q '^progress: ' "$work/out1" || { echo "no plain progress lines"; cat "$work/out1"; exit 1; }

# Resumed to 5 steps past the interrupted one (max_steps is allowed to change).
done1=$(wc -l <"$run/metrics.jsonl")
want=$(( done1 + 5 ))
timeout 300 "$bin" train --config examples/ledger-tiny.yaml --run-dir "$run" --no-progress --log-level warn \
  "run.max_steps=$want" --allow-config-change run.max_steps >"$work/out2" 2>&1
rows=$(wc -l <"$run/metrics.jsonl")
[ "$rows" -eq "$want" ] || { echo "metrics.jsonl has $rows rows, want $want ($done1 before the resume)"; cat "$work/out2"; exit 1; }
test -s "$run/tb/events.out.tfevents.longhaul"
test -s "$run/learning_curve.png"
timeout 60 "$bin" plot --compare "$run" "$run" --out "$work/compare.png" >/dev/null
test -s "$work/compare.png"
n=$(timeout 60 "$bin" inspect "$run" --compacted --step 2 | tail -1)
case "$n" in *" rollouts") ;; *) echo "inspect list: $n"; exit 1 ;; esac
id=$(timeout 60 "$bin" inspect "$run" --step 1 | sed -n 2p | awk '{print $1}')
timeout 60 "$bin" inspect "$run" rollout "$id" --tokens >"$work/rows" # not piped into grep -q: SIGPIPE under pipefail
grep -q 'training rows:' "$work/rows"
if timeout 60 "$bin" inspect "$run" rollout g0000000000000000-0 2>"$work/err"; then echo "unknown id accepted"; exit 1; fi
grep -q 'no group' "$work/err"
echo "observability: ok ($rows steps, interrupted at step $step and resumed)"
