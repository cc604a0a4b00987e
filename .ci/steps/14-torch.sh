#!/usr/bin/env bash
# The Llama/Qwen family (the engine in model/) against an independent PyTorch
# implementation (bench/torch_llama.py): logits within 1e-4, one PG + AdamW
# step with the same loss and updated weights within 1e-5 relative. Needs
# Debian's python3-torch and python3-numpy; fails (does not skip) without.
set -euo pipefail
export GOEXPERIMENT=simd GOAMD64=v1 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
if ! timeout 60 /usr/bin/python3 -c "import torch, numpy"; then
	echo "14-torch: /usr/bin/python3 cannot import torch and numpy (apt-get install python3-torch python3-numpy libopenblas0-pthread)" >&2
	exit 1
fi
LONGHAUL_REQUIRE_TORCH=1 timeout 300 go test -count=1 -run 'TestTorchCrossCheck' -v ./model
# the CLI writes a directory the torch script loads and runs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 120 go run ./cmd/longhaul init-model --family qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 1000 --out "$tmp/q3"
timeout 120 /usr/bin/python3 bench/torch_llama.py bench --model "$tmp/q3" --batches 1 --gen-tokens 4 --prompt 4
