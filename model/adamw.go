package model

import "math"

// AdamW applies one AdamW update (torch semantics, decoupled weight decay
// when decay is set) with learning rate lr to one contiguous run of
// parameters w, their gradient g and float64 moments m and v; step is the
// number of updates taken before this one. The trainer calls it per
// tensor, so every tensor is updated with the same arithmetic, bit for bit.
// https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
func (oc OptimConfig) AdamW(step int64, lr float64, w, g []float32, m, v []float64, decay bool) {
	b1, b2 := oc.Beta1, oc.Beta2
	n := float64(step + 1)
	bc1, bc2 := 1-math.Pow(b1, n), 1-math.Pow(b2, n)
	wd := 0.0
	if decay {
		wd = float64(lr * oc.WeightDecay)
	}
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	for i := range w {
		gi := float64(g[i])
		// float64(…) around each product forbids FMA contraction, so the
		// bits do not depend on GOAMD64
		mi := float64(b1*m[i]) + float64((1-b1)*gi)
		vi := float64(b2*v[i]) + float64(float64((1-b2)*gi)*gi)
		m[i], v[i] = mi, vi
		p := float64(w[i])
		p -= float64(wd * p)
		p -= float64(lr*(mi/bc1)) / (math.Sqrt(vi/bc2) + oc.Eps)
		w[i] = float32(p)
	}
}
