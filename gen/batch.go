package gen

import (
	"context"
	"fmt"
	"time"
)

// Batcher turns many concurrent Generate calls (one per rollout goroutine)
// into few large ones on an inner Generator, because a batch of 16 decodes
// several times more tokens per second than 16 single calls. It changes no
// result: each request carries its own seed, and the inner generator must
// answer a request the same whatever else is in its batch.
type Batcher struct {
	inner  Generator
	max    int
	window time.Duration
	gap    time.Duration // a batch also closes this long after its latest arrival
	queue  chan *pending
	turns  *turns // known callers answered and not back (caller.go)
}

// burstGap closes a batch early once its burst of arrivals is over: the
// rollouts of one step answer their env turns and come back within tens of
// µs of each other, and waiting out the whole window after the last of them
// left both cores idle for it (the window was up to the length of a 6-token
// call). A quiet gap this long ends the gathering.
const burstGap = 300 * time.Microsecond

// laneBurstGap is the quiet gap before a generator with lanes, for calls
// of no known Caller (a known Caller's batch ends when every caller is
// back: caller.go): a batch
// only gathers this way while a lane is idle (while every lane is busy it
// keeps gathering anyway), so there waiting costs a core. 30 µs still
// takes in the returns of one burst; BenchmarkBatchedTurns (gen/embedded)
// ran 0.8–0.9× the wall time per step of the 300 µs gap.
const laneBurstGap = 30 * time.Microsecond

type pending struct {
	ctx    context.Context
	caller *Caller // nil: no known caller
	reqs   []Request
	done   chan struct{}
	res    []Result
	err    error
}

// NewBatcher starts a batcher over inner that sends at most max requests per
// call, waiting up to window after the first request for others to join:
// when the first is a known Caller's (WithCaller), until every caller it
// answered is back or gone; otherwise no longer than a short quiet gap
// (burstGap, or laneBurstGap where inner has lanes; at most window) after
// the latest one. It runs until ctx ends.
func NewBatcher(ctx context.Context, inner Generator, max int, window time.Duration) *Batcher {
	gap := burstGap
	if l, ok := inner.(Laned); ok && l.Lanes() > 1 {
		gap = laneBurstGap
	}
	return newBatcher(ctx, inner, max, window, min(gap, window))
}

func newBatcher(ctx context.Context, inner Generator, max int, window, gap time.Duration) *Batcher {
	if max < 1 {
		max = 1
	}
	b := &Batcher{inner: inner, max: max, window: window, gap: gap, queue: make(chan *pending, 4096), turns: newTurns()}
	go b.loop(ctx)
	return b
}

// Laned is a Generator that can run several calls at once, one per lane
// (the embedded model: one per core), each answering its requests as
// Generate would.
type Laned interface {
	Generator
	Lanes() int
	GenerateOn(ctx context.Context, lane int, reqs []Request) ([]Result, error)
}

// Queued is the number of Generate calls waiting to be batched (the
// generation queue depth).
func (b *Batcher) Queued() int { return len(b.queue) }

// Away is the number of known callers (WithCaller) whose call b answered
// and that have neither called again nor left: rollouts between turns.
func (b *Batcher) Away() int { return int(b.turns.n.Load()) }

// Generate queues reqs as one unit (a group's members stay together so the
// inner generator can share their prompt prefix) and waits for the answer.
func (b *Batcher) Generate(ctx context.Context, reqs []Request) ([]Result, error) {
	p := &pending{ctx: ctx, caller: CallerFrom(ctx), reqs: reqs, done: make(chan struct{})}
	seen := p.caller.answerCount()
	select {
	case b.queue <- p:
	case <-ctx.Done():
		p.caller.back()
		return nil, ctx.Err()
	}
	// Back only once queued: a gatherer that sees the last caller back
	// finds this call in the queue. The call may be answered before this
	// line runs; backFrom then leaves the away its answer set.
	p.caller.backFrom(seen)
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *Batcher) loop(ctx context.Context) {
	if l, ok := b.inner.(Laned); ok && l.Lanes() > 1 {
		b.laneLoop(ctx, l)
		return
	}
	g := b.newGatherer()
	for {
		batch, n, ok := g.next(ctx)
		if !ok {
			return
		}
		b.run(ctx, batch, n, nil, 0)
	}
}

