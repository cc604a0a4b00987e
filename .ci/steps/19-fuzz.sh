#!/usr/bin/env bash
# Issue 33: a short native fuzzing pass (go test -fuzz) of the input
# parsers a user or a client feeds: the trainer protocol's train_step
# handler over the real embedded trainer, the JSONL dataset loader and the
# config loader. Their seed corpora run in every `go test`; here each is
# explored for 10 s. A failing input is written under the package's
# testdata/fuzz/ and printed. Expected duration: about 1-2 minutes (three
# builds and 3 × 10 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=simd GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local

for target in FuzzTrainStepPayload:./train/remote FuzzParseJSONL:./data FuzzParseConfig:./config; do
  name=${target%%:*} pkg=${target#*:}
  echo "-- $name ($pkg)"
  timeout 300 go test -run '^$' -fuzz "^${name}\$" -fuzztime 10s "$pkg"
done
