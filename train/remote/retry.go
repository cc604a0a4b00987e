package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/train"
)

// Retries. A trainer that cannot be reached (connection refused or reset,
// 502/503/429) is waited for with backoff up to Options.MaxOutage; infra
// errors are retried, as docs/serving.md promises. Before a retry the
// client asks the trainer's state: a trainer that came back at another step
// than the client last saw (a restarted serve-trainer starts from its seed
// or its --checkpoint) is not retried into — the call fails with a
// *RestartedError, and the controller loads the newest durable checkpoint
// into it and rewinds through the log, exactly as after its own crash.

// ErrTrainerRestarted is in the chain of a *RestartedError.
var ErrTrainerRestarted = errors.New("trainer came back at a different step")

// RestartedError reports a trainer found at step Got where the client last
// saw Want.
type RestartedError struct {
	Server    string
	Want, Got int64
	// WantWarm, GotWarm: warm-start steps, when the step matched but the
	// warm start did not (a trainer restarted after its warm start).
	WantWarm, GotWarm int
}

func (e *RestartedError) Error() string {
	if e.WantWarm > 0 {
		return fmt.Sprintf("remote trainer %s: %v: it has taken %d warm-start steps, the run expected %d (load the newest durable checkpoint into it, or warm-start it again)",
			e.Server, ErrTrainerRestarted, e.GotWarm, e.WantWarm)
	}
	return fmt.Sprintf("remote trainer %s: %v: it is at step %d, the run expected %d (load the newest durable checkpoint into it and rewind)",
		e.Server, ErrTrainerRestarted, e.Got, e.Want)
}

func (e *RestartedError) Unwrap() []error { return []error{ErrTrainerRestarted, train.ErrStateLost} }

// FailureClass: a restart is infra, but not one a blind retry fixes.
func (e *RestartedError) FailureClass() string { return failure.Infra }

// retryable reports whether err means "the trainer is not there right
// now": no answer at all (but not the call's own deadline), or an answer
// that says come back later.
func retryable(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Class != failure.Infra || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch e.Status {
	case 0, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusTooManyRequests:
		return true
	}
	return false
}

// retry runs call until it succeeds, fails for good, or the trainer has
// been unreachable for MaxOutage. With fence, a retry first checks that
// the trainer is still at the step the client knew.
func (c *Client) retry(ctx context.Context, route string, fence bool, call func() error) error {
	start := time.Now()
	backoff := c.opts.MinBackoff
	defer c.setAway(time.Time{}, nil)
	for {
		err := call()
		if err == nil || !retryable(err) {
			return err
		}
		c.setAway(start, err)
		if time.Since(start) > c.opts.MaxOutage {
			return fmt.Errorf("%s: trainer unreachable for %v (rollout_failure.max_outage_s): %w", route, time.Since(start).Round(time.Second), err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, c.opts.MaxBackoff)
		if !fence {
			continue
		}
		c.mu.Lock()
		want := c.known
		c.mu.Unlock()
		if want < 0 {
			continue
		}
		var s wireState
		if serr := c.do(ctx, c.opts.Timeout, http.MethodGet, "/v1/state", "", nil, &s); serr != nil {
			if retryable(serr) {
				continue // still away: the next round tries again
			}
			return serr
		}
		if s.Step != want {
			return &RestartedError{Server: c.url, Want: want, Got: s.Step}
		}
	}
}

// setAway records since when (zero: not) the trainer has been away, and
// the last failure, for Describe.
func (c *Client) setAway(since time.Time, err error) {
	c.mu.Lock()
	c.awaySince, c.awayErr = since, err
	c.mu.Unlock()
}

// Describe says, for the stall watchdog, whether the run waits on the
// trainer: since when it has been unreachable and why.
func (c *Client) Describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.awaySince.IsZero() {
		return "trainer " + c.url + " reachable"
	}
	return fmt.Sprintf("waiting on trainer %s: unreachable for %s (last: %v)", c.url, time.Since(c.awaySince).Round(time.Second), c.awayErr)
}
