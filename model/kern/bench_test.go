package kern

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

var benchShapes = [][3]int{{256, 128, 512}, {1024, 256, 1024}, {16, 128, 512}, {1, 128, 512}, {1, 128, 264}, {128, 32, 128}, {128, 128, 32}, {128, 512, 704}}

func benchMM(b *testing.B, f func(c, a, bb []float32), m, k, n int) {
	r := rand.New(rand.NewPCG(1, 1))
	a, bb, c := randVec(r, m*k), randVec(r, k*n), make([]float32, m*n)
	f(c, a, bb)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f(c, a, bb)
	}
	b.ReportMetric(2*float64(m)*float64(k)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkMatMul reports GFLOP/s (2·m·k·n per call) for each layout on the
// model's shapes: single-threaded, MatMulPar with 2 shards, and the
// reference as the baseline.
func BenchmarkMatMul(b *testing.B) {
	type entry struct {
		name string
		f    func(c, a, bb []float32, m, k, n int)
	}
	entries := []entry{
		{"NN", func(c, a, bb []float32, m, k, n int) { MatMul(c, a, bb, m, k, n, false) }},
		{"NN/par2", func(c, a, bb []float32, m, k, n int) { MatMulPar(c, a, bb, m, k, n, false, 2) }},
		{"NN/ref", func(c, a, bb []float32, m, k, n int) { RefMatMul(c, a, bb, m, k, n, false) }},
		{"NT", func(c, a, bb []float32, m, k, n int) { MatMulNT(c, a, bb, m, k, n, false) }},
		{"NT/par2", func(c, a, bb []float32, m, k, n int) { MatMulNTPar(c, a, bb, m, k, n, false, 2) }},
		{"NT/ref", func(c, a, bb []float32, m, k, n int) { RefMatMulNT(c, a, bb, m, k, n, false) }},
		{"TN", func(c, a, bb []float32, m, k, n int) { MatMulTN(c, a, bb, m, k, n, false) }},
		{"TN/par2", func(c, a, bb []float32, m, k, n int) { MatMulTNPar(c, a, bb, m, k, n, false, 2) }},
		{"TN/ref", func(c, a, bb []float32, m, k, n int) { RefMatMulTN(c, a, bb, m, k, n, false) }},
	}
	for _, e := range entries {
		for _, s := range benchShapes {
			m, k, n := s[0], s[1], s[2]
			b.Run(fmt.Sprintf("%s/%dx%dx%d", e.name, m, k, n), func(b *testing.B) {
				benchMM(b, func(c, a, bb []float32) { e.f(c, a, bb, m, k, n) }, m, k, n)
			})
		}
	}
}

func BenchmarkVec(b *testing.B) {
	for _, n := range []int{128, 512, 4096} {
		r := rand.New(rand.NewPCG(2, 2))
		x, y := randVec(r, n), randVec(r, n)
		b.Run(fmt.Sprintf("Dot/%d", n), func(b *testing.B) {
			var s float32
			for i := 0; i < b.N; i++ {
				s += Dot(x, y)
			}
			b.ReportMetric(2*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			_ = s
		})
		b.Run(fmt.Sprintf("Axpy/%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Axpy(y, 1e-7, x)
			}
			b.ReportMetric(2*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(fmt.Sprintf("Exp/%d", n), func(b *testing.B) {
			z := make([]float32, n)
			for i := 0; i < b.N; i++ {
				copy(z, x)
				ExpInPlace(z)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
		b.Run(fmt.Sprintf("Softmax/%d", n), func(b *testing.B) {
			z := make([]float32, n)
			for i := 0; i < b.N; i++ {
				copy(z, x)
				SoftmaxInPlace(z)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}

// BenchmarkModelShapes covers the model's own products for a 512-token
// shard with d=128, F=352, V=264 (see model/model.go).
func BenchmarkModelShapes(b *testing.B) {
	fs := []mmFunc{MatMul, MatMulNT, MatMulTN}
	for _, s := range []struct {
		name    string
		kind    int
		m, k, n int
	}{
		{"qkv", kindNN, 512, 128, 384}, {"fc", kindNN, 512, 128, 704}, {"fc2", kindNN, 512, 352, 128},
		{"logits", kindNT, 512, 128, 264}, {"dln", kindNN, 512, 264, 128}, {"dqkv", kindNT, 512, 384, 128},
		{"dfc2", kindNT, 512, 128, 352}, {"gqkv", kindTN, 128, 512, 384}, {"gfc2", kindTN, 352, 512, 128},
		{"gwte", kindTN, 264, 512, 128},
	} {
		f := fs[s.kind]
		b.Run(fmt.Sprintf("%s/%dx%dx%d", s.name, s.m, s.k, s.n), func(b *testing.B) {
			benchMM(b, func(c, a, bb []float32) { f(c, a, bb, s.m, s.k, s.n, false) }, s.m, s.k, s.n)
		})
	}
}
