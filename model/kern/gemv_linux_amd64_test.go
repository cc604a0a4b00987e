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

// gemvCase is a list of m = 1 products (k, n) run one after the other.
type gemvCase struct {
	name  string
	prods [][2]int
}

// modelBDecode: model B's (L = 4, d = 256, F = 704, V = 264) batch-1
// decode products, one token: per layer qkv, proj, fc (SwiGLU: 2F), fc2,
// then the head; 13.1 MB of weights, inside the Xeon's 260 MiB L3.
func modelBDecode() [][2]int {
	var p [][2]int
	for range 4 {
		p = append(p, [2]int{256, 768}, [2]int{256, 256}, [2]int{256, 1408}, [2]int{704, 256})
	}
	return append(p, [2]int{256, 264})
}

// BenchmarkGEMVAlternate: the m = 1 product old vs new, both paths,
// alternated: every round times each form once (whole passes over the
// weights, repeated for ≥ 20 ms) right after a plain read of the same
// bytes, so a burst of other jobs lowers a whole round rather than one
// form. Logs, per form, the median GB/s of weight bytes (wall clock), the
// median GB/s in the thread's own CPU time (single-thread forms) and the
// median of the per-round ratios to the read (2-core forms: to the 2-core
// read). Cases: 16 and 64 MB (inside the Xeon's 260 MiB L3), 512 MB
// (DRAM), model B's decode products, and its fc product alone (1.4 MB:
// L2). Forms: read (ReadLoop, 1 and 2 cores; 1 and 4 streams), packed-ISA (the panel GEMV, 1 and 2 column
// blocks), inplace-ISA (MatMul on the plain weight: AVX-512's strips up to
// 16 MiB; on AVX2 the same code as old-rows-avx2), old-rows-avx2
// (asmAxpyRows) and old-archsimd-avx512 (the archsimd 1×128 kernel): the
// m = 1 paths before session 6.
func BenchmarkGEMVAlternate(b *testing.B) {
	if cpuISA < isaAVX2 {
		b.Skip("no AVX2+FMA")
	}
	const rounds = 9
	for _, cs := range []gemvCase{
		{"16MB", [][2]int{{1024, 4096}}}, {"64MB", [][2]int{{4096, 4096}}},
		{"512MB", [][2]int{{32768, 4096}}}, {"modelB", modelBDecode()}, {"1.4MB", [][2]int{{256, 1408}}},
	} {
		b.Run(cs.name, func(b *testing.B) {
			total := 0
			for _, p := range cs.prods {
				total += p[0] * p[1]
			}
			bb := make([]float32, total)
			for i := range bb {
				bb[i] = float32(i%1021) * (1.0 / 1024)
			}
			a, c := make([]float32, 4096*8), make([]float32, 4096)
			for i := range a {
				a[i] = float32(i%7) - 3
			}
			ws := make([][]float32, len(cs.prods))
			off := 0
			for i, p := range cs.prods {
				ws[i], off = bb[off:off+p[0]*p[1]], off+p[0]*p[1]
			}
			each := func(f func(i, k, n int)) func() {
				return func() {
					for i, p := range cs.prods {
						f(i, p[0], p[1])
					}
				}
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
				pks := make([]Packed, len(cs.prods))
				for i, p := range cs.prods {
					packWidth(&pks[i], ws[i], p[0], p[1], packWidthOf(isa))
				}
				forms = append(forms,
					form{"packed-" + isaName(isa) + "-1c", each(func(i, k, n int) { gemvPackedISA(isa, c, a, &pks[i], false, 1) })},
					form{"packed-" + isaName(isa) + "-2c", each(func(i, k, n int) { gemvPackedISA(isa, c, a, &pks[i], false, 2) })},
					form{"inplace-" + isaName(isa), each(func(i, k, n int) { mmISA(isa, kindNN, c, a, ws[i], 1, k, n, false, 0, 1) })})
			}
			forms = append(forms, form{"old-rows-avx2", each(func(i, k, n int) {
				gemvRows(c, operand{s: a, rs: k, cs: 1}, operand{s: ws[i], rs: n, cs: 1}, k, n, false)
			})})
			if cpuISA >= isaAVX512 {
				sc := new(scratch)
				forms = append(forms, form{"old-archsimd-avx512", each(func(i, k, n int) {
					gemm512simd(c, n, operand{s: a, rs: k, cs: 1}, operand{s: ws[i], rs: n, cs: 1}, 1, k, n, false, true, sc)
				})})
			}
			bytes := float64(4 * total)
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
			fmt.Fprintf(&sb, "%s (%.1f MB of weights), %d rounds, median GB/s wall | thread-CPU | ×read (same round)\n", cs.name, bytes/1e6, len(wall[0]))
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