// gatherer collects a batch after its first request: until max requests,
// the window after the first, or, when the first has a known caller, every
// answered caller back (then it takes what is queued), and otherwise a
// quiet gap after the latest.
type gatherer struct {
	b     *Batcher
	timer *time.Timer
}

func (b *Batcher) newGatherer() *gatherer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &gatherer{b: b, timer: t}
}

// next waits for a first request and gathers its batch; at the end of ctx
// it answers what is queued with ctx's error and returns false.
func (g *gatherer) next(ctx context.Context) ([]*pending, int, bool) {
	select {
	case first := <-g.b.queue:
		batch, n := g.gather(ctx, first)
		return batch, n, true
	case <-ctx.Done():
		g.b.drain(ctx.Err())
		return nil, 0, false
	}
}

func (g *gatherer) gather(ctx context.Context, first *pending) ([]*pending, int) {
	b := g.b
	batch := []*pending{first}
	n := len(first.reqs)
	known := first.caller != nil
	end := time.Now().Add(b.window)
	wait := func() time.Duration {
		if known {
			return max(0, time.Until(end))
		}
		return max(0, min(time.Until(end), b.gap))
	}
	g.timer.Reset(wait())
	defer g.timer.Stop()
	for n < b.max {
		if known && b.turns.n.Load() == 0 {
			return b.takeQueued(batch, n)
		}
		select {
		case p := <-b.queue:
			batch = append(batch, p)
			n += len(p.reqs)
			if !known {
				g.timer.Reset(wait()) // (Go ≥ 1.23 timers: no stale fire survives Reset or Stop)
			}
		case <-b.turns.back: // the loop checks the count
		case <-g.timer.C:
			return batch, n
		case <-ctx.Done():
			return batch, n
		}
	}
	return batch, n
}

// takeQueued adds to batch what is queued now, up to max requests.
func (b *Batcher) takeQueued(batch []*pending, n int) ([]*pending, int) {
	for n < b.max {
		select {
		case p := <-b.queue:
			batch = append(batch, p)
			n += len(p.reqs)
		default:
			return batch, n
		}
	}
	return batch, n
}

// laneLoop drives a generator with several lanes. A gathered batch goes to
// every idle lane, split by whole units into parts of about equal rows; a
// lane whose call ends takes the next batch at once instead of waiting for
// the other lanes' slowest rows, and while every lane is busy the batch
// keeps gathering. A batch too large for one lane (holdBack) leaves the
// busy lanes' shares queued for them. A lone unit of several requests that finds every lane
// idle (a group's first call) runs as one whole-model call over all of
// them; a lone request would decode on one core either way, and as a lane
// call it leaves the other lane free for the next arrival.
func (b *Batcher) laneLoop(ctx context.Context, l Laned) {
	lanes := l.Lanes()
	free := make(chan int, lanes)
	for i := range lanes {
		free <- i
	}
	g := b.newGatherer()
	var held []*pending // the busy lanes' shares of the last batch
	for {
		var batch []*pending
		var n int
		if len(held) > 0 {
			batch, held = held, nil
			for _, p := range batch {
				n += len(p.reqs)
			}
		} else {
			var ok bool
			if batch, n, ok = g.next(ctx); !ok {
				return
			}
		}
		var got []int
		for len(got) == 0 {
			var more chan *pending
			if n < b.max {
				more = b.queue
			}
			select {
			case i := <-free:
				got = append(got, i)
			case p := <-more:
				batch = append(batch, p)
				n += len(p.reqs)
			case <-ctx.Done():
				b.fail(batch, ctx.Err())
				b.drain(ctx.Err())
				return
			}
		}
		for idle := true; idle; {
			select {
			case i := <-free:
				got = append(got, i)
			default:
				idle = false
			}
		}
		if len(batch) == 1 && n > 1 && len(got) == lanes {
			go func() {
				b.run(ctx, batch, n, nil, 0)
				for _, i := range got {
					free <- i
				}
			}()
			continue
		}
		batch, n, held = holdBack(batch, n, len(got), lanes, b.max)
		parts := splitUnits(batch, n, min(len(got), len(batch)))
		for k, pt := range parts {
			go func(lane int) {
				b.run(ctx, pt.batch, pt.n, l, lane)
				free <- lane
			}(got[k])
		}
		for _, i := range got[len(parts):] {
			free <- i
		}
	}
}

