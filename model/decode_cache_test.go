package model

import (
	"context"
	"math"
	"testing"
)

// TestDecodeCopiesFollowWeights: decode keeps its transposed head and
// packed weights across Generate calls while the weights stay the same; a
// trainer step or CopyWeightsFrom must make the next call use the new
// weights. Each call after a change must sample what a fresh Clone (which
// transposes and packs from scratch) samples, and differ from the call
// before the change.
func TestDecodeCopiesFollowWeights(t *testing.T) {
	m, seqs := trainSetup(t)
	other, err := New(m.cfg, 99)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []SampleRequest
	for i := range 8 { // 8 × 40 decode rows: over packDecodeMin, so decode packs
		reqs = append(reqs, SampleRequest{Prompt: seqs[i%len(seqs)].Tokens[:3+i], MaxTokens: 40, Temperature: 1, Seed: uint64(i)})
	}
	ctx := context.Background()
	gen := func(g *Model) []SampleResult {
		t.Helper()
		res, err := g.Generate(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	same := func(a, b []SampleResult) bool {
		for i := range a {
			if len(a[i].Tokens) != len(b[i].Tokens) {
				return false
			}
			for j := range a[i].Tokens {
				if a[i].Tokens[j] != b[i].Tokens[j] || math.Float32bits(a[i].Logprobs[j]) != math.Float32bits(b[i].Logprobs[j]) {
					return false
				}
			}
		}
		return true
	}
	before := gen(m)
	if !m.dc.packed {
		t.Fatal("decode did not pack its weights")
	}
	if again := gen(m); !same(again, before) {
		t.Fatal("a second call with the same weights samples differently")
	}
	tr, err := NewTrainer(m, testOptim())
	if err != nil {
		t.Fatal(err)
	}
	trainSteps(t, tr, seqs, 1)
	afterStep := gen(m)
	if same(afterStep, before) {
		t.Fatal("a trainer step did not change what the model samples")
	}
	if !same(afterStep, gen(m.Clone())) {
		t.Fatal("after a trainer step the model samples with stale decode copies")
	}
	if err := m.CopyWeightsFrom(other); err != nil {
		t.Fatal(err)
	}
	afterCopy := gen(m)
	if same(afterCopy, afterStep) {
		t.Fatal("CopyWeightsFrom did not change what the model samples")
	}
	if !same(afterCopy, gen(other.Clone())) {
		t.Fatal("after CopyWeightsFrom the model samples with stale decode copies")
	}
}
