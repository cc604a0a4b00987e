//go:build goexperiment.simd && amd64

package kern

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPackedMatchesMatMul: a product with B from Pack gives the bits of the
// same path's MatMul with the plain B, on every SIMD path this CPU has, for
// row counts on both sides of the GEMV and tile limits, widths with and
// without panel tails, K past one block, and acc.
func TestPackedMatchesMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	shapes := [][3]int{{1, 1, 1}, {1, 128, 384}, {1, 40, 24}, {1, 33, 40}, {1, 50, 21}, {1, 9, 29}, {1, 300, 45}, {2, 7, 100}, {3, 300, 17}, {4, 128, 264}, {8, 352, 128}, {8, 128, 704}, {13, 257, 33}, {16, 128, 264}, {30, 600, 50}}
	for it := 0; it < 20; it++ {
		shapes = append(shapes, [3]int{1 + r.IntN(40), 1 + r.IntN(600), 1 + r.IntN(150)})
	}
	for _, isa := range availableISAs() {
		for _, s := range shapes {
			m, k, n := s[0], s[1], s[2]
			a, b, c0 := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
			var pk Packed
			packWidth(&pk, b, k, n, packWidthOf(isa))
			for _, acc := range []bool{false, true} {
				want, got := slices.Clone(c0), slices.Clone(c0)
				mmISA(isa, kindNN, want, a, b, m, k, n, acc, 0, m)
				packedISA(isa, got, a, m, &pk, acc)
				bitsEqual(t, fmt.Sprintf("%s m=%d k=%d n=%d acc=%v", isaName(isa), m, k, n, acc), got, want)
			}
		}
	}
}

// TestPackLayout: Pack's panels hold B's columns in order, zero-padded, and
// MatMulPacked refuses an operand packed for another path.
func TestPackLayout(t *testing.T) {
	b := []float32{1, 2, 3, 4, 5, 6} // 2×3
	var pk Packed
	packWidth(&pk, b, 2, 3, 16)
	want := make([]float32, 32)
	copy(want[0:], []float32{1, 2, 3})
	copy(want[16:], []float32{4, 5, 6})
	if !slices.Equal(pk.p, want) {
		t.Fatalf("panels %v, want %v", pk.p, want)
	}
	if packWidthOf(isaAVX2) == packWidthOf(isaAVX512) {
		return
	}
	defer func() {
		if recover() == nil {
			t.Fatal("an operand packed for AVX2 was accepted by the AVX-512 path")
		}
	}()
	packedISA(isaAVX512, make([]float32, 3), []float32{1, 1}, 1, &pk, false)
}
