#!/usr/bin/env bash
# Issues 13+14 integration, the part the suite skips under -race:
# `longhaul train` through `longhaul serve --model DIR` on a tiny random
# Qwen3 with the real tokenizer, train and serve each SIGKILLed twice,
# ending equal to an uninterrupted run (TestHFServedRunKilled, ~40 s), and
# the rollouts through the Qwen3 template (rollout's TestQwen3*: prompts
# are the template's renders, compaction, tools over HTTP).
# The in-process Qwen3 run (TestHFModelRun) and the runner's Chat run in
# the suite, which .ci/run runs after 13-setup.sh with
# LONGHAUL_REQUIRE_TOKENIZERS=1 (a missing tokenizer fails them there).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local
export LONGHAUL_REQUIRE_TOKENIZERS=1
timeout 300 go test -count=1 -v -run '^(TestHFServedRunKilled|TestQwen3.*)$' ./rollout/ ./testkit/crashtest/ 2>&1 | grep -E '^(---|ok|FAIL|PASS)|prompts checked|SKIP|kill [0-9]:|restarted server|reference:'
