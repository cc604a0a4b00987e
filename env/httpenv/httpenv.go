// Package httpenv runs environments over HTTP: a client that implements
// env.Environment and env.Snapshotter, and a reference server that serves
// any environment of an env.Registry. The protocol (docs/protocols.md) is
// JSON over POST: /reset, /step, /snapshot, /restore, /close.
//
// Errors are typed for retries: the client returns *rollout.Failure with
// class infra for transport errors, timeouts, 408, 429 and 5xx, and class
// data for other 4xx and for replies that break the protocol.
package httpenv

import (
	"encoding/json"

	"github.com/longhaul-rl/longhaul/env"
)

// Request and reply bodies of the protocol.
type (
	// ResetRequest opens a session and starts an episode.
	ResetRequest struct {
		Env    string          `json:"env"`
		Params json.RawMessage `json:"params,omitempty"`
		Task   env.Task        `json:"task"`
		Seed   uint64          `json:"seed"`
	}
	// ResetReply names the new session.
	ResetReply struct {
		ID          string `json:"id"`
		Observation string `json:"observation"`
		Snapshot    bool   `json:"snapshot"` // the environment supports snapshot/restore
	}
	// StepRequest applies an action.
	StepRequest struct {
		ID     string `json:"id"`
		Action string `json:"action"`
	}
	// StepReply is env.StepResult.
	StepReply = env.StepResult
	// IDRequest names a session (snapshot, close).
	IDRequest struct {
		ID string `json:"id"`
	}
	// SnapshotReply carries the state, base64 in JSON.
	SnapshotReply struct {
		State []byte `json:"state"`
	}
	// RestoreRequest restores State into session ID, or, when ID is
	// empty, into a new session of Env (with Params).
	RestoreRequest struct {
		ID     string          `json:"id,omitempty"`
		Env    string          `json:"env,omitempty"`
		Params json.RawMessage `json:"params,omitempty"`
		State  []byte          `json:"state"`
	}
	// RestoreReply names the restored session.
	RestoreReply struct {
		ID string `json:"id"`
	}
	// ErrorReply is the body of every non-2xx reply.
	ErrorReply struct {
		Error ErrorBody `json:"error"`
	}
	// ErrorBody describes a failure; Class is "infra" or "data".
	ErrorBody struct {
		Class   string `json:"class"`
		Message string `json:"message"`
	}
)

// Paths of the protocol.
const (
	PathReset    = "/reset"
	PathStep     = "/step"
	PathSnapshot = "/snapshot"
	PathRestore  = "/restore"
	PathClose    = "/close"
)
