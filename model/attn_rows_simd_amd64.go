//go:build goexperiment.simd && amd64

package model

import (
	"unsafe"

	"github.com/longhaul-rl/longhaul/internal/kern"
)

//go:generate sh -c "python3 gen_attn_asm.py && gofmt -w attn_asm_amd64.go"

// decodeLanes is the vector width of the kernel path in use (16 on
// AVX-512, 8 on AVX2). Read-only after init.
var decodeLanes = map[bool]int{true: 16, false: 8}[kern.SIMDPath() == "avx512"]

// A decode step's attention is latency-bound when done one head at a time:
// each head's scores are a few chains of hs multiply-adds, its values a few
// chains of nk. decodeScoresHeads and decodeValuesHeads run the chains of 4
// heads together, 2 vectors each (the assembly kernels of attn_amd64.s), so
// eight independent FMAs are in flight. Each lane is still the one chain
// over the reduction index from 0 that kern's products compute (training's),
// so the bits do not change.

// decodeScoresHeads writes, for every head h, probs[h·ps + j] = Σ_p
// q[h·hs+p]·kt[(h·hs+p)·T + j] for j < nk (lanes up to nk rounded up to the
// vector width hold values that are never read).
func decodeScoresHeads(probs []float32, ps int, q, kt []float32, nk, T, H, hs int) {
	L := decodeLanes
	if !fusedDecode || T%L != 0 {
		for h := range H {
			decodeScores(probs[h*ps:], q[h*hs:(h+1)*hs], kt[h*hs*T:], nk, T)
		}
		return
	}
	chunks := (nk + L - 1) / L
	_ = kt[H*hs*T-1]
	_ = q[H*hs-1]
	_ = probs[(H-1)*ps+chunks*L-1]
	for h0 := 0; h0 < H; h0 += 4 {
		for c0 := 0; c0 < chunks; c0 += 2 {
			V := min(2, chunks-c0)
			var xp, yp [4]unsafe.Pointer
			for g := range 4 {
				h := min(h0+g, H-1) // past the last head: repeat it, store nothing
				xp[g] = unsafe.Pointer(&q[h*hs])
				yp[g] = unsafe.Pointer(&kt[h*hs*T+c0*L])
			}
			var out [8][16]float32
			chains4(L, V, hs, &xp, 4, &yp, uintptr(T)*4, &out)
			for g := range min(4, H-h0) {
				for v := range V {
					d := (h0+g)*ps + (c0+v)*L
					copy(probs[d:d+L], out[g*V+v][:L])
				}
			}
		}
	}
}

// decodeValuesHeads writes, for every head h, out[h·hs + c] = Σ_j
// probs[h·ps + j]·v[(h·T + j)·hs + c] for c < hs.
func decodeValuesHeads(out, probs []float32, ps int, v []float32, nk, T, H, hs int) {
	L := decodeLanes
	if !fusedDecode || hs%L != 0 {
		for h := range H {
			decodeValues(out[h*hs:(h+1)*hs], probs[h*ps:h*ps+nk], v[h*T*hs:])
		}
		return
	}
	chunks := hs / L
	_ = v[((H-1)*T+nk)*hs-1]
	_ = probs[(H-1)*ps+nk-1]
	_ = out[H*hs-1]
	for h0 := 0; h0 < H; h0 += 4 {
		for c0 := 0; c0 < chunks; c0 += 2 {
			V := min(2, chunks-c0)
			var xp, yp [4]unsafe.Pointer
			for g := range 4 {
				h := min(h0+g, H-1)
				xp[g] = unsafe.Pointer(&probs[h*ps])
				yp[g] = unsafe.Pointer(&v[h*T*hs+c0*L])
			}
			var acc [8][16]float32
			chains4(L, V, nk, &xp, 4, &yp, uintptr(hs)*4, &acc)
			for g := range min(4, H-h0) {
				for vv := range V {
					d := (h0+g)*hs + (c0+vv)*L
					copy(out[d:d+L], acc[g*V+vv][:L])
				}
			}
		}
	}
}

// chains4 runs the 4-head, V-vector kernel of width L for n ≥ 1 steps. The
// caller has checked that every address the steps reach lies inside its
// slice.
func chains4(L, V, n int, xp *[4]unsafe.Pointer, xs uintptr, yp *[4]unsafe.Pointer, ys uintptr, out *[8][16]float32) {
	switch {
	case L == 16 && V == 2:
		attnZ4x2(n, xp, xs, yp, ys, out)
	case L == 16:
		attnZ4x1(n, xp, xs, yp, ys, out)
	case V == 2:
		attnY4x2(n, xp, xs, yp, ys, out)
	default:
		attnY4x1(n, xp, xs, yp, ys, out)
	}
}
