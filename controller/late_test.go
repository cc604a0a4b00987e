package controller

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
)

// TestLateResultIsRefusedAndCounted makes a late result happen: attempt 1
// of a rollout is fenced by attempt 2, then attempt 1's recorder delivers a
// call (what a slow generator answering after a retry does). The log's
// Apply refuses it as a stale attempt, the controller counts it, and the
// step reports it as late_results; the rollout's state is untouched.
func TestLateResultIsRefusedAndCounted(t *testing.T) {
	cfg := testConfig(t, "run.max_steps=1")
	h := newHarness(t, cfg)
	ctx := context.Background()
	l, err := runlog.Open(ctx, h.dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := metrics.Create(filepath.Join(h.dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	c, err := New(Options{Config: *ctl(t, cfg), RunDir: h.dir, Log: l, Dataset: h.ds, Envs: h.reg, Generator: h.gen,
		Trainer: h.tr, Publish: func(context.Context, int64) error { return nil }, Metrics: mw})
	if err != nil {
		t.Fatal(err)
	}
	c.o.Crash = func(string) {}
	// Admit step 1 the way the controller does, then fence attempt 1.
	if _, err := l.Append(ctx, runlog.RunStarted{ConfigDigest: config.Digest(cfg), Seed: cfg.Run.Seed, Mode: cfg.Run.Mode}); err != nil {
		t.Fatal(err)
	}
	var adm []runlog.Event
	l.View(func(st *runlog.State) { adm, err = admissions(st, 1, c.cfg, c.order) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, adm...); err != nil {
		t.Fatal(err)
	}
	groups, _ := c.groupsFor(1)
	g := groups[0]
	id := g.Members[0].ID
	task, err := c.task(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []uint32{1, 2} {
		if _, err := l.Append(ctx, runlog.AttemptStarted{Rollout: id, Attempt: a}); err != nil {
			t.Fatal(err)
		}
	}
	late := runlog.CallFinished{Rollout: id, Attempt: 1, Call: 0, PromptSuffix: []int32{1, 2}, Sampled: []int32{3},
		Logprobs: []float32{-1}, Finish: runlog.FinishStop, Selected: true}
	sp, _ := c.spec(g, id, 1, task, nil)
	err = sp.Recorder.Record(ctx, late)
	if !errors.Is(err, runlog.ErrStaleAttempt) {
		t.Fatalf("late result: %v, want ErrStaleAttempt", err)
	}
	var calls int
	l.View(func(s *runlog.State) { calls = len(s.Rollout(id).Calls) })
	if calls != 0 || c.figures.lateResults.Load() != 1 {
		t.Fatalf("after the late result: %d calls logged, %d counted; want 0 and 1", calls, c.figures.lateResults.Load())
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	l.Close()
	ms := h.metrics()
	if len(ms) != 1 || ms[0].LateResults != 1 {
		t.Fatalf("metrics %+v: want step 1 with late_results 1", ms)
	}
}
