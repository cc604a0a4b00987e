package controller

// One write for a step's generation and the decisions it leads to. With
// an in-process environment a rollout stages its calls, steps and seal
// (rollout.Spec.StageSeal), and the run log writes staged appends only
// once somebody waits on them (runlog.Log.Stage).
//
// Throughput mode: a group whose members are done waits for their appends
// before it ends, since the planner decides its outcome from the durable
// log while other groups run.
//
// Deterministic mode: the planner decides nothing while any group of the
// round still runs (plan.go), so a group whose members are done waits for
// the round's other groups to finish generating, then leaves its members'
// staged appends with the controller (c.unsettled) and ends. While any are
// unsettled the loop plans from the log's staged state
// (runlog.Log.ViewStaged); a Ready taken from it appends its decisions
// first, staged after the round's records, and waits for them (a durable
// append's predecessors are durable) before it starts any effect. So a
// round costs one write where it cost two (its records, then the
// decisions on them), no effect outside the process (training, publishing,
// a checkpoint, the next round's calls) acts on a record that is not
// durable, and generation ends with the last seal rather than after a
// write (docs/model.md, sessions 11 and 12).

import (
	"context"
	"slices"
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

// unsettled holds the staged appends of deterministic rounds' ended groups
// until the loop makes them durable.
type unsettled struct {
	mu   sync.Mutex
	pend []runlog.Staged
}

func (u *unsettled) add(pend []runlog.Staged) {
	u.mu.Lock()
	u.pend = append(u.pend, pend...)
	u.mu.Unlock()
}

func (u *unsettled) any() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.pend) > 0
}

func (u *unsettled) take() []runlog.Staged {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.pend
	u.pend = nil
	return p
}

// settle waits on each staged append exactly once, whatever fails, and
// returns the first error.
func settle(pend []runlog.Staged) error {
	var first error
	for _, st := range pend {
		if _, err := st.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// endGroup disposes of an ended group's staged appends (throughput mode:
// made durable now; deterministic: left unsettled once the round is done
// generating).
func (c *Controller) endGroup(ctx context.Context, pend [][]runlog.Staged) error {
	all := slices.Concat(pend...)
	if len(all) == 0 {
		return nil
	}
	if !c.cfg.Run.Throughput() {
		c.generating.wait(ctx)
		c.unsettled.add(all)
		return nil
	}
	c.o.Crash("seals.staged")
	return settle(all)
}
