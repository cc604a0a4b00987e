package gen

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestBatcherWaitsForAnsweredCallers: eight known callers were answered
// (as if by one call); seven come back at 3 ms intervals, far apart for
// the quiet gap, and the eighth leaves. The batcher closes the batch when
// the last of them is back: one call of seven, long before the window.
func TestBatcherWaitsForAnsweredCallers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &countingGen{}
	const window = 30 * time.Second
	b := newBatcher(ctx, inner, 64, window, 100*time.Microsecond)
	callers := make([]*Caller, 8)
	for i := range callers {
		callers[i] = &Caller{}
		callers[i].answered(b.turns)
	}
	start := time.Now()
	errs := make(chan error, 8)
	for i, c := range callers {
		go func() {
			if i == 7 {
				time.Sleep(30 * time.Millisecond)
				c.Leave()
				errs <- nil
				return
			}
			time.Sleep(time.Duration(i+1) * 3 * time.Millisecond)
			_, err := b.Generate(WithCaller(ctx, c), []Request{{Seed: uint64(i)}})
			errs <- err
		}()
	}
	oneCall(t, errs, 8, start, window, inner, 7)
	if n := b.turns.n.Load(); n != 7 {
		t.Fatalf("%d callers away after the call, want the 7 it answered", n)
	}
}

// TestBatcherCallerAwayForever: a known caller that neither comes back nor
// leaves holds a batch only until the window ends.
func TestBatcherCallerAwayForever(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &countingGen{}
	b := newBatcher(ctx, inner, 64, 50*time.Millisecond, 100*time.Microsecond)
	if _, err := b.Generate(WithCaller(ctx, &Caller{}), []Request{{Seed: 1}}); err != nil {
		t.Fatal(err) // this caller is now away for good
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Generate(WithCaller(ctx, &Caller{}), []Request{{Seed: 2}})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a call waited past the window for a caller that never came back")
	}
}

// gateGen is a two-lane generator whose first call waits for open.
type gateGen struct {
	mu    sync.Mutex
	calls []int // requests per call, in the order calls started
	open  chan struct{}
}

func (g *gateGen) Lanes() int { return 2 }

func (g *gateGen) Generate(ctx context.Context, reqs []Request) ([]Result, error) {
	return g.GenerateOn(ctx, -1, reqs)
}

