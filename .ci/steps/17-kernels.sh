#!/usr/bin/env bash
# Issue 17: the kernel paths. On a CPU with AVX-512 the whole kern suite runs
# again with the AVX2 path forced (LONGHAUL_KERN_PATH=avx2), so the assembly
# AVX2 kernels are checked against the reference as the primary path (the
# default run checks the AVX-512 assembly against the archsimd kernels), and
# the model's cross-path digest test compares AVX2, AVX-512 and portable runs
# in child processes. Then a short `longhaul bench kernels` prints where this
# machine stands (FMA peak, path, GEMM share of peak; numpy peer if present).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=simd GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local

timeout 300 go test -count=1 ./model/kern/...
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  LONGHAUL_KERN_PATH=avx2 timeout 300 go test -count=1 ./model/kern/...
fi
timeout 300 go test -count=1 -run 'TestKernelPathsBitIdentical|TestPathGoldenDigest' -v ./model/ | grep -E '^(---|ok|FAIL)|path_test'
# decode attention's 4-head chain kernels, packed decode weights and the
# level-by-level prefill on the AVX2 path too (the default run covers AVX-512)
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  LONGHAUL_KERN_PATH=avx2 timeout 120 go test -count=1 -run 'TestAttnDecodeRow|TestGenerate|TestPrefillSpreads|TestResident|TestBatch' ./model/
fi
# whether a fork-join reaches the second core (kern.Fork's helpers against a
# fresh goroutine per call; 2x the single rate = both jobs ran at once)
timeout 120 go test -count=1 -run X -bench 'ForkFMA' -benchtime 1x ./model/kern/ | grep -E '^Benchmark'
go build -o /tmp/longhaul-17 ./cmd/longhaul
timeout 120 /tmp/longhaul-17 bench kernels --reps 3 --slice 20ms
