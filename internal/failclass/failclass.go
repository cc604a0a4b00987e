// Package failclass is longhaul's one vocabulary of failure classes and
// the one rule by which a client classes a failure: infra when it may work
// later or elsewhere (worth a retry), data when the request or the answer
// is wrong. It is a leaf (standard library only), so the run log, the
// rollout loop, the controller, the environments and every HTTP client
// (OpenAI-compatible generation, the trainer protocol, HTTP environments)
// share it without import cycles.
package failclass

import (
	"context"
	"errors"
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

// Classed is an error that says its own class (the typed errors of
// gen/openai, env/httpenv and train/remote).
type Classed interface{ FailureClass() string }

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
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}
