package runlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/longhaul-rl/longhaul/store"
)

// Framing layer. The log is a sequence of chunks, each a chunk file
// (NNN.seg: the extension is the old name, kept so existing runs open)
// and a pack file. A chunk file is
//
//	header: "LHRL" [version u8 = 1] [3 zero bytes] [base offset u64 LE]   (16 bytes)
//	frames: [payload length u32 LE] [CRC32C u32 LE of flags+payload] [flags u8] [payload]
//
// The offset of a frame is base + its position in the file, so offsets run
// on across chunks. flagCommit marks the last frame of one Append: a crash
// can leave only whole appends behind, never half of one.

const (
	chunkHeaderSize = 16
	frameHeaderSize = 9
	chunkVersion    = 1
	flagCommit      = 1
	// maxPayload bounds a frame so a corrupt length cannot make us
	// allocate or scan gigabytes.
	maxPayload = 64 << 20
)

var chunkMagic = [4]byte{'L', 'H', 'R', 'L'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is the parent of every corruption the log detects.
var ErrCorrupt = errors.New("runlog: corrupt")

// CorruptionError locates a corrupt record in the middle of the log (a torn
// tail is repaired and reported in Recovery instead).
type CorruptionError struct {
	Path   string // chunk or pack file
	Offset Offset // log offset of the bad record (for a pack: byte in the pack)
	Err    error
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("runlog: corrupt record at offset %d in %s: %v", e.Offset, e.Path, e.Err)
}

func (e *CorruptionError) Unwrap() error { return e.Err }

func corruptf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, a...)...)
}

// Recovery describes what Open cut from a torn tail.
type Recovery struct {
	Truncated bool   // something was cut
	File      string // the chunk file that was cut
	Offset    Offset // where the log now ends
	Bytes     int64  // bytes dropped
	Records   int    // frames dropped: whole frames of an unfinished append, plus one for a partial frame
	Message   string // what was found, for the operator
}

func chunkName(base uint64) string { return fmt.Sprintf("%020d.seg", base) }
func packName(base uint64) string  { return fmt.Sprintf("%020d.pack", base) }

// listChunks returns the bases of the chunk files in dir, ascending.
func listChunks(fs store.FS, dir string) ([]uint64, error) {
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list chunks: %w", err)
	}
	var bases []uint64
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".seg")
		if !ok {
			continue
		}
		b, err := strconv.ParseUint(n, 10, 64)
		if err != nil {
			continue
		}
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

func chunkHeader(base uint64) []byte {
	h := make([]byte, chunkHeaderSize)
	copy(h, chunkMagic[:])
	h[4] = chunkVersion
	binary.LittleEndian.PutUint64(h[8:], base)
	return h
}

func checkChunkHeader(b []byte, base uint64) error {
	if len(b) < chunkHeaderSize {
		return corruptf("short chunk header (%d bytes)", len(b))
	}
	if [4]byte(b[:4]) != chunkMagic {
		return corruptf("bad chunk magic %q", b[:4])
	}
	if b[4] != chunkVersion {
		return fmt.Errorf("%w: chunk format version %d", ErrUnknownVersion, b[4])
	}
	if got := binary.LittleEndian.Uint64(b[8:]); got != base || b[5]|b[6]|b[7] != 0 {
		return corruptf("chunk header names base %d, file name %d", got, base)
	}
	return nil
}

// appendFrame frames payload onto dst.
func appendFrame(dst []byte, payload []byte, flags byte) []byte {
	// The header is built in dst itself: flags and payload are then
	// contiguous, so one checksum covers both, and no header array
	// escapes to the heap (crc32 is assembly, so anything it reads does).
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, 0, 0, 0, 0, flags)
	dst = append(dst, payload...)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+8:], castagnoli))
	return dst
}

