package model

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

const python = "/usr/bin/python3"

// requireTorch skips the test when /usr/bin/python3 has no torch, unless
// LONGHAUL_REQUIRE_TORCH=1 (the CI step .ci/steps/14-torch.sh), which
// makes a missing torch a failure.
func requireTorch(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "bench", "torch_llama.py")
	err := exec.Command(python, "-c", "import torch, numpy").Run()
	if err != nil {
		if os.Getenv("LONGHAUL_REQUIRE_TORCH") == "1" {
			t.Fatalf("LONGHAUL_REQUIRE_TORCH=1 but %s cannot import torch and numpy: %v", python, err)
		}
		t.Skipf("skipping: %s cannot import torch and numpy (apt-get install python3-torch python3-numpy): %v", python, err)
	}
	return script
}

// TestTorchCrossCheck runs bench/torch_llama.py, an independent PyTorch
// implementation, on directories this package wrote (one straight from
// Init, as init-model writes it): logits agree to 1e-4, and one PG step
// from the same weights and batch gives the same loss and updated weights
// to 1e-5 relative.
func TestTorchCrossCheck(t *testing.T) {
	script := requireTorch(t)
	if testing.Short() || (raceEnabled && os.Getenv("LONGHAUL_REQUIRE_TORCH") != "1") {
		t.Skip("short mode or -race (the Go side has no concurrency of its own here; .ci/steps/14-torch.sh runs it)")
	}
	cases := map[string]func(dir string) *Model{
		"qwen3-init": func(dir string) *Model {
			m, err := Init(InitOptions{Family: FamilyQwen3, Layers: 2, Hidden: 32, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 300, MaxPos: 128, Seed: 3}, dir)
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
	}
	for name, cfg := range tinyConfigs() {
		cases[name] = func(dir string) *Model {
			m := testModel(t, cfg, 9, 4)
			if err := m.SaveDir(dir, SaveOptions{}); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	var fixtures []string
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		mk := cases[name]
		{
			tmp := filepath.Join(t.TempDir(), name)
			before, after := filepath.Join(tmp, "before"), filepath.Join(tmp, "after")
			mk(before)
			m, err := LoadDir(before)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(4, 5))
			fx := map[string]any{"model_dir": before, "after_dir": after, "clip_low": 0.2, "clip_high": 0.28}
			var seqs [][]int32
			var logits [][]float32
			for _, n := range []int{40, 7, 17} {
				s := randTokens(r, n, m.cfg.Vocab)
				lg, err := m.Logits(s)
				if err != nil {
					t.Fatal(err)
				}
				seqs, logits = append(seqs, s), append(logits, lg)
			}
			fx["logit_seqs"], fx["go_logits"] = seqs, logits
			batch := testSeqs(t, m, []int{24, 9, 40}, 6)
			fx["batch"] = map[string]any{"tokens": col(batch, func(s Sequence) any { return s.Tokens }),
				"mask": col(batch, func(s Sequence) any { return u8s(s.Mask) }), "advantages": col(batch, func(s Sequence) any { return s.Advantages }),
				"old_logprobs": col(batch, func(s Sequence) any { return s.OldLogprobs })}
			// Adam's eps is 1e-6 rather than 1e-8: a first step moves each weight
			// by about lr·g/(|g|+eps), which for a gradient near zero (a k bias
			// under rope is nearly softmax-invariant) turns float32 noise in g
			// into a visible difference; 1e-6 keeps the comparison about the
			// model rather than about the sign of noise.
			oc := OptimConfig{LR: 1e-3, WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-6, GradClip: 1, Schedule: "constant"}
			fx["optim"] = map[string]any{"lr": oc.LR, "weight_decay": oc.WeightDecay, "beta1": oc.Beta1, "beta2": oc.Beta2, "eps": oc.Eps, "grad_clip": oc.GradClip}
			tr, err := NewTrainer(m, oc)
			if err != nil {
				t.Fatal(err)
			}
			st, err := tr.Step(context.Background(), batch, LossConfig{Kind: LossPG, ClipLow: 0.2, ClipHigh: 0.28})
			if err != nil {
				t.Fatal(err)
			}
			if st.ClipFrac == 0 || st.ClipFrac == 1 {
				t.Fatalf("clip fraction %v: the step should have clipped and unclipped tokens", st.ClipFrac)
			}
			fx["go_loss"] = st.Loss
			if err := m.SaveDir(after, SaveOptions{}); err != nil {
				t.Fatal(err)
			}
			fb, _ := json.Marshal(fx)
			path := filepath.Join(tmp, "fixture.json")
			if err := os.WriteFile(path, fb, 0o644); err != nil {
				t.Fatal(err)
			}
			fixtures = append(fixtures, path)
		}
	}
	// one interpreter for every fixture: importing torch costs seconds
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, append([]string{script, "check"}, fixtures...)...).CombinedOutput()
	t.Logf("torch:\n%s", out)
	if err != nil {
		t.Fatalf("torch check failed: %v", err)
	}
	if n := strings.Count(string(out), `"ok": true`); n != len(fixtures) {
		t.Fatalf("%d of %d fixtures passed", n, len(fixtures))
	}
}

func col(b []Sequence, f func(Sequence) any) []any {
	out := make([]any, len(b))
	for i, s := range b {
		out[i] = f(s)
	}
	return out
}

func u8s(m []uint8) []int {
	out := make([]int, len(m))
	for i, v := range m {
		out[i] = int(v)
	}
	return out
}
