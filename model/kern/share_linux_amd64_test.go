//go:build goexperiment.simd

package kern

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time: on the shared build machine
// wall-clock rates swing with other jobs, the thread's own CPU time does not
// (much).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// cpuRate returns f's best rate in GFLOP/s (flops per call) over trials of
// about 2 ms of this thread's CPU time each.
func cpuRate(flops float64, trials int, f func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f()
	best := time.Duration(1 << 62)
	for range trials {
		n, t0 := 0, threadCPU()
		var d time.Duration
		for d < 2*time.Millisecond {
			f()
			n++
			d = threadCPU() - t0
		}
		best = min(best, d/time.Duration(n))
	}
	return flops / best.Seconds() / 1e9
}

// BenchmarkKernelShare: each driver at one shard of each training shape
// (kernbench.TrainingShapes with m halved, as with 2 shards), as a share of
// the same width's FMA peak, all timed in thread CPU time (best of 20
// trials; the peak is the best of all its measurements, taken between the
// drivers', so a moment with a busy SMT sibling lowers no share): the
// single-core figure the shared machine's load leaves (mostly) intact. It
// logs a table, one column per driver (the AVX-512 assembly with every
// blocking in zShapes), and reports the smallest share of the AVX-512
// driver in use and of AVX2.
func BenchmarkKernelShare(b *testing.B) {
	if cpuISA < isaAVX2 {
		b.Skip("no AVX2+FMA")
	}
	shapes := []struct {
		name    string
		kind    int
		m, k, n int
	}{{"qkv", kindNN, 256, 128, 384}, {"fc", kindNN, 256, 128, 704}, {"fc2", kindNN, 256, 352, 128},
		{"logits", kindNT, 256, 128, 264}, {"dqkv", kindNT, 256, 384, 128}, {"dfc2", kindNT, 256, 128, 352},
		{"gqkv", kindTN, 64, 512, 384}, {"gfc2", kindTN, 176, 512, 128}, {"gwte", kindTN, 132, 512, 128},
		{"t256", kindNN, 128, 128, 512}, {"t1024", kindNN, 512, 256, 1024}}
	type driver struct {
		name string
		wide bool // measured against the 16-lane peak
		run  func(c []float32, A, B operand, m, k, n int, sc *scratch)
	}
	drivers := []driver{{"avx2", false, func(c []float32, A, B operand, m, k, n int, sc *scratch) {
		gemm256(c, n, A, B, m, k, n, false, true, &sc.b, nil)
	}}, {"avx2archsimd", false, func(c []float32, A, B operand, m, k, n int, sc *scratch) {
		gemm256simd(c, n, A, B, m, k, n, false, true, &sc.b)
	}}}
	if cpuISA >= isaAVX512 {
		drivers = append(drivers, driver{"512archsimd", true, func(c []float32, A, B operand, m, k, n int, sc *scratch) {
			gemm512simd(c, n, A, B, m, k, n, false, true, sc)
		}})
		for _, z := range zShapes {
			drivers = append(drivers, driver{fmt.Sprintf("z%dx%dk%d", z.rows, 16*z.vecs, z.kc), true, func(c []float32, A, B operand, m, k, n int, sc *scratch) {
				gemm512z(z, c, n, A, B, m, k, n, false, true, &sc.b, nil)
			}})
		}
	}
	for range b.N {
		r := rand.New(rand.NewPCG(3, 4))
		var pk8, pk16 float64
		rates := make([][]float64, len(shapes))
		for i, s := range shapes {
			m, k, n := s.m, s.k, s.n
			a, bb, c := randVec(r, m*k), randVec(r, k*n), make([]float32, m*n)
			A, B := operand{s: a, rs: k, cs: 1}, operand{s: bb, rs: n, cs: 1}
			switch s.kind {
			case kindNT:
				B = operand{s: bb, rs: 1, cs: k}
			case kindTN:
				A = operand{s: a, rs: 1, cs: m}
			}
			sc := new(scratch)
			for _, d := range drivers {
				if d.wide {
					pk16 = max(pk16, cpuRate(12*16*2*1000, 20, func() { fmaPeak512(1000) }))
				} else {
					pk8 = max(pk8, cpuRate(12*8*2*1000, 20, func() { fmaPeak256(1000) }))
				}
				rates[i] = append(rates[i], cpuRate(2*float64(m*k*n), 20, func() { d.run(c, A, B, m, k, n, sc) }))
			}
		}
		head := fmt.Sprintf("%-22s", "shape (one shard)")
		for _, d := range drivers {
			head += fmt.Sprintf(" %12s", d.name)
		}
		b.Logf("FMA peak (thread CPU time, best): 8 lanes %.1f GFLOP/s, 16 lanes %.1f GFLOP/s; %%peak:", pk8, pk16)
		b.Log(head)
		worst := map[string]float64{}
		for i, s := range shapes {
			line := fmt.Sprintf("%-22s", fmt.Sprintf("%s %dx%dx%d", s.name, s.m, s.k, s.n))
			for j, d := range drivers {
				pk := pk8
				if d.wide {
					pk = pk16
				}
				sh := 100 * rates[i][j] / pk
				line += fmt.Sprintf(" %11.0f%%", sh)
				if w, ok := worst[d.name]; !ok || sh < w {
					worst[d.name] = sh
				}
			}
			b.Log(line)
		}
		b.ReportMetric(worst["avx2"], "min%pk-avx2")
		b.ReportMetric(worst["avx2archsimd"], "min%pk-avx2archsimd")
		if cpuISA >= isaAVX512 {
			b.ReportMetric(worst[fmt.Sprintf("z%dx%dk%d", zRows, 16*zVecs, zKC)], "min%pk-avx512")
		}
	}
}

// BenchmarkPackedDecode: a decode step's products for Model A (2 layers,
// d = 128, F = 352, V = 264) at 8 rows (batch 16 on 2 shards), with the
// weights in place (MatMul) and from Pack (MatMulPacked), as a share of
// the FMA peak in thread CPU time (best of 30 trials).
func BenchmarkPackedDecode(b *testing.B) {
	if cpuISA < isaAVX2 {
		b.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(5, 6))
	dims := [][2]int{{128, 384}, {128, 128}, {128, 704}, {352, 128}, {128, 384}, {128, 128}, {128, 704}, {352, 128}, {128, 264}}
	const m = 8
	ws := make([][]float32, len(dims))
	pks := make([]Packed, len(dims))
	fl := 0.0
	for i, d := range dims {
		ws[i] = randVec(r, d[0]*d[1])
		Pack(&pks[i], ws[i], d[0], d[1])
		fl += 2 * float64(m*d[0]*d[1])
	}
	a, c := randVec(r, m*704), make([]float32, m*704)
	for range b.N {
		lanes := 8.0
		peak := func() { fmaPeak256(1000) }
		if bestISA == isaAVX512 {
			lanes, peak = 16, func() { fmaPeak512(1000) }
		}
		pk := cpuRate(12*lanes*2*1000, 30, peak)
		inPlace := cpuRate(fl, 30, func() {
			for i, d := range dims {
				MatMul(c, a, ws[i], m, d[0], d[1], false)
			}
		})
		packed := cpuRate(fl, 30, func() {
			for i := range dims {
				MatMulPacked(c, a, m, &pks[i], false)
			}
		})
		b.ReportMetric(100*inPlace/pk, "%pk-inplace")
		b.ReportMetric(100*packed/pk, "%pk-packed")
	}
}
