package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestReductions(t *testing.T) {
	for n := 0; n < 40; n++ {
		a := make([]float32, n)
		b := make([]float32, n)
		var ws, wd, w3 float64
		for i := range a {
			a[i] = float32(i%7) - 2.5
			b[i] = 0.5 * float32(i%5)
			ws += float64(a[i])
			wd += float64(a[i]) * float64(b[i])
			w3 += float64(a[i]) * float64(b[i]) * float64(a[i])
		}
		if got := sumLanes(a); math.Abs(float64(got)-ws) > 1e-4 {
			t.Fatalf("n=%d sum %v want %v", n, got, ws)
		}
		if got := dotLanes(a, b); math.Abs(float64(got)-wd) > 1e-4 {
			t.Fatalf("n=%d dot %v want %v", n, got, wd)
		}
		if got := dot3Lanes(a, b, a); math.Abs(float64(got)-w3) > 1e-3 {
			t.Fatalf("n=%d dot3 %v want %v", n, got, w3)
		}
	}
}

// TestReductionForms: the build's forms (SIMD under GOEXPERIMENT=simd)
// give the reference forms' bits for every length.
func TestReductionForms(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 70; n++ {
		a := make([]float32, n)
		b := make([]float32, n)
		for i := range a {
			a[i] = float32(r.NormFloat64())
			b[i] = float32(r.NormFloat64())
		}
		if x, y := sumLanes(a), sumLanesRef(a); math.Float32bits(x) != math.Float32bits(y) {
			t.Fatalf("n=%d sumLanes %v != %v", n, x, y)
		}
		if x, y := dotLanes(a, b), dotLanesRef(a, b); math.Float32bits(x) != math.Float32bits(y) {
			t.Fatalf("n=%d dotLanes %v != %v", n, x, y)
		}
		if n == 0 {
			continue
		}
		a2 := slices.Clone(a)
		if x, y := scaleMax(a, 0.3), scaleMaxRef(a2, 0.3); x != y || !slices.Equal(a, a2) {
			t.Fatalf("n=%d scaleMax %v != %v", n, x, y)
		}
		addScalar(a, -1.7)
		addScalarRef(a2, -1.7)
		if !slices.Equal(a, a2) {
			t.Fatalf("n=%d addScalar differs", n)
		}
	}
}

// TestElementwiseForms: the build's row loops give the references' bits.
func TestElementwiseForms(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	for n := 0; n < 40; n++ {
		gate, up, da, x, g := vec(n), vec(n), vec(n), vec(n), vec(n)
		s1, s2 := make([]float32, n), make([]float32, n)
		negate(s1, gate)
		negateRef(s2, gate)
		for i := range s1 {
			s1[i] = float32(math.Exp(float64(s1[i])))
			s2[i] = s1[i]
		}
		a1, a2 := make([]float32, n), make([]float32, n)
		swigluRow(a1, s1, gate, up)
		swigluRowRef(a2, s2, gate, up)
		if !slices.Equal(a1, a2) || !slices.Equal(s1, s2) {
			t.Fatalf("n=%d swigluRow differs", n)
		}
		g1, u1, g2, u2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		swigluBackRow(g1, u1, da, gate, up, s1)
		swigluBackRowRef(g2, u2, da, gate, up, s2)
		if !slices.Equal(g1, g2) || !slices.Equal(u1, u2) {
			t.Fatalf("n=%d swigluBackRow differs", n)
		}
		dx1, dg1 := vec(n), vec(n)
		dx2, dg2 := slices.Clone(dx1), slices.Clone(dg1)
		rmsnormBackRow(dx1, dg1, da, x, g, 0.7, 0.01)
		rmsnormBackRowRef(dx2, dg2, da, x, g, 0.7, 0.01)
		if !slices.Equal(dx1, dx2) || !slices.Equal(dg1, dg2) {
			t.Fatalf("n=%d rmsnormBackRow differs", n)
		}
	}
}
