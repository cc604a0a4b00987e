package llama

import (
	"context"
	"math"
	"testing"

	"github.com/longhaul-rl/longhaul/model"
)

// TestGradientCheck compares backward with central finite differences of
// the loss for every element of every tensor (an even spread under -race)
// of each tiny family config; sequence 40 > attnBlock gives two blocks.
func TestGradientCheck(t *testing.T) {
	for name, cfg := range tinyConfigs() {
		for _, lc := range []model.LossConfig{
			{Kind: model.LossPG, ClipLow: 0.2, ClipHigh: 0.28, KLCoef: 0.1},
			{Kind: model.LossSFT, Norm: model.NormSeqMean},
		} {
			t.Run(name+"/"+lc.Kind, func(t *testing.T) {
				if raceEnabled && (name != "qwen3" || lc.Kind != model.LossPG) {
					t.Skip("under -race one family and loss suffice (the race detector makes each loss evaluation ~20x slower)")
				}
				m := testModel(t, cfg, 3, 8)
				seqs := testSeqs(t, m, []int{40, 11, 7}, 5)
				checkGradient(t, m, seqs, lc)
			})
		}
	}
}

func checkGradient(t *testing.T, m *Model, seqs []model.Sequence, lc model.LossConfig) {
	ctx := context.Background()
	grad := make([]float32, len(m.w))
	st, err := m.gradient(ctx, seqs, lc, grad)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Kind == model.LossPG && (st.ClipFrac == 0 || st.ClipFrac == 1) {
		t.Fatalf("clip fraction %v: the check should cover clipped and unclipped tokens", st.ClipFrac)
	}
	loss := func() float64 {
		s, err := m.gradient(ctx, seqs, lc, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s.Loss
	}
	const eps = 4e-3
	for _, s := range m.specs {
		var num, den float64
		// every element of small tensors, an even spread of 64 (4 under
		// -race) of larger ones, so the whole check stays within seconds
		step := max(1, s.size/64)
		if raceEnabled {
			step = max(1, s.size/4)
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
		}
		rel := math.Sqrt(num) / math.Max(math.Sqrt(den), 1e-6)
		t.Logf("%-45s rel %.2e", s.name, rel)
		if rel > 1e-2 || math.Sqrt(den) == 0 {
			t.Errorf("%s: gradient mismatch, relative error %.3e (|fd| %.3e)", s.name, rel, math.Sqrt(den))
		}
	}
}
