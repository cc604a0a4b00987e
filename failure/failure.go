// Package failure is longhaul's one failure vocabulary: the two classes,
// the typed Failure, and the one rule that classes any error. Infra means
// it may work later or elsewhere (worth a retry: timeouts, connection
// errors, 5xx, 408, 429); data means the request or the answer is wrong
// (bad output, other 4xx, contract violations; unknown errors count as
// data, so a bug is not retried forever).
//
// It is a leaf (standard library only): the run log, the rollout loop, the
// controller, environments, generators and trainers all import it and none
// of them has to import another for its errors.
package failure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

// The failure classes, as the run log records them (RolloutFailed.Class)
// and as the HTTP protocols carry them in error bodies.
const (
	Infra = "infra"
	Data  = "data"
)

// Valid reports whether c is a failure class.
func Valid(c string) bool { return c == Infra || c == Data }

// Classed is an error that says its own class: Failure, and the typed
// errors of the HTTP clients (gen/openai, env/httpenv, train/remote),
// which keep their status and server fields.
type Classed interface{ FailureClass() string }

// Failure is a typed failure of one operation.
type Failure struct {
	Class string // Infra or Data
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

// FailureClass makes a Failure Classed.
func (f *Failure) FailureClass() string { return f.Class }

// NewInfra wraps err as an infra failure of op.
func NewInfra(op string, err error) error { return &Failure{Class: Infra, Op: op, Err: err} }

// NewData wraps err as a data failure of op.
func NewData(op string, err error) error { return &Failure{Class: Data, Op: op, Err: err} }

// Wrap makes err a Failure of op unless its chain already says a class;
// nil stays nil.
func Wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var c Classed
	if errors.As(err, &c) {
		return err
	}
	return &Failure{Class: ClassOf(err), Op: op, Err: err}
}

// ClassOf classes err: "" for nil; the class of the outermost Classed
// error in its chain; infra for transport failures (IsInfra); data
// otherwise.
func ClassOf(err error) string {
	if err == nil {
		return ""
	}
	var c Classed
	if errors.As(err, &c) {
		return c.FailureClass()
	}
	if IsInfra(err) {
		return Infra
	}
	return Data
}

// Status classes a non-2xx status: 5xx, 408 and 429 are infra, the rest data.
func Status(code int) string {
	if code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests {
		return Infra
	}
	return Data
}

// IsInfra reports whether err is a transport failure: a deadline, a
// cancellation, a network error, or an answer cut short of its length
// (what a client reads when the server is killed mid-answer).
func IsInfra(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
