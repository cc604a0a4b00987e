#!/usr/bin/env bash
# The PyTorch trainer (python/longhaul_trainer) and the vLLM worker extension
# (python/longhaul_vllm, against a stand-in for vLLM's worker): their unit
# tests, then the Go tests that run the trainer as a real process on
# loopback (protocol round trip through train/remote's client, exact resume
# across processes, SIGKILL mid-step and restart, `torchrun` with 2 ranks on
# gloo). Needs Debian's
# python3-torch and python3-numpy (installed by .ci/steps/00-setup.sh).
set -euo pipefail
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOAMD64=${GOAMD64:-v1} GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
PY=${LONGHAUL_PYTHON:-/usr/bin/python3}
# tests/test_vllm_ext.py reloads checkpoints written by `longhaul init-model`
# (a few seconds: the build cache is warm after `go test ./...`).
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
timeout 300 go build -o "$bindir/longhaul" ./cmd/longhaul
(cd python && LONGHAUL_BIN="$bindir/longhaul" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 timeout 300 "$PY" -m unittest discover -s tests -t . -v)
# A skip is a failure here: the tests must have run.
LONGHAUL_REQUIRE_PYTORCH=1 timeout 600 go test -count=1 -v ./test/pytorch
