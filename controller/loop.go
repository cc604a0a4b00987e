package controller

// This file holds the effect loop: it takes a Ready from the planner,
// performs it (events first, then effects), and waits in one select for an
// effect to end, a held attempt's backoff to pass or the clock to tick.
// Effects (a rollout attempt, a training step, a checkpoint, a snapshot)
// run in goroutines of their own and report only by appending events to
// the log; what they send back on the loop's channel is a wake-up naming
// which effect ended, with a deadline that ended an attempt (the planner
// records it) or an error that is not in the log (the run stops then, or,
// for a trainer that lost its state, the planner recovers it). The loop
// decides nothing.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train"
)

// effect names what a goroutine of the loop did.
type effect uint8

const (
	effAttempt effect = iota
	effTrain
	effCheckpoint
	effSnapshot
)

// ended is an effect's wake-up: which effect, and an error that is not in
// the log (a failed append, a trainer error, a canceled context).
type ended struct {
	kind    effect
	rollout runlog.RolloutID // effAttempt
	timeout *Timeout         // effAttempt: a deadline ended it, for the planner to record
	step    int64
	ms      metrics.Step // effTrain: the step's row, for the checkpoint's metric
	err     error
}

// effects starts the loop's effects and carries their wake-ups back.
type effects struct {
	ctx  context.Context
	wg   sync.WaitGroup
	pool *workers // the attempts' goroutines (workers.go)
	// done is buffered, so that an attempt's worker is rarely held by a
	// busy loop.
	done chan ended
}

func (e *effects) report(r ended) {
	select {
	case e.done <- r:
	case <-e.ctx.Done():
	}
}

// spawn runs fn in a goroutine of its own.
func (e *effects) spawn(fn func() ended) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.report(fn())
	}()
}

// run runs fn on a rollout worker.
func (e *effects) run(fn func() ended) {
	e.wg.Add(1)
	e.pool.run(func() {
		defer e.wg.Done()
		e.report(fn())
	})
}

