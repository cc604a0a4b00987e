//go:build !(goexperiment.simd && amd64)

package model

func decodeScores(probs, q, kt []float32, nk int) { axpyScores(probs, q, kt, nk) }
func decodeValues(out, s, v []float32)            { axpyValues(out, s, v) }

func decodeScoresHeads(probs []float32, ps int, q, kt []float32, nk, T, H, rep, hs int) {
	tl := ktLen(T)
	for h := range H {
		axpyScores(probs[h*ps:], q[h*hs:(h+1)*hs], kt[(h/rep)*hs*tl:], nk)
	}
}

func decodeValuesHeads(out, probs []float32, ps int, v []float32, nk, T, H, rep, hs int) {
	for h := range H {
		axpyValues(out[h*hs:(h+1)*hs], probs[h*ps:h*ps+nk], v[(h/rep)*T*hs:])
	}
}

// probRow is the stride of the heads' score rows in a decode row's probs.
func probRow(nk int) int { return (nk + 7) &^ 7 }
