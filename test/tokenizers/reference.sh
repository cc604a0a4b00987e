#!/usr/bin/env bash
# Writes the independent corpus and the official references' answers for it
# into OUT (format: README.md):
#   OUT/corpus.jsonl     texts and chats per model (corpus.py, fixed seed)
#   OUT/python.jsonl     the chats rendered by Python Jinja2 (ref_jinja.py)
#   OUT/reference.jsonl  transformers.js ids of every text and of every
#                        Python render, and @huggingface/jinja's render
# Usage: reference.sh OUT [corpus.py options: --seed N --texts N --chats N --models a,b]
# Needs .ci/steps/13-setup.sh (node_modules, python3-jinja2). ~15-25 s.
set -euo pipefail
out=$(realpath "$1"); shift
cd "$(dirname "$0")"
py=${LONGHAUL_PYTHON:-/usr/bin/python3}
"$py" corpus.py "$@" > "$out/corpus.jsonl"
"$py" ref_jinja.py "$out/corpus.jsonl" > "$out/python.jsonl"
node ref.mjs corpus "$out/corpus.jsonl" "$out/python.jsonl" > "$out/reference.jsonl"
