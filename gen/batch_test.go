package gen

import (
	"context"
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

	inner2 := &countingGen{}
	b = newBatcher(ctx, inner2, 64, 150*time.Millisecond, 150*time.Millisecond)
	for i := range 12 {
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
	inner2.mu.Lock()
	defer inner2.mu.Unlock()
	if len(inner2.calls) < 2 {
		t.Errorf("a trickle over 600 ms with a 150 ms window: calls %v, want it cut into several batches", inner2.calls)
	}
}
