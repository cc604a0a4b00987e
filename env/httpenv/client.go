package httpenv

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/longhaul-rl/longhaul/internal/httpclass"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
)

// DefaultTimeout bounds one request when Client.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// Client is one remote environment session. It implements
// env.Environment and env.Snapshotter; Snapshot returns (nil, nil) when the
// server's environment cannot snapshot, so the rollout loop falls back to
// replay.
type Client struct {
	BaseURL string          // e.g. "http://127.0.0.1:8090"
	Env     string          // environment name; default: the task's Env
	Params  json.RawMessage // environment params
	HTTP    *http.Client    // default http.DefaultClient
	Timeout time.Duration   // per request; default DefaultTimeout

	id   string
	name string // environment of the open session
	snap bool
}

// New returns a client for environment name at baseURL.
func New(baseURL, name string, params json.RawMessage) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Env: name, Params: params}
}

var (
	_ env.Environment = (*Client)(nil)
	_ env.Snapshotter = (*Client)(nil)
)

// ErrNoSession is returned by calls before Reset or Restore.
var ErrNoSession = errors.New("httpenv: no open session")

// Reset implements env.Environment: it opens a new session (closing an
// old one).
func (c *Client) Reset(ctx context.Context, task env.Task, seed uint64) (string, error) {
	if c.id != "" {
		_ = c.Close(ctx)
	}
	name := c.Env
	if name == "" {
		name = task.Env
	}
	var rep ResetReply
	if err := c.post(ctx, PathReset, ResetRequest{Env: name, Params: c.Params, Task: task, Seed: seed}, &rep); err != nil {
		return "", err
	}
	if rep.ID == "" {
		return "", rollout.Data("env.reset", fmt.Errorf("httpenv: reset reply has no session id"))
	}
	c.id, c.name, c.snap = rep.ID, name, rep.Snapshot
	return rep.Observation, nil
}

// Step implements env.Environment.
func (c *Client) Step(ctx context.Context, action string) (env.StepResult, error) {
	if c.id == "" {
		return env.StepResult{}, rollout.Data("env.step", ErrNoSession)
	}
	var rep StepReply
	err := c.post(ctx, PathStep, StepRequest{ID: c.id, Action: action}, &rep)
	return rep, err
}

// Snapshot implements env.Snapshotter.
func (c *Client) Snapshot(ctx context.Context) ([]byte, error) {
	if c.id == "" {
		return nil, rollout.Data("env.snapshot", ErrNoSession)
	}
	if !c.snap {
		return nil, nil
	}
	var rep SnapshotReply
	if err := c.post(ctx, PathSnapshot, IDRequest{ID: c.id}, &rep); err != nil {
		return nil, err
	}
	return rep.State, nil
}

// Restore implements env.Snapshotter: into the open session, or a new one.
func (c *Client) Restore(ctx context.Context, state []byte) error {
	var rep RestoreReply
	if err := c.post(ctx, PathRestore, RestoreRequest{ID: c.id, Env: cmp.Or(c.name, c.Env), Params: c.Params, State: state}, &rep); err != nil {
		return err
	}
	c.id, c.snap = rep.ID, true
	return nil
}

// Close implements env.Environment; it is safe to call twice.
func (c *Client) Close(ctx context.Context) error {
	if c.id == "" {
		return nil
	}
	id := c.id
	c.id = ""
	return c.post(ctx, PathClose, IDRequest{ID: id}, &struct{}{})
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	op := "env" + strings.ReplaceAll(path, "/", ".")
	body, err := json.Marshal(in)
	if err != nil {
		return rollout.Data(op, err)
	}
	t := c.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return rollout.Data(op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return rollout.Infra(op, err) // connection refused, reset, timeout
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return rollout.Infra(op, fmt.Errorf("httpenv: reading reply: %w", err))
	}
	if resp.StatusCode/100 != 2 {
		return statusError(op, resp.StatusCode, raw)
	}
	// Unknown fields are allowed: a newer server may add some.
	if err := json.Unmarshal(raw, out); err != nil {
		return rollout.Data(op, fmt.Errorf("httpenv: %s replied %d with a body that is not the protocol's JSON (%v): %q", c.BaseURL+path, resp.StatusCode, err, excerpt(raw)))
	}
	return nil
}

// statusError classifies a non-2xx reply: the server's own class when it
// sends the protocol's error body, else by status.
func statusError(op string, status int, raw []byte) error {
	var er ErrorReply
	msg := excerpt(raw)
	class := httpclass.Status(status)
	if json.Unmarshal(raw, &er) == nil && er.Error.Message != "" {
		msg = er.Error.Message
		if er.Error.Class == runlog.ClassInfra || er.Error.Class == runlog.ClassData {
			class = er.Error.Class
		}
	}
	return &rollout.Failure{Class: class, Op: op, Err: fmt.Errorf("httpenv: HTTP %d: %s", status, msg)}
}

func excerpt(b []byte) string {
	const n = 120
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
