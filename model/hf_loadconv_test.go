package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/model/kern"
)

// TestWidenBF16 checks the vector and scalar widening against the
// definition on every length around the vector widths and on special
// values (±0, ±inf, NaN payloads, subnormals).
func TestWidenBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	special := []uint16{0, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0xffff, 0x0001, 0x807f, 0x3f80}
	for n := range 70 {
		src := make([]uint16, n)
		for i := range n {
			h := uint16(r.Uint32())
			if i < len(special) {
				h = special[(i+n)%len(special)]
			}
			src[i] = h
		}
		dst := make([]float32, n+1)
		dst[n] = 42 // must stay untouched
		widenBF16(dst[:n], src)
		for i := range n {
			want := uint32(src[i]) << 16
			if got := math.Float32bits(dst[i]); got != want {
				t.Fatalf("n=%d element %d: bits %#x, want %#x", n, i, got, want)
			}
		}
		if dst[n] != 42 {
			t.Fatalf("n=%d: wrote past the end", n)
		}
	}
}

func BenchmarkWidenBF16(b *testing.B) {
	const n = chunkElems
	src := make([]uint16, n)
	dst := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		widenBF16(dst, src)
	}
}

// TestReadTensorsChunks reads tensors longer than a chunk, in all three
// dtypes, at odd offsets into the slab, through the parallel work list.
func TestReadTensorsChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	n := 2*chunkElems + 37
	want := make([]float32, n)
	for i := range want {
		want[i] = math.Float32frombits(uint32(uint16(r.Uint32())) << 16) // exact in BF16
		if math.IsNaN(float64(want[i])) || math.IsInf(float64(want[i]), 0) || math.Abs(float64(want[i])) > 60000 || math.Abs(float64(want[i])) < 1e-4 {
			want[i] = float32(i%97) - 48 // exact in all three dtypes
		}
	}
	var file []byte
	offs := map[string]int64{}
	for _, dt := range []string{"F32", "BF16", "F16"} {
		offs[dt] = int64(len(file))
		for i, v := range want {
			switch dt {
			case "F32":
				file = binary.LittleEndian.AppendUint32(file, math.Float32bits(v))
			case "BF16":
				file = binary.LittleEndian.AppendUint16(file, kern.ToBF16(v))
			case "F16":
				file = binary.LittleEndian.AppendUint16(file, uint16(i%97+0x3c00)) // 1 + (i%97)/1024
			}
		}
	}
	path := t.TempDir() + "/t.bin"
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	slab := make([]float32, 3*n+3)
	jobs := []readJob{
		{name: "a", off: offs["F32"], dtype: "F32", dst: slab[1 : 1+n]},
		{name: "b", off: offs["BF16"], dtype: "BF16", dst: slab[2+n : 2+2*n]},
		{name: "c", off: offs["F16"], dtype: "F16", dst: slab[3+2*n : 3+3*n]},
	}
	if err := readTensors(f, jobs, new(readBufs)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		f16 := 1 + float32(i%97)/1024
		if jobs[0].dst[i] != want[i] || jobs[1].dst[i] != want[i] || jobs[2].dst[i] != f16 {
			t.Fatalf("element %d: F32 %v BF16 %v F16 %v, want %v %v", i, jobs[0].dst[i], jobs[1].dst[i], jobs[2].dst[i], want[i], f16)
		}
	}
	if slab[0] != 0 || slab[1+n] != 0 || slab[2+2*n] != 0 {
		t.Fatal("a read wrote outside its tensor")
	}
	jobs[2].off = int64(len(file)) // past the end: the error names the tensor
	if err := readTensors(f, jobs, new(readBufs)); err == nil || !strings.Contains(err.Error(), `tensor "c"`) {
		t.Fatalf("read past the end: %v", err)
	}
}
