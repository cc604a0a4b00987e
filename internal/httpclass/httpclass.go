// Package httpclass forwards to internal/failclass, where the failure
// classes and the HTTP classing rule now live.
//
// Deprecated: use internal/failclass. This package is kept only until
// gen/openai and train/remote (changed by other engineers in the same
// session) import failclass; then it is deleted.
package httpclass

import "github.com/longhaul-rl/longhaul/internal/failclass"

// Failure classes.
const (
	Infra = failclass.Infra
	Data  = failclass.Data
)

// Status classes a non-2xx status (failclass.Status).
func Status(code int) string { return failclass.Status(code) }

// IsInfra reports whether err is a transport failure (failclass.IsInfra).
func IsInfra(err error) bool { return failclass.IsInfra(err) }
