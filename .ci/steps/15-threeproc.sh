#!/usr/bin/env bash
# Issue 15: three processes on loopback: `longhaul train` (the controller),
# `longhaul serve --model DIR` (a tiny random Qwen3 from init-model with the
# real Qwen3 tokenizer) and the PyTorch trainer (python/longhaul_trainer).
# TestThreeProcessesPyTorchKilled: deterministic mode, a warm start through
# the trainer protocol, the run done once uninterrupted and once with the
# controller and the trainer SIGKILLed during the warm start and each
# process SIGKILLed at a seeded random moment; both must end with the same
# call digest and weights. TestThreeProcessesLearn: examples/qwen3-guess.yaml
# (smaller model) through the three processes learns as the same config in
# one process does (untrained success <= 0.05, trained >= 0.5, within 0.25
# of the in-process run). Needs python3-torch (00-setup.sh) and the
# tokenizer files (13-setup.sh); a skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOAMD64=${GOAMD64:-v1} GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export LONGHAUL_REQUIRE_THREEPROC=1
timeout 1200 go test -count=1 -v -timeout 1180s -run 'TestThreeProcessesPyTorchKilled|TestThreeProcessesLearn' ./test/threeproc 2>&1 \
  | grep -E '^(---|ok|FAIL|PASS|panic)|threeproc_test.go|learn_test.go'
