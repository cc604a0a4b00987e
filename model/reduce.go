package model

import "math"

// Fixed-order reductions. sumLanes and dotLanes have SIMD forms
// (reduce_simd_amd64.go) whose 8-lane vectors hold exactly these partial
// sums, so both forms give the same bits.
// A sequential float32 sum is bound by the add
// latency (one element per ~3 cycles); these keep 8 interleaved partial
// sums (element j goes to lane j%8) and combine them in a fixed tree, so
// the result depends only on the values and the length, never on the
// caller, the build or the machine.

func reduce8(s *[8]float32) float32 {
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// sumLanesRef returns Σ x (the portable form of sumLanes).
func sumLanesRef(x []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(x); i += 8 {
		v := x[i : i+8 : i+8]
		s0 += v[0]
		s1 += v[1]
		s2 += v[2]
		s3 += v[3]
		s4 += v[4]
		s5 += v[5]
		s6 += v[6]
		s7 += v[7]
	}
	s := [8]float32{s0, s1, s2, s3, s4, s5, s6, s7}
	for j, v := range x[i:] {
		s[j] += v
	}
	return reduce8(&s)
}

// dotLanesRef returns Σ a·b (len(b) ≥ len(a)), each product rounded
// first (the portable form of dotLanes).
func dotLanesRef(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x := a[i : i+8 : i+8]
		y := b[i : i+8 : i+8]
		s0 += float32(x[0] * y[0])
		s1 += float32(x[1] * y[1])
		s2 += float32(x[2] * y[2])
		s3 += float32(x[3] * y[3])
		s4 += float32(x[4] * y[4])
		s5 += float32(x[5] * y[5])
		s6 += float32(x[6] * y[6])
		s7 += float32(x[7] * y[7])
	}
	s := [8]float32{s0, s1, s2, s3, s4, s5, s6, s7}
	for j := range a[i:] {
		s[j] += float32(a[i+j] * b[i+j])
	}
	return reduce8(&s)
}

// dot3Lanes returns Σ (a·b)·c with the same lane order.
func dot3Lanes(a, b, c []float32) float32 {
	b, c = b[:len(a)], c[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x := a[i : i+8 : i+8]
		y := b[i : i+8 : i+8]
		z := c[i : i+8 : i+8]
		s0 += float32(float32(x[0]*y[0]) * z[0])
		s1 += float32(float32(x[1]*y[1]) * z[1])
		s2 += float32(float32(x[2]*y[2]) * z[2])
		s3 += float32(float32(x[3]*y[3]) * z[3])
		s4 += float32(float32(x[4]*y[4]) * z[4])
		s5 += float32(float32(x[5]*y[5]) * z[5])
		s6 += float32(float32(x[6]*y[6]) * z[6])
		s7 += float32(float32(x[7]*y[7]) * z[7])
	}
	s := [8]float32{s0, s1, s2, s3, s4, s5, s6, s7}
	for j := range a[i:] {
		s[j] += float32(float32(a[i+j]*b[i+j]) * c[i+j])
	}
	return reduce8(&s)
}

// scaleMaxRef multiplies x by scale in place and returns the maximum.
func scaleMaxRef(x []float32, scale float32) float32 {
	mx := float32(math.Inf(-1))
	for j, v := range x {
		v *= scale
		x[j] = v
		mx = max(mx, v)
	}
	return mx
}

// addScalarRef adds c to every element of x.
func addScalarRef(x []float32, c float32) {
	for j := range x {
		x[j] += c
	}
}
