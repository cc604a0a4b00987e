package cputime

import (
	"testing"
	"time"
)

// TestProcessCounts: CPU burnt on this goroutine shows up in Process, and
// no more of it than the wall time elapsed on one thread allows plus the
// others' share (bounded loosely: 2 s).
func TestProcessCounts(t *testing.T) {
	c0, t0 := Process(), time.Now()
	x := 0
	for time.Since(t0) < 50*time.Millisecond {
		x++
	}
	d := Process() - c0
	if d < 10*time.Millisecond || d > 2*time.Second {
		t.Fatalf("50 ms of spinning (%d iterations) read as %v of CPU", x, d)
	}
}
