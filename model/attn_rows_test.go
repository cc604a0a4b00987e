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
// sizes on both sides of the kernels' 4-head, 2-vector blocking.
func TestAttnDecodeRowMatchesPerHead(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range [][4]int{ // H, hs, T, nk
		{4, 32, 128, 1}, {4, 32, 128, 17}, {4, 32, 128, 128}, {1, 16, 64, 33}, {2, 16, 96, 50},
		{3, 32, 64, 64}, {5, 16, 48, 47}, {6, 64, 32, 31}, {8, 8, 16, 9}, {4, 12, 40, 25}, {3, 24, 36, 36},
	} {
		H, hs, T, nk := s[0], s[1], s[2], s[3]
		name := fmt.Sprintf("H=%d hs=%d T=%d nk=%d", H, hs, T, nk)
		q, kt, v := rvec(r, H*hs), rvec(r, H*hs*ktLen(T)), rvec(r, H*T*hs)
		scale := float32(1 / math.Sqrt(float64(hs)))
		got := make([]float32, H*hs)
		attnDecodeRow(got, make([]float32, H*probStride(T)), q, kt, v, nk, T, H, hs, scale)
		for h := range H {
			want := make([]float32, hs)
			attnDecode(want, make([]float32, probStride(T)), q[h*hs:(h+1)*hs], kt[h*hs*ktLen(T):], v[h*T*hs:], nk, scale)
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
