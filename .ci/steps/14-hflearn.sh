#!/usr/bin/env bash
# Issue 14: learning with an HF model. `longhaul train --config
# examples/qwen3-guess.yaml` on a tiny Qwen3 made by `longhaul init-model`
# with the real Qwen3 tokenizer: the untrained model's success rate must be
# ≤ 0.05 and the trained one's (warm start, then GRPO; mean of the last 3
# steps) ≥ 0.5 (testkit/crashtest TestHFModelLearns). The trained run
# generates through `longhaul serve --model DIR` (generator.kind=openai),
# the embedded trainer exporting each version to it. Run after
# 13-setup.sh; a missing tokenizer fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local
export LONGHAUL_REQUIRE_TOKENIZERS=1 LONGHAUL_HF_LEARN=1
timeout 900 go test -count=1 -v -timeout 890s -run 'TestHFModelLearns' ./testkit/crashtest/ 2>&1 | grep -E '^(---|ok|FAIL|PASS)|success:|SKIP|hflearn_test'
