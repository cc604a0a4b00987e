package model

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// groupRequests builds G requests per prompt: members share a prompt, and
// the second prompt shares a 40-token prefix with the first (partial prefill
// over more than one attention block).
func groupRequests(r *rand.Rand, vocab, G int) []SampleRequest {
	base := randTokens(r, 45, vocab)
	prompts := [][]int32{base, append(slices.Clone(base[:40]), randTokens(r, 9, vocab)...), randTokens(r, 3, vocab), base[:20]}
	var reqs []SampleRequest
	for pi, p := range prompts {
		for g := 0; g < G; g++ {
			reqs = append(reqs, SampleRequest{Prompt: p, MaxTokens: 30, Temperature: 1, Seed: uint64(100*pi + g)})
		}
	}
	reqs[1].TopK = 20
	reqs[2].TopP = 0.9
	reqs[3].Temperature = 0.7
	return reqs
}

// TestGenerateLogprobsMatchTraining: the sampler's logprobs are bit-identical
// to the training forward's for the same tokens (the bound in the spec is
// 1e-5; same kernels and summation order make it exact).
func TestGenerateLogprobsMatchTraining(t *testing.T) {
	wide := builtinConfig(80, 2, 2, 48, 96) // hd 40: full and partial 32-lane column blocks in decode
	cfgs := map[string]Config{"builtin": smallConfig(), "qwen3": qwen3Small(), "hd40": wide, "qwen2": qwen2Small(), "llama": llamaSmall()}
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfgs[name], 11, 5)
			reqs := groupRequests(rand.New(rand.NewPCG(1, 2)), m.cfg.Vocab, 4)
			res, err := m.Generate(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			seqs := make([][]int32, len(reqs))
			for i := range reqs {
				seqs[i] = append(slices.Clone(reqs[i].Prompt), res[i].Tokens...)
				if len(res[i].Tokens) != len(res[i].Logprobs) || len(res[i].Tokens) == 0 {
					t.Fatalf("request %d: %d tokens, %d logprobs", i, len(res[i].Tokens), len(res[i].Logprobs))
				}
			}
			lps, err := m.Logprobs(context.Background(), seqs)
			if err != nil {
				t.Fatal(err)
			}
			var maxDiff float64
			differ := 0
			for i := range reqs {
				P := len(reqs[i].Prompt)
				for j, lp := range res[i].Logprobs {
					want := lps[i][P+j]
					if math.Float32bits(lp) != math.Float32bits(want) {
						differ++
					}
					maxDiff = math.Max(maxDiff, math.Abs(float64(lp-want)))
				}
			}
			if maxDiff > 1e-5 || differ > 0 {
				t.Fatalf("%d logprobs differ from training, max abs diff %g", differ, maxDiff)
			}
		})
	}
}

