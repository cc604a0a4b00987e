package model

import (
	"context"
	"math"
	"testing"
)

// TestGradientCheck compares the hand-written backward pass with central
// finite differences of the loss, for every element of every parameter
// tensor of a tiny built-in configuration, for the PG loss (masks,
// advantages, clipping, KL) under both normalisations and for the SFT
// loss; ctx 40 > attnBlock, so the block-causal attention has two blocks.
// The default configuration itself is checked on an even spread of each
// tensor's elements. Under -race and -short (the portable build's loops
// are 20-35x slower) every tensor is checked on an even spread.
func TestGradientCheck(t *testing.T) {
	losses := []struct {
		name string
		lc   LossConfig
	}{
		{"pg_token_mean_kl", LossConfig{Kind: LossPG, ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.1, Norm: NormTokenMean}},
		{"pg_seq_mean", LossConfig{Kind: LossPG, Norm: NormSeqMean}},
		{"sft", LossConfig{Kind: LossSFT}},
	}
	for _, tc := range losses {
		t.Run("builtin_tiny/"+tc.name, func(t *testing.T) {
			m := testModel(t, tinyConfig(40), 3, 15)
			seqs := testSeqs(t, m, []int{40, 11, 7}, 5)
			checkGradient(t, m, seqs, tc.lc, 0, 1e-3)
		})
	}
	t.Run("builtin_default/pg", func(t *testing.T) {
		if raceEnabled || testing.Short() {
			t.Skip("the tiny configuration covers the code under -race and -short")
		}
		m := testModel(t, DefaultConfig(), 3, 4)
		seqs := testSeqs(t, m, []int{36, 9}, 5)
		checkGradient(t, m, seqs, losses[0].lc, 32, 4e-3)
	})
}

// TestGradientCheckFamilies is TestGradientCheck for tiny Qwen3 (q/k norm,
// GQA, tied, head_dim ≠ d/H), Llama (untied, attention bias, llama3 rope
// scaling, GQA with one kv head) and Qwen2 (q/k/v biases, yarn, MHA)
// configurations, every element of every tensor.
func TestGradientCheckFamilies(t *testing.T) {
	for name, cfg := range tinyConfigs() {
		for _, lc := range []LossConfig{
			{Kind: LossPG, ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.1},
			{Kind: LossSFT, Norm: NormSeqMean},
		} {
			t.Run(name+"/"+lc.Kind, func(t *testing.T) {
				if (raceEnabled || testing.Short()) && (name != "qwen3" || lc.Kind != LossPG) {
					t.Skip("under -race and -short one family and loss suffice (the race detector makes each loss evaluation ~20x slower)")
				}
				m := testModel(t, cfg, 3, 8)
				seqs := testSeqs(t, m, []int{40, 11, 7}, 5)
				checkGradient(t, m, seqs, lc, 0, 4e-3)
			})
		}
	}
}

// checkGradient checks every element of every tensor, or an even spread
// of per of each (per > 0), with central differences of step eps.
func checkGradient(t *testing.T, m *Model, seqs []Sequence, lc LossConfig, per int, eps float32) {
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
	for _, s := range m.specs {
		var num, den, maxAbs float64
		// every element, or an even spread of them under the race
		// detector and -short
		step := 1
		if raceEnabled || testing.Short() {
			step = max(1, s.size/12)
		}
		if per > 0 {
			step = max(1, s.size/per)
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