func (g *gateGen) GenerateOn(ctx context.Context, lane int, reqs []Request) ([]Result, error) {
	g.mu.Lock()
	first := len(g.calls) == 0
	g.calls = append(g.calls, len(reqs))
	g.mu.Unlock()
	if first {
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return make([]Result, len(reqs)), nil
}

func (g *gateGen) started() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// TestBatcherHoldsBackBusyLaneShare: of 40 requests gathered while one
// lane is busy, the idle lane runs its share of 20, and the other 20 wait
// for the next free lane (here the same one, whose call ends at once)
// instead of going with them.
func TestBatcherHoldsBackBusyLaneShare(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &gateGen{open: make(chan struct{})}
	b := newBatcher(ctx, inner, 64, time.Minute, 20*time.Millisecond)
	errs := make(chan error, 41)
	ask := func(seed uint64) {
		_, err := b.Generate(ctx, []Request{{Seed: seed}})
		errs <- err
	}
	go ask(0)
	// The 40 are known callers, counted away until they call: their batch
	// closes when the last of them is queued, however far apart a busy
	// machine starts their goroutines (with a quiet gap it closed early
	// when they came more than the gap apart).
	callers := make([]*Caller, 40)
	for i := range callers {
		callers[i] = &Caller{}
		Expect(b, callers[i])
	}
	waitFor := func(what string, ok func([]int) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(inner.started()); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: calls %v", what, inner.started())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the first call never started", func(c []int) bool { return len(c) == 1 })
	for i, c := range callers {
		go func() {
			_, err := b.Generate(WithCaller(ctx, c), []Request{{Seed: uint64(1 + i)}})
			errs <- err
		}()
	}
	// The idle lane answers its share at once and takes the held one.
	waitFor("the 40 requests were not all called", func(c []int) bool {
		n := 0
		for _, k := range c[1:] {
			n += k
		}
		return n == 40
	})
	if got := inner.started(); !slices.Equal(got, []int{1, 20, 20}) {
		t.Fatalf("calls of %v requests while a lane was busy, want [1 20 20]: the idle lane's share, then the held share", got)
	}
	close(inner.open)
	for range 41 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestHoldBack(t *testing.T) {
	units := func(sizes ...int) []*pending {
		out := make([]*pending, len(sizes))
		for i, n := range sizes {
			out[i] = &pending{reqs: make([]Request, n)}
		}
		return out
	}
	ones := func(n int) []int { return slices.Repeat([]int{1}, n) }
	for _, tc := range []struct {
		name             string
		sizes            []int
		free, lanes, max int
		run              int // requests run now; the rest is held
	}{
		{"62 singles, 1 of 2 lanes idle", ones(62), 1, 2, 64, 31},
		{"a batch within one lane's share", ones(32), 1, 2, 64, 32},
		{"every lane idle", ones(62), 2, 2, 64, 62},
		{"one large unit", []int{40}, 1, 2, 64, 40},
		{"units of 8, 1 of 2 idle", []int{8, 8, 8, 8, 8}, 1, 2, 64, 24},
		{"2 of 4 lanes idle", ones(40), 2, 4, 64, 20},
	} {
		batch := units(tc.sizes...)
		n := 0
		for _, s := range tc.sizes {
			n += s
		}
		run, rn, rest := holdBack(batch, n, tc.free, tc.lanes, tc.max)
		held := 0
		for _, p := range rest {
			held += len(p.reqs)
		}
		if rn != tc.run || held != n-tc.run || len(run)+len(rest) != len(batch) {
			t.Errorf("%s: runs %d (%d units), holds %d (%d units); want %d run", tc.name, rn, len(run), held, len(rest), tc.run)
		}
	}
}

// TestCallerLeftIsNotAway: a call answered after its caller gave up on it
// and left (an attempt cancelled while its call ran) does not count the
// caller away, which would hold every later batch for the window.
func TestCallerLeftIsNotAway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &gateGen{open: make(chan struct{})}
	// One call at a time: the second runs after the first is answered.
	b := newBatcher(ctx, oneLane{inner}, 64, 5*time.Second, time.Millisecond)
	c := &Caller{}
	cctx, ccancel := context.WithCancel(WithCaller(ctx, c))
	done := make(chan error, 1)
	go func() {
		_, err := b.Generate(cctx, []Request{{Seed: 1}})
		done <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); len(inner.started()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the call never started")
		}
		time.Sleep(time.Millisecond)
	}
	ccancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	c.Leave()
	close(inner.open) // the call ends and is answered after the caller left
	if _, err := b.Generate(WithCaller(ctx, &Caller{}), []Request{{Seed: 2}}); err != nil {
		t.Fatal(err)
	}
	if n := b.Away(); n != 1 {
		t.Fatalf("%d callers away, want only the second one", n)
	}
}

// oneLane hides gateGen's lanes: the batcher runs one call at a time.
type oneLane struct{ g *gateGen }

func (o oneLane) Generate(ctx context.Context, reqs []Request) ([]Result, error) {
	return o.g.Generate(ctx, reqs)
}

// TestExpectedCallersShareTheFirstCall: callers the batcher was told to
// expect (a step's rollouts, launched together) are gathered into one
// call however far apart their first calls come, where the first to
// arrive would otherwise run alone; one that leaves without calling holds
// nothing, and none is counted away afterwards.
func TestExpectedCallersShareTheFirstCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &countingGen{}
	const window = 30 * time.Second
	b := newBatcher(ctx, inner, 64, window, 100*time.Microsecond)
	callers := make([]*Caller, 5)
	for i := range callers {
		callers[i] = &Caller{}
		Expect(b, callers[i])
	}
	Expect(inner, &Caller{}) // not a batcher: nothing to count
	start := time.Now()
	errs := make(chan error, len(callers))
	for i, c := range callers {
		go func() {
			time.Sleep(time.Duration(i) * 4 * time.Millisecond)
			if i == 4 {
				c.Leave()
				errs <- nil
				return
			}
			_, err := b.Generate(WithCaller(ctx, c), []Request{{Seed: uint64(i)}})
			c.Leave()
			errs <- err
		}()
	}
	oneCall(t, errs, len(callers), start, window, inner, 4)
	if n := b.Away(); n != 0 {
		t.Fatalf("%d callers away after all left", n)
	}
}

// oneCall takes n results from errs and checks that the callers' requests
// reached inner as one call of want, well before the batcher's window.
func oneCall(t *testing.T, errs <-chan error, n int, start time.Time, window time.Duration, inner *countingGen, want int) {
	t.Helper()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > window/2 {
		t.Fatalf("took %v: the batch waited for the window, not for its callers", took)
	}
	inner.mu.Lock()
	defer inner.mu.Unlock()
	if !slices.Equal(inner.calls, []int{want}) {
		t.Fatalf("calls of %v requests: the callers were not gathered into one call of %d", inner.calls, want)
	}
}
