//go:build !(goexperiment.simd && amd64)

package llama

// widenFast: no vector path in this build; widenBF16's loop does it all.
func widenFast([]float32, []byte) int { return 0 }
