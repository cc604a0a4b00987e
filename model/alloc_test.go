package model

import (
	"context"
	"testing"
)

// TestDecodeAllocs: decode allocates per call and per request, never per
// token: 100 more tokens cost no more allocations.
func TestDecodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	m := testModel(t, smallConfig(), 1, 1)
	ctx := context.Background()
	allocs := func(n int) float64 {
		reqs := []SampleRequest{{Prompt: []int32{1, 2, 3}, MaxTokens: n, Temperature: 1, Seed: 1},
			{Prompt: []int32{1, 2, 3}, MaxTokens: n, Temperature: 0.8, TopK: 10, TopP: 0.9, Seed: 2}}
		return testing.AllocsPerRun(5, func() {
			if _, err := m.Generate(ctx, reqs); err != nil {
				t.Fatal(err)
			}
		})
	}
	short, long := allocs(2), allocs(90)
	if long > short {
		t.Fatalf("%v allocations for 2 tokens, %v for 90: decode allocates per token", short, long)
	}
}
