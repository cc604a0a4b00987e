package gen

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

type countingGen struct {
	mu    sync.Mutex
	calls []int
}

func (g *countingGen) Generate(_ context.Context, reqs []Request) ([]Result, error) {
	g.mu.Lock()
	g.calls = append(g.calls, len(reqs))
	g.mu.Unlock()
	out := make([]Result, len(reqs))
	for i, r := range reqs {
		out[i] = Result{Tokens: []int32{int32(r.Seed)}, Finish: "stop"}
	}
	return out, nil
}

func TestBatcherGathersAndRoutesAnswers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &countingGen{}
	b := NewBatcher(ctx, inner, 16, 20*time.Millisecond)
	var wg sync.WaitGroup
	const n = 32
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := b.Generate(ctx, []Request{{Seed: uint64(i)}, {Seed: uint64(i + 1000)}})
			if err != nil {
				t.Error(err)
				return
			}
			if len(res) != 2 || res[0].Tokens[0] != int32(i) || res[1].Tokens[0] != int32(i+1000) {
				t.Errorf("caller %d got %+v", i, res)
			}
		}(i)
	}
	wg.Wait()
	inner.mu.Lock()
	defer inner.mu.Unlock()
	total := 0
	for _, c := range inner.calls {
		if c > 16+1 {
			t.Errorf("batch of %d exceeds max", c)
		}
		total += c
	}
	if total != 2*n || len(inner.calls) >= n {
		t.Fatalf("calls %v: want %d requests in fewer than %d batches", inner.calls, 2*n, n)
	}
}

func TestBatcherCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := NewBatcher(ctx, &countingGen{}, 4, time.Millisecond)
	cancel()
	if _, err := b.Generate(ctx, []Request{{}}); err == nil {
		t.Fatal("want an error after cancel")
	}
}

// TestBatcherClosesAfterQuietGap: a lone request is sent once the quiet gap
// after it has passed, not after the whole window.
func TestBatcherClosesAfterQuietGap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := NewBatcher(ctx, &countingGen{}, 16, 20*time.Second)
	t0 := time.Now()
	if _, err := b.Generate(ctx, []Request{{Seed: 1}}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("a lone request waited %v: the batch did not close after the %v quiet gap", d, burstGap)
	}
}

// TestBatcherGapGathersBurst: requests arriving within the gap of each other
// join one batch, and a steady trickle is still cut at the window.
func TestBatcherGapGathersBurst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &countingGen{}
	b := newBatcher(ctx, inner, 64, 20*time.Second, 2*time.Second)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Generate(ctx, []Request{{Seed: uint64(i)}}); err != nil {
				t.Error(err)
			}
		}()
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	inner.mu.Lock()
	if len(inner.calls) != 1 || inner.calls[0] != 3 {
		t.Errorf("burst of 3 within the gap: calls %v, want one batch of 3", inner.calls)
	}
	inner.mu.Unlock()

	// A trickle that never leaves a quiet gap (20 s) is cut by the window
	// (150 ms): requests keep coming until the first call is made, which
	// only the window can cause (max is out of reach); one more comes
	// after it.
	inner2 := &countingGen{}
	b = newBatcher(ctx, inner2, 1<<20, 150*time.Millisecond, 20*time.Second)
	ask := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Generate(ctx, []Request{{Seed: uint64(i)}}); err != nil {
				t.Error(err)
			}
		}()
	}
	called := func() int {
		inner2.mu.Lock()
		defer inner2.mu.Unlock()
		return len(inner2.calls)
	}
	deadline := time.Now().Add(time.Minute)
	i := 0
	for ; called() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("a trickle of %d requests with a 150 ms window was never called", i)
		}
		ask(i)
		time.Sleep(10 * time.Millisecond) // pacing only
	}
	ask(i)
	wg.Wait()
	inner2.mu.Lock()
	defer inner2.mu.Unlock()
	if len(inner2.calls) < 2 {
		t.Errorf("a trickle with a 150 ms window: calls %v, want it cut into several batches", inner2.calls)
	}
}

// lanedGen is a countingGen with lanes: it records which lane (−1: a
// whole call) answered each call and how many of its calls ran at once.
type lanedGen struct {
	countingGen
	lanes   int
	hold    chan struct{} // when set, a lane call waits for it
	mu      sync.Mutex
	on      []int
	running int
	peak    int
}

func (g *lanedGen) Lanes() int { return g.lanes }

func (g *lanedGen) Generate(ctx context.Context, reqs []Request) ([]Result, error) {
	g.mu.Lock()
	g.on = append(g.on, -1)
	g.mu.Unlock()
	return g.countingGen.Generate(ctx, reqs)
}

