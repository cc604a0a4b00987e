package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttnDecodeRow: one decode row's attention (all heads) for model
// A's shapes at a few key counts, over one KV cache ("hot") or rotating
// over 16 sequences' caches of 2 layers each as a batch-16 decode step does
// ("rot").
func BenchmarkAttnDecodeRow(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxPos = 256
	H, hs, T := cfg.Heads, cfg.HeadDim, cfg.MaxPos
	r := rand.New(rand.NewPCG(3, 4))
	scale := float32(1 / math.Sqrt(float64(hs)))
	for _, caches := range []int{1, 32} {
		kvs := make([][]float32, caches)
		vs := make([][]float32, caches)
		for i := range kvs {
			kvs[i], vs[i] = rvec(r, H*hs*ktLen(T)), rvec(r, H*T*hs)
		}
		q := rvec(r, H*hs)
		out := make([]float32, H*hs)
		probs := make([]float32, H*probStride(T))
		for _, nk := range []int{16, 64, 128} {
			b.Run(fmt.Sprintf("caches%d/nk%d", caches, nk), func(b *testing.B) {
				for i := range b.N {
					c := i % caches
					attnDecodeRow(out, probs, q, kvs[c], vs[c], nk, T, H, 1, hs, scale)
				}
			})
		}
	}
}
