#!/usr/bin/env bash
# A run kept in an S3 bucket (SeaweedFS on loopback, built by
# .ci/weed.sh) survives the loss of whole machines: the machine-loss
# storms (10 losses, deterministic: bit-identical; throughput: every group
# trained once), two controllers on one run (refused; a SIGSTOPped one
# whose lease was taken writes nothing the winner reads), and a 35 s
# bucket outage waited out. docs/storage.md says what each proves.
# Expected: 4-8 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOFLAGS=-buildvcs=false GOAMD64=${GOAMD64-v1} GOTOOLCHAIN=local
LONGHAUL_REQUIRE_S3=1 LONGHAUL_S3_E2E=1 timeout 840 go test -count=1 -timeout 820s \
  -run 'TestMachineLossStorm|TestMachineLossTrainerAhead|TestTwoControllersOneRun|TestBucketOutageWaitedOut' -v ./testkit/crashtest/ 2>&1 |
  grep -E '^(=== RUN|--- |PASS|FAIL|ok|\s+machineloss_test)'
