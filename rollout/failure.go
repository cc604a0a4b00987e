package rollout

import (
	"context"
	"errors"
	"fmt"
	"github.com/longhaul-rl/longhaul/internal/failclass"
	"net"
)

// Failure is a typed rollout failure. Class is failclass.Infra (worth a
// retry: timeouts, connection errors, 5xx, 408, 429) or failclass.Data
// (bad output, 4xx, contract violations). Generators and environments
// return it so the controller can decide on retries with errors.As.
type Failure struct {
	Class string
	Op    string // what failed, e.g. "generate", "env.step"
	Err   error
}

func (f *Failure) Error() string {
	if f.Op == "" {
		return fmt.Sprintf("%s failure: %v", f.Class, f.Err)
	}
	return fmt.Sprintf("%s failure: %s: %v", f.Class, f.Op, f.Err)
}

func (f *Failure) Unwrap() error { return f.Err }

// Infra wraps err as an infra failure of op.
func Infra(op string, err error) error { return &Failure{Class: failclass.Infra, Op: op, Err: err} }

// Data wraps err as a data failure of op.
func Data(op string, err error) error { return &Failure{Class: failclass.Data, Op: op, Err: err} }

// ClassOf classifies err: the class of the outermost Failure in its chain;
// otherwise infra for timeouts and network errors; otherwise data (unknown
// errors count as data, so a bug is not retried forever).
func ClassOf(err error) string {
	var f *Failure
	if errors.As(err, &f) {
		return f.Class
	}
	// Typed errors of other packages (gen/openai, env/httpenv, train/remote)
	// say their class without rollout having to import them.
	var c failclass.Classed
	if errors.As(err, &c) {
		return c.FailureClass()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return failclass.Infra
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return failclass.Infra
	}
	return failclass.Data
}

// classify wraps err in a Failure of op unless it already carries one.
func classify(op string, err error) error {
	var f *Failure
	if errors.As(err, &f) {
		return err
	}
	return &Failure{Class: ClassOf(err), Op: op, Err: err}
}

// ErrDiverged marks a resume whose recomputation disagrees with the logged
// events (a non-deterministic environment or a changed config).
var ErrDiverged = errors.New("rollout: resume diverged from the log")

// ErrSelectionExhausted is returned when every resample was rejected.
var ErrSelectionExhausted = errors.New("rollout: selection exhausted its resampling budget")
