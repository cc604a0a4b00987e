package controller

// This file holds the effect that runs one rollout attempt (runAttempt),
// the rollout spec the config implies, the call timer and the recorder.

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

// runAttempt is the effect that runs one attempt of one rollout, as the
// planner decided it (plan.go): it resumes from the rollout's logged
// events, runs rollout.Run under the attempt's deadlines, and reports only
// by appending (its calls, steps and seal or failure) and by its wake-up.
// It decides nothing: not whether to retry, when, or how.
//
// A sealed attempt returns with its seal and what came before it maybe
// only staged (settle.go). An attempt a deadline ended returns the
// Timeout for the planner to record (rollout.Run records nothing when its
// context ends). An error in the wake-up is one the log does not hold (it
// refused an append): the run stops.
func (c *Controller) runAttempt(ctx context.Context, a Attempt, g *runlog.Group, task env.Task, caller *gen.Caller) ended {
	defer caller.Leave() // a no-op once left
	out := ended{kind: effAttempt, rollout: a.Rollout}
	prior, err := c.o.Log.RolloutEvents(a.Rollout)
	if err != nil {
		out.err = err
		return out
	}
	c.cache.seed(a.Rollout, prior)
	rf := c.cfg.RolloutFailure
	actx, cancel := context.WithTimeout(ctx, seconds(rf.RolloutTimeoutS))
	cctx, ccancel := context.WithCancelCause(actx)
	ct := c.attemptTimer(ccancel)
	sp, rec := c.spec(g, a.Rollout, a.Attempt, task, ct)
	// The attempt's calls are its gen.Caller's: the batcher closes a batch
	// when the rollouts it answered are back (gen/caller.go).
	_, err = rollout.Run(gen.WithCaller(cctx, caller), sp, prior)
	caller.Leave()
	ct.close()
	ccancel(nil)
	cancel()
	switch {
	case err == nil:
		out.err = c.endAttempt(rec.pend)
		rec.pend = nil
		return out
	case ctx.Err() != nil:
		out.err = ctx.Err()
		return out
	case errors.Is(context.Cause(cctx), errCallTimeout):
		out.timeout = &Timeout{Attempt: a.Attempt, Cause: runlog.CauseCallTimeout, Err: err.Error()}
		return out
	case errors.Is(actx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded):
		out.timeout = &Timeout{Attempt: a.Attempt, Cause: runlog.CauseRolloutTimeout, Err: err.Error()}
		return out
	}
	if !c.failedInLog(a.Rollout, a.Attempt) {
		// The failure is not in the log (the log itself refused an
		// append): a retry would be decided from a state that does not
		// know about it, so the run stops here and a resume goes on.
		out.err = fmt.Errorf("controller: rollout %s attempt %d: %w", a.Rollout, a.Attempt, err)
		return out
	}
	c.log.Warn("rollout attempt failed", "rollout", a.Rollout, "attempt", a.Attempt, "class", failure.ClassOf(err), "err", err)
	return out
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
		rng.Derive(c.cfg.Run.Seed, "env", uint64(g.ID)), countingGen{c.o.Generator, &c.figures.genTokens, ct}, rec)
	sp.Logger = c.log
	sp.StageSeal = true // the loop or the attempt settles it (settle.go)
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
// keeps the controller's event cache (cache.go), counts late answers and
// fires the call.logged crash point. It also stages (rollout.Stager): pend
// are the staged appends not yet settled, in staging order.
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
	r.c.cache.add(r.id, evs)
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
	r.c.cache.add(r.id, evs)
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
		r.c.figures.lateResults.Add(1)
	}
}
