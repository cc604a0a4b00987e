//go:build !(goexperiment.simd && amd64)

package model

func decodeScores(probs, q, kt []float32, nk, T int) { axpyScores(probs, q, kt, nk, T) }
func decodeValues(out, s, v []float32)               { axpyValues(out, s, v) }