// loop runs the effect loop until the run ends or fails, from what in
// says (Run: a trainer to restore first). On return every effect it
// started has ended.
func (c *Controller) loop(ctx context.Context, in Input) error {
	ctx, cancel := context.WithCancel(ctx)
	eff := &effects{ctx: ctx, pool: newWorkers(), done: make(chan ended, 64)}
	defer func() {
		cancel()
		eff.wg.Wait()
		eff.pool.stop()
		// What sealed attempts staged is valid: written now, a resume does
		// not run it again (and each staged append is waited on once).
		_ = settle(c.unsettled.take())
	}()
	var tick <-chan time.Time
	if every := c.tickEvery(); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	wake := time.NewTimer(time.Hour) // held attempts (Ready.Wake)
	wake.Stop()
	defer wake.Stop()
	in.Attempts, in.Timeouts = map[runlog.RolloutID]uint32{}, map[runlog.RolloutID]Timeout{}
	var gc genClock
	var rd Ready
	var err error
	// One closure for every plan (a new one each time would cost an
	// allocation per plan, and the loop plans once per attempt).
	take := func(st *runlog.State) { rd, err = c.planner.Take(st, c.cfg, c.order, in) }
	c.planner.start(c.now())
	for {
		in.Now = c.now()
		view := c.o.Log.View
		staged := c.unsettled.any()
		if staged {
			view = c.o.Log.ViewStaged // the round's records (settle.go)
		}
		view(take)
		if err != nil {
			return err
		}
		if err := c.perform(ctx, &rd, &in, eff, staged); err != nil {
			return err
		}
		c.planner.Advance()
		clear(in.Timeouts) // the plan recorded them
		c.inFlight.Store(int64(len(in.Attempts)))
		gc.started(c, len(in.Attempts))
		if again, err := c.after(ctx, &rd, &in); rd.Done && !again || err != nil {
			return err
		} else if again {
			continue
		}
		wake.Stop()
		if !rd.Wake.IsZero() {
			wake.Reset(max(0, rd.Wake.Sub(c.now())))
		}
		if len(in.Attempts) == 0 && !in.Training && !in.Snapshotting && rd.Empty() && rd.Wake.IsZero() {
			return fmt.Errorf("controller: nothing to do and nothing in flight before step %d (a planner bug)", c.view().step+1)
		}
		select {
		case r := <-eff.done:
			c.note(&in, &gc, r)
			if r.err != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				if !errors.Is(r.err, train.ErrStateLost) {
					return r.err
				}
				// The planner drains the effects in flight, then recovers
				// the trainer (Ready.Recover).
				in.TrainerLost = r.err
			}
		case <-wake.C:
		case <-tick:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// after carries out what follows a performed Ready in the loop itself:
// the end of the run (the final export: the loop returns err unless
// again), the trainer's recovery; again says to plan at once (the Ready's
// events may enable more).
func (c *Controller) after(ctx context.Context, rd *Ready, in *Input) (again bool, err error) {
	switch {
	case rd.Done:
		err := c.finish(ctx, *rd)
		if ctx.Err() != nil || !errors.Is(err, train.ErrStateLost) {
			return false, err
		}
		// The trainer lost its state before the final export: the
		// planner recovers it and plans the rewound steps again.
		in.TrainerLost = err
		return true, nil
	case rd.Recover:
		v, err := c.recoverTrainer(ctx, in.TrainerLost)
		switch {
		case err == nil:
			in.TrainerLost, in.Served = nil, v
		case ctx.Err() == nil && errors.Is(err, train.ErrStateLost):
			// Lost again while restored (restarted during the checkpoint
			// load or the first export): the planner counts it.
			in.TrainerLost = err
		case errors.Is(in.TrainerLost, errNotRestored):
			return false, err // the run's start: restore says what failed
		default:
			return false, fmt.Errorf("controller: recovering the trainer: %w", err)
		}
		return true, nil
	}
	// The appended events may enable more (a spare to admit, the next
	// round), and a deterministic train effect may be committed at once
	// (its rounds already done).
	return len(rd.Append) > 0 || rd.Train > 0, nil
}

// genClock measures generation (some attempt in flight) for the next
// metrics row.
type genClock struct {
	since time.Time
	cpu   time.Duration
}

func (g *genClock) started(c *Controller, attempts int) {
	if attempts > 0 && g.since.IsZero() {
		g.since, g.cpu = c.now(), c.o.CPU()
	}
}

// note records that an effect ended: it is no longer in flight.
func (c *Controller) note(in *Input, gc *genClock, r ended) {
	switch r.kind {
	case effAttempt:
		delete(in.Attempts, r.rollout)
		if r.timeout != nil {
			in.Timeouts[r.rollout] = *r.timeout
		}
		if len(in.Attempts) == 0 && !gc.since.IsZero() {
			c.figures.genTime.Add(int64(c.now().Sub(gc.since)))
			c.figures.genCPU.Add(int64(c.o.CPU() - gc.cpu))
			gc.since = time.Time{}
		}
	case effTrain:
		in.Training, in.TrainStep, in.Committing = false, 0, false
		c.stepMetrics = r.ms
		if r.err == nil {
			in.Served = r.step // the version it published
		}
	case effCheckpoint:
		in.Training = false
	case effSnapshot:
		in.Snapshotting = false
	}
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
// then its effects, each started in a goroutine (an attempt on a rollout
// worker) that reports when it ends. staged: rd was taken from the
// log's staged state, so before any effect starts, the unsettled appends
// it rests on are made durable (by the decisions' own append, staged after
// them, when it has one).
func (c *Controller) perform(ctx context.Context, rd *Ready, in *Input, eff *effects, staged bool) error {
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
	if rd.Stall > 0 {
		msg := c.stallReport(rd.Stall)
		if errors.Is(rd.Abort, ErrStalled) {
			return fmt.Errorf("%w: %s", rd.Abort, msg)
		}
		c.log.Warn("run stalled", "detail", msg)
	}
	if ce := (*capError)(nil); errors.As(rd.Abort, &ce) {
		// Say which key to change and how to resume with it (hints.go).
		return fmt.Errorf("%w%s", rd.Abort, c.capHint(ce.key, ce.n))
	}
	if rd.Abort != nil {
		return rd.Abort
	}
	if err := c.launchAttempts(ctx, rd.Attempts, in, eff.run); err != nil {
		return err
	}
	if rd.Train > 0 {
		in.Training, in.TrainStep = true, rd.Train
		k := rd.Train
		var release chan struct{}
		if !c.cfg.Run.Throughput() && c.cfg.Run.Overlap {
			release = make(chan struct{})
		}
		c.release = release
		eff.spawn(func() ended {
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
		eff.spawn(func() ended { return ended{kind: effCheckpoint, step: k, err: c.checkpoint(ctx, k, metric)} })
	}
	if rd.Snapshot {
		in.Snapshotting = true
		eff.spawn(func() ended { c.snapshot(ctx); return ended{kind: effSnapshot} })
	}
	return nil
}

// appendDecisions appends a Ready's events in one atomic append and says
// what they decide in the log.
func (c *Controller) appendDecisions(ctx context.Context, rd *Ready) error {
	regen := 0
	for _, ev := range rd.Append {
		switch e := ev.(type) {
		case runlog.PromptAdmitted:
			if e.Replaces != 0 {
				c.log.Warn("replacing a dropped prompt with a spare", "dropped", e.Replaces, "spare", e.PromptID, "step", rd.Step)
			}
		case runlog.RolloutRegenerated:
			regen++
		case runlog.GroupRequeued, runlog.GroupDropped:
			c.logOutcome(ev)
		case runlog.RolloutFailed:
			c.log.Warn("rollout attempt ran past its deadline", "rollout", e.Rollout, "attempt", e.Attempt, "err", e.Reason)
		}
	}
	if _, err := c.o.Log.Append(ctx, rd.Append...); err != nil {
		return err
	}
	if regen > 0 {
		c.log.Warn("regenerating stale members of retried groups", "step", rd.Step, "members", regen)
		c.figures.regenerated.Add(int64(regen))
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
	// which the planner answers as it does mid-run (Ready.Recover).
	if err := c.o.Trainer.ExportWeights(ctx, c.o.FinalWeights); err != nil {
		return fmt.Errorf("controller: final weights: %w", err)
	}
	return nil
}
