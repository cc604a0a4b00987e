package controller

// This file holds the launch of the generation effects (one per rollout
// attempt the planner decided) and the prompt's task.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/env"
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

// launchAttempts starts an effect for each attempt of a Ready (their
// AttemptStarted, if new, are durable already), each on a rollout worker.
// Every attempt is a gen.Caller, counted away by the generator before any
// starts (gen.Expect), so the generator gathers their first calls into one
// batch instead of running the first to arrive alone.
func (c *Controller) launchAttempts(ctx context.Context, attempts []Attempt, in *Input, run func(func() ended)) error {
	if len(attempts) == 0 {
		return nil
	}
	// The groups' prompts (not their members: an attempt reads its own
	// events from the log), read once per group.
	groups := map[runlog.GroupID]*runlog.Group{}
	c.o.Log.View(func(st *runlog.State) {
		for _, a := range attempts {
			if _, ok := groups[a.Rollout.Group]; !ok {
				g := *st.Groups[a.Rollout.Group]
				g.Members = nil
				groups[g.ID] = &g
			}
			if a.Restart {
				c.log.Warn("rollout restarts its episode", "rollout", a.Rollout, "attempt", a.Attempt,
					"after", st.Rollout(a.Rollout).LastFailure.Reason)
			}
		}
	})
	tasks := make(map[runlog.GroupID]env.Task, len(groups))
	for id, g := range groups {
		t, err := c.task(g)
		if err != nil {
			return err
		}
		tasks[id] = t
	}
	callers := make([]*gen.Caller, len(attempts))
	for i := range attempts {
		callers[i] = &gen.Caller{}
		gen.Expect(c.o.Generator, callers[i])
	}
	for i, a := range attempts {
		in.Attempts[a.Rollout] = a.Attempt
		g := groups[a.Rollout.Group]
		run(func() ended { return c.runAttempt(ctx, a, g, tasks[g.ID], callers[i]) })
	}
	return nil
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
