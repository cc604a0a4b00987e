//go:build goexperiment.simd && amd64

package kern

import "unsafe"

// The m = 1 product (decode GEMV) over Pack's panels: every weight is read
// once per product, so the product is bound by how fast B streams in. The
// kernels (asmGemv16xG, asmZGemv32xG) walk G panels at once, each panel a
// contiguous run of k·w floats read front to back, with 2G accumulators
// held in registers for the whole k loop (no C traffic, no k-blocking).

// gemvGroup is the most panels one kernel call walks: 6 on AVX2 (12 ymm
// accumulators + the broadcast), 8 on AVX-512 (16 zmm accumulators).
func gemvGroup(isa int) int {
	if isa == isaAVX512 {
		return 8
	}
	return 6
}

// gemvPanels computes the columns of panels [J0, J1) of c[1×n] = a·B (or
// c += a·B with acc) with B packed for isa. A partial last panel goes
// through a local copy, so nothing past n is written.
func gemvPanels(isa int, c, a []float32, B *Packed, acc bool, J0, J1 int) {
	k, n, w := B.k, B.n, B.w
	ps := uintptr(k*w) * 4
	full := min(J1, n/w)
	gmax := gemvGroup(isa)
	ap := unsafe.Pointer(&a[0])
	J := J0
	for J < full {
		g := min(gmax, full-J)
		_ = c[(J+g)*w-1]
		gemvCall(isa, g, k, ap, unsafe.Pointer(&B.p[J*k*w]), ps, unsafe.Pointer(&c[J*w]), acc)
		J += g
	}
	if J < J1 {
		var t [32]float32
		cols := n - J*w
		if acc {
			copy(t[:cols], c[J*w:n])
		}
		gemvCall(isa, 1, k, ap, unsafe.Pointer(&B.p[J*k*w]), ps, unsafe.Pointer(&t[0]), acc)
		copy(c[J*w:n], t[:cols])
	}
}

// gemvCall runs the g-panel kernel of the path (direct calls, so the
// kernels' //go:noescape holds).
func gemvCall(isa, g, k int, a, b unsafe.Pointer, ps uintptr, c unsafe.Pointer, load bool) {
	if isa == isaAVX512 {
		switch g {
		case 8:
			asmZGemv32x8(k, a, b, ps, c, load)
		case 7:
			asmZGemv32x7(k, a, b, ps, c, load)
		case 6:
			asmZGemv32x6(k, a, b, ps, c, load)
		case 5:
			asmZGemv32x5(k, a, b, ps, c, load)
		case 4:
			asmZGemv32x4(k, a, b, ps, c, load)
		case 3:
			asmZGemv32x3(k, a, b, ps, c, load)
		case 2:
			asmZGemv32x2(k, a, b, ps, c, load)
		default:
			asmZGemv32x1(k, a, b, ps, c, load)
		}
		return
	}
	switch g {
	case 6:
		asmGemv16x6(k, a, b, ps, c, load)
	case 5:
		asmGemv16x5(k, a, b, ps, c, load)
	case 4:
		asmGemv16x4(k, a, b, ps, c, load)
	case 3:
		asmGemv16x3(k, a, b, ps, c, load)
	case 2:
		asmGemv16x2(k, a, b, ps, c, load)
	default:
		asmGemv16x1(k, a, b, ps, c, load)
	}
}

// gemvPackedISA is GEMVPacked on the given path (B packed for it), split
// into exactly min(shards, panels) column blocks.
func gemvPackedISA(isa int, c, a []float32, B *Packed, acc bool, shards int) {
	if isa == isaRef || B.w != packWidthOf(isa) {
		packedISA(isa, c, a, 1, B, acc) // panics on a width mismatch
		return
	}
	np := (B.n + B.w - 1) / B.w
	if shards > np {
		shards = np
	}
	if shards <= 1 {
		gemvPanels(isa, c, a, B, acc, 0, np)
		return
	}
	per := (np + shards - 1) / shards
	Fork((np+per-1)/per, func(s int) {
		gemvPanels(isa, c, a, B, acc, s*per, min((s+1)*per, np))
	})
}

func gemvPacked(c, a []float32, B *Packed, acc bool, shards int) {
	gemvPackedISA(bestISA, c, a, B, acc, gemvShards(B.k, B.n, shards))
}

