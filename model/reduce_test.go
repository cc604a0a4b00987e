package model

import (
	"math"
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
