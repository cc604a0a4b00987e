package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/failure"

	"github.com/longhaul-rl/longhaul/train"
)

// Error is a failed trainer call.
type Error struct {
	Class  string
	Status int    // HTTP status, 0 when none came back
	Server string // the trainer's base URL
	Err    error
}

func (e *Error) Error() string {
	s := "remote trainer " + e.Class + " error from " + e.Server
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// FailureClass reports the class to callers that classify failures by
// behaviour (the controller and rollout loop).
func (e *Error) FailureClass() string { return e.Class }

// ErrStepConflict is in the chain of a TrainStep refused because the
// trainer is not at the step the client expected (a retried step that had
// in fact been applied). Call State to resynchronise.
var ErrStepConflict = errors.New("trainer step conflict")

// Options configure a Client.
type Options struct {
	HTTPClient *http.Client // nil: a fresh client
	APIKey     string
	// StepTimeout bounds one train_step (default 30m); Timeout bounds the
	// other calls (default 10m: checkpoints of big models are slow).
	StepTimeout, Timeout time.Duration
	// MaxOutage bounds how long a call waits for an unreachable trainer,
	// retrying with backoff from MinBackoff doubling to MaxBackoff
	// (defaults 600s, 250ms, 10s). See retry.go.
	MaxOutage, MinBackoff, MaxBackoff time.Duration
}

// Client drives a trainer over the protocol. It retries a trainer that is
// unreachable (retry.go), but never into a trainer that came back at
// another step: that is a *RestartedError for the caller.
type Client struct {
	url  string
	hc   *http.Client
	opts Options

	mu    sync.Mutex
	known int64 // the trainer's step as last reported, -1 before any report
	// warm is the warm-start steps the trainer last confirmed while at RL
	// step 0 (0: none). A trainer restarted after the warm start is also at
	// step 0, with its weights from before the warm start: only its warm
	// count tells it apart, so that count is fenced too until RL step 1.
	warm int
	// awaySince is when the trainer became unreachable (zero while it
	// answers), awayErr the last failure: the stall watchdog's line.
	awaySince time.Time
	awayErr   error
}

var _ train.Trainer = (*Client)(nil)

// New returns a client for the trainer at base URL url.
func New(url string, opts Options) *Client {
	if opts.StepTimeout <= 0 {
		opts.StepTimeout = 30 * time.Minute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Minute
	}
	if opts.MaxOutage <= 0 {
		opts.MaxOutage = 600 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 250 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(10*time.Second, opts.MinBackoff)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{url: strings.TrimSuffix(url, "/"), hc: hc, opts: opts, known: -1}
}

func (c *Client) setKnown(step int64) { c.setState(step, false) }

// setState records the trainer's step and, with endWarm, that the warm
// start's count no longer fences: from an RL step on the step fence tells a
// restart apart, and a checkpoint holds the warm start's result, if any.
func (c *Client) setState(step int64, endWarm bool) {
	c.mu.Lock()
	c.known = step
	if endWarm {
		c.warm = 0
	}
	c.mu.Unlock()
}

// TrainStep sends the batch. Once the client has seen the trainer's step
// (from State or an earlier step) it sends it as expect_step, so a step
// resent after an infra failure is refused with ErrStepConflict instead of
// being applied twice.
func (c *Client) TrainStep(ctx context.Context, b train.Batch) (train.StepStats, error) {
	c.mu.Lock()
	expect, warm := c.known, c.warm
	c.mu.Unlock()
	if expect == 0 && warm > 0 {
		// The first RL step after a warm start: the step fence alone would
		// take a restarted trainer's un-warmed weights (also at step 0).
		if err := c.checkStep(ctx, true); err != nil {
			return train.StepStats{}, err
		}
	}
	payload, err := encodeBatch(b, expect)
	if err != nil {
		return train.StepStats{}, &Error{Class: failure.Data, Server: c.url, Err: fmt.Errorf("encode batch: %w", err)}
	}
	var ws wireStats
	// Retried only when the step is fenced (expect_step), so a resend
	// can never be applied twice.
	if err := c.retry(ctx, "train_step", expect >= 0, func() error {
		return c.do(ctx, c.opts.StepTimeout, http.MethodPost, "/v1/train_step", "application/octet-stream", payload, &ws)
	}); err != nil {
		return train.StepStats{}, err
	}
	c.setState(ws.Step, true)
	return ws.stats(), nil
}

// State asks the trainer where it stands.
func (c *Client) State(ctx context.Context) (train.State, error) {
	var s wireState
	if err := c.retry(ctx, "state", false, func() error {
		return c.do(ctx, c.opts.Timeout, http.MethodGet, "/v1/state", "", nil, &s)
	}); err != nil {
		return train.State{}, err
	}
	c.setKnown(s.Step)
	return train.State{Step: s.Step, Version: s.Version}, nil
}

// SaveCheckpoint asks the trainer to write a checkpoint into dir (a path
// on the trainer's file system).
func (c *Client) SaveCheckpoint(ctx context.Context, dir string) error {
	return c.pathCall(ctx, "/v1/save_checkpoint", "dir", dir)
}

// LoadCheckpoint asks the trainer to restore the checkpoint in dir.
func (c *Client) LoadCheckpoint(ctx context.Context, dir string) error {
	c.setState(-1, true) // the step is whatever the checkpoint holds
	return c.pathCall(ctx, "/v1/load_checkpoint", "dir", dir)
}

// ExportWeights asks the trainer to write safetensors weights at path.
func (c *Client) ExportWeights(ctx context.Context, path string) error {
	return c.pathCall(ctx, "/v1/export_weights", "path", path)
}

func (c *Client) pathCall(ctx context.Context, route, field, val string) error {
	var ok struct {
		OK bool `json:"ok"`
	}
	// A checkpoint or export from a trainer that restarted meanwhile
	// would hold the wrong state: the fence refuses it (not for
	// load_checkpoint, whose point is to set the state). A trainer that
	// restarted and is back before this call sees no failed attempt to
	// trigger the fence, so its step is checked first; one that restarts
	// between that check and the call is refused by the trainer itself,
	// which the call tells the step it must be at (expect_step).
	fence := route != "/v1/load_checkpoint"
	req := map[string]any{field: val}
	if fence {
		c.mu.Lock()
		want, warm := c.known, c.warm
		c.mu.Unlock()
		if want >= 0 {
			req["expect_step"] = want
			if want == 0 && warm > 0 {
				req["expect_warm_step"] = warm
			}
		}
	}
	body, _ := json.Marshal(req) // strings and integers always marshal
	if err := c.checkStep(ctx, fence); err != nil {
		return err
	}
	if err := c.retry(ctx, route, fence, func() error {
		return c.do(ctx, c.opts.Timeout, http.MethodPost, route, "application/json", body, &ok)
	}); err != nil {
		return err
	}
	if !ok.OK {
		return &Error{Class: failure.Data, Status: http.StatusOK, Server: c.url, Err: fmt.Errorf("%s: answer lacks ok=true", route)}
	}
	return nil
}

// checkStep (with fence, once the client knows the trainer's step) reads
// the trainer's state and fails with a *RestartedError when it is not at
// the step the client last saw.
func (c *Client) checkStep(ctx context.Context, fence bool) error {
	c.mu.Lock()
	want, warm := c.known, c.warm
	c.mu.Unlock()
	if !fence || want < 0 {
		return nil
	}
	var s wireState
	if err := c.retry(ctx, "state", false, func() error {
		return c.do(ctx, c.opts.Timeout, http.MethodGet, "/v1/state", "", nil, &s)
	}); err != nil {
		return err
	}
	if s.Step != want {
		return &RestartedError{Server: c.url, Want: want, Got: s.Step}
	}
	if want == 0 && warm > 0 && s.WarmStep != warm {
		return &RestartedError{Server: c.url, Want: want, Got: s.Step, WantWarm: warm, GotWarm: s.WarmStep}
	}
	return nil
}

func (c *Client) do(ctx context.Context, timeout time.Duration, method, route, ctype string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+route, rd)
	if err != nil {
		return &Error{Class: failure.Data, Server: c.url, Err: fmt.Errorf("%s: %w", route, err)}
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return &Error{Class: failure.Infra, Server: c.url, Err: fmt.Errorf("%s: %w", route, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		class := failure.Data // a broken answer, unless cut short (a killed trainer): infra
		if ctx.Err() != nil || failure.ClassOf(err) == failure.Infra {
			class = failure.Infra
		}
		return &Error{Class: class, Status: resp.StatusCode, Server: c.url, Err: fmt.Errorf("%s: read answer: %w", route, err)}
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error errBody `json:"error"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		class := failure.Status(resp.StatusCode)
		err := errors.New(msg)
		if resp.StatusCode == http.StatusConflict && e.Error.Code == "step_conflict" {
			// The trainer is not at the step the client knew: another
			// process moved it, or it restarted and came back before this
			// call could find it away.
			err = fmt.Errorf("%w (%w): %s", ErrStepConflict, train.ErrStateLost, msg)
		}
		if resp.StatusCode == http.StatusConflict && e.Error.Code == "warm_conflict" {
			err = fmt.Errorf("%w: %s", ErrWarmConflict, msg)
		}
		if resp.StatusCode == http.StatusConflict && e.Error.Code == "warm_after_rl" {
			err = fmt.Errorf("%w: %s", ErrWarmAfterRL, msg)
		}
		return &Error{Class: class, Status: resp.StatusCode, Server: c.url, Err: fmt.Errorf("%s: %w", route, err)}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &Error{Class: failure.Data, Status: resp.StatusCode, Server: c.url, Err: fmt.Errorf("%s: decode answer: %w", route, err)}
	}
	return nil
}
