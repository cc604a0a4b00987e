package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/metrics"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestTrackerPhasesRateETA: the warm start is a phase of its own with its
// own rate and ETA; then steps/s counts from this process's first step,
// the ETA follows from it, and in-flight is read live.
func TestTrackerPhasesRateETA(t *testing.T) {
	c := &fakeClock{time.Unix(1000, 0)}
	tr := newTracker(10, c.now)
	tr.warmStart(1, 100)
	c.t = c.t.Add(9 * time.Second)
	tr.warmStart(31, 100) // 31 steps in 9 s... counted from the first callback
	if got := tr.plainLine(); !strings.HasPrefix(got, "warm start 31/100 (31%)") || !strings.Contains(got, "eta 0m20s") {
		t.Fatalf("warm start line %q", got)
	}
	tr.warmStart(100, 100)
	if got := tr.plainLine(); !strings.HasPrefix(got, "starting") {
		t.Fatalf("between phases: %q", got)
	}
	// resumed at step 4: step 5 took 2 s, step 6 ends 2 s later
	c.t = c.t.Add(time.Minute)
	tr.progress(controller.Progress{Step: 5, MaxSteps: 10, Metrics: metrics.Step{StepSeconds: 2, RewardMean: 0.5}})
	c.t = c.t.Add(2 * time.Second)
	tr.progress(controller.Progress{Step: 6, MaxSteps: 10, Metrics: metrics.Step{StepSeconds: 2, RewardMean: 0.75}})
	var live int64 = 7
	tr.setLive(func() int64 { return live })
	got := tr.plainLine()
	for _, want := range []string{"step 6/10 (60%)", "0.50 steps/s", "eta 0m08s", "reward 0.750", "in flight 7", "elapsed 1m11s"} {
		if !strings.Contains(got, want) {
			t.Errorf("step line %q lacks %q", got, want)
		}
	}
	live = 3
	if got := tr.plainLine(); !strings.Contains(got, "in flight 3") {
		t.Errorf("in flight not live: %q", got)
	}
}

type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPlainModePrintsOnItsClock: without a terminal, a line every interval
// whatever the run does.
func TestPlainModePrintsOnItsClock(t *testing.T) {
	var out lines
	d := newPlain(newTracker(3, time.Now), &out, 10*time.Millisecond)
	// Three lines come on the clock alone (nothing else happens); how long
	// they take is the machine's business.
	for deadline := time.Now().Add(time.Minute); strings.Count(out.String(), "progress: starting") < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d lines in a minute at a 10ms interval:\n%s", strings.Count(out.String(), "progress: starting"), out.String())
		}
	}
	d.stop(false)
	after := out.String()
	time.Sleep(30 * time.Millisecond)
	if out.String() != after {
		t.Fatal("lines after stop")
	}
}
