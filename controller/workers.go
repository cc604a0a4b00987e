package controller

// This file holds the rollout workers: long-lived goroutines that run one
// rollout after another.

import "sync"

// workers runs functions on goroutines that outlive them. A fresh
// goroutine starts with a 2 KB stack, and a rollout's append path (Apply
// and the encoder in the appending goroutine, the loop above them) grows
// it to 8 KB or more: the runtime copies the stack at every doubling, which
// cost 5-7% of the controller's CPU with a goroutine per rollout. A worker
// keeps its grown stack for the next rollout. There is no bound on the
// number of workers: a function never waits for a free one, so the
// concurrency is exactly what the caller starts, as with plain goroutines;
// the pool only grows to the most functions ever in flight at once.
type workers struct {
	jobs chan func() // unbuffered: a send succeeds only when a worker is idle
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), quit: make(chan struct{})}
}

// run runs fn on an idle worker, or on a new one when none is idle. It
// must not be called after stop.
func (w *workers) run(fn func()) {
	select {
	case w.jobs <- fn:
	default:
		w.wg.Add(1)
		go w.work(fn)
	}
}

func (w *workers) work(fn func()) {
	defer w.wg.Done()
	for {
		fn()
		fn = nil // the closure's captures are not kept alive while idle
		select {
		case fn = <-w.jobs:
		case <-w.quit:
			return
		}
	}
}

// stop ends the idle workers and waits for every worker to end (a busy
// one ends when its function returns).
func (w *workers) stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}
