package kern

import (
	"fmt"
	"math"
)

// Layout kinds of the three matrix products.
const (
	kindNN = iota // C = A·B,  A m×k, B k×n
	kindNT        // C = A·Bᵀ, A m×k, B n×k
	kindTN        // C = Aᵀ·B, A k×m, B k×n
)

// checkDims panics (before any unsafe access in the SIMD kernels) when a
// slice is too short for the stated shape.
func checkDims(c, a, b []float32, m, k, n int) {
	if m < 0 || k < 0 || n < 0 {
		panic(fmt.Sprintf("kern: negative dimension m=%d k=%d n=%d", m, k, n))
	}
	if len(c) < m*n || len(a) < m*k || len(b) < k*n {
		panic(fmt.Sprintf("kern: slice too short for m=%d k=%d n=%d: len(c)=%d len(a)=%d len(b)=%d",
			m, k, n, len(c), len(a), len(b)))
	}
}

// MatMulPar is MatMul with the output rows split into a fixed number of
// contiguous blocks, one goroutine each (the caller's goroutine runs the
// first). Results are bit-identical to MatMul for every shards value,
// because the reduction over k is never split. shards <= 1 runs inline.
func MatMulPar(c, a, b []float32, m, k, n int, acc bool, shards int) {
	par(kindNN, c, a, b, m, k, n, acc, shards)
}

// MatMulNTPar is MatMulNT split over output rows like MatMulPar.
func MatMulNTPar(c, a, b []float32, m, k, n int, acc bool, shards int) {
	par(kindNT, c, a, b, m, k, n, acc, shards)
}

// MatMulTNPar is MatMulTN split over output rows like MatMulPar.
func MatMulTNPar(c, a, b []float32, m, k, n int, acc bool, shards int) {
	par(kindTN, c, a, b, m, k, n, acc, shards)
}

func par(kind int, c, a, b []float32, m, k, n int, acc bool, shards int) {
	checkDims(c, a, b, m, k, n)
	if shards > m/4 {
		shards = m / 4
	}
	if shards <= 1 {
		mmRows(kind, c, a, b, m, k, n, acc, 0, m)
		return
	}
	// Rows per shard, rounded up to a multiple of 4 so every shard but the
	// last uses only full micro-kernel tiles.
	per := (m + shards - 1) / shards
	per = (per + 3) &^ 3
	Fork((m+per-1)/per, func(s int) {
		mmRows(kind, c, a, b, m, k, n, acc, s*per, min((s+1)*per, m))
	})
}

// refRows is the reference product restricted to output rows [r0, r1); the
// arithmetic is exactly that of RefMatMul / RefMatMulNT / RefMatMulTN.
func refRows(kind int, c, a, b []float32, m, k, n int, acc bool, r0, r1 int) {
	for i := r0; i < r1; i++ {
		for j := 0; j < n; j++ {
			var s float32
			if acc {
				s = c[i*n+j]
			}
			switch kind {
			case kindNN:
				for p := 0; p < k; p++ {
					s += a[i*k+p] * b[p*n+j]
				}
			case kindNT:
				for p := 0; p < k; p++ {
					s += a[i*k+p] * b[j*k+p]
				}
			default:
				for p := 0; p < k; p++ {
					s += a[p*m+i] * b[p*n+j]
				}
			}
			c[i*n+j] = s
		}
	}
}

// Transpose writes dst[c×r] = srcᵀ for src stored r×c row-major.
func Transpose(dst, src []float32, r, c int) {
	if len(dst) < r*c || len(src) < r*c {
		panic("kern: Transpose slice too short")
	}
	const blk = 16
	for i0 := 0; i0 < r; i0 += blk {
		i1 := min(i0+blk, r)
		for j0 := 0; j0 < c; j0 += blk {
			j1 := min(j0+blk, c)
			for i := i0; i < i1; i++ {
				row := src[i*c : i*c+c]
				for j := j0; j < j1; j++ {
					dst[j*r+i] = row[j]
				}
			}
		}
	}
}

// Dot returns Σ a[i]·b[i] over i < len(a) (b must be at least as long).
//
// Its summation order is NOT the sequential GEMM chain: it keeps many
// partial sums (lane i%64 in the SIMD build, fused multiply-adds; lane i%16,
// separate multiply and add in the portable build) and reduces them in a
// fixed tree. The result is deterministic for a given length and build
// path, but do not expect bit equality with MatMul; use Axpy chains or
// MatMul where that matters.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	return dot(a, b)
}

// Axpy computes y[i] += alpha·x[i] for i < len(y) (x must be at least as
// long). In the SIMD build this is a fused multiply-add, so a sequence of
// Axpy calls over p reproduces MatMul's per-element chain bit for bit (and
// in the portable build it reproduces RefMatMul's unfused chain on amd64).
func Axpy(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	axpy(y, alpha, x)
}

// Scale computes x[i] *= alpha.
func Scale(x []float32, alpha float32) { scale(x, alpha) }

