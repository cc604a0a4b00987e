package runlog

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/store"
)

// gatedFS holds every fsync of a chunk file until release is closed, and
// counts the fsyncs that began.
type gatedFS struct {
	store.FS
	release chan struct{}
	mu      sync.Mutex
	began   int
}

func (g *gatedFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return gatedFile{f, g}, nil
}

type gatedFile struct {
	store.File
	g *gatedFS
}

func (f gatedFile) Sync() error {
	f.g.mu.Lock()
	f.g.began++
	f.g.mu.Unlock()
	<-f.g.release
	return f.File.Sync()
}

// TestStage: Stage returns while the fsync that makes its events durable
// is held, the durable state shows them only after it, Wait then returns
// the offset Append would have, and an append staged later is ordered
// after it. An invalid event, a done context and a closed log are refused
// by Stage itself, with nothing staged.
func TestStage(t *testing.T) {
	dir := t.TempDir()
	open := make(chan struct{})
	close(open)
	gfs := &gatedFS{FS: store.OS, release: open}
	l := openLog(t, dir, Options{FS: gfs})
	g := NewGroupID(testSeed, 0, 0)
	id := RolloutID{g, 0}
	mustAppend(t, l, RunStarted{Seed: testSeed, Mode: "throughput"}, PromptAdmitted{Group: g, Size: 1},
		AttemptStarted{Rollout: id, Attempt: 1})

	calls := func() int {
		n := 0
		l.View(func(s *State) { n = len(s.Rollout(id).Calls) })
		return n
	}
	gfs.release = make(chan struct{}) // hold the fsyncs from here on
	st, err := l.Stage(context.Background(), benchCall(id, 0, 0, 4, 2))
	if err != nil {
		t.Fatal(err)
	}
	// The syncer takes the unit and blocks in its fsync; Stage has long
	// returned.
	deadline := time.Now().Add(10 * time.Second)
	for {
		gfs.mu.Lock()
		began := gfs.began
		gfs.mu.Unlock()
		if began > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the staged append never reached an fsync")
		}
		time.Sleep(time.Millisecond)
	}
	if n := calls(); n != 0 {
		t.Fatalf("the durable state shows %d calls while their fsync is held", n)
	}
	// A second append, staged behind the held fsync.
	later := make(chan Offset, 1)
	go func() {
		off, err := l.Append(context.Background(), benchCall(id, 1, 6, 4, 2))
		if err != nil {
			t.Error(err)
		}
		later <- off
	}()
	select {
	case <-later:
		t.Fatal("an Append returned while the fsync before it was held")
	case <-time.After(20 * time.Millisecond):
	}

	// Refused by Stage itself: a call of an unknown rollout, a done
	// context. Neither is staged, and neither waits for the held fsync.
	if _, err := l.Stage(context.Background(), benchCall(RolloutID{g, 5}, 0, 0, 1, 1)); err == nil {
		t.Fatal("Stage accepted a call of a rollout that never started")
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Stage(cctx, benchCall(id, 2, 12, 1, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stage with a done context: %v", err)
	}

	close(gfs.release)
	off, err := st.Wait()
	if err != nil {
		t.Fatal(err)
	}
	laterOff := <-later
	if off >= laterOff {
		t.Fatalf("staged append at %d, the one staged after it at %d", off, laterOff)
	}
	if n := calls(); n != 2 {
		t.Fatalf("durable calls %d after both appends, want 2", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Stage(context.Background(), benchCall(id, 2, 12, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stage after Close: %v, want ErrClosed", err)
	}
	got, _ := reopen(t, dir)
	found := 0
	for _, o := range got {
		if o == off || o == laterOff {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("the reopened log holds %d of the 2 appends (offsets %d, %d; log %v)", found, off, laterOff, got)
	}
}

// TestStagedWaitsForAWaiter: staged appends nobody waits on are not
// written; a Wait on any of them writes them all with one fsync; and a
// unit nobody waits on is written after Options.MaxDefer.
func TestStagedWaitsForAWaiter(t *testing.T) {
	open := make(chan struct{})
	close(open)
	for _, tc := range []struct {
		name     string
		maxDefer time.Duration
	}{{"waited", time.Hour}, {"deferred", 200 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			gfs := &gatedFS{FS: store.OS, release: open}
			l := openLog(t, t.TempDir(), Options{FS: gfs, MaxDefer: tc.maxDefer})
			defer l.Close()
			g := NewGroupID(testSeed, 0, 0)
			id := RolloutID{g, 0}
			mustAppend(t, l, RunStarted{Seed: testSeed, Mode: "throughput"}, PromptAdmitted{Group: g, Size: 1},
				AttemptStarted{Rollout: id, Attempt: 1})
			began := func() int {
				gfs.mu.Lock()
				defer gfs.mu.Unlock()
				return gfs.began
			}
			calls := func() int {
				n := 0
				l.View(func(s *State) { n = len(s.Rollout(id).Calls) })
				return n
			}
			b0 := began()
			var sts []Staged
			t0 := time.Now()
			for i := range 3 {
				st, err := l.Stage(context.Background(), benchCall(id, uint32(i), uint32(6*i), 4, 2))
				if err != nil {
					t.Fatal(err)
				}
				sts = append(sts, st)
			}
			// With a deadline, the three share one fsync only if they were
			// all staged before it: a machine too busy for that writes
			// them in more units, which is right, and is not checked.
			oneUnit := time.Since(t0) < tc.maxDefer
			if tc.maxDefer < time.Hour {
				deadline := time.Now().Add(10 * time.Second)
				for calls() != 3 {
					if time.Now().After(deadline) {
						t.Fatal("staged appends nobody waits on were never written")
					}
					time.Sleep(time.Millisecond)
				}
			} else {
				time.Sleep(30 * time.Millisecond)
				if n, b := calls(), began(); n != 0 || b != b0 {
					t.Fatalf("with no waiter: %d calls durable, %d fsyncs; want none", n, b-b0)
				}
				done := make(chan error, 1)
				go func() { _, err := sts[1].Wait(); done <- err }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Wait on a staged append did not write it")
				}
				sts = append(sts[:1], sts[2:]...)
			}
			for _, st := range sts {
				if _, err := st.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			if n, b := calls(), began(); n != 3 || (oneUnit && b != b0+1) || b > b0+3 {
				t.Fatalf("%d calls durable after %d fsyncs; want 3 after one", n, b-b0)
			}
		})
	}
}
