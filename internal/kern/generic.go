//go:build !(goexperiment.simd && amd64)

package kern

func matMul(c, a, b []float32, m, k, n int, acc bool)   { RefMatMul(c, a, b, m, k, n, acc) }
func matMulNT(c, a, b []float32, m, k, n int, acc bool) { RefMatMulNT(c, a, b, m, k, n, acc) }
func matMulTN(c, a, b []float32, m, k, n int, acc bool) { RefMatMulTN(c, a, b, m, k, n, acc) }
