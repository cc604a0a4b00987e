//go:build goexperiment.simd && amd64

package kern

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// gemvShapes: k from 1 to past one of MatMul's K-blocks, n on both sides
// of every panel width and kernel group (16·6 = 96 on AVX2, 32·8 = 256 on
// AVX-512), including partial last panels, and model B's decode products.
func gemvShapes(r *rand.Rand) [][2]int {
	var s [][2]int
	for _, k := range []int{1, 2, 3, 7, 17, 257} {
		for _, n := range []int{1, 7, 8, 15, 16, 17, 31, 32, 33, 95, 96, 97, 112, 255, 256, 257, 289, 530} {
			s = append(s, [2]int{k, n})
		}
	}
	s = append(s, [2]int{256, 768}, [2]int{256, 1408}, [2]int{704, 256}, [2]int{256, 264})
	for range 8 {
		s = append(s, [2]int{1 + r.IntN(400), 1 + r.IntN(700)})
	}
	return s
}

// TestGEMVMatchesMatMul: the panel GEMV (GEMVPacked, and MatMulPacked at
// m = 1) gives, bit for bit, on every SIMD path this CPU has and for 1, 2
// and 3 column blocks: the same path's MatMul with the plain B, the
// archsimd drivers kept as references (gemm256simd, gemm512simd), and a
// chain of Axpy over p (one FMA per element in order); AVX2 and AVX-512
// agree. c is a window of a longer buffer whose guard values before and
// after it must survive (the partial last panel goes through a copy).
func TestGEMVMatchesMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	const guard = 40
	for _, s := range gemvShapes(r) {
		k, n := s[0], s[1]
		a, b, c0 := randVec(r, k), randVec(r, k*n), randVec(r, n)
		for _, acc := range []bool{false, true} {
			what := fmt.Sprintf("k=%d n=%d acc=%v", k, n, acc)
			axpy := slices.Clone(c0)
			if !acc {
				clear(axpy)
			}
			for p := range k {
				Axpy(axpy, a[p], b[p*n:(p+1)*n])
			}
			var perISA [][]float32
			for _, isa := range availableISAs() {
				want := slices.Clone(c0)
				mmISA(isa, kindNN, want, a, b, 1, k, n, acc, 0, 1)
				bitsEqual(t, what+" "+isaName(isa)+": MatMul vs Axpy chain", want, axpy)
				ref := slices.Clone(c0)
				if isa == isaAVX2 {
					gemm256simd(ref, n, operand{s: a, rs: k, cs: 1}, operand{s: b, rs: n, cs: 1}, 1, k, n, acc, true, new(panel))
				} else {
					gemm512simd(ref, n, operand{s: a, rs: k, cs: 1}, operand{s: b, rs: n, cs: 1}, 1, k, n, acc, true, new(scratch))
				}
				bitsEqual(t, what+" "+isaName(isa)+": archsimd driver vs Axpy chain", ref, axpy)
				var pk Packed
				packWidth(&pk, b, k, n, packWidthOf(isa))
				for _, shards := range []int{1, 2, 3} {
					buf := make([]float32, n+2*guard)
					for i := range buf {
						buf[i] = float32(-1000 - i)
					}
					copy(buf[guard:], c0)
					got := buf[guard : guard+n]
					gemvPackedISA(isa, got, a, &pk, acc, shards)
					bitsEqual(t, fmt.Sprintf("%s %s GEMV shards=%d", what, isaName(isa), shards), got, want)
					for i, v := range buf {
						if (i < guard || i >= guard+n) && v != float32(-1000-i) {
							t.Fatalf("%s %s shards=%d: guard element %d overwritten with %v", what, isaName(isa), shards, i-guard, v)
						}
					}
				}
				mp := slices.Clone(c0)
				packedISA(isa, mp, a, 1, &pk, acc)
				bitsEqual(t, what+" "+isaName(isa)+": MatMulPacked m=1", mp, want)
				perISA = append(perISA, mp)
			}
			for i := 1; i < len(perISA); i++ {
				bitsEqual(t, what+": AVX-512 vs AVX2 GEMV", perISA[i], perISA[0])
			}
		}
	}
}

// TestReadLoop: ReadLoop reports the whole 512-byte blocks it read, and
// each stream count reads its whole segments.
func TestReadLoop(t *testing.T) {
	buf := make([]float32, 1000)
	want := 4 * (1000 &^ 127)
	if bestISA == isaRef {
		want = 0
	}
	if got := ReadLoop(buf); got != want {
		t.Fatalf("ReadLoop(1000 floats) = %d bytes, want %d", got, want)
	}
	if got := ReadLoop(buf[:127]); got != 0 {
		t.Fatalf("ReadLoop(127 floats) = %d bytes, want 0", got)
	}
	if cpuISA < isaAVX2 {
		return
	}
	for _, s := range []int{1, 4, 8} {
		if got, want := readStreams(s, buf), 4*(1000/(16*s))*16*s; got != want {
			t.Fatalf("readStreams(%d, 1000 floats) = %d bytes, want %d", s, got, want)
		}
	}
}
