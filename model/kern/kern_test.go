package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var edgeSizes = []int{1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 128, 257}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// transpose returns the c×r transpose of an r×c matrix.
func transpose(src []float32, r, c int) []float32 {
	d := make([]float32, r*c)
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			d[j*r+i] = src[i*c+j]
		}
	}
	return d
}

func bitsEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d differs: %v (%#x) vs %v (%#x)", what, i,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

type mmFunc func(c, a, b []float32, m, k, n int, acc bool)

var kinds = []struct {
	name string
	fast mmFunc
	ref  mmFunc
	// layout of A and B as stored (rows×cols)
	aT, bT bool
}{
	{"NN", MatMul, RefMatMul, false, false},
	{"NT", MatMulNT, RefMatMulNT, false, true},
	{"TN", MatMulTN, RefMatMulTN, true, false},
}

// checkClose compares got with the reference within a bound relative to k
// and to Σ|a||b| of each element (both are k-step float32 chains).
func checkClose(t *testing.T, what string, got, want, a, b, c0 []float32, m, k, n int, aT, bT, acc bool) {
	t.Helper()
	eps := float64(k+2) * 2 * 0x1p-24
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var mag float64
			if acc {
				mag = math.Abs(float64(c0[i*n+j]))
			}
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if aT {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if bT {
					bv = b[j*k+p]
				}
				mag += math.Abs(float64(av) * float64(bv))
			}
			d := math.Abs(float64(got[i*n+j]) - float64(want[i*n+j]))
			if d > eps*mag+1e-30 {
				t.Fatalf("%s: C[%d,%d] = %v, ref %v (|d|=%g > %g)", what, i, j, got[i*n+j], want[i*n+j], d, eps*mag)
			}
		}
	}
}

func TestMatMulVsRef(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	count := 0
	// The reference costs O(mnk) and -race slows it several times: keep the
	// full cross product small there, and the big shapes for plain runs.
	lim, big := 1<<15, true
	if raceEnabled {
		lim, big = 1<<13, false
	}
	for _, m := range edgeSizes {
		for _, n := range edgeSizes {
			for _, k := range edgeSizes {
				// Keep the reference cost bounded; the big shapes are
				// covered by a few explicit cases below.
				if m*n*k > lim && !(big && (m == 257 && n == 33 && k == 257 || m == 33 && n == 100 && k == 257)) {
					continue
				}
				count++
				a, b := randVec(r, m*k), randVec(r, k*n)
				c0 := randVec(r, m*n)
				for _, kd := range kinds {
					for _, acc := range []bool{false, true} {
						if acc && (m*n*k)%3 != 0 { // thin out the acc cases
							continue
						}
						got := append([]float32(nil), c0...)
						want := append([]float32(nil), c0...)
						kd.fast(got, a, b, m, k, n, acc)
						kd.ref(want, a, b, m, k, n, acc)
						checkClose(t, fmt.Sprintf("%s m=%d k=%d n=%d acc=%v", kd.name, m, k, n, acc),
							got, want, a, b, c0, m, k, n, kd.aT, kd.bT, acc)
					}
				}
			}
		}
	}
	t.Logf("%d shapes", count)
}

func TestMatMulZeroSizes(t *testing.T) {
	for _, kd := range kinds {
		c := []float32{1, 2, 3, 4}
		kd.fast(c, nil, nil, 2, 0, 2, true)
		bitsEqual(t, kd.name+" k=0 acc", c, []float32{1, 2, 3, 4})
		kd.fast(c, nil, nil, 2, 0, 2, false)
		bitsEqual(t, kd.name+" k=0", c, []float32{0, 0, 0, 0})
		kd.fast(nil, nil, make([]float32, 6), 0, 3, 2, false)
		kd.fast(nil, make([]float32, 6), nil, 2, 3, 0, false)
	}
}

func TestMatMulShortSlicePanics(t *testing.T) {
	for _, kd := range kinds {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic on short slice", kd.name)
				}
			}()
			kd.fast(make([]float32, 4), make([]float32, 5), make([]float32, 6), 2, 3, 2, false)
		}()
	}
}

