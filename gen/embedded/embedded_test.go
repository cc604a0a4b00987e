package embedded

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model"
)

// TestServedLanes: the built-in model is served with two lanes; calls on both
// at once answer what one whole Generate answers for the same requests,
// stamped with the served version; a lane out of range is an error.
func TestServedLanes(t *testing.T) {
	cfg := model.DefaultConfig()
	cfg.Dim, cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.Hidden, cfg.MaxPos = 32, 4, 4, 8, 48, 64
	m, err := model.NewBuiltin(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	g := New(m, 7)
	if g.Lanes() != 2 {
		t.Fatalf("Lanes() = %d, want 2", g.Lanes())
	}
	var reqs []gen.Request
	for i := range 6 {
		reqs = append(reqs, gen.Request{Prompt: []int32{int32(10 + i), 20, 30, int32(40 + i)}, MaxTokens: 8, Temperature: 1, Seed: uint64(i)})
	}
	ctx := context.Background()
	want, err := New(m.Clone(), 7).Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var got [2][]gen.Result
	var errs [2]error
	var wg sync.WaitGroup
	for lane := range 2 {
		wg.Go(func() { got[lane], errs[lane] = g.GenerateOn(ctx, lane, reqs[3*lane:3*lane+3]) })
	}
	wg.Wait()
	for lane, err := range errs {
		if err != nil {
			t.Fatalf("lane %d: %v", lane, err)
		}
	}
	for i, r := range append(got[0], got[1]...) {
		if !slices.Equal(r.Tokens, want[i].Tokens) || !slices.Equal(r.Logprobs, want[i].Logprobs) || r.Finish != want[i].Finish || r.Version != 7 {
			t.Fatalf("request %d: lanes %+v, whole call %+v", i, r, want[i])
		}
	}
	if _, err := g.GenerateOn(ctx, 2, reqs[:1]); err == nil {
		t.Fatal("lane 2 of 2 was accepted")
	}
}
