//go:build !(goexperiment.simd && amd64)

package kern

import "os"

// Only the portable path exists in this build; PathEnv may name it and
// nothing else (checked at start-up).
var _ = mustPath(isaRef, os.Getenv(PathEnv))

// bestISA is the only path this build has.
const bestISA = isaRef

func matMul(c, a, b []float32, m, k, n int, acc bool)   { RefMatMul(c, a, b, m, k, n, acc) }
func matMulNT(c, a, b []float32, m, k, n int, acc bool) { RefMatMulNT(c, a, b, m, k, n, acc) }
func matMulTN(c, a, b []float32, m, k, n int, acc bool) { RefMatMulTN(c, a, b, m, k, n, acc) }

func mmRows(kind int, c, a, b []float32, m, k, n int, acc bool, r0, r1 int) {
	refRows(kind, c, a, b, m, k, n, acc, r0, r1)
}

func dot(a, b []float32) float32                   { return refDot(a, b) }
func axpy(y []float32, alpha float32, x []float32) { refAxpy(y, alpha, x) }
func scale(x []float32, alpha float32)             { refScale(x, alpha) }
func expInPlace(x []float32)                       { refExp(x) }
func softmax(x []float32)                          { refSoftmax(x) }

// SIMDPath names the kernel path in use: "portable" in this build.
func SIMDPath() string { return "portable" }

// FMAPeakLoop does nothing on the portable path and returns 0 FLOPs.
func FMAPeakLoop(iters int) float64 { return 0 }

// packWidthOf is 0: the portable path reads B in place.
func packWidthOf(isa int) int { return 0 }

func matMulPacked(c, a []float32, m int, B *Packed, acc bool) {
	RefMatMul(c, a, B.b, m, B.k, B.n, acc)
}

func gemvPacked(c, a []float32, B *Packed, acc bool, shards int) {
	RefMatMul(c, a, B.b, 1, B.k, B.n, acc)
}

// ReadLoop does nothing on the portable path and returns 0 bytes.
func ReadLoop(buf []float32) int { return 0 }

func widenFast(dst []float32, src []uint16) int { return 0 }

func mmRowsH(c, a []float32, b []uint16, m, k, n int, acc bool, r0, r1 int) {
	refRowsNT(c, a, nil, b, k, n, acc, r0, r1, 0, n)
}

func mmColsNT(c, a, b []float32, h []uint16, m, k, n int, acc bool, j0, j1 int) {
	refRowsNT(c, a, b, h, k, n, acc, 0, m, j0, j1)
}
