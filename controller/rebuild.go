package controller

// This file rebuilds metrics rows from the log: metrics.jsonl is a view of
// the run, so a row lost to damage is computed again from what the log
// holds for its step.

import (
	"fmt"
	"slices"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
)

// TrainedSteps returns the steps the log has trained, in order.
func (c *Controller) TrainedSteps() []int64 {
	var out []int64
	c.o.Log.View(func(st *runlog.State) {
		for _, t := range st.Trained {
			out = append(out, t.Step)
		}
	})
	return out
}

// RebuildRows computes the metrics rows of trained steps from the log: the
// same batch stepBatch picked when the step trained (its trained groups
// and the groups dropped while scheduled for it, in admission order, with
// their members' events), so every figure the log determines (rewards,
// success, lengths, compactions, segments, staleness, retries, drops) is
// the row's as first written. What only the trainer or the clock knew
// (loss, gradient norm, KL, timings) is not in the log: a rebuilt row
// leaves it zero and says Rebuilt.
func (c *Controller) RebuildRows(steps []int64) ([]metrics.Step, error) {
	rows := make([]metrics.Step, 0, len(steps))
	for _, k := range steps {
		var groups []*runlog.Group
		var version int64
		found := false
		c.o.Log.View(func(st *runlog.State) {
			i := slices.IndexFunc(st.Trained, func(t runlog.TrainedStep) bool { return t.Step == k })
			if i < 0 {
				return
			}
			found, version = true, st.Trained[i].Version
			trained := st.Trained[i].Groups
			for _, id := range st.Order {
				g := st.Groups[id]
				switch {
				case slices.Contains(trained, id):
					g = g.Clone()
					g.Status = runlog.GroupStatusCommitted // as it was when it trained
				case g.Status == runlog.GroupStatusDropped && g.ForStep == k:
					g = g.Clone()
				default:
					continue
				}
				groups = append(groups, g)
			}
		})
		if !found {
			return nil, fmt.Errorf("controller: metrics row of step %d: the log has not trained it", k)
		}
		events := map[runlog.RolloutID][]runlog.Event{}
		for _, g := range groups {
			if g.Status != runlog.GroupStatusCommitted {
				continue
			}
			for _, m := range g.Members {
				evs, err := c.o.Log.RolloutEvents(m.ID)
				if err != nil {
					return nil, fmt.Errorf("controller: metrics row of step %d: %w", k, err)
				}
				events[m.ID] = evs
			}
		}
		sp, err := stepBatch(k, events, groups, c.cfg)
		if err != nil {
			return nil, fmt.Errorf("controller: metrics row of step %d: %w", k, err)
		}
		ms := sp.loggedRow()
		ms.Version, ms.Rebuilt = version, true
		rows = append(rows, ms)
	}
	return rows, nil
}
