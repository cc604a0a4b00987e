// Server selection and health: least outstanding calls, servers that
// refuse connections out of the rotation until a probe brings them back.

package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// ServerStatus is a snapshot of one server as the client sees it.
type ServerStatus struct {
	URL      string
	Up       bool
	InFlight int
	Served   int64 // calls answered with a response (any status)
}

// Status reports every server.
func (c *Client) Status() []ServerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ServerStatus, len(c.backends))
	for i, b := range c.backends {
		out[i] = ServerStatus{URL: b.url, Up: b.up, InFlight: b.inFlight, Served: b.served}
	}
	return out
}

// pick takes the eligible server with the fewest outstanding calls,
// preferring servers known up over ones only due for a retry, and counts
// the call against it. Skipped holds servers this call already failed on.
func (c *Client) pick(skip map[*backend]bool) *backend {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var best *backend
	bestDown := false
	n := len(c.backends)
	for k := range n {
		b := c.backends[(c.next+k)%n]
		if skip[b] || b.fenced || (!b.up && now.Before(b.retryAt)) || !c.fresh(b) {
			continue
		}
		down := !b.up
		if best == nil || (bestDown && !down) || (down == bestDown && b.inFlight < best.inFlight) {
			best, bestDown = b, down
		}
	}
	if best != nil {
		best.inFlight++
		c.next = (c.next + 1) % n
	}
	return best
}

func (c *Client) release(b *backend, answered bool) {
	c.mu.Lock()
	b.inFlight--
	if answered {
		b.served++
	}
	c.mu.Unlock()
}

func (c *Client) markDown(b *backend, err error) {
	c.mu.Lock()
	wasUp := b.up
	now := time.Now()
	if !wasUp {
		if now.Before(b.retryAt) {
			// Calls that were in flight when the server went down fail
			// together: count one failure per retry window, or a burst
			// of them sends the backoff straight to its cap.
			c.mu.Unlock()
			return
		}
		b.backoff = min(2*b.backoff, c.opts.MaxBackoff)
	}
	b.up = false
	b.retryAt = now.Add(b.backoff)
	c.mu.Unlock()
	if wasUp {
		c.log.Warn("generation server down", "server", b.url, "err", err)
	}
}

func (c *Client) markUp(b *backend) {
	c.mu.Lock()
	wasUp := b.up
	b.up, b.backoff = true, c.opts.MinBackoff
	c.mu.Unlock()
	if !wasUp {
		c.log.Info("generation server up", "server", b.url)
	}
}

func (c *Client) probeLoop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, b := range c.backends {
			c.mu.Lock()
			due := b.up || !time.Now().Before(b.retryAt)
			c.mu.Unlock()
			if due {
				wg.Go(func() { c.probe(ctx, b) })
			}
		}
		wg.Wait()
	}
}

func (c *Client) probe(ctx context.Context, b *backend) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	defer cancel()
	// A health answer to a request sent while an update was under way, or
	// before one began, may name the old weights (catchUp ignores it).
	c.mu.Lock()
	updates := b.updates
	if b.fenced {
		updates-- // never equal to b.updates: the answer is not used
	}
	c.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/health", nil)
	if err != nil {
		return
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			c.markDown(b, err)
		}
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		// A server that came back (or changed version under us) is
		// brought to the current weights before it gets a call.
		if err := c.catchUp(ctx, b, reportedVersion(resp.Header), resp.Header.Get(instanceHeader), updates); err != nil {
			c.markDown(b, err)
			return
		}
		c.markUp(b)
		return
	}
	c.markDown(b, fmt.Errorf("health: HTTP %d", resp.StatusCode))
}
