package controller

// This file holds the controller's background effects that watch the run:
// the stall watchdog and the snapshotter.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/runlog"
)

// ErrStalled is returned when the stall watchdog aborts the run.
var ErrStalled = errors.New("controller: run stalled")

// watchdog watches the log for progress; after
// rollout_failure.stall_timeout_s without a new event it warns (or, with
// stall_action: abort, stops the run) naming the groups still open, the
// rollouts in flight and what the generator is waiting on.
func (c *Controller) watchdog(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	rf := c.cfg.RolloutFailure
	if rf.StallTimeoutS <= 0 {
		return func() {}
	}
	limit := time.Duration(rf.StallTimeoutS * float64(time.Second))
	tick := min(time.Second, limit/4)
	ctx, done := context.WithCancel(ctx)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(tick)
		defer t.Stop()
		var seen uint64
		last, warned := c.now(), time.Time{}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var applied uint64
			c.o.Log.View(func(s *runlog.State) { applied = s.Applied })
			now := c.now()
			if applied != seen {
				seen, last = applied, now
				continue
			}
			if now.Sub(last) < limit || now.Sub(warned) < limit {
				continue
			}
			warned = now
			msg := c.stallReport(now.Sub(last))
			if rf.StallAction == "abort" {
				cancel(fmt.Errorf("%w: %s", ErrStalled, msg))
				return
			}
			c.log.Warn("run stalled", "detail", msg)
		}
	}()
	return func() { done(); <-exited }
}

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

// snapshotter writes run-state snapshots on their own clock until stop.
func (c *Controller) snapshotter(ctx context.Context) (stop func()) {
	rc := c.cfg.RolloutCheckpointing
	if !rc.Enabled || rc.SnapshotAttemptIntervalS <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Duration(rc.SnapshotAttemptIntervalS * float64(time.Second)))
		defer t.Stop()
		var since uint64 // records applied just after the last snapshot
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Nothing new since the last snapshot: another would cost a
			// write for nothing, and its record would look like progress
			// to the stall watchdog through an outage.
			var applied uint64
			c.o.Log.View(func(s *runlog.State) { applied = s.Applied })
			if applied == since {
				continue
			}
			c.o.Crash("snapshot.before")
			info, err := c.o.Log.Snapshot(ctx)
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("snapshot failed", "err", err)
				}
				continue
			}
			c.log.Debug("snapshot", "offset", info.Offset, "bytes", info.Bytes, "took", info.Duration)
			c.o.Log.View(func(s *runlog.State) { since = s.Applied })
		}
	}()
	return func() { cancel(); <-done }
}
