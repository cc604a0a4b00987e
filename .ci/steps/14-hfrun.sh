#!/usr/bin/env bash
# Issues 13+14 integration: a rollout through the Qwen3 template (bridge,
# append and rerender), the runner's Chat from tokenizer.*, and
# `longhaul train model.path=DIR` on a tiny random Qwen3 with the real
# tokenizer: prompts checked against the template, kill -9 resume equal to
# an uninterrupted run, in process (TestHFModelRun) and through
# `longhaul serve --model DIR` with train and serve each SIGKILLed twice
# (TestHFServedRunKilled, ~40 s). Run after 13-setup.sh; a missing
# tokenizer fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local
export LONGHAUL_REQUIRE_TOKENIZERS=1
timeout 300 go test -count=1 -v -run 'TestQwen3Rollout|TestBridgedByteTemplate|TestBuildChat|TestHFModelRun|TestHFServedRunKilled' \
  ./rollout/ ./runner/ ./testkit/crashtest/ 2>&1 | grep -E '^(---|ok|FAIL|PASS)|prompts checked|SKIP|kill [0-9]:|restarted server|reference:'
