package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
)

// Version fencing. The client tracks, per server, the weight version it
// serves: what the server reports (X-Longhaul-Weight-Version, or
// weight_version in a response) or, for a server that reports none (vLLM),
// the version the client last published to it and saw confirmed. A server
// whose version is unknown or differs from the last published one is
// stale: it gets no calls until the client has published the current
// weights to it again, which the prober does as soon as it answers /health.
// This is how a restarted server (serving its initial weights as version
// 0) is caught before it serves a call. A version number alone cannot tell
// a restart whose initial label equals the published version (`longhaul
// serve --model DIR` labels DIR version 0, and so does a run its
// warm-started weights): `longhaul serve` also names its process on every
// answer (instanceHeader), and an answer from another process than the one
// last updated makes the server stale whatever version it reports.

// ErrVersion marks a call answered by weights of a version the caller did
// not expect (see Expect). It is an infra failure of that server: the
// server is marked stale and re-published before it serves again.
var ErrVersion = errors.New("served weight version not the expected one")

// PublishError lists the servers a Publish could not bring to the version.
type PublishError struct {
	Version int64
	Failed  map[string]error // server URL -> why
}

func (e *PublishError) Error() string {
	parts := make([]string, 0, len(e.Failed))
	for u, err := range e.Failed {
		parts = append(parts, u+": "+err.Error())
	}
	return fmt.Sprintf("openai: publishing version %d failed on %d server(s): %s", e.Version, len(e.Failed), strings.Join(parts, "; "))
}

// Publish makes every server load the weights at path (SGLang's
// /update_weights_from_disk) as version v and confirms it. A server that
// cannot be reached or refuses is marked stale: it gets no calls until the
// prober re-publishes to it. Publish fails (a *PublishError) when no
// server confirmed v, so a run never goes on believing weights were
// published that no server serves; when some did, the failed ones are
// logged and caught up when they answer again. Publish is also the
// version every later call is checked against (see Expect for a range).
func (c *Client) Publish(ctx context.Context, path string, v int64) error {
	c.upd.Lock()
	defer c.upd.Unlock()
	c.published(path, v)
	var outage time.Time
	failed := map[string]error{}
	for {
		clear(failed)
		for _, b := range c.backends {
			if err := c.reload(ctx, b, path, v); err != nil {
				failed[b.url] = err
			}
		}
		if len(failed) < len(c.backends) {
			break
		}
		// No server reachable (all restarting): an outage, waited out up
		// to MaxOutage as a call's is, not a failed publish.
		if !allUnreachable(failed) {
			return &PublishError{Version: v, Failed: failed}
		}
		if outage.IsZero() {
			outage = time.Now()
			c.log.Warn("no generation server reachable to publish to; waiting (rollout_failure.max_outage_s)",
				"version", v, "servers", c.urls())
		}
		if !c.waitForServer(ctx, outage) {
			return &PublishError{Version: v, Failed: failed}
		}
	}
	for u, err := range failed {
		c.log.Warn("weights not published to a server; it gets no calls until it is caught up", "server", u, "version", v, "err", err)
	}
	return nil
}

// published records v (at path) as the version calls are checked against
// and stale servers are caught up to.
func (c *Client) published(path string, v int64) {
	c.mu.Lock()
	if !c.expectSet {
		// Without Expect, calls in flight across this publish may still
		// be answered by the previous version (throughput mode's lag);
		// anything older, such as a restarted server's initial weights,
		// is refused.
		c.lo, c.hi = v, v
		if c.pubPath != "" && c.pubVersion < v {
			c.lo = c.pubVersion
		}
	}
	c.pubPath, c.pubVersion = path, v
	c.mu.Unlock()
}

// Expect sets the versions a call may be answered by: [lo, hi]. Without
// it, calls must come from the last published version or the one before
// (calls in flight across a publish). Deterministic mode should expect
// exactly the schedule's version; throughput mode its lag window.
func (c *Client) Expect(lo, hi int64) {
	c.mu.Lock()
	c.lo, c.hi, c.expectSet = lo, hi, true
	c.mu.Unlock()
}

// ServedVersion returns the version a server is known to serve (-1 when
// unknown), for tests and status.
func (c *Client) ServedVersion(url string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.backends {
		if b.url == strings.TrimSuffix(strings.TrimSuffix(url, "/"), "/v1") {
			return b.version
		}
	}
	return -1
}

// fresh reports whether b may get calls (under c.mu): nothing published
// yet, or b confirmed the last published version.
func (c *Client) fresh(b *backend) bool {
	// A server still at a version the fence allows (the previous one, while
	// a rolling update has not reached it yet) keeps serving; one at any
	// other version (a restart's initial weights) waits to be caught up.
	return c.pubPath == "" || (b.version >= c.lo && b.version <= c.hi)
}

// restarted notes the server process that answered (instance; "" from
// engines that name none) and reports whether it is another one than
// before: its weights are then unknown, whatever version it reports,
// until the client publishes to it again (under c.mu).
func (c *Client) restarted(b *backend, instance string) bool {
	if instance == "" || instance == b.instance {
		return false
	}
	known := b.instance != ""
	b.instance = instance
	if known {
		b.version = -1
	}
	return known
}

