package controller

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/storage"
	"github.com/longhaul-rl/longhaul/runlog"
)

// unitFS records where each fsync of a chunk file left it: the run log's
// units, as chunk sizes.
type unitFS struct {
	storage.FS
	mu    sync.Mutex
	size  map[string]int64
	units map[string][]int64
}

func (u *unitFS) OpenFile(name string, flag int, perm os.FileMode) (storage.File, error) {
	f, err := u.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return unitFile{f, u}, nil
}

type unitFile struct {
	storage.File
	u *unitFS
}

func (f unitFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.u.mu.Lock()
	f.u.size[f.Name()] += int64(n)
	f.u.mu.Unlock()
	return n, err
}

func (f unitFile) Sync() error {
	err := f.File.Sync()
	f.u.mu.Lock()
	f.u.units[f.Name()] = append(f.u.units[f.Name()], f.u.size[f.Name()])
	f.u.mu.Unlock()
	return err
}

// TestRoundSettlesInOneWrite: in deterministic mode a step's rollouts
// stage their calls and seals, and the step's groups settle together once
// all of them are done: every seal of a step reaches the disk in the same
// write (one fsync), instead of one write per rollout or group.
func TestRoundSettlesInOneWrite(t *testing.T) {
	h := newHarness(t, testConfig(t, "run.max_steps=3", "grpo.num_prompts_per_step=3", "rollout.max_turns=4"))
	ufs := &unitFS{FS: storage.OS, size: map[string]int64{}, units: map[string][]int64{}}
	h.fs = ufs
	if err := h.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(ufs.units) != 1 {
		t.Fatalf("the run wrote %d chunk files; the test reads one", len(ufs.units))
	}
	var units []int64
	for _, u := range ufs.units {
		units = u
	}
	unitOf := func(off runlog.Offset) int {
		i, _ := slices.BinarySearch(units, int64(off)+1)
		return i
	}
	// The step each group is for, and the units its seals went out in.
	st := h.state()
	perStep := map[int64]map[int]bool{}
	l, err := runlog.Open(context.Background(), h.dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seals := 0
	if err := l.Events(context.Background(), func(off runlog.Offset, ev runlog.Event) error {
		if s, ok := ev.(runlog.RolloutSealed); ok {
			k := st.Groups[s.Rollout.Group].ForStep
			if perStep[k] == nil {
				perStep[k] = map[int]bool{}
			}
			perStep[k][unitOf(off)] = true
			seals++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Generation runs run.max_lag (1) steps ahead: 4 steps generated.
	if len(perStep) != 4 || seals != 4*3*2 {
		t.Fatalf("%d seals over %d steps; want 24 over 4", seals, len(perStep))
	}
	for k, us := range perStep {
		if len(us) != 1 {
			t.Errorf("step %d: its 6 seals went out in %d writes, want one", k, len(us))
		}
	}
}
