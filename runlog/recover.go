package runlog

// This file holds Open's recovery: replaying the chunks after the newest
// valid snapshot and cutting a torn tail.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/store"
)

// recover replays the log into l.s and opens a fresh chunk for appends.
func (l *Log) recover(ctx context.Context) error {
	bases, err := listChunks(l.opts.FS, l.logDir)
	if err != nil {
		return err
	}
	var filesEnd uint64
	if n := len(bases); n > 0 {
		fi, err := l.opts.FS.Stat(filepath.Join(l.logDir, chunkName(bases[n-1])))
		if err != nil {
			return fmt.Errorf("open run log: %w", err)
		}
		filesEnd = bases[n-1] + uint64(fi.Size())
	}
	verified := l.readWatermark()
	if filesEnd < verified {
		return &ShortLogError{Path: lastChunkPath(l.logDir, bases), End: filesEnd, Expected: verified, By: "the verified watermark"}
	}
	st, from, chain, err := l.loadSnapshots(filesEnd)
	if err != nil {
		return err
	}
	l.chain = chain
	var end uint64
	for i, base := range bases {
		if err := ctx.Err(); err != nil {
			return err
		}
		last := i == len(bases)-1
		if i > 0 && base != end {
			return &CorruptionError{Path: chunkName(base), Offset: Offset(end), Err: corruptf("chunk starts at %d, previous one ends at %d", base, end)}
		}
		path := filepath.Join(l.logDir, chunkName(base))
		fi, err := l.opts.FS.Stat(path)
		if err != nil {
			return fmt.Errorf("open run log: %w", err)
		}
		// A chunk the snapshot covers is not read, only sized: on a run
		// directory mirrored to a bucket its bytes then stay there.
		if size := base + uint64(fi.Size()); from >= size && from > base {
			end = size
			continue
		}
		b, err := store.ReadFile(l.opts.FS, path)
		if err != nil {
			return fmt.Errorf("open run log: %w", err)
		}
		start := 0
		if from > base {
			start = int(from - base)
		}
		res, err := scanChunk(b, base, start, func(off Offset, p []byte) error {
			ev, err := decodeEvent(p)
			if err == nil {
				err = ApplyAt(st, ev, off)
			}
			if err == nil {
				l.markDirty(ev)
			}
			if err != nil {
				return &CorruptionError{Path: path, Offset: off, Err: fmt.Errorf("replay: %w", err)}
			}
			return nil
		})
		if err != nil {
			return err
		}
		end = base + uint64(res.end)
		if res.err == nil {
			continue
		}
		if !last || !res.torn {
			return &CorruptionError{Path: path, Offset: Offset(base + uint64(res.damage)), Err: res.err}
		}
		// A sealed chunk was whole and durable before its seal was
		// written: what looks like a torn tail there is damage.
		if _, sealed, _ := readSeal(l.logDir, base); sealed {
			return &CorruptionError{Path: path, Offset: Offset(base + uint64(res.damage)), Err: fmt.Errorf("%w (the chunk is sealed: not a torn write)", res.err)}
		}
		l.recovery = Recovery{Truncated: true, File: path, Offset: Offset(end), Bytes: int64(len(b) - res.end), Records: res.dropped, Message: res.err.Error()}
		l.logger.Warn("runlog: cut torn tail", "segment", path, "offset", end, "bytes", l.recovery.Bytes, "records", res.dropped, "reason", res.err)
		if err := l.opts.FS.Truncate(path, int64(res.end)); err != nil {
			return fmt.Errorf("cut torn tail: %w", err)
		}
		if err := store.SyncFile(l.opts.FS, path); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	reached := end // how far a snapshot may say the log reached
	if n := len(bases); n > 0 {
		// A chunk with no records (or a torn header) is replaced by a
		// fresh one at the same base. A snapshot taken while it was the
		// log's end (a kill before the snapshot's own record reached the
		// chunk) points just past its header, where the fresh chunk's
		// first record goes again: nothing acknowledged was lost.
		if last := bases[n-1]; end-last <= chunkHeaderSize {
			reached = last + chunkHeaderSize
			for _, name := range []string{chunkName(last), packName(last), sealName(last)} {
				if err := l.opts.FS.Remove(filepath.Join(l.logDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("open run log: %w", err)
				}
			}
			bases = bases[:n-1]
			end = last
		}
	}
	if from > reached {
		return &ShortLogError{Path: lastChunkPath(l.logDir, bases), End: end, Expected: from, By: "the loaded snapshot"}
	}
	if end < verified {
		return &ShortLogError{Path: lastChunkPath(l.logDir, bases), End: end, Expected: verified, By: "the verified watermark"}
	}
	if err := l.verifyRange(ctx, bases, verified, end); err != nil {
		return err
	}
	if err := l.writeWatermark(end); err != nil {
		return err
	}
	chunk, pack, err := createChunk(l.opts.FS, l.logDir, end)
	if err != nil {
		return err
	}
	l.s, l.w = st, st.Clone()
	l.chunks = append(bases, end)
	l.chunkF, l.packF = chunk, pack
	l.sealer.start(end)
	l.chunkBase, l.chunkSize = end, chunkHeaderSize
	l.pack = newPackWriter(end)
	l.end = Offset(end + chunkHeaderSize)
	return nil
}