// checkServed fences one answered call (version -1: the server reported
// none, so the tracked version stands in; instance: the process that
// answered).
func (c *Client) checkServed(b *backend, served int64, instance string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restarted(b, instance) && c.pubPath != "" {
		// A restart not yet caught up: its weights are what it loaded at
		// start, even when its label is the published version.
		return served, &Error{Class: failure.Infra, Server: b.url,
			Err: fmt.Errorf("%w: served by a restarted server (version %d by its label) not yet brought to version %d", ErrVersion, served, c.pubVersion)}
	}
	if c.opts.API == APIVLLM && c.pubPath != "" {
		// vLLM names no version; what a stand-in reports is not vLLM's
		// label either: once weights were published, the version the last
		// update confirmed stands.
		served = -1
	}
	if served < 0 {
		served = b.version
	} else if served != b.version && c.pubPath != "" {
		if b.version < 0 {
			// Weights of unknown version (a restart, a refused call, a
			// failed update): a label never vouches for them (catchUp).
			return served, &Error{Class: failure.Infra, Server: b.url,
				Err: fmt.Errorf("%w: served version %d by a server not yet brought to version %d", ErrVersion, served, c.pubVersion)}
		}
		// The server changed under us (a restart): stale until caught up.
		b.version = served
	}
	if c.pubPath == "" && !c.expectSet {
		return served, nil
	}
	if served < c.lo || served > c.hi {
		b.version = -1 // re-publish before it serves again
		return served, &Error{Class: failure.Infra, Server: b.url,
			Err: fmt.Errorf("%w: served version %d, expected %d..%d", ErrVersion, served, c.lo, c.hi)}
	}
	return served, nil
}

// catchUp re-publishes the current weights to b if it is stale; the
// prober calls it before marking b up, with the version and process b's
// health answer reported and b's update count from before that request
// was sent.
func (c *Client) catchUp(ctx context.Context, b *backend, reported int64, instance string, updates uint64) error {
	if c.opts.API == APIVLLM {
		reported = -1 // as in checkServed
	}
	c.mu.Lock()
	if c.restarted(b, instance) {
		reported = -1 // its label says nothing of the weights it serves
	}
	// A health answer that raced a weight update (sent before it began)
	// names the old weights; believing it would mark a freshly updated
	// server stale.
	if updates != b.updates || b.fenced {
		reported = -1
	}
	// A label may make a server stale (another version than the one it
	// confirmed), never fresh: weights of unknown version (b.version -1: a
	// restart, a refused call, a failed update) are published again even
	// when the label is the published version, as a restart's may be.
	if reported >= 0 && reported != b.version && b.version >= 0 {
		b.version = reported
	}
	path, v, need := c.pubPath, c.pubVersion, c.pubPath != "" && b.version != c.pubVersion
	c.mu.Unlock()
	if !need {
		return nil
	}
	// An update in progress reaches b itself; a second reload racing it
	// would load the weights twice.
	if !c.upd.TryLock() {
		return nil
	}
	defer c.upd.Unlock()
	c.log.Info("re-publishing weights to a server that came back", "server", b.url, "version", v)
	return c.reload(ctx, b, path, v)
}

// reload brings b to the weights at path as version v through the engine's
// own update sequence (updateOne: fence, drain, update, confirm); on
// failure b is stale and gets no calls until it is caught up.
func (c *Client) reload(ctx context.Context, b *backend, path string, v int64) error {
	if err := c.updateOne(ctx, b, path, v); err != nil {
		c.mu.Lock()
		b.version = -1
		c.mu.Unlock()
		if failure.ClassOf(err) == failure.Infra && isUnreachable(err) {
			c.markDown(b, err)
		}
		return fmt.Errorf("weight reload: %w", err)
	}
	return nil
}

// reportedVersion reads the version header of a response (-1: none).
func reportedVersion(h http.Header) int64 {
	if s := h.Get(versionHeader); s != "" {
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			return v
		}
	}
	return -1
}

// waitForServer sleeps before the next round of tries while no server can
// take a call, up to MaxOutage since the outage began; false when the
// outage has lasted too long or ctx ended.
func (c *Client) waitForServer(ctx context.Context, since time.Time) bool {
	if time.Since(since) > c.opts.MaxOutage {
		return false
	}
	t := time.NewTimer(c.opts.MinBackoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// allUnreachable reports whether every failure is a server that could not
// be reached at all (refused, reset, unknown host) or answered 503.
func allUnreachable(failed map[string]error) bool {
	for _, err := range failed {
		var e *Error
		if !isUnreachable(err) && !(errors.As(err, &e) && e.Status == http.StatusServiceUnavailable) {
			return false
		}
	}
	return true
}

// urls lists the servers' base URLs, for messages.
func (c *Client) urls() []string {
	out := make([]string, len(c.backends))
	for i, b := range c.backends {
		out[i] = b.url
	}
	return out
}
