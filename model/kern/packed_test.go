package kern

import (
	"math/rand/v2"
	"testing"
)

// TestGEMVPackedAPI: the exported GEMVPacked on the process's path (every
// build: the portable one runs the reference) equals MatMul for a product
// big enough to be split over cores, and refuses a short c.
func TestGEMVPackedAPI(t *testing.T) {
	r := rand.New(rand.NewPCG(73, 74))
	k, n := 512, 1100 // 2.25 MB: over gemvForkMinBytes
	a, b := randVec(r, k), randVec(r, k*n)
	want, got := make([]float32, n), make([]float32, n)
	MatMul(want, a, b, 1, k, n, false)
	var pk Packed
	Pack(&pk, b, k, n)
	if gemvShards(k, n, 2) != 2 {
		t.Fatalf("a %d-byte B is not split", 4*k*n)
	}
	GEMVPacked(got, a, &pk, false, 2)
	bitsEqual(t, "GEMVPacked 2 shards", got, want)
	defer func() {
		if recover() == nil {
			t.Fatal("a short c was accepted")
		}
	}()
	GEMVPacked(got[:n-1], a, &pk, false, 1)
}
