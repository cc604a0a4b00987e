package runlog

import (
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/longhaul-rl/longhaul/store"
)

// appendUntilFailure appends evs one at a time through a log on fs and
// returns the offsets of the acknowledged appends. After the first failure
// every later append must fail too (nothing about the file can be trusted).
func appendUntilFailure(t *testing.T, dir string, fs store.FS, evs []Event) (acked []Offset, firstErr error) {
	t.Helper()
	l, err := Open(context.Background(), dir, Options{FS: fs})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, ev := range evs {
		off, err := l.Append(context.Background(), ev)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if firstErr != nil {
			t.Fatalf("an append after the failure %v was acknowledged", firstErr)
		}
		acked = append(acked, off)
	}
	l.Close()
	return acked, firstErr
}

// reopen opens dir on the real file system and lists its events' offsets.
func reopen(t *testing.T, dir string) ([]Offset, Recovery) {
	t.Helper()
	l := openLog(t, dir, Options{})
	defer l.Close()
	offs, _ := logEvents(t, l)
	return offs, l.Recovery()
}

// TestStorageFaults drives the log through the storage seam's faults: a
// full disk (at a chosen write, or after N bytes), a short (torn) write and
// a failed fsync, in chunk files and in packs. Every acknowledged append
// survives and reopens with every record and blob verified; a failed
// write or fsync loses only appends that were never acknowledged (a
// failed fsync leaves their fate unknown: they may reappear).
func TestStorageFaults(t *testing.T) {
	s := NewState()
	evs := genRun(s, randChooser{rand.New(rand.NewPCG(11, 12))}, 120, t.Fatalf)
	for _, tc := range []struct {
		name  string
		fault *store.Faulty
		exact bool // no unacknowledged record may reappear
	}{
		{"ENOSPC in a chunk file", &store.Faulty{Fault: store.NoSpace, At: 30, Match: ".seg"}, true},
		{"short write in a chunk file", &store.Faulty{Fault: store.ShortWrite, At: 30, Match: ".seg"}, true},
		{"ENOSPC in a pack", &store.Faulty{Fault: store.NoSpace, At: 8, Match: ".pack"}, true},
		{"short write in a pack", &store.Faulty{Fault: store.ShortWrite, At: 8, Match: ".pack"}, true},
		{"disk full after 6000 bytes", &store.Faulty{Fault: store.FailAfterBytes, Bytes: 6000}, true},
		{"failed fsync of a chunk file", &store.Faulty{Fault: store.FailSync, At: 30, Match: ".seg"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := tc.fault
			f.FS = store.OS
			acked, err := appendUntilFailure(t, dir, f, evs)
			if !f.Fired() || err == nil {
				t.Fatalf("fault fired: %v; first append error: %v (want both)", f.Fired(), err)
			}
			if errors.Is(err, syscall.ENOSPC) != (tc.fault.Fault != store.FailSync) {
				t.Fatalf("append error %v does not carry the disk's error", err)
			}
			if len(acked) < 3 {
				t.Fatalf("only %d appends acknowledged before the fault", len(acked))
			}
			got, _ := reopen(t, dir)
			if len(got) < len(acked) || !slices.Equal(got[:len(acked)], acked) {
				t.Fatalf("reopened log has %d records, want the %d acknowledged first", len(got), len(acked))
			}
			if tc.exact && len(got) != len(acked) {
				t.Fatalf("reopened log has %d records; only %d were acknowledged", len(got), len(acked))
			}
			// And the log goes on: the next append lands after them.
			l := openLog(t, dir, Options{})
			mustAppend(t, l, evs[len(got)])
			l.Close()
		})
	}
}

// TestSnapshotFaultKeepsPrevious: a snapshot that fails to write (full
// disk, failed fsync) is an error, leaves no file, and the previous one
// still loads.
func TestSnapshotFaultKeepsPrevious(t *testing.T) {
	for _, fault := range []store.Fault{store.NoSpace, store.ShortWrite, store.FailSync} {
		dir := t.TempDir()
		f := &store.Faulty{FS: store.OS, Fault: fault, At: 2, Match: ".snap"}
		l, err := Open(context.Background(), dir, Options{FS: f})
		if err != nil {
			t.Fatal(err)
		}
		s := NewState()
		evs := genRun(s, randChooser{rand.New(rand.NewPCG(3, 4))}, 60, t.Fatalf)
		for _, ev := range evs[:30] {
			mustAppend(t, l, ev)
		}
		first, err := l.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs[30:] {
			mustAppend(t, l, ev)
		}
		if _, err := l.Snapshot(context.Background()); err == nil {
			t.Fatalf("fault %d: snapshot on a failing disk succeeded", fault)
		}
		l.Close()
		snaps, _ := filepath.Glob(filepath.Join(dir, logSubdir, snapSubdir, "*"))
		if len(snaps) != 1 || filepath.Base(snaps[0]) != filepath.Base(first.Path) {
			t.Fatalf("fault %d: snapshot files %v, want only %s", fault, snaps, first.Path)
		}
		got, _ := reopen(t, dir)
		if len(got) < 60 {
			t.Fatalf("fault %d: reopened with %d records", fault, len(got))
		}
	}
}

// TestRealTmpfsFull: the same on a real full file system, a 64 KiB tmpfs
// (needs root to mount; skipped otherwise).
func TestRealTmpfsFull(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	s := NewState()
	evs := genRun(s, randChooser{rand.New(rand.NewPCG(5, 9))}, 4000, t.Fatalf)
	acked, err := appendUntilFailure(t, dir, store.OS, evs)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("appends to a full tmpfs: %v, want ENOSPC (%d acknowledged)", err, len(acked))
	}
	// Make room (as an operator would), then reopen: the acknowledged
	// appends are all there; the torn one is cut.
	if out, err := exec.Command("mount", "-o", "remount,size=1m", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, out)
	}
	got, rec := reopen(t, dir)
	if len(got) != len(acked) || !slices.Equal(got, acked) {
		t.Fatalf("reopened %d records, want the %d acknowledged (recovery %+v)", len(got), len(acked), rec)
	}
	t.Logf("%d appends acknowledged before ENOSPC; recovery: %+v", len(acked), rec)
}
