// Command dump writes a Go model and a fixture for bench/torch_compare.py:
// model.safetensors + config.json, and fixture.json with fixed input
// tokens, the Go logits for them, and the Go training-step time for the
// same batch shape the script times in PyTorch.
//
//	GOEXPERIMENT=simd go run ./bench/dump -out /tmp/lhcmp
//	python3 bench/torch_compare.py /tmp/lhcmp
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/longhaul-rl/longhaul/internal/cputime"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/model/kern"
)

type fixture struct {
	Tokens       [][]int32 `json:"tokens"`
	Logits       []float32 `json:"logits"` // (len(tokens), T, V), flattened
	BatchSize    int       `json:"batch_size"`
	SeqLen       int       `json:"seq_len"`
	GoStepMS     []float64 `json:"go_step_ms"`     // wall time per timed step
	GoStepCPUMS  []float64 `json:"go_step_cpu_ms"` // process CPU (user+sys, all threads) per timed step
	GoKernelPath string    `json:"go_kernel_path"`
}

func main() {
	out := flag.String("out", "/tmp/lhcmp", "output directory")
	seed := flag.Uint64("seed", 1, "init and data seed")
	warm := flag.Int("warm", 20, "SFT steps before dumping, so the weights are not just the init")
	batch := flag.Int("batch", 8, "sequences per timed training step")
	steps := flag.Int("steps", 10, "timed training steps")
	flag.Parse()
	if err := run(*out, *seed, *warm, *batch, *steps); err != nil {
		log.Fatal(err)
	}
}

func run(out string, seed uint64, warm, batch, steps int) error {
	cfg := model.DefaultConfig()
	m, err := model.NewBuiltin(cfg, seed)
	if err != nil {
		return err
	}
	oc := model.DefaultOptimConfig()
	oc.LR, oc.WarmupSteps = 1e-2, 0
	tr, err := model.NewTrainer(m, oc)
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(seed, 99))
	T := cfg.Context()
	seqs := make([]model.Sequence, batch)
	for i := range seqs {
		toks := make([]int32, T)
		for j := range toks {
			toks[j] = int32(r.IntN(cfg.Vocab))
		}
		mask := make([]uint8, T)
		for j := 1; j < T; j++ {
			mask[j] = 1
		}
		seqs[i] = model.Sequence{Tokens: toks, Mask: mask}
	}
	ctx := context.Background()
	sft := model.LossConfig{Kind: model.LossSFT}
	for range warm {
		if _, err := tr.Step(ctx, seqs, sft); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := m.SaveSafetensors(filepath.Join(out, "model.safetensors")); err != nil {
		return err
	}
	fx := fixture{BatchSize: batch, SeqLen: T, GoKernelPath: kern.SIMDPath()}
	for i := range 3 {
		toks := slices.Clone(seqs[i].Tokens[:T-7*i])
		lg, err := m.Logits(toks)
		if err != nil {
			return err
		}
		fx.Tokens = append(fx.Tokens, toks)
		fx.Logits = append(fx.Logits, lg...)
	}
	for range steps {
		c0, t0 := cputime.Process(), time.Now()
		if _, err := tr.Step(ctx, seqs, sft); err != nil {
			return err
		}
		fx.GoStepMS = append(fx.GoStepMS, float64(time.Since(t0).Microseconds())/1000)
		fx.GoStepCPUMS = append(fx.GoStepCPUMS, float64((cputime.Process()-c0).Microseconds())/1000)
	}
	b, err := json.Marshal(fx)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "fixture.json"), b, 0o644); err != nil {
		return err
	}
	best := slices.Min(fx.GoStepMS)
	fmt.Printf("wrote %s: %d params; Go step (%d×%d, SFT) best %.1f ms = %.0f tok/s, median CPU %.1f ms (kern %s)\n",
		out, m.NumParams(), batch, T, best, float64(batch*T)/best*1000, median(fx.GoStepCPUMS), fx.GoKernelPath)
	return nil
}

func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	return s[len(s)/2]
}