// TestTilingBitIdentity checks that results do not depend on how the output
// is split or which entry point computes it.
func TestTilingBitIdentity(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := [][3]int{{1, 128, 512}, {1, 100, 150}, {1, 1040, 200}, {1, 15, 70}, {16, 128, 512}, {37, 300, 97}, {64, 33, 200}, {100, 257, 65}, {7, 513, 31}, {130, 64, 16}}
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		name := fmt.Sprintf("m=%d k=%d n=%d", m, k, n)
		a, b := randVec(r, m*k), randVec(r, k*n)
		whole := make([]float32, m*n)
		MatMul(whole, a, b, m, k, n, false)

		// NT and TN on explicitly transposed inputs.
		c := make([]float32, m*n)
		MatMulNT(c, a, transpose(b, k, n), m, k, n, false)
		bitsEqual(t, name+" NT vs NN", c, whole)
		clear(c)
		MatMulTN(c, transpose(a, m, k), b, m, k, n, false)
		bitsEqual(t, name+" TN vs NN", c, whole)

		// Row blocks of uneven sizes.
		clear(c)
		for r0 := 0; r0 < m; {
			r1 := min(m, r0+1+r0%5)
			MatMul(c[r0*n:r1*n], a[r0*k:r1*k], b, r1-r0, k, n, false)
			r0 = r1
		}
		bitsEqual(t, name+" row blocks", c, whole)

		// Column blocks of B (copied out contiguously).
		for _, cw := range []int{1, 5, 16, 17, 40, 64, 70} {
			for j0 := 0; j0 < n; j0 += cw {
				j1 := min(n, j0+cw)
				w := j1 - j0
				bb := make([]float32, k*w)
				for p := 0; p < k; p++ {
					copy(bb[p*w:], b[p*n+j0:p*n+j1])
				}
				cb := make([]float32, m*w)
				MatMul(cb, a, bb, m, k, w, false)
				for i := 0; i < m; i++ {
					bitsEqual(t, fmt.Sprintf("%s col block %d+%d", name, j0, w), cb[i*w:(i+1)*w], whole[i*n+j0:i*n+j1])
				}
			}
		}

		// Splitting k and accumulating continues the same chain.
		for _, k1 := range []int{1, k / 3, k / 2, k - 1} {
			if k1 <= 0 || k1 >= k {
				continue
			}
			a1, a2 := make([]float32, m*k1), make([]float32, m*(k-k1))
			for i := 0; i < m; i++ {
				copy(a1[i*k1:], a[i*k:i*k+k1])
				copy(a2[i*(k-k1):], a[i*k+k1:(i+1)*k])
			}
			clear(c)
			MatMul(c, a1, b[:k1*n], m, k1, n, false)
			MatMul(c, a2, b[k1*n:], m, k-k1, n, true)
			bitsEqual(t, fmt.Sprintf("%s k split at %d", name, k1), c, whole)
		}

		// Parallel entry points.
		for _, sh := range []int{1, 2, 3, 7} {
			clear(c)
			MatMulPar(c, a, b, m, k, n, false, sh)
			bitsEqual(t, fmt.Sprintf("%s Par %d", name, sh), c, whole)
			clear(c)
			MatMulNTPar(c, a, transpose(b, k, n), m, k, n, false, sh)
			bitsEqual(t, fmt.Sprintf("%s NTPar %d", name, sh), c, whole)
			clear(c)
			MatMulTNPar(c, transpose(a, m, k), b, m, k, n, false, sh)
			bitsEqual(t, fmt.Sprintf("%s TNPar %d", name, sh), c, whole)
		}

		// A chain of Axpy calls is the same per-element chain.
		for _, i := range []int{0, m - 1} {
			row := make([]float32, n)
			for p := 0; p < k; p++ {
				Axpy(row, a[i*k+p], b[p*n:(p+1)*n])
			}
			bitsEqual(t, fmt.Sprintf("%s Axpy chain row %d", name, i), row, whole[i*n:(i+1)*n])
		}
	}
}

func TestParAccumulate(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, k, n := 50, 70, 90
	a, b, c0 := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
	want := append([]float32(nil), c0...)
	MatMul(want, a, b, m, k, n, true)
	for _, sh := range []int{2, 3} {
		c := append([]float32(nil), c0...)
		MatMulPar(c, a, b, m, k, n, true, sh)
		bitsEqual(t, "Par acc", c, want)
	}
}

// TestRandomShapes is a fuzz-style sweep over random shapes, layouts and
// modes, comparing with the reference and with the row-sharded entry points.
func TestRandomShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for it := 0; it < 80; it++ {
		m, k, n := 1+r.IntN(40), 1+r.IntN(300), 1+r.IntN(150)
		kd := kinds[r.IntN(3)]
		acc := r.IntN(2) == 0
		a, b, c0 := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
		got := append([]float32(nil), c0...)
		want := append([]float32(nil), c0...)
		kd.fast(got, a, b, m, k, n, acc)
		kd.ref(want, a, b, m, k, n, acc)
		name := fmt.Sprintf("%s m=%d k=%d n=%d acc=%v", kd.name, m, k, n, acc)
		checkClose(t, name, got, want, a, b, c0, m, k, n, kd.aT, kd.bT, acc)
		sh := 2 + r.IntN(3)
		p := append([]float32(nil), c0...)
		switch kd.name {
		case "NN":
			MatMulPar(p, a, b, m, k, n, acc, sh)
		case "NT":
			MatMulNTPar(p, a, b, m, k, n, acc, sh)
		default:
			MatMulTNPar(p, a, b, m, k, n, acc, sh)
		}
		bitsEqual(t, name+" par", p, got)
	}
}

func TestTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range [][2]int{{1, 1}, {3, 17}, {33, 16}, {64, 100}} {
		src := randVec(r, s[0]*s[1])
		d := make([]float32, len(src))
		Transpose(d, src, s[0], s[1])
		bitsEqual(t, "transpose", d, transpose(src, s[0], s[1]))
	}
}