func (g *lanedGen) GenerateOn(ctx context.Context, lane int, reqs []Request) ([]Result, error) {
	g.mu.Lock()
	g.on = append(g.on, lane)
	g.running++
	g.peak = max(g.peak, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	if g.hold != nil {
		select {
		case <-g.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.countingGen.Generate(ctx, reqs)
}

// TestBatcherLanes: with a generator of two lanes, a call that holds its
// lane does not stop the next batch from running on the other one; each
// caller gets its own answers; a lone unit of several requests that finds
// both lanes idle is one whole call, a lone request a lane call.
func TestBatcherLanes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &lanedGen{lanes: 2, hold: make(chan struct{})}
	b := newBatcher(ctx, inner, 64, time.Second, time.Millisecond)
	answers := make(chan error, 2)
	ask := func(seed uint64) {
		res, err := b.Generate(ctx, []Request{{Seed: seed}})
		if err == nil && (len(res) != 1 || res[0].Tokens[0] != int32(seed)) {
			err = fmt.Errorf("request %d answered %+v", seed, res)
		}
		answers <- err
	}
	go ask(1)
	// the second request arrives after the first batch closed; it can only
	// be answered beside the first, which waits for it
	deadline := time.Now().Add(10 * time.Second)
	for {
		inner.mu.Lock()
		started := inner.running
		inner.mu.Unlock()
		if started == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first call never started")
		}
		time.Sleep(time.Millisecond)
	}
	go ask(2)
	for {
		inner.mu.Lock()
		peak := inner.peak
		inner.mu.Unlock()
		if peak == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a second batch did not run beside a held lane")
		}
		time.Sleep(time.Millisecond)
	}
	close(inner.hold)
	for range 2 {
		if err := <-answers; err != nil {
			t.Fatal(err)
		}
	}
	inner.mu.Lock()
	if !slices.Equal(inner.on, []int{0, 1}) {
		t.Errorf("calls went to lanes %v, want [0 1]", inner.on)
	}
	inner.on = nil
	inner.mu.Unlock()

	if _, err := b.Generate(ctx, []Request{{Seed: 3}, {Seed: 4}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Generate(ctx, []Request{{Seed: 5}}); err != nil {
		t.Fatal(err)
	}
	inner.mu.Lock()
	defer inner.mu.Unlock()
	if len(inner.on) != 2 || inner.on[0] != -1 || inner.on[1] < 0 {
		t.Errorf("a lone group then a lone request went to %v, want a whole call then a lane", inner.on)
	}
}

// TestBatcherLanesRouteAnswers: many callers through two lanes each get
// their own answers, and the batches were split over both lanes.
func TestBatcherLanesRouteAnswers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &lanedGen{lanes: 2}
	b := newBatcher(ctx, inner, 16, 20*time.Millisecond, 20*time.Millisecond)
	var wg sync.WaitGroup
	const n = 40
	for i := range n {
		wg.Go(func() {
			reqs := []Request{{Seed: uint64(i)}}
			if i%3 == 0 { // some units of several requests
				reqs = append(reqs, Request{Seed: uint64(i + 1000)}, Request{Seed: uint64(i + 2000)})
			}
			res, err := b.Generate(ctx, reqs)
			if err != nil {
				t.Error(err)
				return
			}
			for k := range reqs {
				if len(res) != len(reqs) || res[k].Tokens[0] != int32(reqs[k].Seed) {
					t.Errorf("caller %d got %+v", i, res)
					return
				}
			}
		})
	}
	wg.Wait()
	inner.mu.Lock()
	defer inner.mu.Unlock()
	if !slices.Contains(inner.on, 0) || !slices.Contains(inner.on, 1) {
		t.Errorf("calls went to lanes %v: want both lanes used", inner.on)
	}
	for _, c := range inner.calls {
		if c > 16+2 {
			t.Errorf("batch of %d exceeds max", c)
		}
	}
}

func TestSplitUnits(t *testing.T) {
	unit := func(n int) *pending { return &pending{reqs: make([]Request, n)} }
	for _, tc := range []struct {
		sizes []int
		k     int
		want  [][]int // the sizes of each part's units
	}{
		{[]int{1, 1, 1, 1}, 2, [][]int{{1, 1}, {1, 1}}},
		{[]int{8, 1, 1, 1}, 2, [][]int{{8}, {1, 1, 1}}},
		{[]int{1, 1, 1, 8}, 2, [][]int{{1, 1, 1}, {8}}},
		{[]int{3, 3, 3}, 2, [][]int{{3, 3}, {3}}},
		{[]int{5, 1}, 2, [][]int{{5}, {1}}},
		{[]int{2, 2, 2, 2, 2, 2}, 3, [][]int{{2, 2}, {2, 2}, {2, 2}}},
		{[]int{1, 1, 1}, 1, [][]int{{1, 1, 1}}},
	} {
		var batch []*pending
		n := 0
		for _, s := range tc.sizes {
			batch = append(batch, unit(s))
			n += s
		}
		parts := splitUnits(batch, n, tc.k)
		var got [][]int
		for _, p := range parts {
			var sizes []int
			sum := 0
			for _, u := range p.batch {
				sizes = append(sizes, len(u.reqs))
				sum += len(u.reqs)
			}
			if sum != p.n {
				t.Errorf("%v into %d: a part counts %d requests, holds %d", tc.sizes, tc.k, p.n, sum)
			}
			got = append(got, sizes)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v into %d: %v, want %v", tc.sizes, tc.k, got, tc.want)
		}
	}
}
