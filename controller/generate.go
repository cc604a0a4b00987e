package controller

// This file holds the generation effect (running a launched group's
// members until each seals or uses up its attempts), the prompt's task,
// and the run-wide drop caps.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/runlog"
)

// groupsFor returns the groups admitted for step s, in admission order.
func (c *Controller) groupsFor(s int64) (out []*runlog.Group, cursor data.Cursor) {
	c.o.Log.View(func(st *runlog.State) {
		for _, id := range st.Unsettled() {
			if g := st.Groups[id]; g.ForStep == s {
				out = append(out, g.Clone())
			}
		}
		cursor = c.order.Normalize(data.Cursor{Epoch: st.Epoch, Pos: st.NextCursor})
	})
	return out, cursor
}

// ErrTooManyDropped is returned when dropped prompts exceed a run-wide cap.
var ErrTooManyDropped = errors.New("controller: too many dropped prompts")

// checkDropCaps enforces the run-wide caps, as NeMo RL defines them:
// rollout_failure.max_skipped_prompts bounds the prompts dropped after data
// failures over the run (bad prompts or a broken environment: skipping more
// would hide a bug), and max_consecutive_dropped_prompts bounds prompts
// dropped after infra failures in a row, in admission order, reset by any
// group that commits (an outage: going on would only skip the data).
func (c *Controller) checkDropCaps() error {
	rf := c.cfg.RolloutFailure
	var data, run, worst int
	var lastData, lastInfra runlog.GroupID
	c.o.Log.View(func(st *runlog.State) {
		for _, id := range st.Order {
			g := st.Groups[id]
			switch g.Status {
			case runlog.GroupStatusDropped:
				if dropClass(g) == failure.Infra {
					run++
					worst, lastInfra = max(worst, run), id
				} else {
					data++
					lastData = id
				}
			case runlog.GroupStatusOpen:
			default:
				run = 0
			}
		}
	})
	switch {
	case data > rf.MaxSkippedPrompts:
		return fmt.Errorf("%w: %d prompts dropped after data failures, more than rollout_failure.max_skipped_prompts (%d); the last was group %s (`longhaul inspect RUN_DIR rollout %s-0` shows its attempts)%s",
			ErrTooManyDropped, data, rf.MaxSkippedPrompts, lastData, lastData, c.capHint("max_skipped_prompts", data))
	case worst > rf.MaxConsecutiveDroppedPrompts:
		return fmt.Errorf("%w: %d prompts dropped after infra failures in a row, more than rollout_failure.max_consecutive_dropped_prompts (%d); the last was group %s%s",
			ErrTooManyDropped, worst, rf.MaxConsecutiveDroppedPrompts, lastInfra, c.capHint("max_consecutive_dropped_prompts", worst))
	}
	return nil
}

// dropClass is the failure class that dropped a group: its exhausted
// member's last failure.
func dropClass(g *runlog.Group) string {
	for _, r := range g.Members {
		if r.Status == runlog.StatusFailed {
			return r.LastFailure.Class
		}
	}
	return failure.Data
}

func (c *Controller) task(g *runlog.Group) (env.Task, error) {
	p, _, err := c.order.Next(data.Cursor{Epoch: g.Epoch, Pos: g.Cursor})
	if err != nil {
		return env.Task{}, fmt.Errorf("controller: prompt of group %s: %w", g.ID, err)
	}
	if p.ID != g.PromptID {
		return env.Task{}, fmt.Errorf("controller: group %s: dataset has prompt %q at epoch %d cursor %d, the log says %q (dataset changed?)", g.ID, p.ID, g.Epoch, g.Cursor, g.PromptID)
	}
	var t env.Task
	if err := json.Unmarshal(p.Task, &t); err != nil {
		return env.Task{}, fmt.Errorf("controller: task of prompt %q: %w", p.ID, err)
	}
	if t.Env == "" {
		t.Env = c.cfg.EnvName
	}
	if t.ID == "" {
		t.ID = p.ID
	}
	return t, nil
}

// runGroup runs a launched group's unsealed members, each until it seals
// or uses up its attempts, and disposes of what they staged (settle.go); the
// loop counted it in c.generating when it launched it.
//
// callers holds the members' gen.Callers, counted away by the generator
// since the launch (expectMembers); nil for a sealed member.
func (c *Controller) runGroup(ctx context.Context, g *runlog.Group, task env.Task, pool *workers, callers []*gen.Caller) error {
	var wg sync.WaitGroup
	errs := make([]error, len(g.Members))
	pend := make([][]runlog.Staged, len(g.Members)) // the members' staged seals, unsettled
	for i, m := range g.Members {
		if m.Status == runlog.StatusSealed {
			continue
		}
		wg.Add(1)
		pool.run(func() {
			defer wg.Done()
			errs[i] = c.runMember(ctx, g, m.ID, task, &pend[i], callers[i])
		})
	}
	wg.Wait()
	c.generating.done()
	if err := c.endGroup(ctx, pend); err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil && !isExhausted(err) {
			return errors.Join(errs...)
		}
	}
	// The group's outcome is the planner's to decide, from the log: the
	// members reported only by appending.
	return nil
}

// exhaustedError is a member that used up its attempt budget: its group
// is dropped, the run goes on.
type exhaustedError struct {
	id    runlog.RolloutID
	class string
	n     int
	err   error
}

func (e *exhaustedError) Error() string {
	return fmt.Sprintf("rollout %s failed %d times, last (%s): %v", e.id, e.n, e.class, e.err)
}

func (e *exhaustedError) Unwrap() error { return e.err }

// isExhausted reports whether err is an exhaustedError; a function of its
// own so that only a failed member pays for the target errors.As needs.
func isExhausted(err error) bool {
	var ex *exhaustedError
	return errors.As(err, &ex)
}

// expectMembers makes a gen.Caller for each member of g still to run and
// counts it away by the generator (gen.Expect) before any member starts,
// so the generator gathers the members' first calls with those of the
// round's other groups instead of running the first to arrive alone.
func (c *Controller) expectMembers(g *runlog.Group) []*gen.Caller {
	callers := make([]*gen.Caller, len(g.Members))
	for i, m := range g.Members {
		if m.Status == runlog.StatusSealed {
			continue
		}
		callers[i] = &gen.Caller{}
		gen.Expect(c.o.Generator, callers[i])
	}
	return callers
}
