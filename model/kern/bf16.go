package kern

import (
	"fmt"
	"math"
)

// Weights kept as bfloat16 (a checkpoint's dtype, read in place from a
// mapped file). A bfloat16 is the top half of a float32, so widening one is
// exact (a 16-bit shift); the products below widen each B value where they
// read it and give the bits of the float32 products with the widened B.

// FromBF16 widens one bfloat16 (exact).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// ToBF16 rounds a float32 to bfloat16, to nearest even (NaN stays NaN).
func ToBF16(v float32) uint16 {
	u := math.Float32bits(v)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// WidenBF16 sets dst[i] to the float32 value of src[i] for i < len(dst)
// (src must be at least as long).
func WidenBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	n := widenFast(dst, src)
	for i, h := range src[n:] {
		dst[n+i] = FromBF16(h)
	}
}

func checkDimsH(c, a []float32, b []uint16, m, k, n int) {
	if m < 0 || k < 0 || n < 0 {
		panic(fmt.Sprintf("kern: negative dimension m=%d k=%d n=%d", m, k, n))
	}
	if len(c) < m*n || len(a) < m*k || len(b) < k*n {
		panic(fmt.Sprintf("kern: slice too short for m=%d k=%d n=%d: len(c)=%d len(a)=%d len(b)=%d",
			m, k, n, len(c), len(a), len(b)))
	}
}

// MatMulNTBF16 computes C[m×n] = A[m×k]·Bᵀ where B is stored n×k as
// bfloat16 bit patterns (or C += A·Bᵀ when acc): MatMulNT with B widened,
// bit for bit.
func MatMulNTBF16(c, a []float32, b []uint16, m, k, n int, acc bool) {
	MatMulNTBF16Par(c, a, b, m, k, n, acc, 1)
}

// MatMulNTBF16Par is MatMulNTBF16 split over output rows like MatMulPar.
func MatMulNTBF16Par(c, a []float32, b []uint16, m, k, n int, acc bool, shards int) {
	checkDimsH(c, a, b, m, k, n)
	if shards > m/4 {
		shards = m / 4
	}
	if shards <= 1 {
		mmRowsH(c, a, b, m, k, n, acc, 0, m)
		return
	}
	per := (m + shards - 1) / shards
	per = (per + 3) &^ 3
	Fork((m+per-1)/per, func(s int) {
		mmRowsH(c, a, b, m, k, n, acc, s*per, min((s+1)*per, m))
	})
}

// colsAlign is the column granularity of the Cols products: whole panels
// of every path.
const colsAlign = 64

// MatMulNTCols is MatMulNT with the output columns (B's rows) split into
// shards contiguous blocks run through Fork: each goroutine streams its
// share of B once, which is what a product of few rows with a large B
// (decode) needs from two cores. Bit-identical to MatMulNT for every
// shards.
func MatMulNTCols(c, a, b []float32, m, k, n int, acc bool, shards int) {
	checkDims(c, a, b, m, k, n)
	cols(n, shards, func(j0, j1 int) { mmColsNT(c, a, b, nil, m, k, n, acc, j0, j1) })
}

// MatMulNTBF16Cols is MatMulNTBF16 split over column blocks like
// MatMulNTCols.
func MatMulNTBF16Cols(c, a []float32, b []uint16, m, k, n int, acc bool, shards int) {
	checkDimsH(c, a, b, m, k, n)
	cols(n, shards, func(j0, j1 int) { mmColsNT(c, a, nil, b, m, k, n, acc, j0, j1) })
}

// MatMulNTColsPart computes only column block part of MatMulNTCols's
// split of n into shards blocks (nothing when the split has fewer
// blocks): a caller that forks once for several products runs each
// product's part on the same core.
func MatMulNTColsPart(c, a, b []float32, m, k, n int, acc bool, part, shards int) {
	checkDims(c, a, b, m, k, n)
	if j0, j1 := colBlock(n, shards, part); j0 < j1 {
		mmColsNT(c, a, b, nil, m, k, n, acc, j0, j1)
	}
}

// MatMulNTBF16ColsPart is MatMulNTColsPart with a bfloat16 B.
func MatMulNTBF16ColsPart(c, a []float32, b []uint16, m, k, n int, acc bool, part, shards int) {
	checkDimsH(c, a, b, m, k, n)
	if j0, j1 := colBlock(n, shards, part); j0 < j1 {
		mmColsNT(c, a, nil, b, m, k, n, acc, j0, j1)
	}
}

// colsPer is the width of cols' blocks: n over shards, rounded up to
// colsAlign.
func colsPer(n, shards int) int {
	per := (n + shards - 1) / max(shards, 1)
	return (per + colsAlign - 1) / colsAlign * colsAlign
}

// colBlock is block part of cols' split ([j0, j1) empty past the last).
func colBlock(n, shards, part int) (int, int) {
	if shards <= 1 {
		if part == 0 {
			return 0, n
		}
		return 0, 0
	}
	per := colsPer(n, shards)
	return min(part*per, n), min((part+1)*per, n)
}

// cols runs f over shards column blocks of [0, n), each a multiple of
// colsAlign wide but the last.
func cols(n, shards int, f func(j0, j1 int)) {
	per := colsPer(n, shards)
	if shards <= 1 || per >= n {
		f(0, n)
		return
	}
	Fork((n+per-1)/per, func(s int) { f(s*per, min((s+1)*per, n)) })
}

// refRowsNT is the reference NT product (float32 B or, where b is nil,
// bfloat16 h) over output rows [r0, r1) and columns [j0, j1) of a C with
// n columns: RefMatMulNT's arithmetic.
func refRowsNT(c, a, b []float32, h []uint16, k, n int, acc bool, r0, r1, j0, j1 int) {
	for i := r0; i < r1; i++ {
		for j := j0; j < j1; j++ {
			var s float32
			if acc {
				s = c[i*n+j]
			}
			if b != nil {
				for p := 0; p < k; p++ {
					s += a[i*k+p] * b[j*k+p]
				}
			} else {
				for p := 0; p < k; p++ {
					s += a[i*k+p] * FromBF16(h[j*k+p])
				}
			}
			c[i*n+j] = s
		}
	}
}
