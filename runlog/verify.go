package runlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/store"
)

// Resume verification. Replay after a snapshot reads only the records the
// snapshot does not cover, and never reads blobs, so damage in older
// records or in a pack would otherwise surface only when a resumed rollout
// or a training step needs it (or never). Open therefore checks every
// record and every blob it references up to the log end, and persists how
// far it got (the verified watermark), so each Open reads only the bytes
// appended since the last one.
//
// The watermark also says how long the log was known to be: a log that is
// now shorter lost acknowledged appends (a truncated or replaced file),
// which is damage, not a torn tail.

const (
	watermarkFile = "verified"
	watermarkSize = 8 + 8 + 4 // magic, end, CRC32C
)

var watermarkMagic = [8]byte{'L', 'H', 'V', 'E', 'R', 'I', 'F', '1'}

// readWatermark returns the verified end, or 0 when none is stored. A
// damaged watermark only costs a full verification, so it is reported and
// treated as 0.
func (l *Log) readWatermark() uint64 {
	b, err := store.ReadFile(l.opts.FS, filepath.Join(l.logDir, watermarkFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil || len(b) != watermarkSize || [8]byte(b[:8]) != watermarkMagic ||
		crc32.Checksum(b[:16], castagnoli) != binary.LittleEndian.Uint32(b[16:]) {
		l.logger.Warn("runlog: verified watermark unreadable; verifying the whole log", "file", filepath.Join(l.logDir, watermarkFile), "err", err)
		return 0
	}
	return binary.LittleEndian.Uint64(b[8:])
}

// writeWatermark durably records that the log is verified up to end.
func (l *Log) writeWatermark(end uint64) error {
	b := append(watermarkMagic[:0:0], watermarkMagic[:]...)
	b = binary.LittleEndian.AppendUint64(b, end)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	path := filepath.Join(l.logDir, watermarkFile)
	tmp := path + ".tmp"
	err := store.WriteFile(l.opts.FS, tmp, b)
	if err == nil {
		err = l.opts.FS.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(l.opts.FS, l.logDir)
	}
	if err != nil {
		return fmt.Errorf("runlog: watermark: %w", err)
	}
	return nil
}

// ShortLogError reports a log that ends before offsets it is known to have
// reached: a verified watermark or a snapshot.
type ShortLogError struct {
	Path     string // the last chunk (or the log directory when none)
	End      uint64 // where the log now ends
	Expected uint64 // where it is known to have reached
	By       string // what says so
}

func (e *ShortLogError) Error() string {
	return fmt.Sprintf("runlog: %s ends at offset %d, but %s shows it reached offset %d: acknowledged records were lost (truncated or replaced file), not a torn tail: %v",
		e.Path, e.End, e.By, e.Expected, ErrCorrupt)
}

func (e *ShortLogError) Unwrap() error { return ErrCorrupt }

// verifyRange checks every record in [from, to) of the chunks bases and
// every blob those records reference.
func (l *Log) verifyRange(ctx context.Context, bases []uint64, from, to uint64) error {
	for i, base := range bases {
		next := to
		if i+1 < len(bases) {
			next = bases[i+1]
		}
		if next <= from || base >= to {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(l.logDir, chunkName(base))
		b, err := store.ReadFile(l.opts.FS, path)
		if err != nil {
			return fmt.Errorf("verify run log: %w", err)
		}
		if uint64(len(b)) > to-base {
			b = b[:to-base]
		}
		start := 0
		if from > base {
			start = int(from - base)
		}
		res, err := scanChunk(b, base, start, func(off Offset, p []byte) error {
			ev, err := decodeEvent(p)
			if err != nil {
				return &CorruptionError{Path: path, Offset: off, Err: err}
			}
			if cr, ok := ev.(*callRecord); ok && cr.mode == tokensBlobs {
				for _, ref := range []blobRef{cr.suffix, cr.sampled} {
					if _, err := l.blobs.get(ref); err != nil {
						return fmt.Errorf("record at offset %d of %s: %w", off, path, err)
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if res.err != nil {
			return &CorruptionError{Path: path, Offset: Offset(base + uint64(res.damage)), Err: res.err}
		}
	}
	return nil
}

func lastChunkPath(dir string, bases []uint64) string {
	if len(bases) == 0 {
		return dir
	}
	return filepath.Join(dir, chunkName(bases[len(bases)-1]))
}
