package openai

import (
	"strings"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
)

// TestDescribeNamesServersWaitedOn: the stall watchdog's line names the
// server generation waits on (down) and the one it can use.
func TestDescribeNamesServersWaitedOn(t *testing.T) {
	up, _ := newLonghaul(t, nil, 1)
	down, _ := newLonghaul(t, nil, 1)
	down.Close()
	c := newClient(t, []string{up.URL, down.URL}, Options{ProbeInterval: 10 * time.Millisecond, MaxOutage: time.Second})
	if _, err := c.Generate(t.Context(), []gen.Request{req(1), req(2)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	var s string
	for time.Now().Before(deadline) {
		if s = c.Describe(); strings.Contains(s, "waiting on 1 of 2 servers: "+down.URL+" (down") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(s, "waiting on 1 of 2 servers: "+down.URL+" (down") || !strings.Contains(s, "ready: "+up.URL+" (up") {
		t.Fatalf("Describe() = %q: want the down server named as waited on and the up one as ready", s)
	}
}
