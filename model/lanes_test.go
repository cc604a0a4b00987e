package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestGenerateOnLanes: calls on both lanes at once give each request the
// tokens and logprob bits one whole-model Generate of every request gives
// with no cross-call state, turn after turn (the prefix cache serving both
// lanes), with one lane's call large enough to read decode's packed panels
// while the other's reads the weights in place. Under -race it also checks
// that the lanes share nothing unguarded.
func TestGenerateOnLanes(t *testing.T) {
	m := testModel(t, smallConfig(), 21, 5)
	V := m.cfg.Vocab
	r := rand.New(rand.NewPCG(21, 22))
	big := groupRequests(r, V, 3) // 12 requests × 30 tokens: ≥ packDecodeMin rows
	small := make([]SampleRequest, 5)
	for i := range small {
		small[i] = SampleRequest{Prompt: randTokens(r, 5+3*i, V), MaxTokens: 6, Temperature: 1, Seed: uint64(500 + i)}
	}
	ctx := context.Background()
	for turn := range 3 {
		all := append(slices.Clone(big), small...)
		want, err := uncached(m).Generate(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		var got [2][]SampleResult
		var errs [2]error
		var wg sync.WaitGroup
		for lane, reqs := range [2][]SampleRequest{big, small} {
			wg.Go(func() { got[lane], errs[lane] = m.GenerateOn(ctx, lane, reqs) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		sameResults(t, fmt.Sprintf("turn %d", turn), append(got[0], got[1]...), want)
		if turn == 0 && !m.dc.packed {
			t.Fatalf("turn 0: the large call did not pack decode's weights")
		}
		// the next turn extends every prompt by its completion and a few
		// tokens, as a rollout's next call does
		for i := range big {
			big[i].Prompt = append(append(slices.Clone(big[i].Prompt), got[0][i].Tokens...), randTokens(r, 2, V)...)
			big[i].Prompt = big[i].Prompt[max(0, len(big[i].Prompt)-60):]
			big[i].Seed += 1000
		}
		for i := range small {
			small[i].Prompt = append(append(slices.Clone(small[i].Prompt), got[1][i].Tokens...), randTokens(r, 3, V)...)
			small[i].Seed += 1000
		}
	}
	if _, err := m.GenerateOn(ctx, 2, small); err == nil {
		t.Fatalf("lane 2 of 2 was accepted")
	}
}
