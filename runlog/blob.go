package runlog

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sync"

	"github.com/longhaul-rl/longhaul/store"
)

// Blob store. Token arrays live in one pack file per log chunk, each blob
// framed as
//
//	[length u32 LE] [CRC32C u32 LE of sum+data] [sum: 16 bytes] [data]
//
// where sum is the first 16 bytes of SHA-256(data). A blob is addressed by
// its sum; the reference in a record also carries where it lies (pack, byte)
// so reading needs no index. Blobs are deduplicated within a pack (the G
// members of a group share their first prompt). A pack is fsynced before
// the records that reference it are written, so a durable record never
// points at a lost blob.

const blobHeaderSize = 24

// blobRef names a blob and where it lies.
type blobRef struct {
	Sum  [16]byte
	Pack uint64 // base offset of the chunk whose pack holds it
	Off  uint64 // byte of its frame in the pack
	Len  uint32 // data bytes
}

// packWriter stages the blobs of the chunk being written: it hands out
// references and buffers the frames until their unit is taken for writing.
type packWriter struct {
	base  uint64
	size  uint64 // bytes handed off
	buf   []byte
	index map[[16]byte]blobRef
	added [][16]byte // index entries of the append being staged, for rollback
}

func newPackWriter(base uint64) *packWriter {
	return &packWriter{base: base, index: map[[16]byte]blobRef{}}
}

func (w *packWriter) put(data []byte) (blobRef, error) {
	if len(data) == 0 {
		return blobRef{Pack: w.base}, nil
	}
	full := sha256.Sum256(data)
	sum := [16]byte(full[:16])
	if r, ok := w.index[sum]; ok {
		return r, nil
	}
	r := blobRef{Sum: sum, Pack: w.base, Off: w.size + uint64(len(w.buf)), Len: uint32(len(data))}
	// The frame is built in w.buf: the sum and the data are contiguous
	// there, so one checksum covers both and sum does not escape to the
	// heap (crc32 is assembly, so anything it reads does).
	start := len(w.buf)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(data)))
	w.buf = append(w.buf, 0, 0, 0, 0)
	w.buf = append(w.buf, sum[:]...)
	w.buf = append(w.buf, data...)
	binary.LittleEndian.PutUint32(w.buf[start+4:], crc32.Checksum(w.buf[start+8:], castagnoli))
	w.index[sum] = r
	w.added = append(w.added, sum)
	return r, nil
}

// mark and rollback undo the puts of a rejected append.
type packMark struct{ buf, added int }

func (w *packWriter) mark() packMark {
	w.added = w.added[:0] // earlier appends are accepted
	return packMark{len(w.buf), 0}
}

func (w *packWriter) rollback(m packMark) {
	for _, s := range w.added[m.added:] {
		delete(w.index, s)
	}
	w.added = w.added[:m.added]
	w.buf = w.buf[:m.buf]
}

// take returns the staged frames and starts a new buffer.
func (w *packWriter) take() []byte {
	b := w.buf
	w.size += uint64(len(b))
	w.buf = nil
	w.added = w.added[:0]
	return b
}

// blobReader reads blobs from any pack of the log.
type blobReader struct {
	fs    store.FS
	dir   string
	mu    sync.Mutex
	files map[uint64]store.Reader
}

func (r *blobReader) get(ref blobRef) ([]byte, error) {
	if ref.Len == 0 {
		return nil, nil
	}
	f, err := r.file(ref.Pack)
	if err != nil {
		return nil, err
	}
	b := make([]byte, blobHeaderSize+int(ref.Len))
	if _, err := f.ReadAt(b, int64(ref.Off)); err != nil {
		return nil, &CorruptionError{Path: f.Name(), Offset: Offset(ref.Off), Err: fmt.Errorf("%w: read blob: %w", ErrCorrupt, err)}
	}
	l := binary.LittleEndian.Uint32(b)
	data := b[blobHeaderSize:]
	c := crc32.Update(crc32.Checksum(b[8:24], castagnoli), castagnoli, data)
	full := sha256.Sum256(data)
	if l != ref.Len || c != binary.LittleEndian.Uint32(b[4:]) || [16]byte(b[8:24]) != ref.Sum || [16]byte(full[:16]) != ref.Sum {
		return nil, &CorruptionError{Path: f.Name(), Offset: Offset(ref.Off), Err: corruptf("blob %x fails its checksum", ref.Sum)}
	}
	return data, nil
}

func (r *blobReader) file(base uint64) (store.Reader, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.files[base]; f != nil {
		return f, nil
	}
	f, err := store.Or(r.fs).Open(filepath.Join(r.dir, packName(base)))
	if err != nil {
		return nil, fmt.Errorf("open pack: %w", err)
	}
	if r.files == nil {
		r.files = map[uint64]store.Reader{}
	}
	r.files[base] = f
	return f, nil
}

func (r *blobReader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.files {
		f.Close()
	}
	r.files = nil
}
