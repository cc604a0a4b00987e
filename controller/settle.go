package controller

// One fsync for a step's generation. With an in-process environment a
// rollout stages its calls, steps and seal (rollout.Spec.StageSeal) and the
// run log writes staged appends only once somebody waits on them
// (runlog.Log.Stage). A group's effect must end with its members' seals
// durable, since the planner decides its outcome from the log; but in
// deterministic mode the planner decides nothing while any group of the
// round still runs (plan.go), so a group that is done waits for the
// others to finish generating before it settles. Then the round's groups
// settle together and its generation costs about one write, where
// rollouts that waited for their own seals made about 11 writes a step,
// each holding up generation on the other core (docs/model.md, session 11).

import (
	"context"
	"sync"

	"github.com/longhaul-rl/longhaul/runlog"
)

// generating counts the groups whose members are still running.
type generating struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // closed when n drops to zero
}

// add counts n groups launched; each calls done when its members are back.
func (g *generating) add(n int) {
	if n == 0 {
		return
	}
	g.mu.Lock()
	if g.n == 0 {
		g.none = make(chan struct{})
	}
	g.n += n
	g.mu.Unlock()
}

func (g *generating) done() {
	g.mu.Lock()
	g.n--
	if g.n == 0 {
		close(g.none)
	}
	g.mu.Unlock()
}

// wait returns once no group is generating, or when ctx ends.
func (g *generating) wait(ctx context.Context) {
	g.mu.Lock()
	none := g.none
	n := g.n
	g.mu.Unlock()
	if n == 0 {
		return
	}
	select {
	case <-none:
	case <-ctx.Done():
	}
}

// settleGroup makes the members' staged appends durable (each is waited
// on exactly once, whatever fails). quiet: wait for the other groups to
// finish generating first.
func (c *Controller) settleGroup(ctx context.Context, pend [][]runlog.Staged, quiet bool) error {
	n := 0
	for _, p := range pend {
		n += len(p)
	}
	if n == 0 {
		return nil
	}
	if quiet {
		c.generating.wait(ctx)
	}
	c.o.Crash("seals.staged")
	var first error
	for _, p := range pend {
		for _, st := range p {
			if _, err := st.Wait(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
