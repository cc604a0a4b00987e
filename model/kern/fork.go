package kern

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Fork runs fn(0), ..., fn(n-1) and returns when all have returned: fn(0) on
// the calling goroutine, the others on long-lived helper goroutines when one
// is free, else on fresh goroutines. The calls must be independent (they may
// run concurrently, in any order); what each computes must not depend on
// where it runs, which keeps every result bit-identical to running them one
// after another. With GOMAXPROCS 1 they run inline, in order.
//
// Why helpers: a product of ~25 MFLOP lasts ~0.1-0.2 ms per core, and
// starting a goroutine on an idle vCPU (futex wake of a parked thread) costs
// tens of µs on a VM, which is where 2 shards lost most of their second
// core. A helper spins for spinWait after each job before it parks, so back
// to back calls (GEMM shards, decode steps, layer after layer) reach a
// running thread. The caller likewise spins for the helpers' shards before
// it blocks. A job a helper has not started by the time the caller is done
// with its own shard is taken back and run by the caller: on an
// oversubscribed machine a helper's thread may not be on a CPU, and the
// caller must not wait for it to be scheduled (a fresh goroutine had the
// same property: the caller's P ran it itself).
func Fork(n int, fn func(i int)) {
	if n <= 1 || runtime.GOMAXPROCS(0) < 2 {
		for i := range n {
			fn(i)
		}
		return
	}
	var got [maxHelpers]*helper
	var wg sync.WaitGroup
	nh := 0
	for i := 1; i < n; i++ {
		if h := helpers.acquire(); h != nil {
			got[nh] = h
			nh++
			h.post(fn, i)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	fn(0)
	for _, h := range got[:nh] {
		if f, i, ok := h.takeBack(); ok {
			f(i)
		} else {
			h.wait()
		}
		helpers.release(h)
	}
	wg.Wait()
}

// maxHelpers bounds the helper goroutines of a process; more shards than
// helpers get fresh goroutines.
const maxHelpers = 8

// spinWait is how long a helper looks for its next job, and a caller for
// its helpers' results, before blocking: long enough to bridge the gap
// between back-to-back products or decode steps, short enough that an idle
// process stops burning CPU within a fraction of a millisecond.
const spinWait = 100 * time.Microsecond

// helperPool is the process's helpers. It is process-wide, like the cores
// the helpers stand for: two models (or a model and a benchmark) in one
// process share them, each Fork taking the ones that are free.
type helperPool struct {
	mu   sync.Mutex
	free []*helper
	all  int
}

var helpers helperPool

// acquire returns a free helper, starting one while fewer than
// min(GOMAXPROCS-1, maxHelpers) exist, or nil.
func (p *helperPool) acquire() *helper {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := len(p.free); k > 0 {
		h := p.free[k-1]
		p.free = p.free[:k-1]
		return h
	}
	if p.all >= min(runtime.GOMAXPROCS(0)-1, maxHelpers) {
		return nil
	}
	p.all++
	h := &helper{wake: make(chan struct{}, 1), fin: make(chan struct{}, 1)}
	go h.loop()
	return h
}

func (p *helperPool) release(h *helper) {
	p.mu.Lock()
	p.free = append(p.free, h)
	p.mu.Unlock()
}

// helper runs one job at a time for the Fork that acquired it. Jobs and
// completions are counted (posted, done); each side spins on the other's
// counter and then parks on a one-slot channel, using the parked/waiting
// flags so exactly one wake-up is sent for each park (see park).
type helper struct {
	fn    func(int)
	arg   int
	seq   atomic.Uint64 // jobs posted
	claim atomic.Uint64 // jobs claimed, by the helper (to run) or the caller (taken back)
	done  atomic.Uint64 // jobs finished by the helper
	// parked: the helper is (about to be) blocked on wake; waiting: the
	// caller is (about to be) blocked on fin.
	parked, waiting atomic.Bool
	wake, fin       chan struct{}
}

func (h *helper) post(fn func(int), arg int) {
	h.fn, h.arg = fn, arg
	h.seq.Add(1) // publishes fn and arg to the helper
	if h.parked.CompareAndSwap(true, false) {
		h.wake <- struct{}{}
	}
}

// takeBack claims the posted job for the caller if the helper has not
// claimed it yet, and returns it.
func (h *helper) takeBack() (func(int), int, bool) {
	k := h.seq.Load()
	if !h.claim.CompareAndSwap(k-1, k) {
		return nil, 0, false
	}
	fn, arg := h.fn, h.arg
	h.fn = nil
	return fn, arg, true
}

func (h *helper) wait() {
	want := h.seq.Load()
	park(&h.done, want, &h.waiting, h.fin)
	h.fn = nil // drop the closure so the caller's data can be collected
}

func (h *helper) loop() {
	for next := uint64(1); ; next++ {
		park(&h.seq, next, &h.parked, h.wake)
		if !h.claim.CompareAndSwap(next-1, next) {
			continue // the caller took this job back
		}
		h.fn(h.arg)
		h.done.Store(next)
		if h.waiting.CompareAndSwap(true, false) {
			h.fin <- struct{}{}
		}
	}
}

// park returns once ctr reaches want: it spins for spinWait, then blocks
// (see block).
func park(ctr *atomic.Uint64, want uint64, flag *atomic.Bool, ch chan struct{}) {
	if ctr.Load() >= want {
		return
	}
	t0 := time.Now()
	for i := 1; ctr.Load() < want; i++ {
		if i%64 != 0 {
			continue
		}
		if time.Since(t0) > spinWait {
			block(ctr, want, flag, ch)
			return
		}
		runtime.Gosched() // let a goroutine waiting for this P run
	}
}

// block sets flag and receives on ch until ctr reaches want. The other side
// advances ctr first and then sends on ch only if it clears flag itself, so
// at most one token is ever outstanding and each is taken by the block that
// set the flag. A token can be stale: a poster preempted between advancing
// ctr and clearing the flag sends it after this side has already seen the
// new count, returned, and set the flag again for the next one. So a wake-up
// is only a hint and the count is read again (a helper that trusted it
// claimed a job not yet posted and ran a cleared closure).
func block(ctr *atomic.Uint64, want uint64, flag *atomic.Bool, ch chan struct{}) {
	for {
		flag.Store(true)
		if ctr.Load() >= want {
			if !flag.CompareAndSwap(true, false) {
				<-ch // a sender cleared the flag: take its token so it cannot wake a later block
			}
			return
		}
		<-ch
		if ctr.Load() >= want {
			return
		}
	}
}
