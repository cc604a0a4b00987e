package model

import (
	"math"
	"slices"
)

// observe adds one trained token's diagnostics: the policy's entropy at
// the position (from the softmax the loss already exponentiated: e holds
// exp(row−max), summing to sum) and, for pg, how its logprob lp compares
// with the sampler's.
func (st *shardStats) observe(lc *LossConfig, lp, lse float64, row, e []float32, sum float64, s *Sequence, i int) {
	// H = lse − Σ p·x with p = e/sum.
	var px float64
	for j, v := range e {
		px += float64(v) * float64(row[j])
	}
	st.entropy += lse - px/sum
	if lc.Kind != LossPG {
		return
	}
	delta := lp - float64(s.OldLogprobs[i])
	r := math.Exp(delta)
	st.absDiff += math.Abs(delta)
	st.k3 += r - 1 - delta // k3 of KL(old‖new): E_old[r − 1 − log r]
	st.ratios = append(st.ratios, r)
	a := float64(s.Advantages[i])
	switch {
	case r < 1-float64(lc.ClipLow) && a < 0:
		st.clipLow++
	case r > 1+float64(lc.ClipHigh) && a > 0:
		st.clipHigh++
	}
}

type diagSums struct {
	entropy, absDiff, k3 float64
	clipLow, clipHigh    int
	ratios               []float64
}

func (d *diagSums) add(st *shardStats) {
	d.entropy += st.entropy
	d.absDiff += st.absDiff
	d.k3 += st.k3
	d.clipLow += st.clipLow
	d.clipHigh += st.clipHigh
	d.ratios = append(d.ratios, st.ratios...)
}

func (d *diagSums) diagnostics(tokens int, pg bool) Diagnostics {
	n := float64(tokens)
	out := Diagnostics{Entropy: d.entropy / n}
	if !pg || len(d.ratios) == 0 {
		return out
	}
	out.ClipLowFrac, out.ClipHighFrac = float64(d.clipLow)/n, float64(d.clipHigh)/n
	out.LogprobAbsDiff, out.KLSampler = d.absDiff/n, d.k3/n
	slices.Sort(d.ratios)
	out.RatioP05, out.RatioP50, out.RatioP95 = quantile(d.ratios, 0.05), quantile(d.ratios, 0.5), quantile(d.ratios, 0.95)
	out.RatioMax = d.ratios[len(d.ratios)-1]
	return out
}

// quantile of sorted xs by linear interpolation between order statistics
// (numpy's default).
func quantile(xs []float64, q float64) float64 {
	pos := q * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	if lo+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	f := pos - float64(lo)
	return xs[lo]*(1-f) + xs[lo+1]*f
}
