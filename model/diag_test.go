package model

import (
	"context"
	"math"
	"sort"
	"testing"
)

// TestDiagnosticsMatchDirectComputation recomputes every diagnostic from
// the raw logits (Logits, float64 softmax) and compares.
func TestDiagnosticsMatchDirectComputation(t *testing.T) {
	m, seqs := trainSetup(t)
	lc := LossConfig{Kind: LossPG, ClipLow: 0.2, ClipHigh: 0.28}
	st, err := m.gradient(context.Background(), seqs, lc, nil)
	if err != nil {
		t.Fatal(err)
	}
	V := m.cfg.Vocab
	var ent, abs, k3 float64
	var low, high, n int
	var ratios []float64
	for _, s := range seqs {
		logits, err := m.Logits(s.Tokens)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(s.Tokens); i++ {
			if s.Mask[i] == 0 {
				continue
			}
			n++
			row := logits[(i-1)*V : i*V]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			var z float64
			for _, v := range row {
				z += math.Exp(float64(v) - mx)
			}
			lse := mx + math.Log(z)
			for _, v := range row {
				p := math.Exp(float64(v) - lse)
				ent -= p * (float64(v) - lse)
			}
			d := float64(row[s.Tokens[i]]) - lse - float64(s.OldLogprobs[i])
			r := math.Exp(d)
			abs += math.Abs(d)
			k3 += r - 1 - d
			ratios = append(ratios, r)
			if a := s.Advantages[i]; r < 0.8 && a < 0 {
				low++
			} else if r > 1.28 && a > 0 {
				high++
			}
		}
	}
	sort.Float64s(ratios)
	q := func(p float64) float64 {
		pos := p * float64(len(ratios)-1)
		lo := int(pos)
		return ratios[lo] + (pos-float64(lo))*(ratios[lo+1]-ratios[lo])
	}
	N := float64(n)
	d := st.Diag
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"entropy", d.Entropy, ent / N},
		{"|Δlogprob|", d.LogprobAbsDiff, abs / N},
		{"KL(sampler)", d.KLSampler, k3 / N},
		{"clip low", d.ClipLowFrac, float64(low) / N},
		{"clip high", d.ClipHighFrac, float64(high) / N},
		{"ratio p05", d.RatioP05, q(0.05)},
		{"ratio p50", d.RatioP50, q(0.5)},
		{"ratio p95", d.RatioP95, q(0.95)},
		{"ratio max", d.RatioMax, ratios[len(ratios)-1]},
	} {
		if math.Abs(c.got-c.want) > 1e-4*math.Max(1, math.Abs(c.want)) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if d.ClipLowFrac == 0 || d.ClipHighFrac == 0 || d.Entropy <= 0 || d.LogprobAbsDiff == 0 {
		t.Fatalf("the batch should exercise both clips, entropy and a mismatch: %+v", d)
	}
	if got := d.ClipLowFrac + d.ClipHighFrac; math.Abs(got-st.ClipFrac) > 1e-12 {
		t.Fatalf("clip low+high = %v, clip fraction %v", got, st.ClipFrac)
	}
}