// holdBack cuts from a batch of n requests, found by free of lanes idle,
// the free lanes' share when the batch is more than one lane's share of
// max: the rest stays queued for the busy lanes, which free soon, rather
// than one lane running it all while they idle after. The first calls of
// a step's rollouts arrive as one such batch (62 of 64 in the default
// run, which one lane took 6 ms to answer, the other lane running the 2
// stragglers' calls meanwhile). A smaller batch goes whole: splitting it
// would add a call's fixed cost for little.
func holdBack(batch []*pending, n, free, lanes, max int) (run []*pending, rn int, rest []*pending) {
	if free >= lanes || n <= max/lanes {
		return batch, n, nil
	}
	want, k := free*n/lanes, 0
	for k < len(batch) && (k == 0 || rn < want) {
		rn += len(batch[k].reqs)
		k++
	}
	if k == len(batch) {
		return batch, n, nil
	}
	return batch[:k:k], rn, batch[k:]
}

type part struct {
	batch []*pending
	n     int
}

// splitUnits cuts batch (n requests in all) into k contiguous parts of
// whole units with about n/k requests each, none empty (k ≤ len(batch)).
func splitUnits(batch []*pending, n, k int) []part {
	parts := make([]part, 0, k)
	lo, acc := 0, 0
	for j := range k {
		hi := lo + 1
		acc += len(batch[lo].reqs)
		// take more while this part is below its share and leaves a unit
		// for each later part
		for hi < len(batch)-(k-1-j) && acc < (j+1)*n/k {
			acc += len(batch[hi].reqs)
			hi++
		}
		if j == k-1 {
			for ; hi < len(batch); hi++ {
				acc += len(batch[hi].reqs)
			}
		}
		p := part{batch: batch[lo:hi]}
		for _, u := range p.batch {
			p.n += len(u.reqs)
		}
		parts = append(parts, p)
		lo = hi
	}
	return parts
}

// run answers a batch with one call: on lane of l, or a whole-model call
// when l is nil.
func (b *Batcher) run(ctx context.Context, batch []*pending, n int, l Laned, lane int) {
	live := batch[:0:0] // a fresh array: the lanes' parts share batch's
	all := make([]Request, 0, n)
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.err = p.ctx.Err()
			close(p.done)
			continue
		}
		live = append(live, p)
		all = append(all, p.reqs...)
	}
	if len(live) == 0 {
		return
	}
	var res []Result
	var err error
	if l != nil {
		res, err = l.GenerateOn(ctx, lane, all)
	} else {
		res, err = b.inner.Generate(ctx, all)
	}
	if err == nil && len(res) != len(all) {
		err = fmt.Errorf("gen: batcher: inner generator answered %d of %d requests", len(res), len(all))
	}
	off := 0
	for _, p := range live {
		if err != nil {
			p.err = err
		} else {
			p.res = res[off : off+len(p.reqs) : off+len(p.reqs)]
			// Away before it is answered: it cannot be back before that.
			p.caller.answered(b.turns)
		}
		off += len(p.reqs)
		close(p.done)
	}
}

// fail answers every request of batch with err.
func (b *Batcher) fail(batch []*pending, err error) {
	for _, p := range batch {
		p.err = err
		close(p.done)
	}
}

func (b *Batcher) drain(err error) {
	for {
		select {
		case p := <-b.queue:
			p.err = err
			close(p.done)
		default:
			return
		}
	}
}
