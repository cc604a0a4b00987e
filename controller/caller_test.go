package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/runlog"
)

// callerCheck records the gen.Caller of every call.
type callerCheck struct {
	g       gen.Generator
	mu      sync.Mutex
	callers map[*gen.Caller]bool
	without int
}

func (c *callerCheck) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	c.mu.Lock()
	if k := gen.CallerFrom(ctx); k != nil {
		c.callers[k] = true
	} else {
		c.without++
	}
	c.mu.Unlock()
	return c.g.Generate(ctx, reqs)
}

// TestRolloutsAreCallers: every model call of a run is made as its
// attempt's gen.Caller, one per attempt, and a batcher in front of the
// generator counts none of them away once the run is over.
func TestRolloutsAreCallers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHarness(t, testConfig(t, "run.max_steps=2"))
	var b *gen.Batcher
	check := &callerCheck{callers: map[*gen.Caller]bool{}}
	h.wrap = func(g gen.Generator) gen.Generator {
		b = gen.NewBatcher(ctx, g, 64, time.Second)
		check.g = b
		return check
	}
	if err := h.run(ctx); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, ev := range h.events() {
		if _, ok := ev.(runlog.AttemptStarted); ok {
			attempts++
		}
	}
	if check.without > 0 || len(check.callers) != attempts || attempts < 8 {
		t.Fatalf("%d calls without a caller, %d callers; want none without and one per attempt (%d logged)", check.without, len(check.callers), attempts)
	}
	if n := b.Away(); n != 0 {
		t.Fatalf("%d callers away after the run", n)
	}
}

// batchSizes records the size of every call that reaches the generator
// behind a batcher.
type batchSizes struct {
	g     gen.Generator
	mu    sync.Mutex
	sizes []int
}

func (s *batchSizes) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(reqs))
	s.mu.Unlock()
	return s.g.Generate(ctx, reqs)
}

// TestRoundsFirstCallsShareOneBatch: the loop counts a launched group's
// members away by the batcher before any of them starts (gen.Expect), so
// every round's first calls, one per rollout, reach the generator as one
// call, and no member is left counted away at the end (a leak would hold
// every later batch for the window).
func TestRoundsFirstCallsShareOneBatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const steps, members, window = 3, 2 * 4, 30 * time.Second
	h := newHarness(t, testConfig(t, "run.max_steps=3", "grpo.num_generations_per_prompt=4"))
	var b *gen.Batcher
	rec := &batchSizes{}
	h.wrap = func(g gen.Generator) gen.Generator {
		rec.g = g
		b = gen.NewBatcher(ctx, rec, 64, window)
		return b
	}
	start := time.Now()
	if err := h.run(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > window/2 {
		t.Fatalf("the run took %v: batches waited for the window, not for their callers", took)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	full := 0
	for _, n := range rec.sizes {
		if n == members {
			full++
		}
	}
	if len(rec.sizes) == 0 || rec.sizes[0] != members || full < steps {
		t.Fatalf("calls of %v requests: want each of the %d rounds to start with one call of its %d rollouts", rec.sizes, steps, members)
	}
	if n := b.Away(); n != 0 {
		t.Fatalf("%d callers away after the run", n)
	}
}
