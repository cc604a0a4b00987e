package kernbench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// DefaultStreamBytes is the buffer RunBandwidth streams by default: 512
// MiB, about twice the 260 MiB L3 the project's 2-vCPU Xeon reports, so a
// pass reads from DRAM (a cyclic pass over twice the cache hits nothing).
const DefaultStreamBytes = 512 << 20

// Bandwidth is the memory-bound picture: the streaming read rate of a
// buffer far larger than the last-level cache on 1 and 2 cores, and the
// m = 1 product (decode GEMV) against a weight of that size, in bytes of
// weights read per second. Rates are GB/s (1e9 bytes), medians of Reps
// alternated rounds; "best" is the highest of them.
type Bandwidth struct {
	Bytes                int     // weight / buffer size
	K, N                 int     // the GEMV's weight shape
	Read1, Read2         float64 // kern.ReadLoop over the buffer, 1 and 2 cores
	GEMV1, GEMV2         float64 // kern.GEMVPacked, 1 and 2 column blocks
	InPlace              float64 // kern.MatMul with m = 1 on the plain weight
	BestRead1, BestGEMV1 float64
	BestRead2, BestGEMV2 float64
}

// RunBandwidth measures Bandwidth with a k×n weight of about bytes bytes
// (n = 4096 columns). Each round times every form once, one after the
// other, each for at least one whole pass and about o.Slice.
func RunBandwidth(ctx context.Context, bytes int, o Options) (Bandwidth, error) {
	if o.Reps <= 0 {
		o.Reps = 5
	}
	const n = 4096
	k := max(1, bytes/(4*n))
	bw := Bandwidth{Bytes: 4 * k * n, K: k, N: n}
	if kern.ReadLoop(make([]float32, 1024)) == 0 { // 0 only on the portable path
		return bw, fmt.Errorf("kernbench: kernel path %q has no streaming read loop", kern.SIMDPath())
	}
	w := make([]float32, k*n)
	for i := range w {
		w[i] = float32(i%1021) * (1.0 / 1024)
	}
	a, c := make([]float32, k), make([]float32, n)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	var pk kern.Packed
	kern.Pack(&pk, w, k, n)
	half := len(w) / 2
	forms := []func(){
		func() { kern.ReadLoop(w) },
		func() { kern.Fork(2, func(i int) { kern.ReadLoop(w[i*half : (i+1)*half]) }) },
		func() { kern.GEMVPacked(c, a, &pk, false, 1) },
		func() { kern.GEMVPacked(c, a, &pk, false, 2) },
		func() { kern.MatMul(c, a, w, 1, k, n, false) },
	}
	rates := make([][]float64, len(forms))
	for r := 0; r < o.Reps; r++ {
		for i, f := range forms {
			if err := ctx.Err(); err != nil {
				return bw, err
			}
			rates[i] = append(rates[i], passRate(bw.Bytes, f, o.Slice))
		}
	}
	bw.Read1, bw.Read2, bw.GEMV1, bw.GEMV2, bw.InPlace = median(rates[0]), median(rates[1]), median(rates[2]), median(rates[3]), median(rates[4])
	bw.BestRead1, bw.BestRead2, bw.BestGEMV1, bw.BestGEMV2 = slices.Max(rates[0]), slices.Max(rates[1]), slices.Max(rates[2]), slices.Max(rates[3])
	return bw, nil
}

// passRate runs f (one pass over bytes) at least once and for about d,
// and returns GB/s.
func passRate(bytes int, f func(), d time.Duration) float64 {
	n := 0
	t0 := time.Now()
	for n == 0 || time.Since(t0) < d {
		f()
		n++
	}
	return float64(bytes) * float64(n) / time.Since(t0).Seconds() / 1e9
}

// PrintBandwidth writes the bandwidth section.
func PrintBandwidth(w io.Writer, bw Bandwidth) {
	fmt.Fprintf(w, "streaming read, %d MiB buffer (sized past the last-level cache): 1 core %.1f GB/s, 2 cores %.1f GB/s (best %.1f, %.1f)\n",
		bw.Bytes>>20, bw.Read1, bw.Read2, bw.BestRead1, bw.BestRead2)
	share := func(x, of float64) float64 {
		if of <= 0 {
			return 0
		}
		return 100 * x / of
	}
	fmt.Fprintf(w, "GEMV m=1 %d×%d packed (weight bytes/s): 1 core %.1f GB/s (%.0f%% of the 1-core read), 2 cores %.1f GB/s (%.0f%% of the 2-core read); in place (MatMul) %.1f GB/s\n",
		bw.K, bw.N, bw.GEMV1, share(bw.GEMV1, bw.Read1), bw.GEMV2, share(bw.GEMV2, bw.Read2), bw.InPlace)
}

// ReadRate2 is the streaming read rate (GB/s) of a buffer of about bytes
// bytes on 2 cores (kern.ReadLoop over each half at once): the median of
// reps passes of at least d each. 0 on the portable path.
func ReadRate2(bytes, reps int, d time.Duration) float64 {
	w := make([]float32, bytes/4)
	for i := range w {
		w[i] = float32(i & 1023)
	}
	if kern.ReadLoop(w[:1024]) == 0 {
		return 0
	}
	half := len(w) / 2
	var rates []float64
	for range max(reps, 1) {
		rates = append(rates, passRate(4*len(w), func() { kern.Fork(2, func(i int) { kern.ReadLoop(w[i*half : (i+1)*half]) }) }, d))
	}
	return median(rates)
}
