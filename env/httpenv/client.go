package httpenv

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/failure"

	"github.com/longhaul-rl/longhaul/env"
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
	// Slots, when set, bounds the sessions open at once over all clients
	// sharing it: a session takes a slot (waiting for one) and gives it
	// back on Close.
	Slots chan struct{}

	id    string
	held  bool   // holds a slot of Slots
	name  string // environment of the open session
	snap  bool
	v2    bool       // the server speaks messages (protocol version 2)
	tools []env.Tool // the open episode's tools (version 2)
}

// New returns a client for environment name at baseURL.
func New(baseURL, name string, params json.RawMessage) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Env: name, Params: params}
}

var (
	_ env.Environment        = (*Client)(nil)
	_ env.Snapshotter        = (*Client)(nil)
	_ env.MessageEnvironment = (*Client)(nil)
)

// ErrNoSession is returned by calls before Reset or Restore.
var ErrNoSession = errors.New("httpenv: no open session")

// Reset implements env.Environment: it opens a new session (closing an
// old one). The first observation of a version-2 server is its tool list
// and first messages as text.
func (c *Client) Reset(ctx context.Context, task env.Task, seed uint64) (string, error) {
	msgs, tools, err := c.ResetMessages(ctx, task, seed)
	if err != nil {
		return "", err
	}
	obs := env.RenderMessages(msgs)
	if t := env.RenderTools(tools); t != "" {
		obs = t + "\n" + obs
	}
	return obs, nil
}

// ResetMessages implements env.MessageEnvironment. A version-1 server's
// observation is one user message.
func (c *Client) ResetMessages(ctx context.Context, task env.Task, seed uint64) ([]env.Message, []env.Tool, error) {
	if c.id != "" {
		_ = c.Close(ctx)
	}
	name := c.Env
	if name == "" {
		name = task.Env
	}
	if err := c.acquire(ctx); err != nil {
		return nil, nil, err
	}
	req := ResetRequest{Env: name, Params: c.Params, Task: task, Seed: seed, Version: 2}
	if k, ok := env.KeyOf(ctx); ok {
		req.Key = k.String()
	}
	var rep ResetReply
	if err := c.post(ctx, PathReset, req, &rep); err != nil {
		return nil, nil, err
	}
	if rep.ID == "" {
		return nil, nil, failure.NewData("env.reset", fmt.Errorf("httpenv: reset reply has no session id"))
	}
	c.id, c.name, c.snap = rep.ID, name, rep.Snapshot
	c.v2, c.tools = rep.Version >= 2, rep.Tools
	if !c.v2 {
		return []env.Message{{Role: "user", Content: rep.Observation}}, nil, nil
	}
	for i, t := range rep.Tools {
		if t.Function.Name == "" {
			return nil, nil, failure.NewData("env.reset", fmt.Errorf("httpenv: reset reply's tool %d has no function name", i))
		}
	}
	return rep.Messages, rep.Tools, nil
}

// Step implements env.Environment. With a version-2 server the action is
// parsed into an assistant message with tool calls (env.ParseToolCall) and
// the answer's messages become the observation.
func (c *Client) Step(ctx context.Context, action string) (env.StepResult, error) {
	if !c.v2 {
		rep, err := c.step(ctx, StepRequest{Action: action})
		return rep.StepResult, err
	}
	id := "call_0"
	if k, ok := env.KeyOf(ctx); ok {
		id = fmt.Sprintf("call_%d", k.Step)
	}
	res, err := c.StepMessage(ctx, env.ParseToolCall(action, c.tools, id))
	if err != nil {
		return env.StepResult{}, err
	}
	return env.StepResult{Observation: env.RenderMessages(res.Messages), Reward: res.Reward, Done: res.Done,
		Success: res.Success, Info: res.Info}, nil
}

