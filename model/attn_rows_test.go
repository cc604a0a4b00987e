package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttnDecodeRowMatchesPerHead: attention for all heads of a decode row
// at once (the 4-head chain kernels, padded head groups, odd key chunks)
// gives the bits of attnDecode run head by head, for head counts and
// sizes on both sides of the kernels' 4-head, 2-vector blocking, with
// grouped-query attention (rep query heads per kv head).
func TestAttnDecodeRowMatchesPerHead(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range [][5]int{ // H, hs, T, nk, rep
		{4, 32, 128, 1, 1}, {4, 32, 128, 17, 1}, {4, 32, 128, 128, 1}, {1, 16, 64, 33, 1}, {2, 16, 96, 50, 1},
		{3, 32, 64, 64, 1}, {5, 16, 48, 47, 1}, {6, 64, 32, 31, 1}, {8, 8, 16, 9, 1}, {4, 12, 40, 25, 1}, {3, 24, 36, 36, 1},
		{8, 16, 64, 40, 4}, {16, 128, 64, 63, 2}, {4, 32, 128, 70, 4}, {6, 16, 48, 20, 3},
	} {
		H, hs, T, nk, rep := s[0], s[1], s[2], s[3], s[4]
		K := H / rep
		name := fmt.Sprintf("H=%d hs=%d T=%d nk=%d rep=%d", H, hs, T, nk, rep)
		q, kt, v := rvec(r, H*hs), rvec(r, K*hs*ktLen(T)), rvec(r, K*T*hs)
		scale := float32(1 / math.Sqrt(float64(hs)))
		got := make([]float32, H*hs)
		attnDecodeRow(got, make([]float32, H*probStride(T)), q, kt, v, nk, T, H, rep, hs, scale)
		for h := range H {
			want := make([]float32, hs)
			g := h / rep
			attnDecode(want, make([]float32, probStride(T)), q[h*hs:(h+1)*hs], kt[g*hs*ktLen(T):], v[g*T*hs:], nk, scale)
			for c := range hs {
				if math.Float32bits(got[h*hs+c]) != math.Float32bits(want[c]) {
					t.Fatalf("%s: head %d column %d: %v, per head %v", name, h, c, got[h*hs+c], want[c])
				}
			}
		}
	}
}

func rvec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	return x
}
