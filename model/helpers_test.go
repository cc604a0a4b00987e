package model

import (
	"context"
	"math/rand/v2"
	"testing"
)

// builtinConfig is a built-in-style configuration (Llama, tied, MHA) of
// the given sizes over the byte tokenizer's 264 ids.
func builtinConfig(d, H, L, F, ctx int) Config {
	c := DefaultConfig()
	c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.Layers, c.Hidden, c.MaxPos = d, H, H, d/H, L, F, ctx
	return c
}

// tinyConfig is a built-in-style configuration small enough to check every
// gradient element.
func tinyConfig(ctx int) Config {
	c := builtinConfig(8, 2, 2, 12, ctx)
	c.Vocab = 16
	return c
}

func smallConfig() Config { return builtinConfig(32, 4, 2, 48, 96) }

// tinyConfigs are the families under test: Qwen3 (q/k norm, GQA, tied,
// head_dim ≠ d/H), Llama (untied, attention_bias, llama3 rope scaling,
// GQA) and Qwen2 (q/k/v biases, yarn rope scaling, MHA).
func tinyConfigs() map[string]Config {
	return map[string]Config{
		"qwen3": {Family: FamilyQwen3, Vocab: 37, Dim: 16, Hidden: 24, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 6,
			NormEps: 1e-6, RopeTheta: 10000, MaxPos: 64, Tied: true},
		"llama": {Family: FamilyLlama, Vocab: 41, Dim: 16, Hidden: 20, Layers: 2, Heads: 4, KVHeads: 1,
			NormEps: 1e-5, RopeTheta: 500000, MaxPos: 64, AttnBias: true,
			RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigMaxPos: 16}},
		"qwen2": {Family: FamilyQwen2, Vocab: 29, Dim: 12, Hidden: 20, Layers: 2, Heads: 3, KVHeads: 3,
			NormEps: 1e-6, RopeTheta: 1000, MaxPos: 64, Tied: false,
			RopeScaling: &RopeScaling{Type: "yarn", Factor: 4, OrigMaxPos: 16}},
	}
}

// qwen3Small is a Qwen3-shaped configuration big enough for the decode
// paths' vector kernels (GQA 8/2, hd 16, q/k norm) over 264 ids.
func qwen3Small() Config {
	return Config{Family: FamilyQwen3, Vocab: 264, Dim: 64, Hidden: 96, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 16,
		NormEps: 1e-6, RopeTheta: 10000, MaxPos: 96, Tied: true}
}

// testModel scales the init up so activations and gradients are far from
// zero and every nonlinearity is exercised; norms and biases get noise.
func testModel(t testing.TB, cfg Config, seed uint64, scale float32) *Model {
	t.Helper()
	m, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for _, s := range m.specs {
		w := m.w[s.off : s.off+s.size]
		for i := range w {
			switch {
			case len(s.shape) == 1 && isBias(s.name):
				w[i] = 0.3 * float32(r.NormFloat64())
			case len(s.shape) == 1:
				w[i] = 1 + 0.3*float32(r.NormFloat64())
			default:
				w[i] *= scale
			}
		}
	}
	return m
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(r.IntN(vocab))
	}
	return t
}

// testSeqs builds sequences with masks, advantages, and old/ref logprobs
// offset from the model's own so some ratios fall inside the clip range and
// some outside (well away from its edges, where the loss has kinks).
func testSeqs(t testing.TB, m *Model, lens []int, seed uint64) []Sequence {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	toks := make([][]int32, len(lens))
	for i, n := range lens {
		toks[i] = randTokens(r, n, m.cfg.Vocab)
	}
	lps, err := m.Logprobs(context.Background(), toks)
	if err != nil {
		t.Fatal(err)
	}
	offsets := []float32{-0.5, 0, 0.05, 0.5}
	seqs := make([]Sequence, len(lens))
	for i, n := range lens {
		s := Sequence{Tokens: toks[i], Mask: make([]uint8, n), Advantages: make([]float32, n),
			OldLogprobs: make([]float32, n), RefLogprobs: make([]float32, n)}
		for j := 1; j < n; j++ {
			if r.IntN(4) != 0 {
				s.Mask[j] = 1
			}
			s.Advantages[j] = float32(r.NormFloat64())
			s.OldLogprobs[j] = lps[i][j] + offsets[r.IntN(len(offsets))]
			s.RefLogprobs[j] = lps[i][j] + 0.3*float32(r.NormFloat64())
		}
		seqs[i] = s
	}
	return seqs
}

// qwen2Small and llamaSmall exercise the biases (q/k/v; o), untied heads
// and GQA with one kv head in the decode paths.
func qwen2Small() Config {
	return Config{Family: FamilyQwen2, Vocab: 264, Dim: 48, Hidden: 64, Layers: 2, Heads: 3, KVHeads: 3,
		NormEps: 1e-6, RopeTheta: 1000, MaxPos: 96}
}

func llamaSmall() Config {
	return Config{Family: FamilyLlama, Vocab: 264, Dim: 64, Hidden: 80, Layers: 2, Heads: 4, KVHeads: 1,
		NormEps: 1e-5, RopeTheta: 500000, MaxPos: 96, AttnBias: true,
		RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigMaxPos: 32}}
}
