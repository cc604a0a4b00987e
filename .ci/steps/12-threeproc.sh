#!/usr/bin/env bash
# Issue 12: processes that come back. The three-process run (`longhaul
# serve`, `longhaul serve-trainer`, `longhaul train`, started as the README
# starts them) with each process SIGKILLed at random moments (seeded,
# bounded count) and started again: deterministic mode ends equal to the
# in-process run, throughput mode trains every prompt once. Then a 30 s
# generation outage in the middle of a step: the run waits, drops nothing
# and ends equal to the uninterrupted run. LONGHAUL_THREEPROC=long selects
# the long versions of the tests (testkit/crashtest/threeproc_test.go).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=simd GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local
LONGHAUL_THREEPROC=long timeout 300 go test -count=1 -timeout 280s \
	-run 'TestThreeProcessesKilledDeterministic|TestThreeProcessesKilledThroughput|TestGenerationOutage' \
	-v ./testkit/crashtest/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|threeproc_test.go'
