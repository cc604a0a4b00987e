package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
)

// UpdateWeights makes every server serve the weights at path as version v,
// one server at a time, and confirms it before the server takes calls
// again, so no call is attributed to the wrong version:
//
//  1. the server is fenced: new calls go to the others, and this client's
//     calls in flight on it finish (their version is the old one);
//  2. the engine's own sequence:
//     - openai (longhaul serve): POST /update_weights_from_disk {model_path},
//     whose answer names the loaded version; answers carry it as a header.
//     - sglang: POST /pause_generation, POST /update_weights_from_disk
//     {model_path, weight_version: "v"}, POST /continue_generation, then
//     GET /get_weight_version must say "v".
//     - vllm (VLLM_SERVER_DEV_MODE=1): POST /pause?mode=wait, POST
//     /collective_rpc {method: ReloadMethod, kwargs: {weights_path}}, POST
//     /update_weight_version {new_version: "v"}, GET /weight_info must say
//     "v", POST /resume. vLLM answers name no version, so calls take the
//     one confirmed here.
//  3. on success the server's version becomes v and the fence lifts; on
//     failure it stays fenced (its weights are in doubt) until a later
//     update succeeds.
//
// path is what the server loads: an HF directory (config.json +
// safetensors) for vLLM and SGLang; a safetensors file or directory for
// longhaul serve. A server that cannot be reached is skipped with a warning
// (it stays fenced and loads the newest weights when it comes back and is
// updated); UpdateWeights fails when a reachable server failed or none
// took the update.
func (c *Client) UpdateWeights(ctx context.Context, path string, v int64) error {
	c.upd.Lock()
	defer c.upd.Unlock()
	c.published(path, v)
	var errs []error
	ok := 0
	for _, b := range c.backends {
		err := c.updateOne(ctx, b, path, v)
		switch {
		case err == nil:
			ok++
		case failure.ClassOf(err) == failure.Infra && ctx.Err() == nil && isUnreachable(err):
			c.log.Warn("weight update: server unreachable; it stays out of rotation until an update reaches it", "server", b.url, "err", err)
		default:
			errs = append(errs, fmt.Errorf("%s: %w", b.url, err))
		}
	}
	if len(errs) == 0 && ok == 0 {
		errs = append(errs, &Error{Class: failure.Infra, Err: fmt.Errorf("weight update to version %d: no server reachable", v)})
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("openai: weight update to version %d: %w", v, err)
	}
	return nil
}

// ServedVersions is the version each server was last confirmed to serve
// (-1 before any update), by URL.
func (c *Client) ServedVersions() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.backends))
	for _, b := range c.backends {
		out[b.url] = b.version
	}
	return out
}

func (c *Client) updateOne(ctx context.Context, b *backend, path string, v int64) error {
	c.mu.Lock()
	b.fenced = true
	b.updates++
	c.mu.Unlock()
	for {
		c.mu.Lock()
		busy := b.inFlight
		c.mu.Unlock()
		if busy == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return &Error{Class: failure.Infra, Server: b.url, Err: fmt.Errorf("waiting for %d calls to finish: %w", busy, ctx.Err())}
		case <-time.After(2 * time.Millisecond):
		}
	}
	vs := strconv.FormatInt(v, 10)
	var err error
	var instance string
	switch c.opts.API {
	case APISGLang:
		err = c.admin(ctx, b, http.MethodPost, "/pause_generation", map[string]any{}, nil)
		if err == nil {
			err = c.admin(ctx, b, http.MethodPost, "/update_weights_from_disk", map[string]any{"model_path": path, "weight_version": vs}, nil)
			// Generation continues whatever the update did: a paused server
			// serves no one, and the fence keeps this client's calls away.
			err = errors.Join(err, c.admin(ctx, b, http.MethodPost, "/continue_generation", map[string]any{}, nil))
		}
		if err == nil {
			err = c.confirm(ctx, b, "/get_weight_version", vs)
		}
	case APIVLLM:
		err = c.admin(ctx, b, http.MethodPost, "/pause?mode=wait", nil, nil)
		if err == nil {
			err = c.admin(ctx, b, http.MethodPost, "/collective_rpc", map[string]any{"method": c.opts.ReloadMethod,
				"kwargs": map[string]string{"weights_path": path}}, nil)
			if err == nil {
				err = c.admin(ctx, b, http.MethodPost, "/update_weight_version", map[string]any{"new_version": vs}, nil)
			}
			if err == nil {
				err = c.confirm(ctx, b, "/weight_info", vs)
			}
			err = errors.Join(err, c.admin(ctx, b, http.MethodPost, "/resume", nil, nil))
		}
	default:
		var out struct {
			Success  bool   `json:"success"`
			Version  *int64 `json:"version"`
			Instance string `json:"instance"` // the process that loaded them
		}
		err = c.admin(ctx, b, http.MethodPost, "/update_weights_from_disk", map[string]any{"model_path": path}, &out)
		if err == nil && (!out.Success || out.Version == nil || *out.Version != v) {
			err = dataErr(b.url, http.StatusOK, "update_weights_from_disk answered success=%v version=%v, want version %d", out.Success, out.Version, v)
		}
		instance = out.Instance
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	b.version, b.fenced = v, false
	if instance != "" {
		// The process that loaded v: an answer from any other one is a
		// restart (restarted, publish.go).
		b.instance = instance
	}
	c.mu.Unlock()
	c.log.Info("weights updated", "server", b.url, "version", v)
	return nil
}

// confirm reads the served version from route ({"weight_version": "v"}).
func (c *Client) confirm(ctx context.Context, b *backend, route, want string) error {
	var out struct {
		WeightVersion *string `json:"weight_version"`
	}
	if err := c.admin(ctx, b, http.MethodGet, route, nil, &out); err != nil {
		return err
	}
	if out.WeightVersion == nil || *out.WeightVersion != want {
		got := "null"
		if out.WeightVersion != nil {
			got = strconv.Quote(*out.WeightVersion)
		}
		return dataErr(b.url, http.StatusOK, "%s reports weight_version %s after the update, want %q", route, got, want)
	}
	return nil
}

// admin makes one control call; out (when not nil) receives the JSON answer.
func (c *Client) admin(ctx context.Context, b *backend, method, route string, body any, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return dataErr(b.url, 0, "%s: encode: %w", route, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url+route, rd)
	if err != nil {
		return dataErr(b.url, 0, "%s: %w", route, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &Error{Class: failure.Infra, Server: b.url, Err: fmt.Errorf("%s: %w", route, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &Error{Class: failure.Infra, Status: resp.StatusCode, Server: b.url, Err: fmt.Errorf("%s: read answer: %w", route, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return &Error{Class: failure.Status(resp.StatusCode), Status: resp.StatusCode, Server: b.url,
			Err: fmt.Errorf("%s: %s", route, errorMessage(raw))}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return dataErr(b.url, resp.StatusCode, "%s: decode answer: %w", route, err)
		}
	}
	return nil
}

// isUnreachable tells a server that is gone (the connection never reached
// it, or closed with no answer at all, as a server SIGKILLed mid-request
// leaves it) from a server that answered or timed out.
func isUnreachable(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Status != 0 {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "no such host") || strings.Contains(s, "connection reset")
}
