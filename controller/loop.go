package controller

// This file holds the effect loop: it takes a Ready from the planner,
// performs it (events first, then effects), and waits in one select for an
// effect to end or the clock to tick. Effects (a launched group, a
// training step, a checkpoint, a snapshot) run in goroutines of their own
// and report only by appending events to the log; what they send back on
// the loop's channel is a wake-up naming which effect ended and whether it
// failed outside the log (the run stops then).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train"
)

// effect names what a goroutine of the loop did.
type effect uint8

const (
	effGroup effect = iota
	effTrain
	effCheckpoint
	effSnapshot
)

// ended is an effect's wake-up: which effect, and an error that is not in
// the log (a failed append, a trainer error, a canceled context).
type ended struct {
	kind  effect
	group runlog.GroupID
	step  int64
	ms    metrics.Step // effTrain: the step's row, for the checkpoint's metric
	err   error
}

// loop runs the effect loop until the run ends or fails. On return every
// effect it started has ended.
func (c *Controller) loop(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	pool := newWorkers() // the rollouts' goroutines (workers.go)
	defer func() {
		cancel()
		wg.Wait()
		pool.stop()
		// What ended groups staged is valid: written now, a resume does
		// not run it again (and each staged append is waited on once).
		_ = settle(c.unsettled.take())
	}()
	done := make(chan ended)
	spawn := func(fn func() ended) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := fn()
			select {
			case done <- r:
			case <-ctx.Done():
			}
		}()
	}
	var tick <-chan time.Time
	if every := c.tickEvery(); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	in := Input{Running: map[runlog.GroupID]bool{}}
	var genSince time.Time
	var cpuSince time.Duration
	// note records that an effect ended: it is no longer in flight.
	note := func(r ended) {
		switch r.kind {
		case effGroup:
			delete(in.Running, r.group)
			if len(in.Running) == 0 {
				c.genTime.Add(int64(c.now().Sub(genSince)))
				c.genCPU.Add(int64(c.o.CPU() - cpuSince))
				genSince = time.Time{}
			}
		case effTrain:
			in.Training, in.TrainStep, in.Committing = false, 0, false
			c.stepMetrics = r.ms
		case effCheckpoint:
			in.Training = false
		case effSnapshot:
			in.Snapshotting = false
		}
	}
	c.planner.start(c.now())
	for {
		in.Now, in.Served = c.now(), c.version.Load()
		var rd Ready
		var err error
		view := c.o.Log.View
		staged := c.unsettled.any()
		if staged {
			view = c.o.Log.ViewStaged // the round's records (settle.go)
		}
		view(func(st *runlog.State) { rd, err = c.planner.Take(st, c.cfg, c.order, in) })
		if err != nil {
			return err
		}
		if err := c.perform(ctx, &rd, &in, spawn, pool, staged); err != nil {
			return err
		}
		c.planner.Advance()
		if len(in.Running) > 0 && genSince.IsZero() {
			genSince, cpuSince = c.now(), c.o.CPU()
		}
		if rd.Done {
			return c.finish(ctx, rd)
		}
		if len(rd.Append) > 0 || rd.Train > 0 {
			// The appended events may enable more (a spare to admit, the
			// next round), and a deterministic train effect may be
			// committed at once (its rounds already done): plan again.
			continue
		}
		if len(in.Running) == 0 && !in.Training && rd.Empty() {
			return fmt.Errorf("controller: nothing to do and nothing in flight before step %d (a planner bug)", c.view().step+1)
		}
		select {
		case r := <-done:
			note(r)
			if r.err != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				if errors.Is(r.err, train.ErrStateLost) {
					return c.drain(ctx, r.err, done, &in, note)
				}
				return r.err
			}
		case <-tick:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// drain lets the effects in flight end on their own before the loop
// returns the trainer's lost state (err) to runRecovering, which restores
// the trainer and starts the loop again: generation in flight (throughput
// mode) finishes and is logged, so no call is generated twice, and no
// effect of this loop runs beside the next one. An effect that fails
// otherwise while draining stops the run with its own error.
func (c *Controller) drain(ctx context.Context, err error, done <-chan ended, in *Input, note func(ended)) error {
	// A train effect waiting for its commit (run.overlap) never meets a
	// drain: only trainer calls lose the trainer's state, and the effects
	// that may run beside it (generation, snapshots) make none.
	for len(in.Running) > 0 || in.Training || in.Snapshotting {
		select {
		case r := <-done:
			note(r)
			if r.err != nil && !errors.Is(r.err, train.ErrStateLost) {
				return r.err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return err
}

// tickEvery is how often the loop wakes without an effect ending: for the
// watchdog and the snapshot interval (0: never).
func (c *Controller) tickEvery() time.Duration {
	every := time.Duration(0)
	for _, d := range []time.Duration{durationS(c.cfg.RolloutFailure.StallTimeoutS) / 4, durationS(c.cfg.SnapshotIntervalS) / 4} {
		if d > 0 && (every == 0 || d < every) {
			every = d
		}
	}
	if every > time.Second {
		every = time.Second
	}
	return every
}

// perform carries out a Ready: its events in one atomic append first,
// then its effects, each started in a goroutine that reports when it ends.
// staged: rd was taken from the log's staged state, so before any effect
// starts, the unsettled appends it rests on are made durable (by the
// decisions' own append, staged after them, when it has one).
func (c *Controller) perform(ctx context.Context, rd *Ready, in *Input, spawn func(func() ended), pool *workers, staged bool) error {
	if staged && rd.Empty() {
		return nil // the round still runs: nothing rests on its records yet
	}
	if staged {
		c.o.Crash("seals.staged")
	}
	if len(rd.Append) > 0 {
		if err := c.appendDecisions(ctx, rd); err != nil {
			return err
		}
	}
	if staged {
		if err := settle(c.unsettled.take()); err != nil {
			return err
		}
	}
	// The groups as launched, read before their attempts start (a member
	// with no events clones without allocating); runGroup reads only which
	// members are sealed.
	launch := make([]*runlog.Group, len(rd.Launch))
	c.o.Log.View(func(st *runlog.State) {
		for i, id := range rd.Launch {
			launch[i] = st.Groups[id].Clone()
		}
	})
	if err := c.startAttempts(ctx, rd.Launch); err != nil {
		return err
	}
	tasks := make([]env.Task, len(launch))
	for i, g := range launch {
		var err error
		if tasks[i], err = c.task(g); err != nil {
			return err
		}
	}
	// Counted before any starts: a group done early waits for the round's
	// other groups (settle.go), not only for those already started.
	c.generating.add(len(launch))
	callers := make([][]*gen.Caller, len(launch))
	for i, g := range launch {
		callers[i] = c.expectMembers(g)
	}
	for i, g := range launch {
		in.Running[g.ID] = true
		spawn(func() ended {
			return ended{kind: effGroup, group: g.ID, err: c.runGroup(ctx, g, tasks[i], pool, callers[i])}
		})
	}
	if rd.Train > 0 {
		in.Training, in.TrainStep = true, rd.Train
		k := rd.Train
		var release chan struct{}
		if !c.cfg.Run.Throughput() && c.cfg.Run.Overlap {
			release = make(chan struct{})
		}
		c.release = release
		spawn(func() ended {
			ms, err := c.trainStep(ctx, k, release)
			return ended{kind: effTrain, step: k, ms: ms, err: err}
		})
	}
	if rd.Commit {
		in.Committing = true
		close(c.release)
	}
	if rd.Checkpoint {
		in.Training = true
		k := rd.CheckpointStep
		var metric *float64
		if c.stepMetrics.Step == k {
			metric = metricValue(c.stepMetrics, c.cfg.Checkpointing.Metric)
		}
		spawn(func() ended { return ended{kind: effCheckpoint, step: k, err: c.checkpoint(ctx, k, metric)} })
	}
	if rd.Snapshot {
		in.Snapshotting = true
		spawn(func() ended { c.snapshot(ctx); return ended{kind: effSnapshot} })
	}
	if rd.Stall > 0 {
		msg := c.stallReport(rd.Stall)
		if c.cfg.RolloutFailure.StallAction == "abort" {
			return fmt.Errorf("%w: %s", ErrStalled, msg)
		}
		c.log.Warn("run stalled", "detail", msg)
	}
	return nil
}

// appendDecisions appends a Ready's events in one atomic append, says
// what they decide in the log, and enforces the drop caps once a group is
// dropped.
func (c *Controller) appendDecisions(ctx context.Context, rd *Ready) error {
	regen, drops := 0, false
	for _, ev := range rd.Append {
		switch e := ev.(type) {
		case runlog.PromptAdmitted:
			if e.Replaces != 0 {
				c.log.Warn("replacing a dropped prompt with a spare", "dropped", e.Replaces, "spare", e.PromptID, "step", rd.Step)
			}
		case runlog.RolloutRegenerated:
			regen++
		case runlog.GroupRequeued, runlog.GroupDropped:
			drops = true
			c.logOutcome(ev)
		}
	}
	if _, err := c.o.Log.Append(ctx, rd.Append...); err != nil {
		return err
	}
	if regen > 0 {
		c.log.Warn("regenerating stale members of retried groups", "step", rd.Step, "members", regen)
		c.regenerated.Add(int64(regen))
	}
	if drops {
		return c.checkDropCaps()
	}
	return nil
}

// logOutcome says why a group is retried later or dropped.
func (c *Controller) logOutcome(ev runlog.Event) {
	var id runlog.GroupID
	switch e := ev.(type) {
	case runlog.GroupRequeued:
		id = e.Group
	case runlog.GroupDropped:
		id = e.Group
	}
	var g runlog.Group
	c.o.Log.View(func(st *runlog.State) { g = *st.Groups[id] })
	switch e := ev.(type) {
	case runlog.GroupRequeued:
		c.log.Warn("retrying a prompt group in a later step: a member used up its attempts", "group", g.ID, "prompt", g.PromptID,
			"step", g.ForStep, "to_step", e.Step, "retry", g.Retries+1, "class", e.Class, "err", e.Reason)
	case runlog.GroupDropped:
		c.log.Warn("dropping a prompt group: a member used up its attempts", "group", g.ID, "prompt", g.PromptID,
			"class", e.Class, "retries", g.Retries, "err", e.Reason)
	}
}

// finish ends the run: at run.max_steps, or when run.max_epochs used up
// the data (the last step's checkpoint is already written: the planner
// made it due first), and exports the final weights.
func (c *Controller) finish(ctx context.Context, rd Ready) error {
	if rd.DataEnded {
		var last int64
		c.o.Log.View(func(s *runlog.State) { last = s.Step })
		c.log.Info("run.max_epochs reached: the data is used up", "epochs", c.cfg.Run.MaxEpochs, "last_step", last, "next_step", rd.NextStep)
	}
	if c.o.FinalWeights == "" {
		return nil
	}
	// A trainer that lost its state fails this with train.ErrStateLost,
	// which runRecovering answers as it does mid-run.
	if err := c.o.Trainer.ExportWeights(ctx, c.o.FinalWeights); err != nil {
		return fmt.Errorf("controller: final weights: %w", err)
	}
	return nil
}

// ErrStalled is returned when the stall watchdog aborts the run.
var ErrStalled = errors.New("controller: run stalled")
