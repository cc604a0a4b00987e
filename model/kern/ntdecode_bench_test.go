package kern

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkNTDecode: the decode product c[1×n] = a·Bᵀ with B a stored n×k
// weight (a checkpoint's [out, in]) far past the last-level cache, in
// float32 and bfloat16, its columns over 1 and 2 cores; weight GB/s and the
// share of the streaming read rate on the same cores, measured right
// before.
func BenchmarkNTDecode(b *testing.B) {
	const k, n = 1024, 128 << 10
	a := make([]float32, k)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	c := make([]float32, n)
	f := make([]float32, k*n)
	h := make([]uint16, k*n)
	for i := range f {
		f[i] = float32(i%1021) / 1024
		h[i] = ToBF16(f[i])
	}
	for _, cores := range []int{1, 2} {
		read := readRate(f, cores)
		for _, dt := range []string{"F32", "BF16"} {
			b.Run(fmt.Sprintf("%s/cores=%d", dt, cores), func(b *testing.B) {
				bytes := 4 * k * n
				if dt == "BF16" {
					bytes /= 2
				}
				b.SetBytes(int64(bytes))
				for b.Loop() {
					if dt == "F32" {
						MatMulNTCols(c, a, f, 1, k, n, false, cores)
					} else {
						MatMulNTBF16Cols(c, a, h, 1, k, n, false, cores)
					}
				}
				gbs := float64(bytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				if read > 0 {
					b.ReportMetric(100*gbs/read, "%read")
				}
			})
		}
	}
}

// readRate is ReadLoop's GB/s over buf on cores goroutines (best of 3).
func readRate(buf []float32, cores int) float64 {
	best := 0.0
	part := len(buf) / cores
	for range 3 {
		t0 := time.Now()
		Fork(cores, func(i int) { ReadLoop(buf[i*part : (i+1)*part]) })
		if r := float64(4*part*cores) / time.Since(t0).Seconds() / 1e9; r > best {
			best = r
		}
	}
	return best
}
