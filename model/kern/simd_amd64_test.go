//go:build goexperiment.simd && amd64

package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// availableISAs lists the SIMD paths this CPU can run.
func availableISAs() []int {
	var s []int
	if cpuISA >= isaAVX2 {
		s = append(s, isaAVX2)
	}
	if cpuISA >= isaAVX512 {
		s = append(s, isaAVX512)
	}
	return s
}

func TestSIMDPathSelected(t *testing.T) {
	t.Logf("SIMD path: %s", SIMDPath())
	if bestISA == isaRef {
		t.Skip("CPU lacks AVX2+FMA: the SIMD build runs the reference")
	}
}

// TestISABitIdentity: the AVX2 and AVX-512 kernels compute the same
// per-element FMA chains, so they agree bit for bit on every shape.
func TestISABitIdentity(t *testing.T) {
	isas := availableISAs()
	if len(isas) < 2 {
		t.Skip("need both AVX2 and AVX-512")
	}
	r := rand.New(rand.NewPCG(21, 22))
	shapes := [][3]int{{1, 1, 1}, {1, 128, 512}, {2, 3, 7}, {3, 17, 33}, {16, 128, 512}, {17, 257, 31}, {33, 64, 100}, {5, 600, 70}}
	for it := 0; it < 40; it++ {
		shapes = append(shapes, [3]int{1 + r.IntN(40), 1 + r.IntN(300), 1 + r.IntN(140)})
	}
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		a, b, c0 := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
		for kind := kindNN; kind <= kindTN; kind++ {
			for _, acc := range []bool{false, true} {
				var want []float32
				for _, isa := range isas {
					c := append([]float32(nil), c0...)
					mmISA(isa, kind, c, a, b, m, k, n, acc, 0, m)
					if want == nil {
						want = c
						continue
					}
					bitsEqual(t, fmt.Sprintf("%s vs %s kind=%d m=%d k=%d n=%d acc=%v",
						isaName(isa), isaName(isas[0]), kind, m, k, n, acc), c, want)
				}
			}
		}
	}
}

func TestISAVectorOps(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for n := 0; n < 400; n += 1 + n/6 {
		a, b := randVec(r, n), randVec(r, n)
		for i := range a {
			a[i] *= 10
		}
		wantE := append([]float32(nil), a...)
		refExp(wantE)
		var wantS []float32
		if n > 0 {
			wantS = append([]float32(nil), a...)
			refSoftmax(wantS)
		}
		var dots []float32
		var axpys [][]float32
		for _, isa := range availableISAs() {
			e := append([]float32(nil), a...)
			expISA(isa, e)
			bitsEqual(t, fmt.Sprintf("exp %s n=%d", isaName(isa), n), e, wantE)
			if n > 0 {
				s := append([]float32(nil), a...)
				softmaxISA(isa, s)
				bitsEqual(t, fmt.Sprintf("softmax %s n=%d", isaName(isa), n), s, wantS)
			}
			dots = append(dots, dotISA(isa, a, b))
			y := append([]float32(nil), b...)
			axpyISA(isa, y, 0.3, a)
			axpys = append(axpys, y)
		}
		for i := 1; i < len(dots); i++ {
			bitsEqual(t, fmt.Sprintf("dot n=%d", n), dots[i:i+1], dots[:1])
			bitsEqual(t, fmt.Sprintf("axpy n=%d", n), axpys[i], axpys[0])
		}
	}
}

