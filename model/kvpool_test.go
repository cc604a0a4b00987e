package model

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestClonesShareKVCaches: a Clone generates from the KV caches its
// original's earlier call left in the pool, spare or in the prefix cache
// (no new cache), the reused caches (holding another call's keys and
// values) give the same tokens and logprobs bit for bit as fresh ones, and
// a model and its clone may generate at the same time (the shared pool is
// locked; -race checks it).
func TestClonesShareKVCaches(t *testing.T) {
	m := testModel(t, smallConfig(), 3, 5)
	reqs := groupRequests(rand.New(rand.NewPCG(5, 6)), m.cfg.Vocab, 3)
	ctx := context.Background()
	want, err := m.Generate(ctx, reqs) // fresh caches
	if err != nil {
		t.Fatal(err)
	}
	// the pool's caches: the spares and the prefix cache's entries (which
	// a clone, having other weights, takes when no spare is left)
	held := func(p *kvPool) []*kvCache {
		all := slices.Clone(p.free)
		for _, e := range p.entries {
			all = append(all, e.kv)
		}
		return all
	}
	pooled := map[*float32]bool{}
	for _, kv := range held(m.kv) {
		pooled[&kv.l[0].k[0]] = true
	}
	if len(pooled) != len(reqs) {
		t.Fatalf("%d caches pooled after a call of %d requests", len(pooled), len(reqs))
	}
	c := m.Clone()
	// other prompts first, so the caches the check below reuses hold
	// someone else's keys and values
	other := groupRequests(rand.New(rand.NewPCG(7, 8)), m.cfg.Vocab, 3)
	if _, err := c.Generate(ctx, other); err != nil {
		t.Fatal(err)
	}
	for _, kv := range held(c.kv) {
		if !pooled[&kv.l[0].k[0]] {
			t.Fatal("the clone allocated a KV cache instead of reusing the pooled ones")
		}
	}
	got := make([][]SampleResult, 2)
	errs := make(chan error, 2)
	for i, g := range []*Model{m, c} {
		go func() {
			var err error
			got[i], err = g.Generate(ctx, reqs)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for k, res := range got {
		for i := range reqs {
			w, g := want[i], res[i]
			if len(g.Tokens) != len(w.Tokens) || g.Finish != w.Finish {
				t.Fatalf("model %d request %d: %d tokens (%s), fresh caches %d (%s)", k, i, len(g.Tokens), g.Finish, len(w.Tokens), w.Finish)
			}
			for j := range w.Tokens {
				if g.Tokens[j] != w.Tokens[j] || math.Float32bits(g.Logprobs[j]) != math.Float32bits(w.Logprobs[j]) {
					t.Fatalf("model %d request %d token %d: %d (%v), fresh caches %d (%v)", k, i, j, g.Tokens[j], g.Logprobs[j], w.Tokens[j], w.Logprobs[j])
				}
			}
		}
	}
}
