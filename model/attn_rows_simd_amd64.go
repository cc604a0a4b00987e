//go:build goexperiment.simd && amd64

package model

import (
	"unsafe"

	"github.com/longhaul-rl/longhaul/model/kern"
)

//go:generate sh -c "python3 gen_attn_asm.py && gofmt -w attn_asm_amd64.go"

// decodeLanes is the vector width of the kernel path in use (16 on
// AVX-512, 8 on AVX2); decodeHeads and decodeVecs the heads and vectors a
// kernel call runs together (4 × 2 on AVX-512; 2 × 4 on AVX2, where a
// call's vectors then cover a whole key block or value row and each
// broadcast feeds 4 FMAs). Read-only after init.
var (
	decodeLanes = map[bool]int{true: 16, false: 8}[kern.SIMDPath() == "avx512"]
	decodeHeads = map[bool]int{true: 4, false: 2}[kern.SIMDPath() == "avx512"]
	decodeVecs  = map[bool]int{true: 2, false: 4}[kern.SIMDPath() == "avx512"]
)

// A decode step's attention is latency-bound when done one head at a time:
// each head's scores are a few chains of hs multiply-adds, its values a few
// chains of nk. decodeScoresHeads and decodeValuesHeads run the chains of
// several heads together (the assembly kernels of attn_amd64.s), so eight
// independent FMAs are in flight. Each lane is still the one chain
// over the reduction index from 0 that kern's products compute (training's),
// so the bits do not change.

// decodeScoresHeads writes, for every head h, probs[h·ps + j] = Σ_p
// q[h·hs+p]·kt[g·hs·ktLen(T) + ktAt(hs, j, p)] for j < nk, g = h/rep its
// kv head (lanes up to nk rounded up to the vector width hold values that
// are never read). A kernel call's vectors of keys lie in one block
// (ktBlock is decodeVecs vectors), whose rows are ktBlock floats apart.
func decodeScoresHeads(probs []float32, ps int, q, kt []float32, nk, T, H, rep, hs int) {
	L, tl := decodeLanes, ktLen(T)
	if !fusedDecode {
		for h := range H {
			decodeScores(probs[h*ps:], q[h*hs:(h+1)*hs], kt[(h/rep)*hs*tl:], nk)
		}
		return
	}
	chunks := (nk + L - 1) / L
	_ = kt[(H/rep)*hs*tl-1]
	_ = q[H*hs-1]
	_ = probs[(H-1)*ps+chunks*L-1]
	G, VM := decodeHeads, decodeVecs
	for h0 := 0; h0 < H; h0 += G {
		for c0 := 0; c0 < chunks; c0 += VM {
			V := min(VM, chunks-c0)
			var xp, yp, op [4]unsafe.Pointer
			for g := range G {
				// past the last head: repeat it (its lanes are written
				// twice with the same values)
				h := min(h0+g, H-1)
				xp[g] = unsafe.Pointer(&q[h*hs])
				yp[g] = unsafe.Pointer(&kt[(h/rep)*hs*tl+ktAt(hs, c0*L, 0)])
				op[g] = unsafe.Pointer(&probs[h*ps+c0*L])
			}
			chains(L, V, hs, &xp, 4, &yp, ktBlock*4, &op)
		}
	}
}

// decodeValuesHeads writes, for every head h, out[h·hs + c] = Σ_j
// probs[h·ps + j]·v[(g·T + j)·hs + c] for c < hs, g = h/rep its kv head.
func decodeValuesHeads(out, probs []float32, ps int, v []float32, nk, T, H, rep, hs int) {
	L := decodeLanes
	if !fusedDecode || hs%L != 0 {
		for h := range H {
			decodeValues(out[h*hs:(h+1)*hs], probs[h*ps:h*ps+nk], v[(h/rep)*T*hs:])
		}
		return
	}
	chunks := hs / L
	_ = v[((H/rep-1)*T+nk)*hs-1]
	_ = probs[(H-1)*ps+nk-1]
	_ = out[H*hs-1]
	G, VM := decodeHeads, decodeVecs
	for h0 := 0; h0 < H; h0 += G {
		for c0 := 0; c0 < chunks; c0 += VM {
			V := min(VM, chunks-c0)
			var xp, yp, op [4]unsafe.Pointer
			for g := range G {
				h := min(h0+g, H-1)
				xp[g] = unsafe.Pointer(&probs[h*ps])
				yp[g] = unsafe.Pointer(&v[(h/rep)*T*hs+c0*L])
				op[g] = unsafe.Pointer(&out[h*hs+c0*L])
			}
			chains(L, V, nk, &xp, 4, &yp, uintptr(hs)*4, &op)
		}
	}
}

// probRow is the stride of the heads' score rows in a decode row's probs:
// nk rounded up to whole vectors of the path, so the kernels' last vector
// stays inside its head's row and the softmax's exp runs on whole vectors.
func probRow(nk int) int { return (nk + decodeLanes - 1) / decodeLanes * decodeLanes }

// chains runs the kernel of width L (decodeHeads heads, V vectors) for
// n ≥ 1 steps. The caller has checked that every address the steps reach
// lies inside its slice.
func chains(L, V, n int, xp *[4]unsafe.Pointer, xs uintptr, yp *[4]unsafe.Pointer, ys uintptr, op *[4]unsafe.Pointer) {
	switch {
	case L == 16 && V == 2:
		attnZ4x2(n, xp, xs, yp, ys, op)
	case L == 16:
		attnZ4x1(n, xp, xs, yp, ys, op)
	case V == 4:
		attnY2x4(n, xp, xs, yp, ys, op)
	case V == 3:
		attnY2x3(n, xp, xs, yp, ys, op)
	case V == 2:
		attnY2x2(n, xp, xs, yp, ys, op)
	default:
		attnY2x1(n, xp, xs, yp, ys, op)
	}
}