// StepMessage implements env.MessageEnvironment. A reply that answers a
// call the message did not make, or names a tool the episode does not
// have, breaks the protocol: a data failure.
func (c *Client) StepMessage(ctx context.Context, msg env.Message) (env.MessageResult, error) {
	text := msg.Content
	if len(msg.ToolCalls) > 0 && text == "" {
		text = msg.ToolCalls[0].Function.Name + " " + msg.ToolCalls[0].Function.Arguments
	}
	rep, err := c.step(ctx, StepRequest{Action: text, Message: &msg})
	if err != nil {
		return env.MessageResult{}, err
	}
	res := env.MessageResult{Messages: rep.Messages, Reward: rep.Reward, Done: rep.Done, Success: rep.Success, Info: rep.Info}
	if len(res.Messages) == 0 && rep.Observation != "" {
		res.Messages = []env.Message{{Role: "user", Content: rep.Observation}}
	}
	if err := env.CheckReply(msg, c.tools, res); err != nil {
		return env.MessageResult{}, failure.NewData("env.step", fmt.Errorf("httpenv: %s: %w", c.BaseURL+PathStep, err))
	}
	return res, nil
}

func (c *Client) step(ctx context.Context, req StepRequest) (StepReply, error) {
	if c.id == "" {
		return StepReply{}, failure.NewData("env.step", ErrNoSession)
	}
	req.ID = c.id
	if k, ok := env.KeyOf(ctx); ok {
		req.Key = k.String()
	}
	var rep StepReply
	err := c.post(ctx, PathStep, req, &rep)
	return rep, err
}

// Snapshot implements env.Snapshotter.
func (c *Client) Snapshot(ctx context.Context) ([]byte, error) {
	if c.id == "" {
		return nil, failure.NewData("env.snapshot", ErrNoSession)
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
	if err := c.acquire(ctx); err != nil {
		return err
	}
	var rep RestoreReply
	if err := c.post(ctx, PathRestore, RestoreRequest{ID: c.id, Env: cmp.Or(c.name, c.Env), Params: c.Params, State: state}, &rep); err != nil {
		return err
	}
	c.id, c.snap = rep.ID, true
	return nil
}

// Close implements env.Environment; it is safe to call twice.
func (c *Client) Close(ctx context.Context) error {
	defer c.release()
	if c.id == "" {
		return nil
	}
	id := c.id
	c.id = ""
	return c.post(ctx, PathClose, IDRequest{ID: id}, &struct{}{})
}

func (c *Client) acquire(ctx context.Context) error {
	if c.Slots == nil || c.held {
		return nil
	}
	select {
	case c.Slots <- struct{}{}:
		c.held = true
		return nil
	case <-ctx.Done():
		return failure.NewInfra("env.session", fmt.Errorf("httpenv: waiting for a free session (env.max_sessions %d): %w", cap(c.Slots), ctx.Err()))
	}
}

func (c *Client) release() {
	if c.held {
		<-c.Slots
		c.held = false
	}
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	op := "env" + strings.ReplaceAll(path, "/", ".")
	body, err := json.Marshal(in)
	if err != nil {
		return failure.NewData(op, err)
	}
	t := c.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return failure.NewData(op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return failure.NewInfra(op, err) // connection refused, reset, timeout
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return failure.NewInfra(op, fmt.Errorf("httpenv: reading reply: %w", err))
	}
	if resp.StatusCode/100 != 2 {
		return statusError(op, resp.StatusCode, raw)
	}
	// Unknown fields are allowed: a newer server may add some.
	if err := json.Unmarshal(raw, out); err != nil {
		return failure.NewData(op, fmt.Errorf("httpenv: %s replied %d with a body that is not the protocol's JSON (%v): %q", c.BaseURL+path, resp.StatusCode, err, excerpt(raw)))
	}
	return nil
}

// statusError classifies a non-2xx reply: the server's own class when it
// sends the protocol's error body, else by status.
func statusError(op string, status int, raw []byte) error {
	var er ErrorReply
	msg := excerpt(raw)
	class := failure.Status(status)
	if json.Unmarshal(raw, &er) == nil && er.Error.Message != "" {
		msg = er.Error.Message
		if failure.Valid(er.Error.Class) {
			class = er.Error.Class
		}
	}
	return &failure.Failure{Class: class, Op: op, Err: fmt.Errorf("httpenv: HTTP %d: %s", status, msg)}
}

func excerpt(b []byte) string {
	const n = 120
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
