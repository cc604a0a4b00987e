//go:build goexperiment.simd && amd64

package model

import "simd/archsimd"

// The vector forms use separate multiplies and adds (never fused), so each
// lane computes what the scalar reference's lane computes.

var haveAVX2 = archsimd.X86.AVX2() // read-only after init

func sumLanes(x []float32) float32 {
	if !haveAVX2 {
		return sumLanesRef(x)
	}
	var acc archsimd.Float32x8
	i := 0
	for ; i+8 <= len(x); i += 8 {
		acc = acc.Add(archsimd.LoadFloat32x8Slice(x[i:]))
	}
	if i < len(x) {
		acc = acc.Add(load8(x, i)) // zero lanes add nothing: no lane holds −0
	}
	var s [8]float32
	acc.Store(&s)
	archsimd.ClearAVXUpperBits() // the scalar SSE code after (GOAMD64=v1) must not see dirty upper halves
	return reduce8(&s)
}

func dotLanes(a, b []float32) float32 {
	if !haveAVX2 {
		return dotLanesRef(a, b)
	}
	b = b[:len(a)]
	var acc archsimd.Float32x8
	i := 0
	for ; i+8 <= len(a); i += 8 {
		acc = acc.Add(archsimd.LoadFloat32x8Slice(a[i:]).Mul(archsimd.LoadFloat32x8Slice(b[i:])))
	}
	if i < len(a) {
		acc = acc.Add(load8(a, i).Mul(load8(b, i)))
	}
	var s [8]float32
	acc.Store(&s)
	archsimd.ClearAVXUpperBits() // the scalar SSE code after (GOAMD64=v1) must not see dirty upper halves
	return reduce8(&s)
}

func scaleMax(x []float32, scale float32) float32 {
	if !haveAVX2 || len(x) < 8 {
		return scaleMaxRef(x, scale)
	}
	sc := archsimd.BroadcastFloat32x8(scale)
	mx := archsimd.LoadFloat32x8Slice(x).Mul(sc)
	i := 0
	for ; i+8 <= len(x); i += 8 {
		v := archsimd.LoadFloat32x8Slice(x[i:]).Mul(sc)
		v.StoreSlice(x[i:])
		mx = mx.Max(v)
	}
	var s [8]float32
	mx.Store(&s)
	archsimd.ClearAVXUpperBits()
	m := s[0]
	for _, v := range s[1:] {
		m = max(m, v)
	}
	for ; i < len(x); i++ {
		v := x[i] * scale
		x[i] = v
		m = max(m, v)
	}
	return m
}

func addScalar(x []float32, c float32) {
	if !haveAVX2 {
		addScalarRef(x, c)
		return
	}
	cv := archsimd.BroadcastFloat32x8(c)
	i := 0
	for ; i+8 <= len(x); i += 8 {
		archsimd.LoadFloat32x8Slice(x[i:]).Add(cv).StoreSlice(x[i:])
	}
	archsimd.ClearAVXUpperBits()
	for ; i < len(x); i++ {
		x[i] += c
	}
}
