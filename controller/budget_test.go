package controller

import (
	"context"
	"testing"

	"github.com/longhaul-rl/longhaul/runlog"
)

// TestBudgetSurvivesCrash: a rollout that failed twice (infra) before a
// crash has two of its four infra attempts left after resume, not four: the
// budget is folded from the log, not held by the goroutine that ran it.
// The resume gets it by replaying the failures, or from a snapshot taken
// after them (so a snapshot that dropped the per-class counts would give
// the victim four attempts again).
func TestBudgetSurvivesCrash(t *testing.T) {
	t.Run("replay", func(t *testing.T) { budgetSurvivesCrash(t, false) })
	t.Run("snapshot", func(t *testing.T) { budgetSurvivesCrash(t, true) })
}

func budgetSurvivesCrash(t *testing.T, fromSnapshot bool) {
	cfg := testConfig(t, "rollout_failure.max_infra_attempts=4", "rollout_failure.on_dropped_prompt=shrink",
		"rollout_failure.min_step_batch_fraction=0.5", "run.max_steps=1")
	h := newHarness(t, cfg)
	victim := runlog.RolloutID{Group: runlog.NewGroupID(cfg.Run.Seed, 0, 0), Member: 1}
	ctx, cancel := context.WithCancelCause(context.Background())
	h.gen.fail = func(_ context.Context, k callKey, n int) error {
		if k.id != victim {
			return nil
		}
		if n == 3 { // the third attempt's first call: crash with two failures logged
			cancel(errCrash)
			<-ctx.Done()
			return ctx.Err()
		}
		return injected(k)
	}
	if err := h.run(ctx); err == nil {
		t.Fatal("the crashed run ended cleanly")
	}
	if r := h.state().Rollout(victim); r.InfraFailures != 2 || r.Status != runlog.StatusRunning {
		t.Fatalf("before the crash: %d infra failures, status %v; want 2, running", r.InfraFailures, r.Status)
	}
	if fromSnapshot {
		snap := h.snapshot()
		if r := snap.Rollout(victim); r.InfraFailures != 2 {
			t.Fatalf("the snapshot's state holds %d infra failures of the victim, want 2", r.InfraFailures)
		}
	}
	if err := h.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, ev := range h.events() {
		if f, ok := ev.(runlog.RolloutFailed); ok && f.Rollout == victim {
			failed++
		}
	}
	st := h.state()
	if failed != 4 {
		t.Fatalf("the victim failed %d attempts over the run, want 4 (2 before the crash, 2 after)", failed)
	}
	if g := st.Groups[victim.Group]; g.Status != runlog.GroupStatusDropped {
		t.Fatalf("victim's group is %v, want dropped", g.Status)
	}
	if st.Step != 1 {
		t.Fatalf("step %d, want 1", st.Step)
	}
}
