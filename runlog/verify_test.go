package runlog

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/longhaul-rl/longhaul/store"
)

// snapLog builds a log with a snapshot in the middle; it returns the
// records' offsets and the snapshot's.
func snapLog(t *testing.T, dir string) ([]Offset, Offset) {
	t.Helper()
	l := openLog(t, dir, Options{})
	s := NewState()
	evs := genRun(s, randChooser{rand.New(rand.NewPCG(5, 6))}, 60, t.Fatalf)
	var offs []Offset
	var snap Offset
	for i, ev := range evs {
		offs = append(offs, mustAppend(t, l, ev))
		if i == 40 {
			info, err := l.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			snap = info.Offset
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return offs, snap
}

// TestDamageBeforeSnapshot: replay starts at the snapshot, but Open still
// verifies the records before it that were never verified, and names the
// damaged record's file and offset.
func TestDamageBeforeSnapshot(t *testing.T) {
	dir := t.TempDir()
	offs, snap := snapLog(t, dir)
	if snap == 0 || offs[10] >= snap {
		t.Fatalf("snapshot at %d does not follow record 10 at %d", snap, offs[10])
	}
	segs, _ := listChunks(store.OS, filepath.Join(dir, logSubdir))
	path := filepath.Join(dir, logSubdir, chunkName(segs[0]))
	b, _ := os.ReadFile(path)
	pos := int(uint64(offs[10])-segs[0]) + frameHeaderSize + 1
	b[pos] ^= 0x10
	os.WriteFile(path, b, 0o644)
	_, err := Open(context.Background(), dir, Options{})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Path != path || ce.Offset != offs[10] {
		t.Fatalf("Open with a damaged record before the snapshot: %v; want %s at offset %d", err, path, offs[10])
	}
	t.Log(err)
}

// TestShortLogIsDamage: a log cut below what it is known to have reached
// (the verified watermark, a snapshot) is an error, not a torn tail; also
// a log truncated to 0 bytes.
func TestShortLogIsDamage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepMark  bool
		keepSnaps bool
		size      func(offs []Offset, snap Offset, base uint64) int64
	}{
		{"zero bytes, watermark", true, false, func([]Offset, Offset, uint64) int64 { return 0 }},
		{"zero bytes, snapshot only", false, true, func([]Offset, Offset, uint64) int64 { return 0 }},
		{"cut inside acknowledged records", true, false, func(o []Offset, _ Offset, base uint64) int64 { return int64(uint64(o[50])-base) + 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			offs, snap := snapLog(t, dir)
			openLog(t, dir, Options{}).Close() // verifies to the end
			logDir := filepath.Join(dir, logSubdir)
			if !tc.keepMark {
				os.Remove(filepath.Join(logDir, watermarkFile))
			}
			if !tc.keepSnaps {
				os.RemoveAll(filepath.Join(logDir, snapSubdir))
			}
			segs, _ := listChunks(store.OS, logDir)
			if err := os.Truncate(filepath.Join(logDir, chunkName(segs[0])), tc.size(offs, snap, segs[0])); err != nil {
				t.Fatal(err)
			}
			for _, s := range segs[1:] {
				os.Remove(filepath.Join(logDir, chunkName(s)))
			}
			_, err := Open(context.Background(), dir, Options{})
			var se *ShortLogError
			if !errors.As(err, &se) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open of a short log: %v, want a ShortLogError", err)
			}
			t.Log(err)
		})
	}
}

// TestSnapshotOnEmptyChunk: a kill after a snapshot's file is durable but
// before its SnapshotWritten record reaches the fresh chunk a reopen made
// leaves that chunk with its header only, while the snapshot points just
// past the header. That is not a short log (CI hit it in
// TestAgentKilledRunEqualsUninterrupted): the log opens, from the
// snapshot, and appends go on where the lost record would have gone.
func TestSnapshotOnEmptyChunk(t *testing.T) {
	dir := t.TempDir()
	offs, _ := snapLog(t, dir)
	l := openLog(t, dir, Options{})
	_, before := logEvents(t, l)
	info, err := l.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(dir, logSubdir)
	segs, _ := listChunks(store.OS, logDir)
	last := segs[len(segs)-1]
	if uint64(info.Offset) != last+chunkHeaderSize || uint64(offs[len(offs)-1]) >= last {
		t.Fatalf("snapshot at %d, last chunk at %d: not the fresh chunk's first offset", info.Offset, last)
	}
	// the kill: the record never reached the chunk, and Close's watermark
	// was never written
	if err := os.Truncate(filepath.Join(logDir, chunkName(last)), chunkHeaderSize); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(logDir, watermarkFile))
	l2, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatalf("Open after a kill between a snapshot and its record: %v", err)
	}
	defer l2.Close()
	_, evs := logEvents(t, l2)
	if len(evs) != len(before) {
		t.Fatalf("reopened log holds %d events, want the %d logged before the snapshot", len(evs), len(before))
	}
	if _, err := l2.Snapshot(context.Background()); err != nil {
		t.Fatalf("a snapshot after the reopen: %v", err)
	}
}
