#!/usr/bin/env bash
# Issue 13: real tokenizers and chat templates against the official
# JavaScript reference (and, for template semantics, Python Jinja2), at full size (5,000 strings and 300 conversations per
# model, the 20-turn bridge test), then brief fuzzing of the BPE encoder, the
# hand-written pre-tokenizer splits (against regexp2), the partial
# re-encoding the bridge uses, and
# the tool-call parsers. Run after 13-setup.sh. A missing reference fails
# here instead of skipping (LONGHAUL_REQUIRE_TOKENIZERS=1).
# Issue 30: the independent corpus (test/tokenizers/corpus.py, fixed seed:
# 2,400 texts and 300 chats with tools per model) and the references' answers
# (Python Jinja2 renders, transformers.js ids, @huggingface/jinja renders),
# made once here (~25 s) for TestReferenceCorpus in hf and chat (~20 s each)
# and for `serve --model`'s /tokenize (TestServeTokenizeParity, below).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOFLAGS=-buildvcs=false GOAMD64=v1 GOTOOLCHAIN=local
export LONGHAUL_REQUIRE_TOKENIZERS=1 LONGHAUL_TOKENIZER_PARITY=full
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
timeout 300 bash test/tokenizers/reference.sh "$corpus"
export LONGHAUL_TOKENIZER_CORPUS=$corpus
timeout 600 go test -count=1 -v -run 'Parity|TwentyTurns|ServerRendering|FastPath|RenderEncodingReuse|Qwen3Native|SeqNative|HandSplit|RealTokenizersUse|RuntimeErrorsNameLine|LineMarksKeep|TurnAllocFlat|ReferenceCorpus|Normalize|TestPy|MessageReasoningJSON' \
  ./tokenizer/ ./tokenizer/hf/ ./tokenizer/chat/ ./tokenizer/bridge/ ./tokenizer/remote/ 2>&1 \
  | grep -E '^(---|ok|FAIL|PASS)|identical|turns,|SKIP' 
# The same corpus over HTTP: `longhaul serve --model` processes with the
# three real tokenizers answer /tokenize (prompt and messages forms) with the
# references' ids (testkit/crashtest TestServeTokenizeParity, ~2 min).
timeout 420 go test -count=1 -v -timeout 400s -run '^TestServeTokenizeParity$' ./testkit/crashtest/ 2>&1 \
  | grep -E '^(---|ok|FAIL|PASS|panic)|identical|SKIP|hfserve_test.go'
# grep hides the RUN lines; pipefail keeps a test failure fatal, and a skip
# cannot pass silently: REQUIRE turns it into a failure.
# Budgets are counts, not durations: Go 1.26's fuzz coordinator can report a
# bare "context deadline exceeded" when -fuzztime's wall clock ends while a
# worker is busy (go.dev/issue/75804, fixed in 1.27), and minimizing a new
# interesting input (60 s by default) held the workers past the deadline.
# Minimizing is capped at a count too; a crasher is still written, less reduced.
fz() { timeout 180 go test -run '^$' -fuzz "^$1\$" -fuzztime "$2" -fuzzminimizetime 100x "$3"; }
fz FuzzParsers 150000x ./tokenizer/toolcall/
fz FuzzEncode 60000x ./tokenizer/hf/
fz FuzzHandSplit 40000x ./tokenizer/hf/
fz FuzzEncodeFromInto 30000x ./tokenizer/hf/
