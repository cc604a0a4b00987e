// Package httpenv runs environments over HTTP: a client that implements
// env.Environment, env.Snapshotter and env.MessageEnvironment, and a
// reference server that serves any environment of an env.Registry. The
// protocol (docs/protocols.md) is JSON over POST: /reset, /step,
// /snapshot, /restore, /close. Version 2 adds chat messages with tool
// calls and idempotency keys; a version-1 peer ignores the new fields.
//
// Errors are typed for retries: the client returns *failure.Failure with
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
		Env     string          `json:"env"`
		Params  json.RawMessage `json:"params,omitempty"`
		Task    env.Task        `json:"task"`
		Seed    uint64          `json:"seed"`
		Version int             `json:"version,omitempty"` // 2: the client speaks messages
		Key     string          `json:"key,omitempty"`     // idempotency key (version 2)
	}
	// ResetReply names the new session. A version-2 server also sends the
	// first messages and the episode's tools; Observation then holds the
	// messages' text for version-1 clients.
	ResetReply struct {
		ID          string        `json:"id"`
		Observation string        `json:"observation"`
		Snapshot    bool          `json:"snapshot"` // the environment supports snapshot/restore
		Version     int           `json:"version,omitempty"`
		Messages    []env.Message `json:"messages,omitempty"`
		Tools       []env.Tool    `json:"tools,omitempty"`
	}
	// StepRequest applies an action: a version-2 client sends the
	// assistant message (with parsed tool calls) and the step's key, and
	// Action holds the message's raw text.
	StepRequest struct {
		ID      string       `json:"id"`
		Action  string       `json:"action"`
		Message *env.Message `json:"message,omitempty"`
		Key     string       `json:"key,omitempty"`
	}
	// StepReply is env.StepResult; a version-2 server adds the tool and
	// user messages that answer the step (Observation is their text).
	StepReply struct {
		env.StepResult
		Messages []env.Message `json:"messages,omitempty"`
	}
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
