package openai

import (
	"fmt"
	"strings"
	"time"
)

// Describe says, for the stall watchdog, which servers generation is
// waiting on and why: each server that cannot take a call now (down and
// when it is tried next, stale until re-published, or fenced while its
// weights change), then the ones that can.
func (c *Client) Describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var waiting, ready []string
	for _, b := range c.backends {
		switch {
		case !b.up:
			waiting = append(waiting, fmt.Sprintf("%s (down, tried again in %s)", b.url, max(0, b.retryAt.Sub(now)).Round(100*time.Millisecond)))
		case b.fenced:
			waiting = append(waiting, fmt.Sprintf("%s (updating its weights)", b.url))
		case !c.fresh(b):
			waiting = append(waiting, fmt.Sprintf("%s (stale: serves version %d, calls need %d..%d; re-published when it answers /health)", b.url, b.version, c.lo, c.hi))
		default:
			ready = append(ready, fmt.Sprintf("%s (up, version %d, %d in flight)", b.url, b.version, b.inFlight))
		}
	}
	s := "waiting on no server"
	if len(waiting) > 0 {
		s = fmt.Sprintf("waiting on %d of %d servers: %s", len(waiting), len(c.backends), strings.Join(waiting, ", "))
	}
	if len(ready) > 0 {
		s += "; ready: " + strings.Join(ready, ", ")
	}
	return s
}
