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
