//go:build goexperiment.simd && amd64

package kern

//go:generate sh -c "python3 gen_kernels.py > kernels_amd64.go && gofmt -w kernels_amd64.go"

import (
	"fmt"
	"os"
	"simd/archsimd"
	"sync"
	"unsafe"

	"github.com/longhaul-rl/longhaul/internal/race"
)

// cpuISA is the best path this CPU runs.
var cpuISA = func() int {
	switch {
	case archsimd.X86.AVX512():
		return isaAVX512
	case archsimd.X86.AVX2() && archsimd.X86.FMA():
		return isaAVX2
	}
	return isaRef
}()

// bestISA is the path every kernel call takes: the CPU's best, or the lower
// one PathEnv names (so an AVX2-only machine's kernels can be run, and
// compared bit for bit, on an AVX-512 one). Fixed at start-up, read-only.
var bestISA = mustPath(cpuISA, os.Getenv(PathEnv))

// SIMDPath names the kernel path in use: "avx512", "avx2" or "portable".
func SIMDPath() string { return isaName(bestISA) }

const (
	kcBlk  = 256 // reduction block: partial sums go through C between blocks
	panelW = 64  // widest B panel (AVX-512 2×64 GEMV-like kernel)
)

// panel is the per-call scratch for a packed, zero-padded B panel.
type panel [kcBlk * panelW]float32

