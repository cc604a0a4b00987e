package model

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestResidentDecodeMatchesTrainer: a BF16 checkpoint loads mapped and
// stays BF16 through generation; its sampler's logprobs equal, bit for
// bit, what a trainer of the same weights (the float32 master copy, each
// weight widened: read as a copy, and made by NewTrainer over the mapped
// model itself) computes for the sampled tokens, and the tokens are
// those a float32 copy samples. Decode reads the weights in place (as a
// model too big for decode's copies does: forced here), each product's
// columns over both cores, for the BF16 mapping and for the float32 one.
func TestResidentDecodeMatchesTrainer(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]Config{"qwen3": qwen3Small(), "llama": llamaSmall(), "qwen2": qwen2Small()} {
		t.Run(name, func(t *testing.T) {
			src := testModel(t, cfg, 31, 4)
			for _, dtype := range []string{"BF16", "F32"} {
				dir := t.TempDir()
				if err := src.SaveDir(dir, SaveOptions{DType: dtype}); err != nil {
					t.Fatal(err)
				}
				m, err := LoadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				if m.DType() != dtype || m.w != nil {
					t.Fatalf("%s checkpoint loaded as %s (own slab: %v), want it mapped as it is", dtype, m.DType(), m.w != nil)
				}
				m.copyMax = 1 // decode reads the weights in place
				if m.Lanes() != 1 {
					t.Fatalf("a model without decode copies has %d lanes, want 1", m.Lanes())
				}
				r := rand.New(rand.NewPCG(4, 5))
				base := randTokens(r, 30, cfg.Vocab)
				reqs := []SampleRequest{
					{Prompt: base, MaxTokens: 20, Temperature: 1, Seed: 1},
					{Prompt: base, MaxTokens: 20, Temperature: 1, Seed: 2},
					{Prompt: append(slices.Clone(base[:12]), 3, 4), MaxTokens: 25, Temperature: 0.8, TopK: 40, Seed: 3},
					{Prompt: randTokens(r, 3, cfg.Vocab), MaxTokens: 0, Temperature: 1, Seed: 4},
				}
				got, err := m.Generate(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if m.w != nil || m.DType() != dtype {
					t.Fatalf("%s: generation gave the mapped model a float32 slab", dtype)
				}
				master, err := LoadDirWith(dir, LoadOptions{Copy: true})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := NewTrainer(master, DefaultOptimConfig()); err != nil {
					t.Fatal(err)
				}
				// a trainer of the mapped model itself: NewTrainer widens its
				// weights into a master slab of its own (ensureF32)
				mapped, err := LoadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := NewTrainer(mapped, DefaultOptimConfig()); err != nil {
					t.Fatal(err)
				}
				if mapped.w == nil {
					t.Fatalf("%s: a trainer of a mapped model has no float32 master slab", dtype)
				}
				copyRes, err := master.Clone().Generate(ctx, reqs) // decode through the transposed copies
				if err != nil {
					t.Fatal(err)
				}
				for i, q := range reqs {
					if !slices.Equal(got[i].Tokens, copyRes[i].Tokens) || !sameBits(got[i].Logprobs, copyRes[i].Logprobs) {
						t.Fatalf("%s request %d: in place %v, float32 copy %v", dtype, i, got[i].Tokens, copyRes[i].Tokens)
					}
					for tn, tm := range map[string]*Model{"copied": master, "mapped": mapped} {
						lps, err := tm.Logprobs(ctx, [][]int32{append(slices.Clone(q.Prompt), got[i].Tokens...)})
						if err != nil {
							t.Fatal(err)
						}
						for j, lp := range got[i].Logprobs {
							if want := lps[0][len(q.Prompt)+j]; math.Float32bits(lp) != math.Float32bits(want) {
								t.Fatalf("%s request %d token %d: sampler %v, trainer of the %s model %v", dtype, i, j, lp, tn, want)
							}
						}
					}
				}
			}
		})
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
