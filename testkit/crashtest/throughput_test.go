package crashtest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
)

// TestThroughputKillsLoseNothing is guarantee 2: in throughput mode, after
// SIGKILLs at random moments and crash points, every admitted prompt is
// trained exactly once, in admission order, and every logged call was
// generated exactly once (no (rollout, call) is in the log twice).
func TestThroughputKillsLoseNothing(t *testing.T) {
	bin := binary(t)
	dir := filepath.Join(t.TempDir(), "run")
	o := Options{Binary: bin, Config: tinyConfig(t), Kills: 6, Seed: 11,
		Overrides: []string{"run.mode=throughput", "run.max_steps=24"}}
	t0 := time.Now()
	ref := filepath.Join(t.TempDir(), "ref")
	if _, err := o.start(context.Background(), ref, "").wait(); err != nil {
		t.Fatal(err)
	}
	kills, err := o.KillAndResume(context.Background(), dir, time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kills: %v", kills)

	rep, err := runlog.Inspect(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Step != 24 || len(rep.Trained) != 24 {
		t.Fatalf("step %d, %d trained steps; want 24", rep.Step, len(rep.Trained))
	}
	// The admission order, from the log.
	l, err := runlog.Open(context.Background(), dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var admitted []string
	calls := map[string]int{}
	err = l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
		switch e := ev.(type) {
		case runlog.PromptAdmitted:
			admitted = append(admitted, e.Group.String())
		case runlog.CallFinished:
			calls[fmt.Sprintf("%s/%d", e.Rollout, e.Call)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var trained []string
	for _, st := range rep.Trained {
		trained = append(trained, st.GroupIDs...)
	}
	if !slices.Equal(trained, admitted[:len(trained)]) {
		t.Fatalf("trained groups are not the admitted ones in admission order:\ntrained  %v\nadmitted %v", trained, admitted)
	}
	seen := map[string]bool{}
	for _, g := range trained {
		if seen[g] {
			t.Fatalf("group %s trained twice", g)
		}
		seen[g] = true
	}
	for k, n := range calls {
		if n != 1 {
			t.Fatalf("call %s is in the log %d times", k, n)
		}
	}
	if uint64(len(calls)) != rep.CallsGenerated {
		t.Fatalf("%d distinct calls, %d CallFinished events", len(calls), rep.CallsGenerated)
	}
}
