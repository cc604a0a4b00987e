package rollout

// Staged call records: with an environment that acts only inside the
// process, a finished call's record is staged and the loop goes on (the
// environment's step, the next call) while the log fsyncs it, instead of
// waiting for an fsync on every turn.

import (
	"context"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/runlog"
)

// Stager is a Recorder that can also stage an append: Stage orders evs
// after every earlier append and may return before they are durable;
// Settle waits until everything staged since the last Settle is durable
// (runlog.Log.Stage and Staged.Wait).
type Stager interface {
	Recorder
	Stage(ctx context.Context, evs ...runlog.Event) error
	Settle() error
}

// Why this keeps the log's rule (a fact is durable before anything acts on
// it): what acts on a staged call before its fsync is the environment's
// step and the next generation, and both act only inside this process (an
// env.InProcess environment keeps its whole state in memory and resume
// rebuilds it from the log). A crash loses the staged calls and all that
// was built on them together, and resume generates those calls again;
// durability follows staging order, so nothing appended later can be
// durable without them. Every effect that may leave the process waits:
// staging is off for an environment that is not InProcess, and the loop
// settles its staged calls after each append it waits for and before Run
// returns, except with Spec.StageSeal: then the seal is staged as well,
// and the caller settles it (the controller, once its step's generation
// is done, before the group's outcome is decided from the log).

// startStaging turns staging on when both the recorder and the
// environment allow it.
func (l *loop) startStaging(e env.Environment) {
	st, ok := l.s.Recorder.(Stager)
	if _, local := e.(env.InProcess); ok && local {
		l.stager = st
	}
}

// recordCall makes a call's record durable (record), or, when staging,
// stages it with the events held before it and returns before the fsync.
func (l *loop) recordCall(ctx context.Context, c runlog.CallFinished) error {
	if l.stager == nil {
		return l.record(ctx, c)
	}
	if err := l.appendHeld(ctx, c, true); err != nil {
		return err
	}
	l.staged = true
	return nil
}

// settle waits until the staged call records, if any, are durable.
func (l *loop) settle() error {
	if !l.staged {
		return nil
	}
	l.staged = false
	if err := l.stager.Settle(); err != nil {
		return &recordError{err}
	}
	return nil
}
