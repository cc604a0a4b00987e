package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train"
)

// stepGate is a trainer that says when each step's TrainStep returned.
type stepGate struct {
	*fakeTrainer
	mu      sync.Mutex
	trained map[int64]chan struct{}
}

func (g *stepGate) done(k int64) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.trained[k] == nil {
		g.trained[k] = make(chan struct{})
	}
	return g.trained[k]
}

func (g *stepGate) TrainStep(ctx context.Context, b train.Batch) (train.StepStats, error) {
	st, err := g.fakeTrainer.TrainStep(ctx, b)
	if err == nil {
		close(g.done(st.Step))
	}
	return st, err
}

// TestTrainingOverlapsGeneration: in deterministic mode with run.max_lag
// 1, step k trains while step k+1 is generated, and that round still
// sees version k-1 to its end: every call is answered by the version the
// schedule names, the log records StepTrained k only after step k+1's
// outcomes, and the run trains what a one-at-a-time run trains.
//
// The fake generator holds the first call of each step s ≥ 2 until step
// s-1 has finished TrainStep (one-at-a-time training never gets there
// while a round runs: the hold times out after 30 s and the test fails), then gives
// a premature publish of version s-1 time to land before it answers.
func TestTrainingOverlapsGeneration(t *testing.T) {
	const steps, perStep = 4, 2
	cfg := testConfig(t, "run.max_lag=1", "run.overlap=on", "run.max_steps=4", "data.num_prompts=12")
	h := newHarness(t, cfg)
	gate := &stepGate{fakeTrainer: h.tr, trained: map[int64]chan struct{}{}}
	stepOf := map[runlog.GroupID]int64{}
	for cur := range uint64(steps+1) * perStep {
		stepOf[runlog.NewGroupID(cfg.Run.Seed, 0, cur)] = int64(cur/perStep) + 1
	}
	var mu sync.Mutex
	held := map[int64]bool{}
	var missed []int64
	h.gen.fail = func(ctx context.Context, k callKey, _ int) error {
		s := stepOf[k.id.Group]
		mu.Lock()
		first := s >= 2 && !held[s]
		held[s] = true
		mu.Unlock()
		if !first {
			return nil
		}
		select {
		case <-gate.done(s - 1):
		case <-time.After(30 * time.Second): // only a run that does not overlap waits this out
			mu.Lock()
			missed = append(missed, s)
			mu.Unlock()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		// a publish of s-1 before step s is generated would land now
		for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end) && h.published.Load() < s-1; {
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	if err := h.runWith(context.Background(), gate); err != nil {
		t.Fatal(err)
	}
	if len(missed) > 0 {
		t.Errorf("steps %v were not generated while the step before them trained", missed)
	}
	st := h.state()
	// every call at the version the schedule names; StepTrained k after
	// every outcome of step k+1
	trainedAt := map[int64]int{}
	outcomeAt := map[int64]int{}
	bad := 0
	for i, ev := range h.events() {
		switch e := ev.(type) {
		case runlog.CallFinished:
			s := st.Groups[e.Rollout.Group].ForStep
			if want := max(0, s-2); e.Version != want {
				bad++
				if bad <= 3 {
					t.Errorf("call %d of %s (step %d) answered by version %d, the schedule names %d", e.Call, e.Rollout, s, e.Version, want)
				}
			}
		case runlog.GroupCommitted:
			outcomeAt[st.Groups[e.Group].ForStep] = i
		case runlog.StepTrained:
			trainedAt[e.Step] = i
		}
	}
	for k := int64(1); k <= steps; k++ {
		if trainedAt[k] == 0 || trainedAt[k] < outcomeAt[k+1] {
			t.Errorf("StepTrained %d at event %d, step %d's last outcome at %d: want it after", k, trainedAt[k], k+1, outcomeAt[k+1])
		}
	}
	if st.Step != steps || h.tr.steps != steps {
		t.Fatalf("log at step %d, trainer ran %d steps; want %d", st.Step, h.tr.steps, steps)
	}
}
