package batch_test

import (
	"testing"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/batch"
	"github.com/longhaul-rl/longhaul/train"
)

func row(n int) train.Row {
	r := train.Row{Tokens: make([]int32, n), Mask: make([]uint8, n), Advantages: make([]float32, n), OldLogprobs: make([]float32, n)}
	r.Mask[n-1] = 1
	return r
}

func TestPack(t *testing.T) {
	groups := []advantage.Group{
		{Rollouts: []advantage.Assigned{{Rows: []train.Row{row(10), row(30)}}, {Placeholder: true}}},
		{Rollouts: []advantage.Assigned{{Rows: []train.Row{row(20)}}, {Rows: []train.Row{row(70), row(5)}}}},
	}
	b, c, err := batch.Pack(train.LossPG, groups, 60)
	if err != nil {
		t.Fatal(err)
	}
	want := batch.Counts{Groups: 2, Rollouts: 4, Placeholders: 1, Rows: 5, Tokens: 135, Trainable: 5,
		Microbatches: 3, Oversize: 1}
	// Longest first: [70] alone (oversize), [30 20] (2*30=60), [10 5] (2*10=20).
	want.Padding = 0 + (60 - 50) + (20 - 15)
	if c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	seen := map[int]int{}
	for _, mb := range b.Microbatches {
		longest := 0
		for _, i := range mb {
			seen[i]++
			longest = max(longest, len(b.Rows[i].Tokens))
		}
		if longest*len(mb) > 60 && len(mb) > 1 {
			t.Fatalf("microbatch %v over budget", mb)
		}
	}
	if len(seen) != 5 {
		t.Fatalf("rows placed %v", seen)
	}
	// No budget: one microbatch.
	b, c, _ = batch.Pack(train.LossPG, groups, 0)
	if b.Microbatches != nil || c.Microbatches != 1 || c.Padding != 70*5-135 {
		t.Fatalf("%+v", c)
	}
}
