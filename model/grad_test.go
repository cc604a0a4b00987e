package model

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

func tinyConfig(pos string, ctx int) Config {
	return Config{Vocab: 16, Dim: 8, Heads: 2, Layers: 2, Hidden: 12, Context: ctx,
		Positions: pos, RopeTheta: 10000, NormEps: 1e-5}
}

// testModel returns a model whose weights are scaled up from the usual
// init, so activations and gradients are far from zero and every
// nonlinearity is exercised.
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
			if len(s.shape) == 1 {
				w[i] = 1 + 0.3*float32(r.NormFloat64())
			} else {
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

// TestGradientCheck compares the hand-written backward pass with central
// finite differences of the loss, for every element of every parameter
// tensor, for the PG loss (masks, advantages, clipping, KL) under both
// normalisations and for the SFT loss, with rope and learned positions.
// ctx 40 > attnBlock, so the block-causal attention has two blocks.
func TestGradientCheck(t *testing.T) {
	losses := []struct {
		name string
		lc   LossConfig
	}{
		{"pg_token_mean_kl", LossConfig{Kind: LossPG, ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.1, Norm: NormTokenMean}},
		{"pg_seq_mean", LossConfig{Kind: LossPG, Norm: NormSeqMean}},
		{"sft", LossConfig{Kind: LossSFT}},
	}
	for _, pos := range []string{PosRope, PosLearned} {
		for _, tc := range losses {
			t.Run(pos+"/"+tc.name, func(t *testing.T) {
				m := testModel(t, tinyConfig(pos, 40), 3, 15)
				seqs := testSeqs(t, m, []int{40, 11, 7}, 5)
				checkGradient(t, m, seqs, tc.lc)
			})
		}
	}
}

func checkGradient(t *testing.T, m *Model, seqs []Sequence, lc LossConfig) {
	ctx := context.Background()
	grad := make([]float32, len(m.w))
	st, err := m.gradient(ctx, seqs, lc, grad)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Kind == LossPG && (st.ClipFrac == 0 || st.ClipFrac == 1) {
		t.Fatalf("clip fraction %v: the check should cover clipped and unclipped tokens", st.ClipFrac)
	}
	loss := func() float64 {
		s, err := m.gradient(ctx, seqs, lc, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s.Loss
	}
	const eps = 1e-3
	for _, s := range m.specs {
		var num, den, maxAbs float64
		// every element, or an even spread of them under the race detector
		step := 1
		if raceEnabled {
			step = max(1, s.size/12)
		}
		for i := s.off; i < s.off+s.size; i += step {
			w0 := m.w[i]
			m.w[i] = w0 + eps
			hi := float64(m.w[i])
			lp := loss()
			m.w[i] = w0 - eps
			lo := float64(m.w[i])
			lm := loss()
			m.w[i] = w0
			fd := (lp - lm) / (hi - lo)
			diff := fd - float64(grad[i])
			num += diff * diff
			den += fd * fd
			maxAbs = math.Max(maxAbs, math.Abs(diff))
		}
		rel := math.Sqrt(num) / math.Max(math.Sqrt(den), 1e-6)
		t.Logf("%-24s |fd|=%.3e rel=%.2e maxabs=%.2e", s.name, math.Sqrt(den), rel, maxAbs)
		if rel > 1e-2 || math.Sqrt(den) == 0 {
			t.Errorf("%s: gradient mismatch, relative error %.3e (|fd| %.3e)", s.name, rel, math.Sqrt(den))
		}
	}
}
