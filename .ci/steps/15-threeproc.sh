#!/usr/bin/env bash
# Issue 15: three processes on loopback: `longhaul train` (the controller),
# `longhaul serve --model DIR` (a tiny random Qwen3 from init-model with the
# real Qwen3 tokenizer) and the PyTorch trainer (python/longhaul_trainer),
# deterministic mode. The run is done once uninterrupted and once with each
# process SIGKILLed at a seeded random moment and restarted; both must end
# with the same call digest and weights. The same task in one process is
# run alongside and compared (test/threeproc). Needs python3-torch
# (00-setup.sh) and the tokenizer files (13-setup.sh); a skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOAMD64=${GOAMD64:-v1} GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export LONGHAUL_REQUIRE_THREEPROC=1
timeout 400 go test -count=1 -v -timeout 380s -run TestThreeProcessesPyTorchKilled ./test/threeproc 2>&1 \
  | grep -E '^(---|ok|FAIL|PASS|panic)|threeproc_test.go'