func TestDotAxpyScale(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for n := 0; n < 300; n += 1 + n/8 {
		a, b := randVec(r, n), randVec(r, n)
		var want, mag float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		got := Dot(a, b)
		if d := math.Abs(float64(got) - want); d > 1e-6*mag+1e-30 {
			t.Fatalf("Dot n=%d: %v vs %v", n, got, want)
		}
		if g2 := Dot(a, b); math.Float32bits(g2) != math.Float32bits(got) {
			t.Fatalf("Dot not repeatable")
		}
		y := append([]float32(nil), b...)
		Axpy(y, 0.75, a)
		y2 := append([]float32(nil), b...)
		Scale(y2, 2)
		for i := range y {
			if d := math.Abs(float64(y[i]) - (float64(b[i]) + 0.75*float64(a[i]))); d > 1e-6*(math.Abs(float64(b[i]))+math.Abs(float64(a[i]))) {
				t.Fatalf("Axpy n=%d i=%d: %v", n, i, y[i])
			}
			if y2[i] != 2*b[i] {
				t.Fatalf("Scale n=%d i=%d", n, i)
			}
		}
	}
}

func TestExp(t *testing.T) {
	check := func(x float32) float32 {
		v := []float32{x}
		ExpInPlace(v)
		return v[0]
	}
	// Special values.
	if v := check(0); v != 1 {
		t.Fatalf("exp(0) = %v", v)
	}
	for _, x := range []float32{-104, -200, float32(math.Inf(-1)), -1e30} {
		if v := check(x); v != 0 {
			t.Fatalf("exp(%v) = %v, want 0", x, v)
		}
	}
	for _, x := range []float32{89, 100, float32(math.Inf(1))} {
		if v := check(x); !math.IsInf(float64(v), 1) {
			t.Fatalf("exp(%v) = %v, want +Inf", x, v)
		}
	}
	if v := check(float32(math.NaN())); v == v {
		t.Fatalf("exp(NaN) = %v", v)
	}
	// Accuracy sweep (in vectors of odd length to hit the tails).
	const N = 200003
	xs := make([]float32, N)
	for i := range xs {
		xs[i] = -104 + float32(i)*(104+88.7)/N
	}
	ys := append([]float32(nil), xs...)
	ExpInPlace(ys)
	var worst float64
	for i, x := range xs {
		want := math.Exp(float64(x))
		got := float64(ys[i])
		if want < 0x1p-126 { // subnormal range: absolute error in units of the smallest subnormal
			if d := math.Abs(got - want); d > 2*0x1p-149 {
				t.Fatalf("exp(%v) = %g, want %g", x, got, want)
			}
			continue
		}
		rel := math.Abs(got-want) / want
		worst = max(worst, rel)
		if rel > 3e-7 {
			t.Fatalf("exp(%v) = %g, want %g (rel %g)", x, got, want, rel)
		}
	}
	t.Logf("worst relative error %.3g (%.2f ulp of 2^-24)", worst, worst/0x1p-24)
	// Portable scalar and vector paths agree bit for bit.
	ref := append([]float32(nil), xs...)
	refExp(ref)
	bitsEqual(t, "ExpInPlace vs refExp", ys, ref)
}

func TestSoftmax(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 2, 7, 15, 16, 17, 31, 33, 64, 100, 255, 256, 1000} {
		x := randVec(r, n)
		for i := range x {
			x[i] *= 5
		}
		if n > 3 {
			x[2] = -1e30 // a masked position
		}
		want := append([]float32(nil), x...)
		refSoftmax(want)
		got := append([]float32(nil), x...)
		SoftmaxInPlace(got)
		bitsEqual(t, fmt.Sprintf("softmax n=%d vs portable", n), got, want)
		var sum float64
		mx := x[0]
		for _, v := range x {
			mx = max(mx, v)
		}
		var z float64
		for _, v := range x {
			z += math.Exp(float64(v - mx))
		}
		for i, v := range got {
			sum += float64(v)
			w := math.Exp(float64(x[i]-mx)) / z
			if math.Abs(float64(v)-w) > 5e-6*w+1e-12 {
				t.Fatalf("softmax n=%d i=%d: %v vs %v", n, i, v, w)
			}
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Fatalf("softmax n=%d sums to %v", n, sum)
		}
	}
	SoftmaxInPlace(nil)
}

// TestNoSteadyStateAllocs: the single-threaded kernels take their scratch
// from a pool and must not allocate per call once warm.
func TestNoSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	r := rand.New(rand.NewPCG(15, 16))
	m, k, n := 37, 70, 90
	a, b, c := randVec(r, m*k), randVec(r, k*n), make([]float32, m*n)
	x := randVec(r, 100)
	for _, kd := range kinds {
		kd.fast(c, a, b, m, k, n, false)
		if got := testing.AllocsPerRun(20, func() { kd.fast(c, a, b, m, k, n, true) }); got > 0 {
			t.Errorf("%s allocates %v per call", kd.name, got)
		}
	}
	if got := testing.AllocsPerRun(20, func() {
		SoftmaxInPlace(x)
		ExpInPlace(x)
		Axpy(x, 0.5, x)
		Scale(x, 0.5)
		_ = Dot(x, x)
	}); got > 0 {
		t.Errorf("vector ops allocate %v per call", got)
	}
}
