package crashtest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/longhaul-rl/longhaul/runlog"
)

// TestEpochsUnderKills: a deterministic run over three epochs of an
// 8-prompt dataset (two steps an epoch), SIGKILLed in every epoch (inside
// generation and just before a training step) and resumed after each kill,
// trains every prompt exactly once per epoch, in each epoch's own order,
// ends at run.max_epochs, and ends bit-identical to an uninterrupted run.
func TestEpochsUnderKills(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	o := Options{Binary: bin, Config: tinyConfig(t), Overrides: []string{"data.num_prompts=8", "run.max_epochs=3",
		"run.max_steps=100", "checkpointing.save_period=1"}}
	ref := filepath.Join(t.TempDir(), "ref")
	if _, err := o.start(ctx, ref, "").wait(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	// train.before:2 lets each process train one step and kills it before
	// the next, so the kills walk through every epoch; call.logged:60 kills
	// in the middle of generating a step.
	specs := []string{"call.logged:60", "train.before:2"}
	killedIn := map[uint32]int{}
	for i := 0; ; i++ {
		if i > 40 {
			t.Fatal("the run did not finish after 40 processes")
		}
		st, err := o.start(ctx, dir, specs[i%len(specs)]).wait()
		if err != nil {
			t.Fatalf("process %d (%s): %v", i+1, specs[i%len(specs)], err)
		}
		if st != "killed" {
			break
		}
		step, epoch := workingOn(t, dir)
		killedIn[epoch]++
		t.Logf("kill %d (%s): working on step %d, of epoch %d", i+1, specs[i%len(specs)], step, epoch)
	}
	for e := range uint32(3) {
		if killedIn[e] == 0 {
			t.Fatalf("no kill landed in epoch %d: %v", e, killedIn)
		}
	}
	want, err := Summarize(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Summarize(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); d != "" {
		t.Fatalf("killed run differs from the uninterrupted one: %s", d)
	}
	if got.Steps != 6 {
		t.Fatalf("run ended at step %d, want 6 (3 epochs of 8 prompts, 4 a step)", got.Steps)
	}
	l, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	perEpoch := map[uint32][]string{}
	l.View(func(s *runlog.State) {
		for _, ts := range s.Trained {
			for _, id := range ts.Groups {
				g := s.Groups[id]
				perEpoch[g.Epoch] = append(perEpoch[g.Epoch], g.PromptID)
			}
		}
	})
	var all []string
	for i := range 8 {
		all = append(all, fmt.Sprint(i))
	}
	var orders [][]string
	for e := range uint32(3) {
		ids := perEpoch[e]
		orders = append(orders, slices.Clone(ids))
		slices.Sort(ids)
		if len(ids) != 8 || len(slices.Compact(slices.Clone(ids))) != 8 {
			t.Fatalf("epoch %d trained prompts %v: want each of the 8 exactly once", e, perEpoch[e])
		}
	}
	if len(perEpoch) != 3 {
		t.Fatalf("trained epochs %v, want exactly 0, 1, 2", perEpoch)
	}
	if slices.Equal(orders[0], orders[1]) && slices.Equal(orders[1], orders[2]) {
		t.Fatalf("every epoch has the same order %v: the shuffle is not per epoch", orders[0])
	}
}

// workingOn returns the step a killed run was working on (the one after
// its last trained step) and the epoch of that step's prompts.
func workingOn(t *testing.T, dir string) (int64, uint32) {
	t.Helper()
	l, err := runlog.Open(context.Background(), dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var step int64
	var epoch uint32
	l.View(func(s *runlog.State) {
		step = s.Step + 1
		for _, id := range s.Order {
			if g := s.Groups[id]; g.ForStep == step {
				epoch = g.Epoch
			}
		}
	})
	return step, epoch
}