// scratch is what one call borrows from the pool: the B panel and, for TN
// with many rows, a row-major copy of the current k-block of Aᵀ (grown on
// demand, then reused).
type scratch struct {
	b  panel
	at []float32
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// packATMinM: TN reads A(i, p) = a[p*m + i] with stride m, which thrashes L1
// sets for large m; from this many rows on, each k-block of Aᵀ is
// transposed into a row-major buffer first (BenchmarkMatMul/TN).
const packATMinM = 64

// packAT writes dst[i*ld + p] = A(i, kb+p) for i < m, p < kc, with A in TN
// layout (A(i, p) = A.s[i + p*A.cs]), by 16×16 register transposes. It may
// write up to the next multiples of 16 in both i and p; dst must hold
// roundup16(m)·ld with ld ≥ roundup16(kc).
func packAT(dst []float32, ld int, A operand, m, kb, kc int) {
	for p0 := 0; p0 < kc; p0 += 16 {
		np := min(16, kc-p0)
		for i0 := 0; i0 < m; i0 += 16 {
			ni := min(16, m-i0)
			d := dst[i0*ld+p0:]
			if np == 16 && ni == 16 {
				transpose16(A.s[(kb+p0)*A.cs+i0:], A.cs, d, ld)
				continue
			}
			var t [256]float32
			for r := 0; r < np; r++ {
				copy(t[r*16:r*16+ni], A.s[(kb+p0+r)*A.cs+i0:])
			}
			transpose16(t[:], 16, d, ld)
		}
	}
}

func matMul(c, a, b []float32, m, k, n int, acc bool) {
	checkDims(c, a, b, m, k, n)
	mmISA(bestISA, kindNN, c, a, b, m, k, n, acc, 0, m)
}

func matMulNT(c, a, b []float32, m, k, n int, acc bool) {
	checkDims(c, a, b, m, k, n)
	mmISA(bestISA, kindNT, c, a, b, m, k, n, acc, 0, m)
}

func matMulTN(c, a, b []float32, m, k, n int, acc bool) {
	checkDims(c, a, b, m, k, n)
	mmISA(bestISA, kindTN, c, a, b, m, k, n, acc, 0, m)
}

// packWidthOf is the panel width of Pack's layout for a path.
func packWidthOf(isa int) int {
	switch isa {
	case isaAVX512:
		return zVecs * 16
	case isaAVX2:
		return 16
	}
	return 0
}

func matMulPacked(c, a []float32, m int, B *Packed, acc bool) { packedISA(bestISA, c, a, m, B, acc) }

// packedISA is MatMulPacked on the given path; B must have been packed for
// it (width packWidthOf(isa)).
func packedISA(isa int, c, a []float32, m int, B *Packed, acc bool) {
	k, n := B.k, B.n
	if m == 0 {
		return
	}
	if B.w != packWidthOf(isa) {
		panic(fmt.Sprintf("kern: operand packed %d wide, path %s wants %d", B.w, isaName(isa), packWidthOf(isa)))
	}
	if m == 1 && isa != isaRef {
		gemvPanels(isa, c, a, B, acc, 0, (n+B.w-1)/B.w)
		return
	}
	A, Bp := operand{s: a, rs: k, cs: 1}, operand{s: B.b, rs: n, cs: 1}
	sc := scratchPool.Get().(*scratch)
	switch {
	case isa == isaAVX512 && m >= zGEMVRows:
		gemm512z(zShape{zRows, zVecs, zKC}, c, n, A, Bp, m, k, n, acc, true, &sc.b, B)
	case isa == isaAVX512:
		gemm512simd(c, n, A, Bp, m, k, n, acc, true, sc)
	case isa == isaAVX2:
		gemm256(c, n, A, Bp, m, k, n, acc, true, &sc.b, B)
	default:
		RefMatMul(c, a, B.b, m, k, n, acc)
	}
	scratchPool.Put(sc)
}

func mmRows(kind int, c, a, b []float32, m, k, n int, acc bool, r0, r1 int) {
	mmISA(bestISA, kind, c, a, b, m, k, n, acc, r0, r1)
}

// operand describes a strided matrix: X(r, q) = s[r*rs + q*cs], or, for a
// bfloat16 B (s nil), the widened h[r*rs + q*cs]. A bfloat16 operand is
// always packed (bPanel widens it), never read in place.
type operand struct {
	s      []float32
	rs, cs int
	h      []uint16
}

// at is X(r, q) as float32.
func (o operand) at(r, q int) float32 {
	if o.h != nil {
		return FromBF16(o.h[r*o.rs+q*o.cs])
	}
	return o.s[r*o.rs+q*o.cs]
}

// mmISA computes output rows [r0, r1) of the product of the given kind on
// the given path. Dimensions must already be checked.
func mmISA(isa, kind int, c, a, b []float32, m, k, n int, acc bool, r0, r1 int) {
	if isa == isaRef {
		refRows(kind, c, a, b, m, k, n, acc, r0, r1)
		return
	}
	rows := r1 - r0
	if rows <= 0 || n == 0 {
		return
	}
	cc := c[r0*n : r1*n]
	if k == 0 {
		if !acc {
			clear(cc)
		}
		return
	}
	var A, B operand
	switch kind {
	case kindNN:
		A = operand{s: a[r0*k:], rs: k, cs: 1}
		B = operand{s: b, rs: n, cs: 1}
	case kindNT:
		A = operand{s: a[r0*k:], rs: k, cs: 1}
		B = operand{s: b, rs: 1, cs: k}
	default:
		A = operand{s: a[r0:], rs: 1, cs: m}
		B = operand{s: b, rs: n, cs: 1}
	}
	// B with contiguous rows (NN, TN) is read in place on both paths: with
	// the assembly kernels, packing it cost more than the L1 misses it
	// saves, from 1 to 512 rows (BenchmarkPackPolicy). NT's B is always
	// packed (transposed).
	gemmISA(isa, cc, n, A, B, rows, k, n, acc)
}

// gemmISA runs the path's driver with a pooled scratch.
func gemmISA(isa int, c []float32, ldc int, A, B operand, m, k, n int, acc bool) {
	sc := scratchPool.Get().(*scratch)
	if B.cs != 1 && B.rs == 1 && A.cs == 1 && m == 1 && isa == isaAVX512 {
		ntGemv512(c, A, B, k, n, acc, &sc.b)
	} else if B.cs != 1 && B.rs == 1 && A.cs == 1 && m <= ntSmallRows {
		ntSmall(isa, c, ldc, A, B, m, k, n, acc, &sc.b)
	} else if isa == isaAVX512 {
		gemm512(c, ldc, A, B, m, k, n, acc, true, sc)
	} else {
		gemm256(c, ldc, A, B, m, k, n, acc, true, &sc.b, nil)
	}
	scratchPool.Put(sc)
}

// mmRowsH is the NT product with a bfloat16 B over output rows [r0, r1).
func mmRowsH(c, a []float32, b []uint16, m, k, n int, acc bool, r0, r1 int) {
	if bestISA == isaRef {
		refRowsNT(c, a, nil, b, k, n, acc, r0, r1, 0, n)
		return
	}
	rows := r1 - r0
	if rows <= 0 || n == 0 {
		return
	}
	cc := c[r0*n : r1*n]
	if k == 0 {
		if !acc {
			clear(cc)
		}
		return
	}
	gemmISA(bestISA, cc, n, operand{s: a[r0*k:], rs: k, cs: 1}, operand{h: b, rs: 1, cs: k}, rows, k, n, acc)
}

// mmColsNT is the NT product (float32 b, or bfloat16 h where b is nil)
// over output columns [j0, j1) of a C with n columns.
func mmColsNT(c, a, b []float32, h []uint16, m, k, n int, acc bool, j0, j1 int) {
	if bestISA == isaRef {
		refRowsNT(c, a, b, h, k, n, acc, 0, m, j0, j1)
		return
	}
	if m == 0 || j1 <= j0 {
		return
	}
	if k == 0 {
		if !acc {
			for i := range m {
				clear(c[i*n+j0 : i*n+j1])
			}
		}
		return
	}
	B := operand{rs: 1, cs: k}
	if b != nil {
		B.s = b[j0*k:]
	} else {
		B.h = h[j0*k:]
	}
	gemmISA(bestISA, c[j0:], n, operand{s: a, rs: k, cs: 1}, B, m, k, j1-j0, acc)
}

// bPanel returns B(kb.., jb..) as a base pointer and a byte stride between
// consecutive p, either in place (contiguous columns, full width, few rows)
// or packed zero-padded into buf with row stride W. B in NT layout is
// transposed with the isa's register transpose.
func bPanel(isa int, B operand, kb, kc, jb, w, W int, inPlace bool, buf *panel) (unsafe.Pointer, uintptr) {
	if B.h != nil {
		return bPanelH(isa, B, kb, kc, jb, w, W, buf)
	}
	if inPlace && B.cs == 1 && w == W {
		return unsafe.Pointer(&B.s[kb*B.rs+jb]), uintptr(B.rs) * 4
	}
	dst := buf[:kc*W]
	if B.cs == 1 && w == W && W%8 == 0 {
		// Full-width panel rows: vector copies (copy's memmove call costs
		// more than moving 16-64 floats).
		src := B.s[kb*B.rs+jb:]
		_ = src[(kc-1)*B.rs+W-1]
		for pp := 0; pp < kc; pp++ {
			srow, drow := src[pp*B.rs:pp*B.rs+W], dst[pp*W:pp*W+W]
			for j := 0; j < W; j += 8 {
				archsimd.LoadFloat32x8Slice(srow[j:]).StoreSlice(drow[j:])
			}
		}
		archsimd.ClearAVXUpperBits() // the Go code around is legacy SSE (GOAMD64=v1)
	} else if B.cs == 1 {
		for pp := 0; pp < kc; pp++ {
			d := dst[pp*W : pp*W+W]
			copy(d, B.s[(kb+pp)*B.rs+jb:][:w])
			clear(d[w:])
		}
	} else if isa == isaAVX2 && W%8 == 0 {
		packT8(B, kb, kc, jb, w, W, buf)
	} else if isa == isaAVX512 && W%16 == 0 {
		// B(p, j) = B.s[j*B.cs + p]: transpose 16×16 blocks in registers.
		for jj0 := 0; jj0 < W; jj0 += 16 {
			nr := w - jj0
			for p0 := 0; p0 < kc; p0 += 16 {
				nq := min(16, kc-p0)
				d := buf[p0*W+jj0:]
				if nr <= 0 {
					for q := 0; q < nq; q++ {
						clear(d[q*W : q*W+16])
					}
					continue
				}
				if nr >= 16 && nq == 16 {
					transpose16(B.s[(jb+jj0)*B.cs+kb+p0:], B.cs, d, W)
					continue
				}
				// Partial block: through a zero-padded 16×16 copy. The
				// transpose may write panel rows p ≥ kc; they are never read
				// and stay inside buf (p0+16 ≤ kcBlk).
				var t [256]float32
				for r := 0; r < min(nr, 16); r++ {
					copy(t[r*16:r*16+nq], B.s[(jb+jj0+r)*B.cs+kb+p0:])
				}
				transpose16(t[:], 16, d, W)
			}
		}
	} else {
		if w < W {
			for pp := 0; pp < kc; pp++ {
				clear(dst[pp*W+w : pp*W+W])
			}
		}
		for jj := 0; jj < w; jj++ {
			src := B.s[(jb+jj)*B.cs+kb*B.rs:][:kc]
			d := dst[jj:]
			for pp, v := range src {
				d[pp*W] = v
			}
		}
	}
	return unsafe.Pointer(&dst[0]), uintptr(W) * 4
}

// bPanelH is bPanel for a bfloat16 B: packed, widened.
func bPanelH(isa int, B operand, kb, kc, jb, w, W int, buf *panel) (unsafe.Pointer, uintptr) {
	dst := buf[:kc*W]
	switch {
	case B.rs == 1 && isa == isaAVX512 && W%16 == 0:
		for jj0 := 0; jj0 < W; jj0 += 16 {
			nr := w - jj0
			for p0 := 0; p0 < kc; p0 += 16 {
				nq := min(16, kc-p0)
				d := buf[p0*W+jj0:]
				if nr >= 16 && p0%32 == 0 && kc-p0 >= 32 && B.cs%2 == 0 {
					// whole 16×32 blocks as pairs, where the rows are
					// 4-byte aligned
					src := B.h[(jb+jj0)*B.cs+kb+p0:]
					if uintptr(unsafe.Pointer(&src[0]))%4 == 0 {
						transpose16pairs(src, B.cs, d, W)
						p0 += 16
						continue
					}
				}
				if nr <= 0 {
					for q := 0; q < nq; q++ {
						clear(d[q*W : q*W+16])
					}
					continue
				}
				if nr >= 16 && nq == 16 {
					transpose16h(B.h[(jb+jj0)*B.cs+kb+p0:], B.cs, d, W)
					continue
				}
				var t [256]float32
				for r := 0; r < min(nr, 16); r++ {
					WidenBF16(t[r*16:r*16+nq], B.h[(jb+jj0+r)*B.cs+kb+p0:])
				}
				transpose16(t[:], 16, d, W)
			}
		}
	case B.rs == 1 && isa == isaAVX2 && W%8 == 0:
		packT8(B, kb, kc, jb, w, W, buf)
	default:
		for pp := 0; pp < kc; pp++ {
			d := dst[pp*W : pp*W+W]
			for jj := range w {
				d[jj] = B.at(kb+pp, jb+jj)
			}
			clear(d[w:])
		}
	}
	return unsafe.Pointer(&dst[0]), uintptr(W) * 4
}

// gemm512simd is the archsimd AVX-512 driver the assembly one (gemm512z)
// replaced, kept for m < zGEMVRows and as the tests' reference: K-blocks of kcBlk; for m ≥ 4, column
// panels 32 wide (16 for a last remainder ≤ 16) with 4-row tiles and 2/1-row
// tails; for m < 4 (GEMV-like), 64-wide panels read in place with 2/1-row
// tiles, and 128-wide ones for m = 1. The tile shapes were chosen by BenchmarkMicroKernel.
func gemm512simd(c []float32, ldc int, A, B operand, m, k, n int, acc, inPlace bool, sc *scratch) {
	buf := &sc.b
	packA := A.rs == 1 && A.cs != 1 && m >= packATMinM
	for kb := 0; kb < k; kb += kcBlk {
		kc := min(kcBlk, k-kb)
		load := acc || kb > 0
		ar, ap := uintptr(A.rs)*4, uintptr(A.cs)*4
		a0 := unsafe.Pointer(&A.s[kb*A.cs])
		if packA {
			ld := (kc + 15) &^ 15
			need := ((m + 15) &^ 15) * ld
			if cap(sc.at) < need {
				sc.at = make([]float32, need)
			}
			at := sc.at[:need]
			packAT(at, ld, A, m, kb, kc)
			ar, ap = uintptr(ld)*4, 4
			a0 = unsafe.Pointer(&at[0])
		}
		for jb := 0; jb < n; {
			rem := n - jb
			W := 32
			switch {
			case rem <= 16:
				W = 16
			case m == 1 && inPlace && rem >= 128 && B.cs == 1:
				W = 128
			case m < 4 && rem > 32:
				W = 64
			}
			w := min(W, rem)
			bp, bs := bPanel(isaAVX512, B, kb, kc, jb, w, W, inPlace, buf)
			i := 0
			switch W {
			case 128:
				z1x128(kc, a0, ar, ap, bp, bs, c[jb:], ldc, w, load)
			case 64:
				for ; i+2 <= m; i += 2 {
					z2x64(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
				if i < m {
					z1x64(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
			case 32:
				for ; i+4 <= m; i += 4 {
					z4x32(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
				if i+2 <= m {
					z2x32(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
					i += 2
				}
				if i < m {
					z1x32(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
			default:
				for ; i+4 <= m; i += 4 {
					z4x16(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
				if i+2 <= m {
					z2x16(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
					i += 2
				}
				if i < m {
					z1x16(kc, unsafe.Add(a0, uintptr(i)*ar), ar, ap, bp, bs, c[i*ldc+jb:], ldc, w, load)
				}
			}
			jb += W
		}
	}
}

// C tile loads/stores: columns [off, off+lanes) of a row, only the first w
// are real (the rest are zero on load and not written on store). Partial
// vectors are masked loads and stores (archsimd's Load/StoreSlicePart);
// under -race they go through a local array instead, because those build
// an over-long array pointer that checkptr rejects near the end of an
// allocation. Both give the same lanes; the array's copies were 4 % of the
// CPU of the default run's RL steps (the tails of short causal rows in
// softmax and scaling).

func ld16(c []float32, off, w int) archsimd.Float32x16 {
	if off+16 <= w {
		return archsimd.LoadFloat32x16Slice(c[off:])
	}
	if !race.Enabled {
		return archsimd.LoadFloat32x16SlicePart(c[min(off, w):w])
	}
	var t [16]float32
	if off < w {
		copy(t[:], c[off:w])
	}
	return archsimd.LoadFloat32x16(&t)
}

func st16(v archsimd.Float32x16, c []float32, off, w int) {
	if off+16 <= w {
		v.StoreSlice(c[off:])
		return
	}
	if !race.Enabled {
		v.StoreSlicePart(c[min(off, w):w])
		return
	}
	if off < w {
		var t [16]float32
		v.Store(&t)
		copy(c[off:w], t[:])
	}
}

func ld8(c []float32, off, w int) archsimd.Float32x8 {
	if off+8 <= w {
		return archsimd.LoadFloat32x8Slice(c[off:])
	}
	if !race.Enabled {
		return archsimd.LoadFloat32x8SlicePart(c[min(off, w):w])
	}
	var t [8]float32
	if off < w {
		copy(t[:], c[off:w])
	}
	return archsimd.LoadFloat32x8(&t)
}

func st8(v archsimd.Float32x8, c []float32, off, w int) {
	if off+8 <= w {
		v.StoreSlice(c[off:])
		return
	}
	if !race.Enabled {
		v.StoreSlicePart(c[min(off, w):w])
		return
	}
	if off < w {
		var t [8]float32
		v.Store(&t)
		copy(c[off:w], t[:])
	}
}
