package runlog

import (
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shipCopy copies dir into dst as a mirror would ship it under cut c:
// each file up to its limit, the watermark replaced, nothing c excludes.
func shipCopy(t *testing.T, c ShipCut, dir, dst string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.Contains(d.Name(), ".tmp") {
			// A write in progress (a seal being staged by the background
			// sealer): the mirror never ships one, and it may be gone
			// by the time it would be read.
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n, ok := c.Limit(rel, int64(len(b)))
		if !ok {
			return nil
		}
		if r, ok := c.Replace(rel); ok {
			b, n = r, int64(len(r))
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, b[:n], 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestShipCutOpensElsewhere: a copy of the log taken by its cut, at any
// moment (right after an Open created an empty chunk, mid-chunk, after a
// snapshot, across a chunk roll), opens on another machine with exactly
// the state the log had at the cut, and without reading the history its
// snapshot covers (the shipped watermark is the cut's end).
func TestShipCutOpensElsewhere(t *testing.T) {
	dir := t.TempDir()
	opts := Options{ChunkSize: 4 << 10}
	r := rand.New(rand.NewPCG(3, 4))
	l := openLog(t, dir, opts)
	shipped := func(step string, c ShipCut, want [32]byte) {
		t.Helper()
		dst := t.TempDir()
		shipCopy(t, c, dir, dst)
		cp, err := Open(context.Background(), dst, Options{})
		if err != nil {
			t.Fatalf("%s: the shipped copy does not open: %v", step, err)
		}
		defer cp.Close()
		if viewDigest(cp) != want {
			t.Fatalf("%s: the shipped copy's state differs from the log's at the cut", step)
		}
	}
	check := func(step string) {
		t.Helper()
		shipped(step, l.Cut(), viewDigest(l))
	}
	check("a new log")
	for round := range 6 {
		var evs []Event
		l.View(func(s *State) { evs = genRun(s.Clone(), randChooser{r}, 10+r.IntN(30), t.Fatalf) })
		var early ShipCut
		var earlyWant [32]byte
		for i, ev := range evs {
			mustAppend(t, l, ev)
			if i == len(evs)/4 {
				early, earlyWant = l.Cut(), viewDigest(l)
			}
			if i == len(evs)/4+3 {
				// A mirror reads the files after its cut: the log
				// has grown since.
				shipped("records appended after the cut", early, earlyWant)
			}
			if i == len(evs)/2 {
				check("mid-round")
			}
		}
		if round%2 == 1 {
			if _, err := l.Snapshot(context.Background()); err != nil {
				t.Fatal(err)
			}
			check("after a snapshot")
		}
		if round == 3 {
			l.Close()
			l = openLog(t, dir, opts) // a restart: an empty chunk at the end
			check("after a reopen")
		}
	}
	l.Close()
}
