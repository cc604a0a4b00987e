package controller

import (
	"errors"
	"testing"
	"time"
)

// firedTimer returns a call timer of d and a channel that receives the
// time its cancel ran, with the cause.
func firedTimer(d time.Duration) (*callTimer, chan time.Time) {
	fired := make(chan time.Time, 4)
	ct := newCallTimer(d, func(cause error) {
		if errors.Is(cause, errCallTimeout) {
			fired <- time.Now()
		}
	})
	return ct, fired
}

// TestCallTimerFiresAtTheRunningCallsDeadline: the timer armed by a first
// call goes off while a second call runs; it must wait out the second
// call's own deadline (not cancel at the first's, half a deadline
// earlier), and then cancel. The second call must start before the
// first's deadline: a machine too busy for that (the first call then
// rightly times out) retries with a longer deadline instead of failing.
func TestCallTimerFiresAtTheRunningCallsDeadline(t *testing.T) {
	for d := 60 * time.Millisecond; ; d *= 2 {
		if d > 16*time.Second {
			t.Fatal("never started a second call before the first's deadline")
		}
		ct, fired := firedTimer(d)
		t0 := time.Now()
		ct.arm()
		time.Sleep(d / 2)
		ct.disarm()
		start := time.Now()
		ct.arm() // the second call, still running when the first's deadline passes
		if start.Sub(t0) >= d {
			ct.close()
			continue
		}
		select {
		case at := <-fired:
			if took := at.Sub(start); took < d {
				t.Fatalf("cancelled %v into the second call, before its %v deadline", took, d)
			}
		case <-time.After(d + 30*time.Second):
			t.Fatal("the second call's deadline passed and nothing was cancelled")
		}
		ct.close()
		return
	}
}

// TestCallTimerIdle: with no call running when the timer goes off nothing
// is cancelled, and the next call's deadline is still enforced.
func TestCallTimerIdle(t *testing.T) {
	const d = 30 * time.Millisecond
	ct, fired := firedTimer(d)
	defer ct.close()
	ct.arm()
	ct.disarm()
	select {
	case <-fired:
		t.Fatal("cancelled with no call running")
	case <-time.After(3 * d):
	}
	start := time.Now()
	ct.arm()
	select {
	case at := <-fired:
		if took := at.Sub(start); took < d {
			t.Fatalf("cancelled after %v, before the %v deadline", took, d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call after an idle timer was never cancelled")
	}
	ct.disarm()
	ct.arm()
	ct.close()
	select {
	case <-fired:
		t.Fatal("cancelled after close")
	case <-time.After(3 * d):
	}
}
