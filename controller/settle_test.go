package controller

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
)

// unitFS records where each fsync of a chunk file left it: the run log's
// units, as chunk sizes.
type unitFS struct {
	store.FS
	mu    sync.Mutex
	size  map[string]int64
	units map[string][]int64
}

func (u *unitFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	f, err := u.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return unitFile{f, u}, nil
}

type unitFile struct {
	store.File
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
// stage their calls and seals, and once all of them are done the planner
// decides on the round from the staged records: every seal of a step and
// the planner's GroupCommitted for each of its groups reach the disk in
// the same write (one fsync), instead of one write per rollout or group,
// or one for the round and one for the decisions.
func TestRoundSettlesInOneWrite(t *testing.T) {
	h := newHarness(t, testConfig(t, "run.max_steps=3", "grpo.num_prompts_per_step=3", "rollout.max_turns=4"))
	ufs := &unitFS{FS: store.OS, size: map[string]int64{}, units: map[string][]int64{}}
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
	seals, commits := 0, 0
	if err := l.Events(context.Background(), func(off runlog.Offset, ev runlog.Event) error {
		if c, ok := ev.(runlog.GroupCommitted); ok {
			// the planner's decision on the round goes out with it
			k := st.Groups[c.Group].ForStep
			if perStep[k] == nil {
				perStep[k] = map[int]bool{}
			}
			perStep[k][unitOf(off)] = true
			commits++
		}
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
	if len(perStep) != 4 || seals != 4*3*2 || commits != 4*3 {
		t.Fatalf("%d seals and %d group commits over %d steps; want 24 and 12 over 4", seals, commits, len(perStep))
	}
	for k, us := range perStep {
		if len(us) != 1 {
			t.Errorf("step %d: its 6 seals and 3 group commits went out in %d writes, want one", k, len(us))
		}
	}
}

// syncedAtTrain is a trainer that notes, at each TrainStep, how far the
// run log's chunk is durable (the last fsync'd size).
type syncedAtTrain struct {
	*fakeTrainer
	ufs    *unitFS
	synced []int64
}

func (s *syncedAtTrain) TrainStep(ctx context.Context, b train.Batch) (train.StepStats, error) {
	s.ufs.mu.Lock()
	var at int64
	for _, u := range s.ufs.units {
		if len(u) > 0 {
			at = u[len(u)-1]
		}
	}
	s.ufs.mu.Unlock()
	s.synced = append(s.synced, at)
	return s.fakeTrainer.TrainStep(ctx, b)
}

// TestTrainerSeesOnlyDurableRounds: the planner decides on a round from
// its staged records, but no effect acts on them before they are durable:
// when the trainer is called for step k, every call, step, seal and group
// commit of step k's groups is inside the fsync'd part of the log.
func TestTrainerSeesOnlyDurableRounds(t *testing.T) {
	h := newHarness(t, testConfig(t, "run.max_steps=3", "grpo.num_prompts_per_step=3", "rollout.max_turns=4"))
	ufs := &unitFS{FS: store.OS, size: map[string]int64{}, units: map[string][]int64{}}
	h.fs = ufs
	tr := &syncedAtTrain{fakeTrainer: h.tr, ufs: ufs}
	if err := h.runWith(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	if len(ufs.units) != 1 || len(tr.synced) != 3 {
		t.Fatalf("%d chunk files, %d train steps; the test reads one file and 3 steps", len(ufs.units), len(tr.synced))
	}
	st := h.state()
	l, err := runlog.Open(context.Background(), h.dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checked := 0
	if err := l.Events(context.Background(), func(off runlog.Offset, ev runlog.Event) error {
		var g runlog.GroupID
		switch e := ev.(type) {
		case runlog.GroupCommitted:
			g = e.Group
		case runlog.RolloutSealed:
			g = e.Rollout.Group
		case runlog.CallFinished:
			g = e.Rollout.Group
		default:
			return nil
		}
		k := st.Groups[g].ForStep
		if k < 1 || k > 3 {
			return nil // generated ahead, never trained
		}
		checked++
		if int64(off) >= tr.synced[k-1] {
			t.Errorf("step %d: a %T of group %d at offset %d was not durable when the trainer was called (durable to %d)",
				k, ev, g, off, tr.synced[k-1])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if checked < 3*3*(2+2) {
		t.Fatalf("checked %d records of the trained steps; want at least their seals, calls and commits", checked)
	}
}
