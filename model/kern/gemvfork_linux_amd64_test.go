//go:build goexperiment.simd

package kern

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkGEMVShards: GEMVPacked's column split over 2 cores against one
// core, alternated in 5 ms slices, at weight sizes around
// gemvForkMinBytes (k = 256, model B's d); logs the median wall-time ratio
// (1 core's time / 2 cores') per size. Back-to-back calls, as in a decode
// step, so Fork's helpers are still spinning.
func BenchmarkGEMVShards(b *testing.B) {
	if bestISA == isaRef {
		b.Skip("portable path")
	}
	var sb strings.Builder
	for _, n := range []int{64, 128, 256, 512, 768, 1024, 1408, 2048, 4096} {
		k := 256
		bb, a, c := make([]float32, k*n), make([]float32, k), make([]float32, n)
		for i := range bb {
			bb[i] = float32(i%1021) * (1.0 / 1024)
		}
		var pk Packed
		Pack(&pk, bb, k, n)
		per := func(shards int) float64 {
			np, t0 := 0, time.Now()
			for time.Since(t0) < 5*time.Millisecond {
				gemvPackedISA(bestISA, c, a, &pk, false, shards)
				np++
			}
			return time.Since(t0).Seconds() / float64(np)
		}
		var r []float64
		var t1s, t2s []float64
		for range 15 * b.N {
			t1, t2 := per(1), per(2)
			r, t1s, t2s = append(r, t1/t2), append(t1s, t1), append(t2s, t2)
		}
		fmt.Fprintf(&sb, "k=%d n=%d (%4d KiB): 1 core %.1f µs, 2 cores %.1f µs, speed-up ×%.2f (median of %d)\n", k, n, 4*k*n>>10, 1e6*med(t1s), 1e6*med(t2s), med(r), len(r))
	}
	b.Log("\n" + sb.String())
}
