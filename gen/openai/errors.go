package openai

import (
	"errors"
	"fmt"

	"github.com/longhaul-rl/longhaul/internal/failclass"
)

// Failure classes (internal/failclass, the one vocabulary). Infra
// failures are worth retrying elsewhere or later; data failures mean the
// request or the answer is wrong and a retry would fail the same way.
const (
	ClassInfra = failclass.Infra
	ClassData  = failclass.Data
)

// Error is a failed call to a server.
type Error struct {
	Class  string // ClassInfra or ClassData
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

// ClassOf returns the class of err: "" for nil, the Class of an *Error in
// its chain, infra for deadlines and network errors, and data otherwise
// (unknown errors count as data, as the design says).
func ClassOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	if isInfra(err) {
		return ClassInfra
	}
	return ClassData
}

func classOfStatus(status int) string { return failclass.Status(status) }

func isInfra(err error) bool { return failclass.IsInfra(err) }
func dataErr(server string, status int, format string, args ...any) *Error {
	return &Error{Class: ClassData, Status: status, Server: server, Err: fmt.Errorf(format, args...)}
}
