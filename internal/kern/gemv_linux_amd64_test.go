//go:build goexperiment.simd

package kern

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkGEMVAlternate: the m = 1 product old vs new, both paths,
// alternated: every round times each form once (a whole pass over the
// weight, repeated for ≥ 20 ms) right after a plain read of the same
// bytes, so a burst of other jobs lowers a whole round rather than one
// form. Logs, per form, the median GB/s of weight bytes (wall clock), the
// median GB/s in the thread's own CPU time (single-thread forms) and the
// median of the per-round ratios to the read. Sizes: 16 and 64 MB (inside
// the Xeon's 260 MiB L3) and 512 MB (DRAM). Forms: read (ReadLoop, 1 and 2
// cores), packed-ISA (the panel GEMV, 1 and 2 column blocks), inplace-ISA
// (MatMul on the plain weight: what decode ran before; AVX2's row-axpy,
// AVX-512's archsimd 1×128 kernel).
func BenchmarkGEMVAlternate(b *testing.B) {
	if cpuISA < isaAVX2 {
		b.Skip("no AVX2+FMA")
	}
	const rounds = 9
	for _, s := range [][2]int{{1024, 4096}, {4096, 4096}, {32768, 4096}} {
		k, n := s[0], s[1]
		b.Run(fmt.Sprintf("%dMB", 4*k*n>>20), func(b *testing.B) {
			bb := make([]float32, k*n)
			for i := range bb {
				bb[i] = float32(i%1021) * (1.0 / 1024)
			}
			a, c := make([]float32, k), make([]float32, n)
			for i := range a {
				a[i] = float32(i%7) - 3
			}
			type form struct {
				name string
				f    func()
			}
			h := len(bb) / 2
			forms := []form{
				{"read-1c", func() { readStreams(8, bb) }},
				{"read-2c", func() { Fork(2, func(j int) { readStreams(8, bb[j*h:(j+1)*h]) }) }},
				{"read-1c-1stream", func() { readStreams(1, bb) }},
				{"read-1c-4streams", func() { readStreams(4, bb) }},
			}
			for _, isa := range availableISAs() {
				pk := new(Packed)
				packWidth(pk, bb, k, n, packWidthOf(isa))
				forms = append(forms,
					form{"packed-" + isaName(isa) + "-1c", func() { gemvPackedISA(isa, c, a, pk, false, 1) }},
					form{"packed-" + isaName(isa) + "-2c", func() { gemvPackedISA(isa, c, a, pk, false, 2) }},
					form{"inplace-" + isaName(isa), func() { mmISA(isa, kindNN, c, a, bb, 1, k, n, false, 0, 1) }})
			}
			bytes := float64(4 * k * n)
			wall := make([][]float64, len(forms))
			cpu := make([][]float64, len(forms))
			ratio := make([][]float64, len(forms))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range b.N {
				for range rounds {
					for i, f := range forms {
						f.f()
						np, t0, c0 := 0, time.Now(), threadCPU()
						for np == 0 || time.Since(t0) < 20*time.Millisecond {
							f.f()
							np++
						}
						w := bytes * float64(np) / time.Since(t0).Seconds() / 1e9
						cp := bytes * float64(np) / (threadCPU() - c0).Seconds() / 1e9
						wall[i], cpu[i] = append(wall[i], w), append(cpu[i], cp)
						ref := wall[0][len(wall[0])-1] // this round's 1-core read
						if strings.HasSuffix(f.name, "-2c") && i > 1 {
							ref = wall[1][len(wall[1])-1]
						}
						ratio[i] = append(ratio[i], w/ref)
					}
				}
			}
			var sb strings.Builder
			fmt.Fprintf(&sb, "%d×%d (%d MB), %d rounds, median GB/s wall | thread-CPU | ×read (same round)\n", k, n, 4*k*n>>20, len(wall[0]))
			for i, f := range forms {
				fmt.Fprintf(&sb, "  %-20s %6.1f | %6.1f | %.2f\n", f.name, med(wall[i]), med(cpu[i]), med(ratio[i]))
			}
			b.Log(sb.String())
		})
	}
}

func med(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}
