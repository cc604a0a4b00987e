#!/usr/bin/env bash
# Issue 11: SIGKILL at every named crash point (crashtest.Points), in
# deterministic and throughput mode, each resumed and checked (identical to
# an uninterrupted run / trained once in admission order / no logged call
# generated again). About 30 short processes of the tiny ledger config.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=simd GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local
LONGHAUL_CRASH_ALL=1 timeout 420 go test -count=1 -timeout 400s -run 'TestEveryCrashPoint' -v ./testkit/crashtest/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok)' 