// BenchmarkMicroKernel times the register-tiled kernels alone on an
// L1-resident packed panel (kc=256), reporting GFLOP/s.
func BenchmarkMicroKernel(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const kc = 128
	a := randVec(r, 8*kc)
	pan := randVec(r, kc*64)
	c := make([]float32, 8*64)
	type kf func(kc int, a unsafe.Pointer, ar, ap uintptr, b unsafe.Pointer, bs uintptr, c []float32, ldc, w int, load bool)
	for _, kk := range []struct {
		name       string
		f          kf
		rows, cols int
		avx512     bool
	}{
		{"z2x64", z2x64, 2, 64, true}, {"z4x32", z4x32, 4, 32, true}, {"z4x16", z4x16, 4, 16, true}, {"z1x64", z1x64, 1, 64, true},
		{"y4x16", y4x16, 4, 16, false}, {"y4x8", y4x8, 4, 8, false},
	} {
		if kk.avx512 && bestISA < isaAVX512 || bestISA < isaAVX2 {
			continue
		}
		b.Run(kk.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				kk.f(kc, unsafe.Pointer(&a[0]), kc*4, 4, unsafe.Pointer(&pan[0]), uintptr(kk.cols)*4, c, 64, kk.cols, true)
			}
			b.ReportMetric(2*float64(kk.rows*kk.cols*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPackPolicy compares reading B (contiguous rows) in place with
// packing it, per shape and path, with the assembly drivers: the basis of
// mmISA's "always in place" for NN and TN.
func BenchmarkPackPolicy(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][3]int{{4, 128, 512}, {16, 128, 512}, {64, 128, 512}, {256, 128, 512}, {1024, 256, 1024}, {256, 512, 128}, {256, 256, 256}} {
		m, k, n := s[0], s[1], s[2]
		a, bb, c := randVec(r, m*k), randVec(r, k*n), make([]float32, m*n)
		for _, isa := range availableISAs() {
			for _, inPlace := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/%dx%dx%d/inPlace=%v", isaName(isa), m, k, n, inPlace), func(b *testing.B) {
					buf := new(scratch)
					for i := 0; i < b.N; i++ {
						if isa == isaAVX512 {
							gemm512(c, n, operand{s: a, rs: k, cs: 1}, operand{s: bb, rs: n, cs: 1}, m, k, n, false, inPlace, buf)
						} else {
							gemm256(c, n, operand{s: a, rs: k, cs: 1}, operand{s: bb, rs: n, cs: 1}, m, k, n, false, inPlace, &buf.b, nil)
						}
					}
					b.ReportMetric(2*float64(m*k*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkAVX2Path runs the AVX2+FMA kernels (what an AVX2-only CPU gets)
// on the training and decode shapes.
func BenchmarkAVX2Path(b *testing.B) {
	if bestISA < isaAVX2 {
		b.Skip("no AVX2+FMA")
	}
	for kind, name := range []string{"NN", "NT", "TN"} {
		for _, s := range [][3]int{{256, 128, 512}, {512, 128, 704}, {16, 128, 512}, {1, 128, 512}, {1, 1024, 4096}} {
			m, k, n := s[0], s[1], s[2]
			b.Run(fmt.Sprintf("%s/%dx%dx%d", name, m, k, n), func(b *testing.B) {
				benchMM(b, func(c, a, bb []float32) { mmISA(isaAVX2, kind, c, a, bb, m, k, n, false, 0, m) }, m, k, n)
			})
			// The archsimd driver the assembly replaced, as the baseline.
			b.Run(fmt.Sprintf("%s/%dx%dx%d/archsimd", name, m, k, n), func(b *testing.B) {
				A, B := operand{s: nil, rs: k, cs: 1}, operand{s: nil, rs: n, cs: 1}
				switch kind {
				case kindNT:
					B = operand{s: nil, rs: 1, cs: k}
				case kindTN:
					A = operand{s: nil, rs: 1, cs: m}
				}
				buf := new(panel)
				benchMM(b, func(c, a, bb []float32) {
					A.s, B.s = a, bb
					gemm256simd(c, n, A, B, m, k, n, false, true, buf)
				}, m, k, n)
			})
		}
	}
}

// gemm256simd is the archsimd AVX2 driver that gemm256 replaced (column
// panels of 16/8, row tiles of 4): the reference the assembly kernels must
// match bit for bit.
func gemm256simd(c []float32, ldc int, A, B operand, m, k, n int, acc, inPlace bool, buf *panel) {
	ar, ap := uintptr(A.rs)*4, uintptr(A.cs)*4
	for kb := 0; kb < k; kb += kcBlk {
		kc := min(kcBlk, k-kb)
		load := acc || kb > 0
		a0 := unsafe.Pointer(&A.s[kb*A.cs])
		for jb := 0; jb < n; {
			W := 16
			if n-jb <= 8 {
				W = 8
			}
			w := min(W, n-jb)
			bp, bs := bPanel(isaAVX2, B, kb, kc, jb, w, W, inPlace, buf)
			i := 0
			if W == 16 {
				for ; i+4 <= m; i += 4 {
					y4x16(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
				for ; i < m; i++ {
					y1x16(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
			} else {
				for ; i+4 <= m; i += 4 {
					y4x8(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
				for ; i < m; i++ {
					y1x8(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
			}
			jb += W
		}
	}
}

// TestAsmMatchesArchsimd: the assembly AVX2 driver (6×16 tiles, memory
// broadcasts, 8×8 transposes, row-axpy GEMV) gives the bits of the archsimd
// AVX2 driver it replaced, on every layout, with and without acc, with B
// packed and read in place.
func TestAsmMatchesArchsimd(t *testing.T) {
	if cpuISA < isaAVX2 {
		t.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(31, 32))
	shapes := [][3]int{{1, 1, 1}, {1, 5, 8}, {1, 300, 77}, {1, 128, 512}, {6, 8, 16}, {7, 9, 17}, {13, 257, 40}, {130, 20, 9}}
	for it := 0; it < 30; it++ {
		shapes = append(shapes, [3]int{1 + r.IntN(30), 1 + r.IntN(300), 1 + r.IntN(70)})
	}
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		a, b, c0 := randVec(r, m*k), randVec(r, k*n), randVec(r, m*n)
		for kind := kindNN; kind <= kindTN; kind++ {
			A, B := operand{s: a, rs: k, cs: 1}, operand{s: b, rs: n, cs: 1}
			switch kind {
			case kindNT:
				B = operand{s: b, rs: 1, cs: k}
			case kindTN:
				A = operand{s: a, rs: 1, cs: m}
			}
			for _, acc := range []bool{false, true} {
				for _, inPlace := range []bool{false, true} {
					got, want := slices.Clone(c0), slices.Clone(c0)
					gemm256(got, n, A, B, m, k, n, acc, inPlace, new(panel), nil)
					gemm256simd(want, n, A, B, m, k, n, acc, inPlace, new(panel))
					bitsEqual(t, fmt.Sprintf("kind=%d m=%d k=%d n=%d acc=%v inPlace=%v", kind, m, k, n, acc, inPlace), got, want)
				}
			}
		}
	}
}

// BenchmarkAVX2Tiles compares the archsimd 4×16 kernel with the assembly
// tiles on an L1-resident panel (kc = 128), 1 thread.
func BenchmarkAVX2Tiles(b *testing.B) {
	if cpuISA < isaAVX2 {
		b.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(1, 1))
	const kc = 128
	a := randVec(r, 8*kc)
	pan := randVec(r, kc*16)
	c := make([]float32, 8*64)
	flops := func(b *testing.B, rows, cols int) {
		b.ReportMetric(2*float64(rows*cols*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
	b.Run("archsimd/y4x16", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			y4x16(kc, unsafe.Pointer(&a[0]), kc*4, 4, unsafe.Pointer(&pan[0]), 64, c, 64, 16, true)
		}
		flops(b, 4, 16)
	})
	for _, rows := range []int{6, 4} {
		b.Run(fmt.Sprintf("asm/y%dx16", rows), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				asmTile(16, rows, kc, unsafe.Pointer(&a[0]), kc*4, 4, unsafe.Pointer(&pan[0]), 64, unsafe.Pointer(&c[0]), 256, true)
			}
			flops(b, rows, 16)
		})
	}
	b.Run("asm/y6x8", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			asmTile(8, 6, kc, unsafe.Pointer(&a[0]), kc*4, 4, unsafe.Pointer(&pan[0]), 64, unsafe.Pointer(&c[0]), 256, true)
		}
		flops(b, 6, 8)
	})
}

// BenchmarkFMAPeak: the FMA throughput of one core on the path in use.
func BenchmarkFMAPeak(b *testing.B) {
	var f float64
	for i := 0; i < b.N; i++ {
		f += FMAPeakLoop(1000)
	}
	b.ReportMetric(f/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// TestPackT8: the 8×8-transpose NT pack equals a scalar gather, with zero
// padding past w, on full and partial blocks.
func TestPackT8(t *testing.T) {
	if cpuISA < isaAVX2 {
		t.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(41, 42))
	for _, s := range [][4]int{{16, 16, 16, 0}, {20, 13, 16, 3}, {9, 40, 8, 1}, {30, 257, 16, 8}} {
		n, k, W, jb := s[0], s[1], s[2], s[3]
		b := randVec(r, n*k)
		B := operand{s: b, rs: 1, cs: k}
		for kb := 0; kb < k; kb += kcBlk {
			kc := min(kcBlk, k-kb)
			w := min(W, n-jb)
			buf := new(panel)
			packT8(B, kb, kc, jb, w, W, buf)
			for p := 0; p < kc; p++ {
				for j := 0; j < W; j++ {
					var want float32
					if j < w {
						want = b[(jb+j)*k+kb+p]
					}
					if got := buf[p*W+j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("n=%d k=%d W=%d jb=%d: panel(%d,%d) = %v, want %v", n, k, W, jb, kb+p, j, got, want)
					}
				}
			}
		}
	}
}

// BenchmarkGEMVBandwidth: decode's m = 1 product, in bytes of B read per
// second, next to a plain read of the same bytes (ReadLoop: the bandwidth
// ceiling at that size) on 1 and 2 cores: the panel GEMV over Pack's
// layout (GEMVPacked, 1 and 2 column blocks), MatMul with the plain B
// (AVX2: the row-axpy asmAxpyRows; AVX-512: the archsimd 1×128 kernel) and
// the archsimd AVX2 driver. 16 and 64 MB fit in the 260 MiB L3 of the
// project's Xeon; 512 MB does not (DRAM).
func BenchmarkGEMVBandwidth(b *testing.B) {
	if cpuISA < isaAVX2 {
		b.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][2]int{{1024, 4096}, {4096, 4096}, {32768, 4096}} {
		k, n := s[0], s[1]
		a, bb, c := randVec(r, k), randVec(r, k*n), make([]float32, n)
		bytes := float64(4 * k * n)
		gbs := func(b *testing.B) {
			b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		}
		b.Run(fmt.Sprintf("%dx%d/read", k, n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				readStreams(8, bb)
			}
			gbs(b)
		})
		b.Run(fmt.Sprintf("%dx%d/read-2c", k, n), func(b *testing.B) {
			h := len(bb) / 2
			for i := 0; i < b.N; i++ {
				Fork(2, func(j int) { readStreams(8, bb[j*h:(j+1)*h]) })
			}
			gbs(b)
		})
		for _, isa := range availableISAs() {
			var pk Packed
			packWidth(&pk, bb, k, n, packWidthOf(isa))
			for _, shards := range []int{1, 2} {
				b.Run(fmt.Sprintf("%dx%d/packed-%s-%dc", k, n, isaName(isa), shards), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						gemvPackedISA(isa, c, a, &pk, false, shards)
					}
					gbs(b)
				})
			}
			b.Run(fmt.Sprintf("%dx%d/inplace-%s", k, n, isaName(isa)), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					mmISA(isa, kindNN, c, a, bb, 1, k, n, false, 0, 1)
				}
				gbs(b)
			})
		}
		b.Run(fmt.Sprintf("%dx%d/gemv-archsimd-avx2", k, n), func(b *testing.B) {
			buf := new(panel)
			for i := 0; i < b.N; i++ {
				gemm256simd(c, n, operand{s: a, rs: k, cs: 1}, operand{s: bb, rs: n, cs: 1}, 1, k, n, false, true, buf)
			}
			gbs(b)
		})
	}
}
