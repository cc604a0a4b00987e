package controller

// One write for a step's generation and the decisions it leads to. With
// an in-process environment a rollout stages its calls, steps and seal
// (rollout.Spec.StageSeal), and the run log writes staged appends only
// once somebody waits on them (runlog.Log.Stage).
//
// Throughput mode: an attempt that sealed waits for its appends before it
// ends, since the planner decides on its group from the durable log while
// other groups run.
//
// Deterministic mode: the planner decides nothing on a round while any of
// its attempts still runs (plan.go; a retry of a failed attempt aside), so
// an attempt that sealed leaves its staged appends with the controller
// (c.unsettled) and ends. While any are unsettled the loop plans from the
// log's staged state (runlog.Log.ViewStaged); a Ready taken from it that
// asks for anything appends its decisions first, staged after the round's
// records, and waits for them (a durable append's predecessors are
// durable) before it starts any effect; one that asks for nothing does
// nothing. So a round costs one write where it cost two (its records,
// then the decisions on them), no effect outside the process (training,
// publishing, a checkpoint, the next round's calls) acts on a record that
// is not durable, and generation ends with the last seal rather than after
// a write (docs/model.md, sessions 11 and 12).

import (
	"sync"

	"github.com/longhaul-rl/longhaul/runlog"
)

// unsettled holds the staged appends of deterministic rounds' sealed
// attempts until the loop makes them durable.
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

// endAttempt disposes of a sealed attempt's staged appends (throughput
// mode: made durable now; deterministic: left unsettled for the loop).
func (c *Controller) endAttempt(pend []runlog.Staged) error {
	if len(pend) == 0 {
		return nil
	}
	if !c.cfg.Run.Throughput() {
		c.unsettled.add(pend)
		return nil
	}
	c.o.Crash("seals.staged")
	return settle(pend)
}
