package kern

import "fmt"

// Packed is a right-hand operand B (k×n, row-major) laid out once for the
// kernel path in use and reused across products: column panels of the
// path's width, each panel's k rows contiguous and zero-padded, so a
// product streams B front to back instead of in rows n floats apart
// (decode reads every weight once per step, mostly from L2 or beyond). A
// product with a Packed B gives the bits of MatMul with the plain B.
type Packed struct {
	k, n, w int
	b       []float32 // the plain B, for paths and shapes that read it in place
	p       []float32 // panels: panel J's row p at p[J·k·w + p·w]
}

// Pack lays out b (k×n) into dst, reusing dst's memory. b must stay
// unchanged while dst is used.
func Pack(dst *Packed, b []float32, k, n int) {
	if k <= 0 || n <= 0 || len(b) < k*n {
		panic(fmt.Sprintf("kern: Pack: bad operand k=%d n=%d len(b)=%d", k, n, len(b)))
	}
	packWidth(dst, b, k, n, packWidthOf(bestISA))
}

// packWidth is Pack with an explicit panel width (0: none, B is read in
// place).
func packWidth(dst *Packed, b []float32, k, n, w int) {
	dst.k, dst.n, dst.w, dst.b = k, n, w, b[:k*n]
	if w == 0 {
		dst.p = dst.p[:0]
		return
	}
	np := (n + w - 1) / w
	if cap(dst.p) < np*k*w {
		dst.p = make([]float32, np*k*w)
	}
	dst.p = dst.p[:np*k*w]
	for J := range np {
		j0 := J * w
		cols := min(w, n-j0)
		pan := dst.p[J*k*w : (J+1)*k*w]
		for p := range k {
			row := pan[p*w : (p+1)*w]
			copy(row, b[p*n+j0:p*n+j0+cols])
			clear(row[cols:])
		}
	}
}

// MatMulPacked computes C[m×n] = A[m×k]·B (or C += A·B when acc) with B
// from Pack.
func MatMulPacked(c, a []float32, m int, B *Packed, acc bool) {
	checkDims(c, a, B.b, m, B.k, B.n)
	matMulPacked(c, a, m, B, acc)
}
