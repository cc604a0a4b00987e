package controller

// This file holds the effects that watch the run: the stall watchdog's
// report (the planner decides when it fires, watch in plan.go) and the
// snapshot effect (the planner decides when one is due).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
)

func (c *Controller) stallReport(idle time.Duration) string {
	var open []string
	running := 0
	c.o.Log.View(func(s *runlog.State) {
		for _, id := range s.Order {
			g := s.Groups[id]
			if g.Status != runlog.GroupStatusOpen {
				continue
			}
			if len(open) < 8 {
				open = append(open, fmt.Sprintf("%s (prompt %s, step %d)", id, g.PromptID, g.ForStep))
			}
			for _, r := range g.Members {
				if r.Status == runlog.StatusRunning {
					running++
				}
			}
		}
	})
	msg := fmt.Sprintf("no progress for %s; open groups: %s; rollouts running: %d (%d in flight in this process)",
		idle.Round(time.Second), strings.Join(open, ", "), running, c.inFlight.Load())
	if c.o.Describe != nil {
		msg += "; generator: " + c.o.Describe()
	}
	return msg
}

// snapshot writes one run-state snapshot. A failed snapshot is only
// logged: the log stays the truth, a resume folds more events.
func (c *Controller) snapshot(ctx context.Context) {
	c.o.Crash("snapshot.before")
	info, err := c.o.Log.Snapshot(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("snapshot failed", "err", err)
		}
		return
	}
	c.log.Debug("snapshot", "offset", info.Offset, "bytes", info.Bytes, "took", info.Duration)
}