// ExpInPlace replaces every x[i] with exp(x[i]), using a branch-free
// Cephes-style polynomial (range reduction by ln 2, degree-5 polynomial,
// exponent reconstruction in two halves so subnormal results are right).
// Relative error is below about 2e-7 (1–2 ulp) on [-87, 88]; results are
// subnormal down to about -103.3 and exactly 0 below; x ≥ ~88.72 gives
// +Inf; NaN stays NaN. Each element is computed independently with
// separate multiplies and adds (no FMA), so the SIMD paths (AVX-512,
// AVX2) and the portable code give identical bits on amd64.
func ExpInPlace(x []float32) { expInPlace(x) }

// SoftmaxInPlace replaces x with softmax(x) = exp(x - max) / Σ exp(x - max).
// The sum uses 16 fixed lanes (element i goes to lane i%16, lanes reduced in
// a fixed tree), so the result depends only on the values and the length:
// the AVX-512, AVX2 and portable paths all give identical bits on amd64.
// An empty slice is left alone.
func SoftmaxInPlace(x []float32) {
	if len(x) == 0 {
		return
	}
	softmax(x)
}

// Exp constants (Cephes expf).
const (
	expLo    = -104.0 // exp(-104) rounds to 0 in float32
	expHi    = 89.0   // above ln(MaxFloat32): overflows to +Inf
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
	expRound = 12582912.0 // 1.5·2^23: adding and subtracting rounds to nearest even
)

// refExp1 is the scalar exp; every product is wrapped in float32() so no
// compiler may fuse it into an FMA (the SIMD versions use the same
// unfused operation sequence and give the same bits).
func refExp1(v float32) float32 {
	if v != v {
		return v
	}
	x := min(max(v, expLo), expHi)
	t := float32(x * expLog2e)
	fn := (t + expRound) - expRound
	x = x - float32(fn*expC1)
	x = x - float32(fn*expC2)
	z := float32(x * x)
	y := float32(expP0 * x)
	y = float32(float32(y+expP1) * x)
	y = float32(float32(y+expP2) * x)
	y = float32(float32(y+expP3) * x)
	y = float32(float32(y+expP4) * x)
	y = float32(y + expP5)
	y = float32(y * z)
	y = y + x
	y = y + 1
	n := int32(fn)
	n1 := n >> 1
	n2 := n - n1
	s1 := math.Float32frombits(uint32(n1+127) << 23)
	s2 := math.Float32frombits(uint32(n2+127) << 23)
	return float32(float32(y*s1) * s2)
}

func refExp(x []float32) {
	for i, v := range x {
		x[i] = refExp1(v)
	}
}

// reduce16 sums 16 lanes in the fixed tree used by every softmax path.
func reduce16(s *[16]float32) float32 {
	for h := 8; h >= 1; h >>= 1 {
		for l := 0; l < h; l++ {
			s[l] += s[l+h]
		}
	}
	return s[0]
}

func refSoftmax(x []float32) {
	mx := x[0]
	for _, v := range x {
		mx = max(mx, v)
	}
	var s [16]float32
	for i := range x {
		e := refExp1(x[i] - mx)
		x[i] = e
		s[i&15] += e
	}
	sum := reduce16(&s)
	for i := range x {
		x[i] /= sum
	}
}

func refDot(a, b []float32) float32 {
	var s [16]float32
	for i := range a {
		s[i&15] += float32(a[i] * b[i])
	}
	return reduce16(&s)
}

func refAxpy(y []float32, alpha float32, x []float32) {
	for i := range y {
		y[i] += alpha * x[i]
	}
}

func refScale(x []float32, alpha float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// PathEnv is the environment variable that selects a kernel path below the
// CPU's best: "avx2" (AVX2+FMA ymm kernels), "avx512" or "portable" (the
// reference loops). Empty means the CPU's best. It is read once at start-up.
const PathEnv = "LONGHAUL_KERN_PATH"

// Instruction-set paths, in increasing order of what the CPU must have.
const (
	isaRef    = iota // portable reference (no FMA)
	isaAVX2          // AVX2 + FMA, ymm micro-kernels
	isaAVX512        // AVX-512 F/CD/BW/DQ/VL, zmm micro-kernels
)

func isaName(isa int) string {
	switch isa {
	case isaAVX512:
		return "avx512"
	case isaAVX2:
		return "avx2"
	}
	return "portable"
}

// parsePath resolves a PathEnv value against the best path the CPU (and
// build) has. A path the CPU lacks is an error, not a silent fallback: a
// run that asked for AVX-512 bits must not quietly get another path.
func parsePath(have int, v string) (int, error) {
	if v == "" {
		return have, nil
	}
	for isa := isaRef; isa <= isaAVX512; isa++ {
		if v != isaName(isa) {
			continue
		}
		if isa > have {
			return 0, fmt.Errorf("kern: %s=%q: this CPU/build only runs up to %q", PathEnv, v, isaName(have))
		}
		return isa, nil
	}
	return 0, fmt.Errorf("kern: %s=%q: want one of avx512, avx2, portable (or unset)", PathEnv, v)
}

// mustPath is parsePath for package initialisation, where an error can
// only be a panic (with a message naming the variable and its value).
func mustPath(have int, v string) int {
	isa, err := parsePath(have, v)
	if err != nil {
		panic(err)
	}
	return isa
}
