// Package env defines the Environment an agent acts in, a registry of
// environments by name, task generation for datasets, and the built-in
// environments ("ledger", "guess", "recall"). HTTP environments live in env/httpenv.
//
// An environment is deterministic given its task and seed: the rollout loop
// relies on that to resume an episode by replaying logged actions when the
// environment cannot snapshot itself.
package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/longhaul-rl/longhaul/tokenizer"
)

// Task is one dataset row for an environment. It is JSON-serialisable so a
// JSONL dataset can hold tasks directly. Params carry everything the
// environment needs to reproduce the episode, so every member of a group
// sees the same episode.
type Task struct {
	ID     string          `json:"id"`
	Env    string          `json:"env"`
	Prompt string          `json:"prompt,omitempty"` // informational; Reset returns the real first message
	Params json.RawMessage `json:"params,omitempty"`
}

// StepResult is the outcome of one action.
type StepResult struct {
	Observation string            `json:"observation"` // the next message to the agent; "" when none
	Reward      float64           `json:"reward"`      // this step's reward; a rollout's reward is the sum
	Done        bool              `json:"done"`
	Success     bool              `json:"success"` // meaningful when Done: the episode was solved
	Info        map[string]string `json:"info,omitempty"`
}

// Environment is one episode at a time. Reset starts an episode and returns
// the first message to the agent (the task message); Step applies the
// agent's action. Implementations need not be safe for concurrent use.
type Environment interface {
	Reset(ctx context.Context, task Task, seed uint64) (string, error)
	Step(ctx context.Context, action string) (StepResult, error)
	Close(ctx context.Context) error
}

// Snapshotter is the optional capability to save and restore an in-flight
// episode; the rollout loop checks for it with a type assertion. Restore
// may be called on a fresh environment (after Reset or not).
type Snapshotter interface {
	Snapshot(ctx context.Context) ([]byte, error)
	Restore(ctx context.Context, state []byte) error
}

// InProcess marks an environment that acts on nothing outside the process:
// its whole state is in memory, and resume rebuilds it from the log. The
// rollout loop lets it step on a model call whose record is staged but not
// yet fsync'd (a crash loses both, and the call is generated again). An
// environment with any effect outside (a server, a file, a subprocess) must
// not implement it.
type InProcess interface{ InProcess() }

// ErrUnknown is returned for an environment name that is not registered.
var ErrUnknown = errors.New("env: unknown environment")

// ErrBadParams wraps errors in environment or task parameters.
var ErrBadParams = errors.New("env: bad params")

// Definition describes one environment kind.
type Definition struct {
	Name string
	// New builds an environment from params (may be nil for defaults).
	New func(params json.RawMessage) (Environment, error)
	// Task returns task number index of the dataset drawn from seed; nil
	// when the environment has no task generator.
	Task func(params json.RawMessage, seed uint64, index int) (Task, error)
	// Oracle, when set, returns the scripted agent that writes the warm
	// start's demonstrations for params: it answers a conversation (the
	// generation prompt's empty assistant turn last) with the text of the
	// next reply, and a user message equal to summaryRequest (when not
	// empty) with a summary.
	Oracle func(params json.RawMessage, summaryRequest string) (func([]tokenizer.Message) (string, error), error)
}

// Registry maps names to environment definitions. It is safe for
// concurrent use.
type Registry struct {
	mu   sync.RWMutex
	defs map[string]Definition
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{defs: map[string]Definition{}} }

// Builtin returns a new registry holding the built-in environments.
func Builtin() *Registry {
	r := NewRegistry()
	for _, d := range []Definition{LedgerDefinition(), GuessDefinition(), RecallDefinition()} {
		if err := r.Register(d); err != nil {
			panic(err) // built-in names are distinct; this is a programming error
		}
	}
	return r
}

// Register adds a definition; a name may be registered once.
func (r *Registry) Register(d Definition) error {
	if d.Name == "" || d.New == nil {
		return fmt.Errorf("env: definition needs a name and New")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.defs[d.Name]; ok {
		return fmt.Errorf("env: %q already registered", d.Name)
	}
	r.defs[d.Name] = d
	return nil
}

// Lookup returns the definition of name.
func (r *Registry) Lookup(name string) (Definition, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.defs[name]
	if !ok {
		return Definition{}, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	return d, nil
}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.defs))
	for n := range r.defs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New builds the environment name with params.
func (r *Registry) New(name string, params json.RawMessage) (Environment, error) {
	d, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	return d.New(params)
}

// Task returns task index of the dataset of environment name drawn from seed.
func (r *Registry) Task(name string, params json.RawMessage, seed uint64, index int) (Task, error) {
	d, err := r.Lookup(name)
	if err != nil {
		return Task{}, err
	}
	if d.Task == nil {
		return Task{}, fmt.Errorf("env: %q has no task generator", name)
	}
	t, err := d.Task(params, seed, index)
	if err != nil {
		return Task{}, err
	}
	t.Env = name
	return t, nil
}

// Tasks returns the first n tasks of the dataset of environment name.
func (r *Registry) Tasks(name string, params json.RawMessage, seed uint64, n int) ([]Task, error) {
	out := make([]Task, 0, n)
	for i := range n {
		t, err := r.Task(name, params, seed, i)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// decodeParams unmarshals raw into dst (which holds the defaults),
// rejecting unknown fields so a typo in a config is not silently ignored.
func decodeParams(raw json.RawMessage, dst any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%w: %w", ErrBadParams, err)
	}
	return nil
}
