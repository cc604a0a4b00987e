package openai

import (
	"fmt"

	"github.com/longhaul-rl/longhaul/failure"
)

// Error is a failed call to a server.
type Error struct {
	Class  string // failure.Infra or failure.Data
	Status int    // HTTP status, 0 when none came back
	Server string // base URL of the server, "" when none was tried
	Err    error
}

func (e *Error) Error() string {
	s := "openai " + e.Class + " error"
	if e.Server != "" {
		s += " from " + e.Server
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// FailureClass reports the class to callers that classify failures by
// behaviour (the rollout loop), so an infra failure here is retried as one.
func (e *Error) FailureClass() string { return e.Class }

func dataErr(server string, status int, format string, args ...any) *Error {
	return &Error{Class: failure.Data, Status: status, Server: server, Err: fmt.Errorf(format, args...)}
}
