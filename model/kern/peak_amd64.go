//go:build goexperiment.simd && amd64

package kern

//go:noescape
func fmaPeak256(iters int)

//go:noescape
func fmaPeak512(iters int)

// FMAPeakLoop runs iters (≥ 1) iterations of 12 independent FMA chains at
// the width of the kernel path in use (8 lanes on AVX2, 16 on AVX-512) and
// returns the FLOPs done; 0 on the portable path. Timing it gives the
// machine's FMA peak for the path, the yardstick for "share of peak".
func FMAPeakLoop(iters int) float64 {
	switch bestISA {
	case isaAVX512:
		fmaPeak512(iters)
		return float64(iters) * 12 * 16 * 2
	case isaAVX2:
		fmaPeak256(iters)
		return float64(iters) * 12 * 8 * 2
	}
	return 0
}
