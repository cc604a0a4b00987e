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

// GEMVPacked computes c[1×n] = a[1×k]·B (or c += a·B when acc), the decode
// product, with B from Pack: the bits of MatMul(c, a, B's plain form, 1, k,
// n, acc) and of MatMulPacked, for every shards. With shards ≥ 2 and a B
// of at least gemvForkMinBytes, B's column panels are split into that many
// contiguous blocks run through Fork (each output element keeps its one
// chain over p); smaller products run on the caller, where a fork would
// cost more than it saves.
func GEMVPacked(c, a []float32, B *Packed, acc bool, shards int) {
	checkDims(c, a, B.b, 1, B.k, B.n)
	gemvPacked(c, a, B, acc, shards)
}

// gemvForkMinBytes is the smallest packed B (bytes) GEMVPacked splits over
// cores: below it the fork-join (µs, tens of µs when a helper must be
// woken) costs more than half the product saves (BenchmarkGEMVShards).
const gemvForkMinBytes = 2 << 20

// gemvShards is the number of column blocks GEMVPacked uses for a k×n B.
func gemvShards(k, n, shards int) int {
	if 4*k*n < gemvForkMinBytes {
		return 1
	}
	return shards
}