// ReadLoop reads buf once with 8 streams at once (8 equal segments, read
// side by side; assembly) and returns the bytes read: the buffer rounded
// down to a multiple of 512 bytes. Timing it over a buffer far larger than
// the last-level cache gives the streaming DRAM read rate a GEMV's bytes/s
// are judged against; a single stream read less (BenchmarkReadStreams).
// 0 on the portable path.
func ReadLoop(buf []float32) int {
	if bestISA == isaRef {
		return 0
	}
	return readStreams(8, buf)
}

// readStreams reads buf in s (1, 4 or 8) equal segments side by side and
// returns the bytes read (len(buf) rounded down to s·64 bytes).
func readStreams(s int, buf []float32) int {
	seg := len(buf) / (16 * s) * 16 // floats per segment, whole cache lines
	if seg == 0 {
		return 0
	}
	p, sb := unsafe.Pointer(&buf[0]), uintptr(seg)*4
	switch s {
	case 8:
		asmReadY8(p, sb, seg*4)
	case 4:
		asmReadY4(p, sb, seg*4)
	default:
		asmReadY1(p, sb, seg*4)
		s = 1
	}
	return s * seg * 4
}

// gemvStripMaxBytes is the largest B the AVX-512 in-place GEMV walks as
// strips. Each strip walks all k rows with a stride of n floats; from DRAM
// that stride defeats the hardware prefetchers and the archsimd 1×128
// kernel reads faster (BenchmarkGEMVAlternate: 512 MB, strips 0.74 of the
// read rate, archsimd 0.89), while from L2 the strips win (1.4 MB: 1.3-1.4×
// in thread CPU time) and from L3 they are within a few per cent. Set
// between 16 and 64 MB, where the Xeon's measurements cross.
const gemvStripMaxBytes = 16 << 20

// gemvStrips reports whether an in-place k×n B is walked as strips.
func gemvStrips(k, n int) bool { return 4*k*n <= gemvStripMaxBytes }

// gemvRowsAhead is how many rows ahead the in-place GEMV prefetches.
const gemvRowsAhead = 4

// gemvInPlace computes columns [0, nw) of c[1×n] = a·B (c += with acc) on
// the AVX-512 path, nw = n rounded down to 32, with B row-major (row stride
// ldb floats) read in place and a contiguous: groups of up to 8 strips of
// 32 columns, i.e. 256 contiguous floats of every row, accumulated in zmm
// registers over all k rows. It returns nw; the caller does the columns
// past it.
func gemvInPlace(c, a, b []float32, ldb, k, n int, acc bool) int {
	const w = 32
	nw := n / w * w
	if nw == 0 || k == 0 {
		return 0
	}
	_ = a[k-1]
	_ = b[(k-1)*ldb+nw-1]
	_ = c[nw-1]
	gmax := gemvGroup(isaAVX512)
	bs := uintptr(ldb) * 4
	pf := gemvRowsAhead * bs
	ap := unsafe.Pointer(&a[0])
	for j := 0; j < nw; {
		g := min(gmax, (nw-j)/w)
		gemvRowCall(g, k, ap, unsafe.Pointer(&b[j]), bs, pf, unsafe.Pointer(&c[j]), acc)
		j += g * w
	}
	return nw
}

// gemvRowCall runs the g-strip AVX-512 in-place kernel.
func gemvRowCall(g, k int, a, b unsafe.Pointer, bs, pf uintptr, c unsafe.Pointer, load bool) {
	switch g {
	case 8:
		asmZGemvRow32x8(k, a, b, bs, pf, c, load)
	case 7:
		asmZGemvRow32x7(k, a, b, bs, pf, c, load)
	case 6:
		asmZGemvRow32x6(k, a, b, bs, pf, c, load)
	case 5:
		asmZGemvRow32x5(k, a, b, bs, pf, c, load)
	case 4:
		asmZGemvRow32x4(k, a, b, bs, pf, c, load)
	case 3:
		asmZGemvRow32x3(k, a, b, bs, pf, c, load)
	case 2:
		asmZGemvRow32x2(k, a, b, bs, pf, c, load)
	default:
		asmZGemvRow32x1(k, a, b, bs, pf, c, load)
	}
}
