package controller

// This file holds one rollout's effect loop (runMember) and the rollout
// spec the config implies.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	lhtok "github.com/longhaul-rl/longhaul/tokenizer"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/tokenizer/bridge"
)

// runMember runs one rollout to its seal, resuming its current attempt
// from the log when it has one, retrying failed attempts within budget.
// Every decision (resume or new attempt, restart or continue, backoff,
// exhausted) is read from the rollout's state as the log folds it
// (decide.go), never from this goroutine's memory, so a restarted process
// decides exactly what this one would have.
//
// A sealed attempt returns with its seal and what came before it maybe
// only staged: they are left in pend for the group to settle (settle.go).
//
// first, when not nil, is the caller the generator has counted away since
// the group's launch (expectMembers): the first attempt calls as first,
// and a member that does not go straight to its calls (done, out of
// budget, backing off, failed) leaves it, so no batch waits for it.
func (c *Controller) runMember(ctx context.Context, g *runlog.Group, id runlog.RolloutID, task env.Task, pend *[]runlog.Staged, first *gen.Caller) error {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	defer first.Leave() // a no-op once left
	rf := c.cfg.RolloutFailure
	for {
		var r runlog.Rollout
		c.o.Log.View(func(s *runlog.State) { r = *s.Rollout(id) })
		next := nextAttempt(&r, rf, c.cfg.Run.Seed)
		switch {
		case next.done:
			return nil
		case next.exhausted:
			return &exhaustedError{id: id, class: r.LastFailure.Class, n: int(r.InfraFailures + r.DataFailures),
				err: errors.New(r.LastFailure.Reason)}
		}
		if next.backoff > 0 {
			first.Leave()
			first = nil
			select {
			case <-time.After(next.backoff):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		attempt := r.Attempt
		if next.start {
			ev := c.attemptStarted(&r, next)
			attempt = ev.Attempt
			if _, err := c.o.Log.Append(ctx, ev); err != nil {
				return err
			}
		}
		prior, err := c.o.Log.RolloutEvents(id)
		if err != nil {
			return err
		}
		c.evMu.Lock()
		// Room for a typical attempt's events (a call, an env step and now
		// and then a compaction per turn), so the cache does not regrow
		// on every few appends.
		c.events[id] = append(make([]runlog.Event, 0, len(prior)+64), prior...)
		c.evMu.Unlock()
		actx, cancel := context.WithTimeout(ctx, seconds(rf.RolloutTimeoutS))
		cctx, ccancel := context.WithCancelCause(actx)
		ct := c.attemptTimer(ccancel)
		// The attempt's calls are one gen.Caller's: the batcher closes a
		// batch when the rollouts it answered are back (gen/caller.go).
		caller := first
		if first == nil {
			caller = &gen.Caller{}
		}
		first = nil
		sp, rec := c.spec(g, id, attempt, task, ct)
		_, err = rollout.Run(gen.WithCaller(cctx, caller), sp, prior)
		caller.Leave()
		ct.close()
		ccancel(nil)
		cancel()
		if err == nil {
			*pend, rec.pend = rec.pend, nil
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// rollout.Run records nothing when its context ends, so a failure
		// of the attempt's own deadlines is recorded here, as infra.
		var timeout error
		switch {
		case errors.Is(context.Cause(cctx), errCallTimeout):
			timeout = fmt.Errorf("attempt %d: a model call ran past rollout_failure.call_timeout_s (%gs): %w", attempt, rf.CallTimeoutS, err)
		case errors.Is(actx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded):
			timeout = fmt.Errorf("attempt %d ran past rollout_failure.rollout_timeout_s (%gs): %w", attempt, rf.RolloutTimeoutS, err)
		}
		if timeout != nil && c.failedInLog(id, attempt) {
			// The call's own failure got there first (the client's
			// request timeout fired with the timer): it is recorded.
			timeout = nil
		}
		if timeout != nil {
			err = failure.NewInfra("rollout", timeout)
			if _, aerr := c.o.Log.Append(ctx, runlog.RolloutFailed{Rollout: id, Attempt: attempt, Class: failure.Infra, Reason: err.Error()}); aerr != nil {
				return aerr
			}
		}
		var after runlog.Rollout
		c.o.Log.View(func(s *runlog.State) { after = *s.Rollout(id) })
		if after.Status != runlog.StatusFailed {
			// The failure is not in the log (the log itself refused an
			// append): retrying would decide from a state that does not
			// know about it, so the run stops here and a resume goes on.
			return fmt.Errorf("controller: rollout %s attempt %d: %w", id, attempt, err)
		}
		msg := "rollout attempt failed, retrying"
		if nextAttempt(&after, rf, c.cfg.Run.Seed).exhausted {
			msg = "rollout attempt failed, budget used up"
		}
		c.log.Warn(msg, "rollout", id, "attempt", attempt, "class", after.LastFailure.Class,
			"infra_failures", after.InfraFailures, "data_failures", after.DataFailures, "err", err)
	}
}

// attemptStarted is the event that starts a rollout's next attempt (plan
// has start set), and says so when it starts the episode over.
func (c *Controller) attemptStarted(r *runlog.Rollout, plan attemptPlan) runlog.AttemptStarted {
	attempt := r.Attempt + 1
	if plan.restart {
		c.log.Warn("rollout restarts its episode", "rollout", r.ID, "attempt", attempt, "after", r.LastFailure.Reason)
	}
	return runlog.AttemptStarted{Rollout: r.ID, Attempt: attempt,
		Seed:    rng.Derive(c.cfg.Run.Seed, "attempt", uint64(r.ID.Group), uint64(r.ID.Member), uint64(attempt)),
		Version: c.version.Load(), Restart: plan.restart}
}

// startAttempts starts, in one append, the next attempt of every member
// of the launched groups that runMember would start at once (no backoff),
// so that it finds the attempt running and goes on with it. Started from
// each member's goroutine, the first one's append went alone and put that
// member one append ahead of the others for the rest of the step: two
// fsyncs per step more, and 64 appends instead of one. Decided from the
// log by the same nextAttempt, so a resumed run decides alike.
func (c *Controller) startAttempts(ctx context.Context, groups []runlog.GroupID) error {
	var evs []runlog.Event
	rf := c.cfg.RolloutFailure
	c.o.Log.View(func(st *runlog.State) {
		n := 0
		for _, id := range groups {
			n += len(st.Groups[id].Members)
		}
		evs = make([]runlog.Event, 0, n)
		for _, id := range groups {
			for _, r := range st.Groups[id].Members {
				if next := nextAttempt(r, rf, c.cfg.Run.Seed); next.start && next.backoff == 0 {
					evs = append(evs, c.attemptStarted(r, next))
				}
			}
		}
	})
	if len(evs) == 0 {
		return nil
	}
	_, err := c.o.Log.Append(ctx, evs...)
	return err
}

// failedInLog reports whether the log holds the failure of the rollout's
// attempt.
func (c *Controller) failedInLog(id runlog.RolloutID, attempt uint32) bool {
	var failed bool
	c.o.Log.View(func(s *runlog.State) {
		r := s.Rollout(id)
		failed = r.Attempt == attempt && r.Status == runlog.StatusFailed
	})
	return failed
}

func (c *Controller) spec(g *runlog.Group, id runlog.RolloutID, attempt uint32, task env.Task, ct *callTimer) (rollout.Spec, *recorder) {
	rec := &recorder{c: c, id: id}
	sp := RolloutSpec(c.cfg, c.o.Envs, task, id, attempt,
		rng.Derive(c.cfg.Run.Seed, "env", uint64(g.ID)), countingGen{c.o.Generator, &c.genTokens, ct}, rec)
	sp.Logger = c.log
	sp.StageSeal = true // the group settles (settle.go)
	if c.o.Chat != nil {
		sp.Chat, sp.ToolParser = c.o.Chat, c.o.ToolParser
		sp.History = bridge.History(c.cfg.History)
		sp.Render.Kwargs = c.cfg.TemplateKwargs
	}
	return sp, rec
}

// RolloutSpec is the rollout spec the config implies for one attempt; the
// controller and the warm start build their rollouts with it.
func RolloutSpec(cfg *Config, reg *env.Registry, task env.Task, id runlog.RolloutID,
	attempt uint32, envSeed uint64, g gen.Generator, rec rollout.Recorder) rollout.Spec {
	params := cfg.EnvParams
	return rollout.Spec{
		Seed: cfg.Run.Seed, Rollout: id, Attempt: attempt, Task: task,
		EnvSeed:         envSeed,
		NewEnv:          func(context.Context) (env.Environment, error) { return reg.New(task.Env, params) },
		Generator:       g,
		Recorder:        rec,
		ObservationRole: lhtok.RoleUser,
		Limits: rollout.Limits{MaxTurns: cfg.Rollout.MaxTurns, MaxTokensPerCall: cfg.Sampling.MaxTokensPerCall,
			ContextBudget: cfg.Rollout.ContextBudget, MaxSampledTokens: cfg.Rollout.MaxTokensPerRollout},
		Sampling: rollout.Sampling{Temperature: float32(cfg.Sampling.Temperature), TopP: float32(cfg.Sampling.TopP),
			TopK: cfg.Sampling.TopK},
		Compaction:   cfg.Compaction,
		MaxResamples: cfg.Rollout.MaxResamples,
	}
}

// attemptTimer is the call timer of one attempt: nil (no deadline put on
// calls here) when the generator bounds its requests itself
// (Options.GenBoundsCalls), so an outage is waited out by the generator
// instead of failing each call at rollout_failure.call_timeout_s.
func (c *Controller) attemptTimer(cancel context.CancelCauseFunc) *callTimer {
	if c.o.GenBoundsCalls {
		return nil
	}
	return newCallTimer(seconds(c.cfg.RolloutFailure.CallTimeoutS), cancel)
}

// countingGen counts generated tokens for the tokens/s figure and puts
// rollout_failure.call_timeout_s on every call (timer).
type countingGen struct {
	g     gen.Generator
	n     *atomic.Int64
	timer *callTimer
}

func (cg countingGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	cg.timer.arm()
	res, err := cg.g.Generate(ctx, reqs)
	cg.timer.disarm()
	for _, r := range res {
		cg.n.Add(int64(len(r.Tokens)))
	}
	return res, err
}

// errCallTimeout is the cause of an attempt's context that a model call
// outlived rollout_failure.call_timeout_s.
var errCallTimeout = errors.New("model call ran past rollout_failure.call_timeout_s")

// callTimer is the call timeout of one attempt: it cancels the attempt's
// context when a call outlives it. A context and a timer per call cost
// about five allocations a call, and re-arming one timer per call cost
// ~3% of the controller's CPU (the runtime's timer heap and a netpoller
// wakeup each time). So a call only stores its deadline, and the one timer
// is re-armed lazily: when it fires it cancels if the running call's
// deadline has passed, waits out the rest of it if not, and stops when no
// call is running. Every deadline is now+d, so a later call's deadline is
// never before the pending timer's: a timeout fires exactly at its call's
// deadline, as before.
type callTimer struct {
	d      time.Duration
	t      *time.Timer
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time // of the running call; zero when none
	pending  bool      // t is armed
}

func newCallTimer(d time.Duration, cancel context.CancelCauseFunc) *callTimer {
	ct := &callTimer{d: d, cancel: cancel}
	ct.t = time.AfterFunc(time.Hour, ct.fire)
	ct.t.Stop()
	return ct
}

// arm, disarm and close do nothing on a nil timer (no call timeout).
func (ct *callTimer) arm() {
	if ct == nil {
		return
	}
	dl := time.Now().Add(ct.d)
	ct.mu.Lock()
	ct.deadline = dl
	if !ct.pending {
		ct.pending = true
		ct.t.Reset(ct.d)
	}
	ct.mu.Unlock()
}

func (ct *callTimer) disarm() {
	if ct == nil {
		return
	}
	ct.mu.Lock()
	ct.deadline = time.Time{}
	ct.mu.Unlock()
}

// close stops the timer for good: the attempt is over.
func (ct *callTimer) close() {
	if ct == nil {
		return
	}
	ct.mu.Lock()
	ct.deadline, ct.pending = time.Time{}, false
	ct.t.Stop()
	ct.mu.Unlock()
}

// fire runs when the timer goes off (in its own goroutine).
func (ct *callTimer) fire() {
	ct.mu.Lock()
	if !ct.pending {
		// close stopped it while it was firing.
		ct.mu.Unlock()
		return
	}
	if ct.deadline.IsZero() {
		ct.pending = false
		ct.mu.Unlock()
		return
	}
	if left := time.Until(ct.deadline); left > 0 {
		ct.t.Reset(left)
		ct.mu.Unlock()
		return
	}
	ct.pending = false
	ct.mu.Unlock()
	ct.cancel(errCallTimeout)
}

// recorder is one attempt's rollout.Recorder: it appends to the run log,
// keeps the controller's event cache, counts late answers and fires the
// call.logged crash point. It also stages (rollout.Stager): pend are the
// staged appends not yet settled, in staging order.
type recorder struct {
	c    *Controller
	id   runlog.RolloutID
	pend []runlog.Staged
}

func (r *recorder) Record(ctx context.Context, evs ...runlog.Event) error {
	if _, err := r.c.o.Log.Append(ctx, evs...); err != nil {
		r.refused(err)
		return err
	}
	r.cache(evs)
	r.crashAtCalls(evs)
	return nil
}

func (r *recorder) crashAtCalls(evs []runlog.Event) {
	for _, ev := range evs {
		if _, ok := ev.(runlog.CallFinished); ok {
			r.c.o.Crash("call.logged")
		}
	}
}

// Stage stages evs (runlog.Log.Stage), kept for Settle; the cache takes
// them at once (a log that fails to make them durable fails the run).
func (r *recorder) Stage(ctx context.Context, evs ...runlog.Event) error {
	st, err := r.c.o.Log.Stage(ctx, evs...)
	if err != nil {
		r.refused(err)
		return err
	}
	r.cache(evs)
	r.pend = append(r.pend, st)
	// The crash point fires once staged, maybe before the fsync: a kill
	// there loses the call or not, and the resume must be right either way.
	r.crashAtCalls(evs)
	return nil
}

// Settle waits until every staged call record is durable.
func (r *recorder) Settle() error {
	var first error
	for i, st := range r.pend {
		if _, err := st.Wait(); err != nil && first == nil {
			first = err
		}
		r.pend[i] = runlog.Staged{}
	}
	r.pend = r.pend[:0]
	return first
}

func (r *recorder) refused(err error) {
	if errors.Is(err, runlog.ErrStaleAttempt) {
		// A late answer of a fenced attempt: discarded, counted.
		r.c.lateResults.Add(1)
	}
}

func (r *recorder) cache(evs []runlog.Event) {
	r.c.evMu.Lock()
	if cached, ok := r.c.events[r.id]; ok {
		r.c.events[r.id] = append(cached, evs...)
	}
	r.c.evMu.Unlock()
}
