#!/usr/bin/env bash
# Issue 30: `longhaul serve --model DIR` with DIR's real tokenizer and chat
# template, as processes on loopback (testkit/crashtest, run without -race):
# - TestServeModelNeverFails: 1,500 seeded random requests (≤ 90 s) to every
#   route of a server under a 4 GiB address-space cap: no 5xx, no crash;
# - TestHFAgentTools: examples/qwen3-guess-agent.yaml (an external agent
#   using a guess(n) tool on the Qwen3 template) learns against the
#   untrained baseline; the official OpenAI Node SDK drives `serve --model`
#   on the trained weights (test/node/hfmodel.mjs: the model's tool calls,
#   streamed tool-call deltas, text completions); from the trained weights,
#   tokenizer.source server equals local (calls, trained prompts, weights),
#   and the agent's run SIGKILLed and resumed equals the uninterrupted one.
# Run after 13-setup.sh (tokenizers) and with test/node installed; a skip is
# a failure. Takes about 6 minutes on a quiet 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOAMD64=${GOAMD64:-v1} GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export LONGHAUL_REQUIRE_TOKENIZERS=1 LONGHAUL_REQUIRE_NODE=1 LONGHAUL_HF_AGENT=1
timeout 900 go test -count=1 -v -timeout 890s \
  -run '^(TestServeModelNeverFails|TestHFAgentTools)$' \
  ./testkit/crashtest/ 2>&1 | grep -E '^(---|ok|FAIL|PASS|panic)|SKIP|identical|requests|tool calls|renders|ok - |checks passed|hf(serve|fuzz|agent|remote)_test.go'