// parseFrame reads the frame at the start of b.
func parseFrame(b []byte) (payload []byte, flags byte, n int, err error) {
	if len(b) < frameHeaderSize {
		return nil, 0, 0, corruptf("short frame header (%d bytes)", len(b))
	}
	l := binary.LittleEndian.Uint32(b)
	if l == 0 || l > maxPayload {
		return nil, 0, 0, corruptf("frame length %d", l)
	}
	if uint64(len(b)) < frameHeaderSize+uint64(l) {
		return nil, 0, 0, corruptf("frame length %d beyond end (%d bytes left)", l, len(b)-frameHeaderSize)
	}
	flags = b[8]
	if flags&^flagCommit != 0 {
		return nil, 0, 0, corruptf("frame flags %#x", flags)
	}
	p := b[frameHeaderSize : frameHeaderSize+l]
	want := binary.LittleEndian.Uint32(b[4:])
	if got := crc32.Update(crc32.Checksum(b[8:9], castagnoli), castagnoli, p); got != want {
		return nil, 0, 0, corruptf("checksum %08x, want %08x", got, want)
	}
	return p, flags, frameHeaderSize + int(l), nil
}

// validFrameAfter reports whether any whole, checksummed frame starts at or
// after from. It tells a torn tail (nothing valid follows the damage) from
// corruption in the middle (the log goes on after it).
func validFrameAfter(b []byte, from int) bool {
	for p := from; p+frameHeaderSize < len(b); p++ {
		l := binary.LittleEndian.Uint32(b[p:])
		if l == 0 || l > maxPayload || uint64(p)+frameHeaderSize+uint64(l) > uint64(len(b)) {
			continue
		}
		if _, _, _, err := parseFrame(b[p:]); err == nil {
			return true
		}
	}
	return false
}

// scanResult is what a scan of one chunk found.
type scanResult struct {
	end     int   // position after the last committed frame
	damage  int   // position of the damage, when err != nil
	dropped int   // frames after end (whole uncommitted + one partial)
	err     error // damage found at end, if any (tail or middle: see torn)
	torn    bool  // the damage is a torn tail: nothing valid follows it
}

// scanChunk walks the frames of one chunk file's bytes from position
// from, calling fn for each frame of every committed append. The callback
// sees an append's frames only once its commit frame has been checked.
func scanChunk(b []byte, base uint64, from int, fn func(off Offset, payload []byte) error) (scanResult, error) {
	if from < chunkHeaderSize {
		if err := checkChunkHeader(b, base); err != nil {
			return scanResult{end: 0, damage: 0, err: err, torn: !validFrameAfter(b, 0), dropped: btoi(len(b) > 0)}, nil
		}
		from = chunkHeaderSize
	}
	type frame struct {
		pos int
		p   []byte
	}
	var pending []frame
	pos, end := from, from
	for pos < len(b) {
		p, flags, n, err := parseFrame(b[pos:])
		if err != nil {
			return scanResult{end: end, damage: pos, err: fmt.Errorf("at byte %d: %w", pos, err), torn: !validFrameAfter(b, pos+1), dropped: len(pending) + 1}, nil
		}
		pending = append(pending, frame{pos, p})
		pos += n
		if flags&flagCommit != 0 {
			for _, f := range pending {
				if err := fn(Offset(base+uint64(f.pos)), f.p); err != nil {
					return scanResult{end: end}, err
				}
			}
			pending = pending[:0]
			end = pos
		}
	}
	if len(pending) > 0 {
		return scanResult{end: end, damage: pending[0].pos, err: corruptf("append without its commit frame at byte %d", pending[0].pos), torn: true, dropped: len(pending)}, nil
	}
	return scanResult{end: end}, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// syncDir makes a directory's entries (new or renamed files) durable.
func syncDir(fs store.FS, dir string) error {
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// createChunk creates the chunk and pack files for base, durably.
func createChunk(fs store.FS, dir string, base uint64) (chunk, pack store.File, err error) {
	chunk, err = fs.OpenFile(filepath.Join(dir, chunkName(base)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("create chunk: %w", err)
	}
	pack, err = fs.OpenFile(filepath.Join(dir, packName(base)), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = chunk.Write(chunkHeader(base))
	}
	if err == nil {
		err = chunk.Sync()
	}
	if err == nil {
		err = syncDir(fs, dir)
	}
	if err != nil {
		chunk.Close()
		if pack != nil {
			pack.Close()
		}
		return nil, nil, fmt.Errorf("create chunk %d: %w", base, err)
	}
	return chunk, pack, nil
}
