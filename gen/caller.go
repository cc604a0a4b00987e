package gen

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Caller is one caller's sequence of calls, each made once the one
// before it was answered: a rollout attempt, whose turns alternate between
// the model and its environment. A Batcher counts a known Caller away from
// when it answers its call until the caller calls again or leaves, and
// closes a batch once every caller it answered is back, where it would
// otherwise guess the end of a burst of returns from a quiet gap after the
// latest. The guess cost both ways: a gap shorter than a burst's slowest
// turn splits it into small calls, and a sub-millisecond timer fires late
// whenever the process has nothing else to run (the runtime then sleeps in
// epoll, whose timeout is in milliseconds): the 30 µs gap waited a median
// 0.5 ms and a 90th percentile 1.4 ms in the default run, with requests
// queued and a lane idle.
type Caller struct {
	mu   sync.Mutex
	away *turns // the batcher that answered the last call, until back or left
	left bool   // Leave was called: a late answer (its caller gave up waiting) does not count it away
	// answers counts the calls answered (and Expects). A call comes back
	// only after it is queued, and its answer may come first: the back of
	// a call then must not undo the away its own answer just set.
	answers uint64
}

// turns counts a batcher's callers that were answered and are not back.
type turns struct {
	n    atomic.Int64
	back chan struct{} // capacity 1: n reached 0 (may be stale: read n)
}

func newTurns() *turns { return &turns{back: make(chan struct{}, 1)} }

type callerKey struct{}

// WithCaller returns ctx carrying c: the calls made with it are c's.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller ctx carries, or nil.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// Leave says that the caller ctx carries makes no more calls (its rollout
// ends), so no batcher waits for it. Without a caller, or repeated, it
// does nothing.
func Leave(ctx context.Context) { CallerFrom(ctx).Leave() }

// Leave is Leave for c itself.
func (c *Caller) Leave() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.left = true
	c.mu.Unlock()
	c.back()
}

// Expect counts c away from g, when g is a Batcher, until c's first call
// or its Leave, as if g had answered it. A rollout's first call otherwise
// reaches a batcher that knows nothing of it: when a step's rollouts were
// launched together, the first to call ran alone on a lane, each lane then
// answered one rollout at a time, and the Go scheduler ran those answers
// ahead of the goroutines of rollouts not yet started (in 12 of 38 steps
// of a traced run the tenth rollout started 1-8 ms late, one core busy;
// docs/model.md, session 12). Counted away from the launch, a step's
// rollouts are gathered into one first batch, as returning callers are.
func Expect(g Generator, c *Caller) {
	if b, ok := g.(*Batcher); ok {
		c.answered(b.turns)
	}
}

// answered marks c away from t, before its call's answer is handed over
// (so it cannot come back first).
func (c *Caller) answered(t *turns) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answers++
	if c.away == nil && !c.left {
		c.away = t
		t.n.Add(1)
	}
}

// answerCount returns how many of c's calls were answered so far (0 for a
// nil c): what backFrom compares with.
func (c *Caller) answerCount() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answers
}

// back ends c's time away, telling its batcher when it was the last one.
func (c *Caller) back() { c.backFrom(^uint64(0)) }

// backFrom is back for a call queued when c had seen seen answers: it
// does nothing once a later answer (the call's own) came first. With
// seen = ^0 it always acts.
func (c *Caller) backFrom(seen uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if seen != ^uint64(0) && c.answers != seen {
		c.mu.Unlock()
		return
	}
	t := c.away
	c.away = nil
	c.mu.Unlock()
	if t != nil && t.n.Add(-1) == 0 {
		select {
		case t.back <- struct{}{}:
		default:
		}
	}
}
