package controller

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWorkersReuseAndStop: functions run at once however many are in
// flight (no bound), a later batch runs on the idle workers of the first
// (no new goroutines), and stop ends them all. Workers are counted from a
// stack dump, not runtime.NumGoroutine: other tests' goroutines may still
// be ending (a count against a baseline failed under -race that way).
func TestWorkersReuseAndStop(t *testing.T) {
	const n = 8
	w := newWorkers()
	batch := func() int {
		var started, done sync.WaitGroup
		release := make(chan struct{})
		started.Add(n)
		done.Add(n)
		for range n {
			w.run(func() {
				defer done.Done()
				started.Done()
				<-release // every function is in flight at once
			})
		}
		waitOrFail(t, started.Wait, "the functions to start together")
		running := workerGoroutines(false)
		close(release)
		waitOrFail(t, done.Wait, "the functions to end")
		return running
	}
	if got := batch(); got != n {
		t.Fatalf("first batch ran on %d goroutines, want %d", got, n)
	}
	// The workers go idle after their function returns: wait until all
	// are (a second batch started sooner would rightly start more).
	deadline := time.Now().Add(time.Minute)
	for workerGoroutines(true) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers idle a minute after their functions returned", workerGoroutines(true), n)
		}
		time.Sleep(time.Millisecond)
	}
	if got := batch(); got != n {
		t.Fatalf("second batch ran on %d workers, want the first batch's %d", got, n)
	}
	waitOrFail(t, w.stop, "stop")
	deadline = time.Now().Add(time.Minute) // a worker past wg.Done may still be on its way out
	for workerGoroutines(false) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := workerGoroutines(false); got != 0 {
		t.Fatalf("%d workers after stop", got)
	}
}

// workerGoroutines counts the workers (only the idle ones, waiting for a
// function, with idle), from a dump of every goroutine's stack.
func workerGoroutines(idle bool) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*workers).work") && (!idle || strings.Contains(g, "[select")) {
			n++
		}
	}
	return n
}

func waitOrFail(t *testing.T, wait func(), what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
