package kern

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// bf16Operand draws an n×k bfloat16 matrix and its exact float32 value.
func bf16Operand(r *rand.Rand, n, k int) ([]uint16, []float32) {
	h := make([]uint16, n*k)
	f := make([]float32, n*k)
	for i := range h {
		h[i] = ToBF16(float32(r.NormFloat64()))
		f[i] = FromBF16(h[i])
	}
	return h, f
}

// TestBF16MatchesF32: the NT product with a bfloat16 B gives the bits of
// MatMulNT with B widened, on every shape class the drivers split into (1,
// 2-3 and ≥ 4 rows; tails of every panel width; k across the 256-block),
// with and without acc, and so do its row-parallel and column-parallel
// forms for several shard counts (and its parts, one call per block). The
// column-parallel float32 form equals MatMulNT too.
func TestBF16MatchesF32(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, m := range []int{1, 2, 3, 5, 16, 33} {
		for _, k := range []int{1, 7, 16, 100, 257, 520} {
			for _, n := range []int{1, 15, 33, 64, 100, 300} {
				h, f := bf16Operand(r, n, k)
				a := randVec(r, m*k)
				c0 := randVec(r, m*n)
				for _, acc := range []bool{false, true} {
					name := fmt.Sprintf("m=%d k=%d n=%d acc=%v", m, k, n, acc)
					want := append([]float32(nil), c0...)
					MatMulNT(want, a, f, m, k, n, acc)
					got := append([]float32(nil), c0...)
					MatMulNTBF16(got, a, h, m, k, n, acc)
					bitsEqual(t, name+" BF16", got, want)
					for _, sh := range []int{2, 3} {
						got = append(got[:0], c0...)
						MatMulNTBF16Par(got, a, h, m, k, n, acc, sh)
						bitsEqual(t, fmt.Sprintf("%s BF16Par(%d)", name, sh), got, want)
						got = append(got[:0], c0...)
						MatMulNTBF16Cols(got, a, h, m, k, n, acc, sh)
						bitsEqual(t, fmt.Sprintf("%s BF16Cols(%d)", name, sh), got, want)
						got = append(got[:0], c0...)
						MatMulNTCols(got, a, f, m, k, n, acc, sh)
						bitsEqual(t, fmt.Sprintf("%s Cols(%d)", name, sh), got, want)
						got = append(got[:0], c0...)
						for part := range sh + 1 { // one past the last: nothing
							MatMulNTBF16ColsPart(got, a, h, m, k, n, acc, part, sh)
							MatMulNTColsPart(got[:0:0], a[:0:0], f[:0:0], 0, 0, 0, acc, part, sh)
						}
						bitsEqual(t, fmt.Sprintf("%s BF16ColsPart(%d)", name, sh), got, want)
					}
				}
			}
		}
	}
}

// TestBF16Rounding: ToBF16 rounds to nearest even and keeps NaN a NaN;
// FromBF16 is its exact inverse on bfloat16 values.
func TestBF16Rounding(t *testing.T) {
	if ToBF16(1.00390625) != 0x3f80 || ToBF16(1.01171875) != 0x3f82 {
		t.Fatalf("ties: %#x %#x", ToBF16(1.00390625), ToBF16(1.01171875))
	}
	for _, h := range []uint16{0, 0x8000, 0x3f80, 0x7f80, 0xff80, 0x0001, 0x7f7f} {
		if ToBF16(FromBF16(h)) != h {
			t.Fatalf("%#x does not round-trip", h)
		}
	}
	if v := FromBF16(ToBF16(float32NaN())); v == v {
		t.Fatal("NaN became a number")
	}
}

func float32NaN() float32 {
	var z float32
	return z / z
}
