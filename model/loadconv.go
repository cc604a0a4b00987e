package model

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Loading speed. Profiling LoadDir on a 0.6B-shaped BF16 checkpoint showed
// the time going to (1) the kernel zeroing the float32 slab's freshly
// faulted pages, (2) copying the file out of the page cache and (3) the
// widening loop; so each chunk's pages are faulted in with one call right
// before it is written (see readChunk), the file is read in chunks small
// enough to stay in L2 and widened from there, and the chunks of all tensors of a shard form one work list that
// every worker pulls from, so small tensors never leave a core idle.

// chunkElems elements per read: 256 KiB of F32, 128 KiB of BF16 per worker.
const chunkElems = 64 << 10

// readJob is one tensor of a shard: its data offset in the file, its dtype
// and its place in the slab.
type readJob struct {
	name  string
	off   int64
	dtype string
	dst   []float32
}

// readBufs holds the per-worker staging buffers, reused across shards.
type readBufs struct {
	b [][]byte
}

func (r *readBufs) get(n int) [][]byte {
	for len(r.b) < n {
		r.b = append(r.b, make([]byte, 2*chunkElems))
	}
	return r.b[:n]
}

type chunkRef struct {
	job, lo, hi int
}

// readTensors reads every job's bytes into its dst, converting to float32,
// on up to GOMAXPROCS workers over chunks of all jobs.
func readTensors(f *os.File, jobs []readJob, bufs *readBufs) error {
	var chunks []chunkRef
	for j, jb := range jobs {
		for lo := 0; lo < len(jb.dst); lo += chunkElems {
			chunks = append(chunks, chunkRef{j, lo, min(lo+chunkElems, len(jb.dst))})
		}
	}
	nw := max(1, min(runtime.GOMAXPROCS(0), 8, len(chunks)))
	var next atomic.Int64
	var failed atomic.Bool
	errs := make([]error, nw)
	var wg sync.WaitGroup
	for w, buf := range bufs.get(nw) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= len(chunks) {
					return
				}
				c := chunks[i]
				jb := jobs[c.job]
				if err := readChunk(f, jb, c.lo, c.hi, buf); err != nil {
					errs[w] = errors.New("safetensors: tensor " + quote(jb.name) + ": " + err.Error())
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func quote(s string) string { return `"` + s + `"` }

// readChunk fills jb.dst[lo:hi]. F32 is read straight into the slab's
// memory (the format is little-endian, as are the machines Go builds this
// for: amd64, arm64); 16-bit types go through buf and are widened.
func readChunk(f *os.File, jb readJob, lo, hi int, buf []byte) error {
	out := jb.dst[lo:hi]
	// the kernel zeroes the chunk's fresh pages here, so they are in cache
	// when the data is written over them (zeroing the whole slab first
	// costs a second trip to memory)
	populate(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(out)))
	es := dtypeSize[jb.dtype]
	at := jb.off + int64(lo*es)
	if jb.dtype == "F32" {
		_, err := f.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(out)), at)
		return err
	}
	raw := buf[:2*len(out)]
	if _, err := f.ReadAt(raw, at); err != nil {
		return err
	}
	if jb.dtype == "BF16" {
		// raw is 2-byte aligned (a fresh buffer), so it can be read as uint16s
		widenBF16(out, unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), len(out)))
		return nil
	}
	for j := range out {
		out[j] = f16ToF32(binary.LittleEndian.Uint16(raw[2*j:]))
	}
	return nil
}

// fromBF16 widens a bfloat16 (exact).
func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func mathFloat32frombits(b uint32) float32 { return math.Float32frombits(b) }
