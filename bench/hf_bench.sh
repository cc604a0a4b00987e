#!/usr/bin/env bash
# Issue 14 benchmarks: the engine (model/, Go) against bench/torch_llama.py (PyTorch
# CPU) on the same HF directories, thread counts and shapes, run back to
# back so both see the same machine load. Prints one JSON line per run.
#   bench/hf_bench.sh OUTDIR [gen|train|load|all]
set -euo pipefail
out=${1:?usage: hf_bench.sh OUTDIR [what]}
what=${2:-all}
mkdir -p "$out"
export GOEXPERIMENT=simd GOAMD64=v1 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
go build -o "$out/longhaul" ./cmd/longhaul
go build -o "$out/llamabench" ./bench/llamabench
# Debian 12's OpenBLAS 0.3.21 does not know newer Intel models and falls
# back to SSE3 "Prescott" kernels, 3-10x slower: give torch the kernel set
# of the ISA the Go side runs (LONGHAUL_KERN_PATH, else the CPU's best).
if [[ -z ${OPENBLAS_CORETYPE:-} ]] && grep -qw avx2 /proc/cpuinfo; then
	if [[ ${LONGHAUL_KERN_PATH:-} == avx2 ]] || ! grep -qw avx512f /proc/cpuinfo; then
		export OPENBLAS_CORETYPE=Haswell
	else
		export OPENBLAS_CORETYPE=SkylakeX
	fi
fi
echo "# torch's OpenBLAS kernels: ${OPENBLAS_CORETYPE:-as OpenBLAS detects}"
py() { timeout 3000 /usr/bin/python3 bench/torch_llama.py bench "$@"; }
tiny="$out/qwen3-tiny" big="$out/qwen3-0.6b-bf16"
[ -d "$tiny" ] || "$out/longhaul" init-model --family qwen3 --layers 4 --hidden 256 --heads 8 --kv-heads 2 --vocab 151936 --out "$tiny"
if [[ $what == all || $what == gen || $what == train ]]; then
	for th in 1 2; do
		echo "# tiny qwen3 (L=4 d=256 8/2 heads V=151936), threads $th"
		echo "go    $(GOMAXPROCS=$th timeout 3000 "$out/llamabench" -model "$tiny" -batches 1,16 -prompt 16 -gen-tokens 16 -train-batch 4 -train-len 128 -train-steps 2)"
		echo "torch $(py --model "$tiny" --threads $th --batches 1 16 --prompt 16 --gen-tokens 16 --train-batch 4 --train-len 128 --train-steps 2)"
	done
fi
if [[ $what == all || $what == gen || $what == load ]]; then
	# Qwen3-0.6B's shape: L=28, d=1024, 16/8 heads of 128, F=3072, V=151936, tied
	[ -d "$big" ] || "$out/longhaul" init-model --family qwen3 --layers 28 --hidden 1024 --heads 16 --kv-heads 8 --head-dim 128 \
		--intermediate 3072 --vocab 151936 --max-pos 40960 --dtype BF16 --out "$big"
fi
if [[ $what == all || $what == gen ]]; then
	echo "# 0.6B-shaped qwen3, generation, threads 2"
	echo "go    $(GOMAXPROCS=2 timeout 3000 "$out/llamabench" -model "$big" -batches 1,16 -prompt 8 -gen-tokens 8)"
	echo "torch $(py --model "$big" --threads 2 --batches 1 16 --prompt 8 --gen-tokens 8)"
fi
if [[ $what == all || $what == load ]]; then
	echo "# 0.6B-shaped qwen3 BF16 checkpoint: load"
	echo "go    $(GOMAXPROCS=2 timeout 600 "$out/llamabench" -model "$big" -load)"
fi