// TestGenerateBatchInvariant: a request samples the same tokens and
// logprobs alone, in a batch, and on a second call.
func TestGenerateBatchInvariant(t *testing.T) {
	m := testModel(t, smallConfig(), 12, 5)
	ctx := context.Background()
	reqs := groupRequests(rand.New(rand.NewPCG(3, 4)), m.cfg.Vocab, 3)
	all, err := m.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	prefilled := m.prefilled
	again, err := m.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		one, err := m.Generate(ctx, reqs[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []SampleResult{one[0], again[i]} {
			if !slices.Equal(got.Tokens, all[i].Tokens) || !slices.Equal(got.Logprobs, all[i].Logprobs) || got.Finish != all[i].Finish {
				t.Fatalf("request %d differs between batch and single/second call", i)
			}
		}
	}
	// groupRequests has prompts of 45 and 49 tokens sharing 40, one of 3, and
	// a 20-token prefix of the first, each 3 times: prefill computes
	// 45 + 9 + 3 + 1 tokens (the prefix recomputes its last token for logits)
	if prefilled != 45+9+3+1 {
		t.Errorf("prefilled %d prompt tokens, want %d", prefilled, 45+9+3+1)
	}
	// members of a group draw different samples (their seeds differ)
	if slices.Equal(all[0].Tokens, all[1].Tokens) {
		t.Errorf("two members with different seeds sampled the same completion")
	}
}

func TestGenerateStopsAndLimits(t *testing.T) {
	m := testModel(t, qwen3Small(), 13, 5)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	p := randTokens(r, 10, m.cfg.Vocab)
	// greedy is deterministic regardless of seed and picks the argmax
	g, err := m.Generate(ctx, []SampleRequest{{Prompt: p, MaxTokens: 5, Seed: 1}, {Prompt: p, MaxTokens: 5, Seed: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g[0].Tokens, g[1].Tokens) || len(g[0].Tokens) != 5 || g[0].Finish != FinishLength {
		t.Fatalf("greedy: %+v %+v", g[0], g[1])
	}
	// stop on the first token greedy would produce: included, finish "stop"
	s, err := m.Generate(ctx, []SampleRequest{{Prompt: p, MaxTokens: 5, Stop: []int32{g[0].Tokens[2]}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Index(g[0].Tokens, g[0].Tokens[2]) + 1; len(s[0].Tokens) != want || s[0].Finish != FinishStop {
		t.Fatalf("stop: got %v (%s), want %d tokens ending in the stop token", s[0].Tokens, s[0].Finish, want)
	}
	// context full: prompt+completion never exceeds Context
	long := randTokens(r, m.ctx-3, m.cfg.Vocab)
	full := randTokens(r, m.ctx, m.cfg.Vocab)
	c, err := m.Generate(ctx, []SampleRequest{{Prompt: long, Temperature: 1}, {Prompt: full, Temperature: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c[0].Tokens) != 3 || c[0].Finish != FinishLength || len(c[1].Tokens) != 0 || c[1].Finish != FinishLength {
		t.Fatalf("context full: got %d (%s) and %d (%s) tokens", len(c[0].Tokens), c[0].Finish, len(c[1].Tokens), c[1].Finish)
	}
	// top-k 1 is greedy
	k, err := m.Generate(ctx, []SampleRequest{{Prompt: p, MaxTokens: 5, Temperature: 1, TopK: 1, Seed: 9}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k[0].Tokens, g[0].Tokens) {
		t.Fatalf("top-k 1 %v != greedy %v", k[0].Tokens, g[0].Tokens)
	}
	if _, err := m.Generate(ctx, []SampleRequest{{Prompt: append(full, 1)}}); err == nil {
		t.Fatal("a prompt longer than the context must fail")
	}
	if _, err := m.Generate(ctx, []SampleRequest{{Prompt: nil}}); err == nil {
		t.Fatal("an empty prompt must fail")
	}
}

// TestSamplerDistribution: with temperature 1 and no filtering, sampled
// frequencies follow the model's probabilities.
func TestSamplerDistribution(t *testing.T) {
	row := []float32{2, 1, 0, -1, 0.5}
	var sc sampler
	r := rand.New(rand.NewPCG(1, 1))
	e := make([]float32, len(row))
	lse, _ := logSumExp(row, e)
	counts := make([]int, len(row))
	const n = 20000
	for range n {
		counts[sc.draw(row, e, 1, 0, 0, r)]++
	}
	for j, v := range row {
		p := math.Exp(float64(v - lse))
		if got := float64(counts[j]) / n; math.Abs(got-p) > 0.015 {
			t.Errorf("token %d: frequency %.3f, probability %.3f", j, got, p)
		}
	}
	// top-p 0.5 keeps only the top token (p≈0.53)
	for range 100 {
		if tok := sc.draw(row, e, 1, 0, 0.5, r); tok != 0 {
			t.Fatalf("top-p 0.5 sampled %d", tok)
		}
	}
	// top-k 2 keeps tokens 0 and 1
	for range 200 {
		if tok := sc.draw(row, e, 1, 2, 0, r); tok > 1 {
			t.Fatalf("top-k 2 sampled %d", tok)
		}
	}
}

// TestPrefillSpreadsOneGroup: a batch holding one prefix tree (a root and
// members that extend it differently, as a group's later turns do)
// prefills on both shards, and each member samples what it samples alone.
func TestPrefillSpreadsOneGroup(t *testing.T) {
	m := testModel(t, smallConfig(), 13, 5)
	r := rand.New(rand.NewPCG(5, 6))
	root := randTokens(r, 30, m.cfg.Vocab)
	reqs := []SampleRequest{{Prompt: root, MaxTokens: 4, Temperature: 1, Seed: 1}}
	for g := range 6 {
		p := append(slices.Clone(root), randTokens(r, 10+3*g, m.cfg.Vocab)...)
		reqs = append(reqs, SampleRequest{Prompt: p, MaxTokens: 4, Temperature: 1, Seed: uint64(2 + g)})
	}
	ctx := context.Background()
	all, err := m.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sh := m.prefillShards
	for s, n := range sh {
		if n == 0 {
			t.Fatalf("shard %d prefilled nothing (per shard %v): the group ran on one core", s, sh)
		}
	}
	for i := range reqs {
		one, err := m.Generate(ctx, reqs[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one[0].Tokens, all[i].Tokens) || !slices.Equal(one[0].Logprobs, all[i].Logprobs) {
			t.Fatalf("request %d differs between the group batch and alone", i)
		}
	}
}
