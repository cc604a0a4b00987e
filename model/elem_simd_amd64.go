//go:build goexperiment.simd && amd64

package model

import "simd/archsimd"

// Vector forms of the elementwise row loops in layers.go: the same IEEE
// operations in the same order per element (no fusion), so the same bits;
// tails run the scalar reference, after archsimd.ClearAVXUpperBits (the
// scalar code is legacy SSE under GOAMD64=v1 and would otherwise carry a
// false dependency on the dirty upper halves).

func negate(dst, src []float32) {
	dst = dst[:len(src)]
	i := 0
	if haveAVX2 {
		m := archsimd.BroadcastFloat32x8(-1) // x·(−1) = −x exactly, signed zeros included
		for ; i+8 <= len(src); i += 8 {
			archsimd.LoadFloat32x8Slice(src[i:]).Mul(m).StoreSlice(dst[i:])
		}
		archsimd.ClearAVXUpperBits()
	}
	negateRef(dst[i:], src[i:])
}

func swigluRow(act, sr, gate, up []float32) {
	n := len(gate)
	act, sr, up = act[:n], sr[:n], up[:n]
	i := 0
	if haveAVX2 {
		one := archsimd.BroadcastFloat32x8(1)
		for ; i+8 <= n; i += 8 {
			s := one.Div(one.Add(archsimd.LoadFloat32x8Slice(sr[i:])))
			s.StoreSlice(sr[i:])
			archsimd.LoadFloat32x8Slice(gate[i:]).Mul(s).Mul(archsimd.LoadFloat32x8Slice(up[i:])).StoreSlice(act[i:])
		}
		archsimd.ClearAVXUpperBits()
	}
	swigluRowRef(act[i:], sr[i:], gate[i:], up[i:])
}

func swigluBackRow(dg, du, da, gate, up, sr []float32) {
	n := len(gate)
	dg, du, da, up, sr = dg[:n], du[:n], da[:n], up[:n], sr[:n]
	i := 0
	if haveAVX2 {
		one := archsimd.BroadcastFloat32x8(1)
		for ; i+8 <= n; i += 8 {
			s := archsimd.LoadFloat32x8Slice(sr[i:])
			g := archsimd.LoadFloat32x8Slice(gate[i:])
			a := archsimd.LoadFloat32x8Slice(da[i:])
			a.Mul(g).Mul(s).StoreSlice(du[i:])
			dsilu := s.Mul(one.Add(g.Mul(one.Sub(s))))
			a.Mul(archsimd.LoadFloat32x8Slice(up[i:])).Mul(dsilu).StoreSlice(dg[i:])
		}
		archsimd.ClearAVXUpperBits()
	}
	swigluBackRowRef(dg[i:], du[i:], da[i:], gate[i:], up[i:], sr[i:])
}

func rmsnormBackRow(dx, dg, dy, x, g []float32, s, c float32) {
	n := len(x)
	dx, dg, dy, g = dx[:n], dg[:n], dy[:n], g[:n]
	i := 0
	if haveAVX2 {
		sv := archsimd.BroadcastFloat32x8(s)
		cv := archsimd.BroadcastFloat32x8(c)
		for ; i+8 <= n; i += 8 {
			xi := archsimd.LoadFloat32x8Slice(x[i:])
			yi := archsimd.LoadFloat32x8Slice(dy[i:])
			archsimd.LoadFloat32x8Slice(dg[i:]).Add(yi.Mul(xi).Mul(sv)).StoreSlice(dg[i:])
			t := sv.Mul(archsimd.LoadFloat32x8Slice(g[i:])).Mul(yi).Sub(xi.Mul(cv))
			archsimd.LoadFloat32x8Slice(dx[i:]).Add(t).StoreSlice(dx[i:])
		}
		archsimd.ClearAVXUpperBits()
	}
	rmsnormBackRowRef(dx[i:], dg[i:], dy[i:], x[i:], g[i:], s, c)
}
