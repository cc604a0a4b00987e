// Package httpclass is the one rule by which an HTTP client in longhaul
// (OpenAI-compatible generation, the trainer protocol, HTTP environments)
// classes a failure: infra when it may work later or elsewhere, data when
// the request or the answer is wrong.
package httpclass

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// Failure classes (the same strings as runlog.ClassInfra / ClassData).
const (
	Infra = "infra"
	Data  = "data"
)

// Status classes a non-2xx status: 5xx, 408 and 429 are infra, the rest data.
func Status(code int) string {
	if code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests {
		return Infra
	}
	return Data
}

// IsInfra reports whether err is a transport failure: a deadline, a
// cancellation, or a network error.
func IsInfra(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}
