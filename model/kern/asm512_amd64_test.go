//go:build goexperiment.simd && amd64

package kern

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// zShapes are the AVX-512 blockings the tests and benchmarks cover: the one
// in use and the alternatives BenchmarkAVX512Blocking compares it with.
var zShapes = []zShape{{zRows, zVecs, zKC}, {14, 2, 256}, {8, 3, 256}, {6, 4, 256}, {14, 1, 96}}

// TestAsm512MatchesArchsimd: the assembly AVX-512 driver, with every
// blocking and so every tile height 1-14 and width 16-64, masked column
// tails, K-blocks, acc, B packed or in place, gives the bits of the
// archsimd AVX-512 kernels it replaced on every layout.
func TestAsm512MatchesArchsimd(t *testing.T) {
	if cpuISA < isaAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(51, 52))
	shapes := [][3]int{{1, 1, 1}, {2, 7, 40}, {3, 33, 100}, {4, 1, 1}, {5, 300, 77}, {12, 8, 32}, {13, 9, 17}, {14, 257, 64}, {15, 20, 65}, {29, 96, 49}, {130, 20, 9}}
	for m := 1; m <= 16; m++ {
		shapes = append(shapes, [3]int{m, 1 + r.IntN(40), 1 + r.IntN(100)})
	}
	for it := 0; it < 12; it++ {
		shapes = append(shapes, [3]int{4 + r.IntN(60), 1 + r.IntN(600), 1 + r.IntN(140)})
	}
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		a, b, c0 := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
		for kind := kindNN; kind <= kindTN; kind++ {
			A, B := operand{s: a, rs: k, cs: 1}, operand{s: b, rs: n, cs: 1}
			switch kind {
			case kindNT:
				B = operand{s: b, rs: 1, cs: k}
			case kindTN:
				A = operand{s: a, rs: 1, cs: m}
			}
			for _, acc := range []bool{false, true} {
				for _, inPlace := range []bool{false, true} {
					want := slices.Clone(c0)
					gemm512simd(want, n, A, B, m, k, n, acc, inPlace, new(scratch))
					for _, z := range zShapes {
						got := slices.Clone(c0)
						gemm512z(z, got, n, A, B, m, k, n, acc, inPlace, new(panel), nil)
						bitsEqual(t, fmt.Sprintf("z=%v kind=%d m=%d k=%d n=%d acc=%v inPlace=%v", z, kind, m, k, n, acc, inPlace), got, want)
					}
				}
			}
		}
	}
}

// TestAsm512StaysInBounds: C has exactly m·n floats, surrounded by
// sentinels; masked tails and tile edges write nothing outside.
func TestAsm512StaysInBounds(t *testing.T) {
	if cpuISA < isaAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(53, 54))
	for _, s := range [][3]int{{4, 3, 1}, {13, 5, 17}, {14, 7, 33}, {25, 9, 50}} {
		m, k, n := s[0], s[1], s[2]
		a, b := randVec(r, m*k), randVec(r, k*n)
		for _, z := range zShapes {
			buf := make([]float32, m*n+64)
			for i := range buf {
				buf[i] = 12345
			}
			c := buf[32 : 32+m*n : 32+m*n]
			gemm512z(z, c, n, operand{s: a, rs: k, cs: 1}, operand{s: b, rs: n, cs: 1}, m, k, n, true, false, new(panel), nil)
			for i := range 32 {
				if buf[i] != 12345 || buf[32+m*n+i] != 12345 {
					t.Fatalf("z=%v m=%d k=%d n=%d: wrote outside C", z, m, k, n)
				}
			}
		}
	}
}
