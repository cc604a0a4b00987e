package segment_test

import (
	"math/rand/v2"
	"testing"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
)

// benchRollout builds one rollout of the peer-segments workload
// (docs/rollouts.md): 50 calls; the first prompt is a 100-token system
// prompt + 400±50 task tokens; each call appends 100±20 tokens and
// samples 50±20; compactions at calls 12, 25 and 37 (±2) reset the prompt
// to the system prompt + 400±50 fresh tokens. Calls are in the log's delta
// form, as the rollout loop records them (PromptPrefix 0 after a
// compaction).
func benchRollout(r *rand.Rand, id runlog.RolloutID) ([]runlog.CallFinished, []runlog.Compaction) {
	rnd := func(n, pm int) []int32 {
		out := make([]int32, n-pm+r.IntN(2*pm+1))
		for i := range out {
			out[i] = int32(r.IntN(256))
		}
		return out
	}
	sys := rnd(100, 0)
	at := map[int]bool{12 + r.IntN(5) - 2: true, 25 + r.IntN(5) - 2: true, 37 + r.IntN(5) - 2: true}
	calls := make([]runlog.CallFinished, 0, 50)
	var bounds []runlog.Compaction
	ctxLen := 0
	for i := range 50 {
		c := runlog.CallFinished{Rollout: id, Attempt: 1, Call: uint32(i), Selected: true, Finish: runlog.FinishStop, Version: 3}
		if i == 0 || at[i] {
			c.PromptSuffix = append(append([]int32(nil), sys...), rnd(400, 50)...)
			if i > 0 {
				bounds = append(bounds, runlog.Compaction{Rollout: id, Boundary: uint32(len(bounds)), AfterCall: uint32(i - 1), Policy: "recency"})
			}
		} else {
			c.PromptPrefix = uint32(ctxLen)
			c.PromptSuffix = rnd(100, 20)
		}
		c.Sampled = rnd(50, 20)
		c.Logprobs = make([]float32, len(c.Sampled))
		ctxLen = int(c.PromptPrefix) + len(c.PromptSuffix) + len(c.Sampled)
		calls = append(calls, c)
	}
	return calls, bounds
}

type benchCase struct {
	calls  []runlog.CallFinished
	bounds []runlog.Compaction
}

func benchPool(n int) []benchCase {
	r := rand.New(rand.NewPCG(1, 2))
	pool := make([]benchCase, n)
	for i := range pool {
		pool[i].calls, pool[i].bounds = benchRollout(r, runlog.RolloutID{Group: runlog.GroupID(i / 8), Member: uint16(i % 8)})
	}
	return pool
}

// BenchmarkBuild: segment building per rollout (run with -benchtime=10000x
// for the 10,000-rollout figure).
func BenchmarkBuild(b *testing.B) {
	pool := benchPool(200)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := &pool[i%len(pool)]
		segs, _, err := segment.Build(c.calls, c.bounds, segment.Config{})
		if err != nil || len(segs) != 4 {
			b.Fatalf("%d segments, %v", len(segs), err)
		}
	}
}

// BenchmarkPlan: the checks and layout of Build without copying tokens
// (the "excluding token copying" figure).
func BenchmarkPlan(b *testing.B) {
	pool := benchPool(200)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := &pool[i%len(pool)]
		p, err := segment.MakePlan(c.calls, c.bounds, segment.Config{})
		if err != nil || p.Stats.Segments != 4 {
			b.Fatalf("%+v, %v", p.Stats, err)
		}
	}
}

// BenchmarkBuildAndAssign adds advantage assignment: groups of 8 rollouts,
// GRPO, broadcast credit, one train.Row per segment.
func BenchmarkBuildAndAssign(b *testing.B) {
	pool := benchPool(200)
	group := make([]advantage.Rollout, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 8 {
		for m := range group {
			c := &pool[(i+m)%len(pool)]
			segs, _, err := segment.Build(c.calls, c.bounds, segment.Config{})
			if err != nil {
				b.Fatal(err)
			}
			group[m] = advantage.Rollout{ID: c.calls[0].Rollout, Reward: float64(m % 3), Segments: segs}
		}
		if _, err := advantage.Compute(advantage.Config{}, group); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyFloor allocates and fills what BuildAndAssign must write
// per rollout (segment tokens, mask, logprobs, advantages) with plain
// copies: the token-copying cost to subtract.
func BenchmarkCopyFloor(b *testing.B) {
	pool := benchPool(200)
	sizes := make([]int, len(pool))
	for i, c := range pool {
		segs, _, _ := segment.Build(c.calls, c.bounds, segment.Config{})
		for _, s := range segs {
			sizes[i] += len(s.Tokens)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := &pool[i%len(pool)]
		n := sizes[i%len(pool)]
		toks := make([]int32, 0, n)
		for _, call := range c.calls {
			toks = append(toks, call.PromptSuffix...)
			toks = append(toks, call.Sampled...)
		}
		mask := make([]uint8, n)
		lps := make([]float32, n)
		adv := make([]float32, n)
		for j := range mask {
			mask[j], lps[j], adv[j] = 1, 0.5, 0.5
		}
		_ = toks
	}
}
