package runlog

import (
	"encoding/binary"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"
)

// ShipCut is what a copy of the run directory taken from now on may hold
// of the log so that the copy is a consistent prefix of it: every record
// of the copy is whole and durable, and everything those records reference
// is in it. A mirror (store/mirror) takes a cut before it reads any file,
// so the files it then reads already hold what the cut's records name
// (blobs are fsync'd before the records that reference them, snapshots and
// checkpoints before the records that name them).
type ShipCut struct {
	// End is the durable end of the log at the cut.
	End uint64
	// Watermark is the content runlog/verified must have in the copy: the
	// cut's end. The copy's bytes are checked against their digests when
	// they are read back, and Open scans every record after the snapshot
	// it loads, so a resume from the copy need not read the history before
	// it (which would make resume time grow with the log).
	Watermark []byte
	chunks    []uint64
}

// Cut returns a cut at the log's durable end.
func (l *Log) Cut() ShipCut {
	l.mu.RLock()
	end := uint64(l.end)
	chunks := append([]uint64(nil), l.chunks...)
	l.mu.RUnlock()
	// The watermark is what recovery will find the log reaches: a last
	// chunk holding only its header is removed there, so it does not count.
	mark := end
	if n := len(chunks); n > 0 && end-chunks[n-1] <= chunkHeaderSize {
		mark = chunks[n-1]
	}
	b := append(watermarkMagic[:0:0], watermarkMagic[:]...)
	b = binary.LittleEndian.AppendUint64(b, mark)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return ShipCut{End: end, Watermark: b, chunks: chunks}
}

// Limit says how many bytes of the file rel (a path relative to the run
// directory, of size bytes now) the copy may hold: all of them (size) for
// files outside the log; the durable prefix of a chunk file; none of a
// chunk or pack the cut does not reach, of a snapshot beyond the cut's end,
// or of a temporary file. ok is false when the file must not be shipped.
func (c ShipCut) Limit(rel string, size int64) (n int64, ok bool) {
	dir, name := filepath.Split(filepath.ToSlash(rel))
	switch strings.TrimSuffix(dir, "/") {
	case logSubdir:
		if name == watermarkFile {
			return int64(len(c.Watermark)), true
		}
		if stem, ok := strings.CutSuffix(name, ".seg"); ok {
			base, err := strconv.ParseUint(stem, 10, 64)
			if err != nil || base+chunkHeaderSize > c.End {
				return 0, false
			}
			if c.sealed(base) {
				return size, true
			}
			return min(size, int64(c.End-base)), true
		}
		if stem, ok := strings.CutSuffix(name, ".pack"); ok {
			base, err := strconv.ParseUint(stem, 10, 64)
			return size, err == nil && base+chunkHeaderSize <= c.End
		}
		return 0, false // lock-free temporaries (verified.tmp) and strays
	case logSubdir + "/" + snapSubdir:
		stem, ok := strings.CutSuffix(name, ".snap")
		off, err := strconv.ParseUint(stem, 10, 64)
		return size, ok && err == nil && off <= c.End
	}
	return size, true
}

// Replace returns the content the copy holds for rel instead of the
// local file's: the watermark at the cut's end for runlog/verified.
func (c ShipCut) Replace(rel string) ([]byte, bool) {
	if filepath.ToSlash(rel) == logSubdir+"/"+watermarkFile {
		return c.Watermark, true
	}
	return nil, false
}

// sealed reports whether the chunk at base was closed before the cut (a
// later chunk exists below the end).
func (c ShipCut) sealed(base uint64) bool {
	for _, b := range c.chunks {
		if b > base && b+chunkHeaderSize <= c.End {
			return true
		}
	}
	return false
}

// isMilestone reports an event after which a mirror ships at once: a
// snapshot or a checkpoint the log now names.
func isMilestone(a applied) bool {
	k := a.ev.Kind()
	return k == KindSnapshotWritten || k == KindCheckpointDurable
}

// LogEnd is the cut's end (the offset its copy reaches).
func (c ShipCut) LogEnd() uint64 { return c.End }
