//go:build goexperiment.simd && amd64

package model

import (
	"simd/archsimd"

	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/model/kern"
)

// fusedDecode: the kern products use fused multiply-adds (any SIMD path),
// and this CPU has them, so the fused loops below give the same chains.
// Read-only after init.
var fusedDecode = kern.SIMDPath() != "portable" && archsimd.X86.AVX2() && archsimd.X86.FMA()

// decodeScores writes s[j] = Σ_p q[p]·kt[ktAt(hs, j, p)] for j < nk,
// keeping a block's 32 keys' chains in registers across p. Lanes past nk
// hold garbage (probs has room for them) and are never read.
func decodeScores(probs, q, kt []float32, nk int) {
	if !fusedDecode {
		axpyScores(probs, q, kt, nk)
		return
	}
	hs := len(q)
	for j := 0; j < nk; j += ktBlock {
		var a0, a1, a2, a3 archsimd.Float32x8
		blk := kt[j*hs : (j+ktBlock)*hs]
		for p, qp := range q {
			b := archsimd.BroadcastFloat32x8(qp)
			row := blk[p*ktBlock : (p+1)*ktBlock]
			a0 = b.MulAdd(archsimd.LoadFloat32x8Slice(row), a0)
			a1 = b.MulAdd(archsimd.LoadFloat32x8Slice(row[8:]), a1)
			a2 = b.MulAdd(archsimd.LoadFloat32x8Slice(row[16:]), a2)
			a3 = b.MulAdd(archsimd.LoadFloat32x8Slice(row[24:]), a3)
		}
		a0.StoreSlice(probs[j:])
		a1.StoreSlice(probs[j+8:])
		a2.StoreSlice(probs[j+16:])
		a3.StoreSlice(probs[j+24:])
	}
	archsimd.ClearAVXUpperBits()
}

// decodeValues writes out[c] = Σ_j s[j]·v[j·hs+c], 32 columns of chains in
// registers across j.
func decodeValues(out, s, v []float32) {
	if !fusedDecode {
		axpyValues(out, s, v)
		return
	}
	hs := len(out)
	for c := 0; c < hs; c += 32 {
		var a0, a1, a2, a3 archsimd.Float32x8
		full := c+32 <= hs
		for j, pj := range s {
			b := archsimd.BroadcastFloat32x8(pj)
			row := v[j*hs : (j+1)*hs]
			if full {
				a0 = b.MulAdd(archsimd.LoadFloat32x8Slice(row[c:]), a0)
				a1 = b.MulAdd(archsimd.LoadFloat32x8Slice(row[c+8:]), a1)
				a2 = b.MulAdd(archsimd.LoadFloat32x8Slice(row[c+16:]), a2)
				a3 = b.MulAdd(archsimd.LoadFloat32x8Slice(row[c+24:]), a3)
			} else {
				a0 = b.MulAdd(load8(row, c), a0)
				a1 = b.MulAdd(load8(row, c+8), a1)
				a2 = b.MulAdd(load8(row, c+16), a2)
				a3 = b.MulAdd(load8(row, c+24), a3)
			}
		}
		store8(a0, out, c)
		store8(a1, out, c+8)
		store8(a2, out, c+16)
		store8(a3, out, c+24)
	}
	archsimd.ClearAVXUpperBits()
}

// load8 loads x[off:off+8], zero-filling past the end (masked, or under
// -race through an array: kern's ld8 says why).
func load8(x []float32, off int) archsimd.Float32x8 {
	if off+8 <= len(x) {
		return archsimd.LoadFloat32x8Slice(x[off:])
	}
	if !race.Enabled {
		return archsimd.LoadFloat32x8SlicePart(x[min(off, len(x)):])
	}
	var t [8]float32
	if off < len(x) {
		copy(t[:], x[off:])
	}
	return archsimd.LoadFloat32x8(&t)
}

// store8 stores the lanes of v that fall inside x[off:].
func store8(v archsimd.Float32x8, x []float32, off int) {
	if off+8 <= len(x) {
		v.StoreSlice(x[off:])
		return
	}
	if !race.Enabled {
		v.StoreSlicePart(x[min(off, len(x)):])
		return
	}
	if off < len(x) {
		var t [8]float32
		v.Store(&t)
		copy(x[off:], t[:])
	}
}
