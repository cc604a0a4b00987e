package model

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/internal/cputime"
)

// uncached is a fresh copy of m's weights with a pool of its own and the
// prefix cache off: what m samples without any cross-call state.
func uncached(m *Model) *Model {
	c := m.Clone()
	c.kv = &kvPool{cfg: m.cfg}
	return c
}

// sameResults fails t unless got and want hold the same tokens, logprob
// bits and finish reasons.
func sameResults(t *testing.T, what string, got, want []SampleResult) {
	t.Helper()
	for i := range want {
		g, w := got[i], want[i]
		if !slices.Equal(g.Tokens, w.Tokens) || g.Finish != w.Finish || len(g.Logprobs) != len(w.Logprobs) {
			t.Fatalf("%s: request %d: %v (%s), without the cache %v (%s)", what, i, g.Tokens, g.Finish, w.Tokens, w.Finish)
		}
		for j := range w.Logprobs {
			if math.Float32bits(g.Logprobs[j]) != math.Float32bits(w.Logprobs[j]) {
				t.Fatalf("%s: request %d token %d: logprob %v, without the cache %v", what, i, j, g.Logprobs[j], w.Logprobs[j])
			}
		}
	}
}

// generateBoth runs reqs on m and on uncached(m), requires the same
// results, and returns m's.
func generateBoth(t *testing.T, what string, m *Model, reqs []SampleRequest) []SampleResult {
	t.Helper()
	ctx := context.Background()
	res, err := m.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want, err := uncached(m).Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameResults(t, what, res, want)
	return res
}

// fedSeq is the sequence a call leaves in its cache: the prompt and every
// sampled token but the last (which decode never fed).
func fedSeq(prompt []int32, r SampleResult) []int32 {
	s := slices.Clone(prompt)
	if len(r.Tokens) > 0 {
		s = append(s, r.Tokens[:len(r.Tokens)-1]...)
	}
	return s
}

// wantPrefill is the prompt tokens a call must compute: each request
// covers the longest prefix it shares with an earlier request of the call
// (an identical prompt: all of it) or with any sequence an earlier call of
// the same weights computed (history), the latter one short of the whole
// prompt (the last position's logits are not kept).
func wantPrefill(reqs []SampleRequest, history [][]int32) int {
	total := 0
	for i, q := range reqs {
		p := q.Prompt
		cover := 0
		for j := range i {
			l := lcp(p, reqs[j].Prompt)
			if l == len(p) && len(reqs[j].Prompt) == len(p) {
				cover = len(p)
				break
			}
			cover = max(cover, min(l, len(p)-1))
		}
		for _, h := range history {
			cover = max(cover, min(lcp(p, h), len(p)-1))
		}
		total += len(p) - cover
	}
	return total
}

// TestPrefixCacheMultiTurn: rollouts calling the model turn after turn,
// each prompt the previous prompt + its completion + a few new tokens (an
// observation), with one prompt rewritten mid-way (a compaction keeping its
// first 8 tokens) and one sent again unchanged (a resample), sample on one
// model with the prefix cache exactly what a fresh uncached clone samples
// for each call: tokens, logprob bits, finish. Two rollouts start as a
// group (one prompt), so in-batch sharing and the cache combine. The
// prefill counter must equal the tokens no earlier request or call covers,
// and the cache must save most of the prompts.
func TestPrefixCacheMultiTurn(t *testing.T) {
	wide := builtinConfig(80, 2, 2, 48, 96) // hd 40: partial 32-lane blocks
	cfgs := map[string]Config{"builtin": smallConfig(), "qwen3": qwen3Small(), "hd40": wide}
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfgs[name], 11, 5)
			V := m.cfg.Vocab
			r := rand.New(rand.NewPCG(7, 8))
			const nRoll, turns = 5, 6
			prompts := make([][]int32, nRoll)
			for i := range prompts {
				prompts[i] = append([]int32{int32(40 + i)}, randTokens(r, 10+2*i, V)...)
			}
			prompts[1] = slices.Clone(prompts[0]) // a group of two
			stop := make([]int32, 20)
			for i := range stop {
				stop[i] = int32(200 + i)
			}
			var history [][]int32
			saved, total := 0, 0
			for turn := range turns {
				reqs := make([]SampleRequest, nRoll)
				for i := range reqs {
					reqs[i] = SampleRequest{Prompt: prompts[i], MaxTokens: 6, Temperature: 1, Stop: stop, Seed: uint64(100*turn + i)}
				}
				reqs[2].Temperature = 0
				reqs[3].TopK = 12
				res := generateBoth(t, fmt.Sprintf("turn %d", turn), m, reqs)
				if w := wantPrefill(reqs, history); m.prefilled != w {
					t.Fatalf("turn %d: prefilled %d prompt tokens, want %d", turn, m.prefilled, w)
				}
				if turn > 0 && m.fromCache == 0 {
					t.Fatalf("turn %d: nothing came from the prefix cache", turn)
				}
				for i := range reqs {
					total += len(reqs[i].Prompt)
					history = append(history, fedSeq(reqs[i].Prompt, res[i]))
				}
				saved += m.fromCache
				for i := range prompts {
					switch {
					case turn == 2 && i == 3: // a resample: the same prompt again
					case turn == 3 && i == 2: // a compaction rewrites the context
						prompts[i] = append(slices.Clone(prompts[i][:8]), randTokens(r, 10, V)...)
					default:
						prompts[i] = append(append(slices.Clone(prompts[i]), res[i].Tokens...), randTokens(r, 3+r.IntN(4), V)...)
					}
				}
			}
			t.Logf("%d of %d prompt positions came from the prefix cache", saved, total)
			if saved < total/2 {
				t.Fatalf("the cache covered %d of %d prompt positions", saved, total)
			}
		})
	}
}

// TestPrefixCacheFollowsWeights: after a trainer step or CopyWeightsFrom,
// no entry of the old weights is used (the next call samples what a fresh
// clone of the new weights samples, with nothing from the cache); between
// changes the cache serves again.
func TestPrefixCacheFollowsWeights(t *testing.T) {
	m, seqs := trainSetup(t)
	other, err := New(m.cfg, 99)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 9))
	prompts := make([][]int32, 4)
	for i := range prompts {
		prompts[i] = append([]int32{int32(i)}, randTokens(r, 12, m.cfg.Vocab)...)
	}
	call := func(what string, wantCached bool) {
		t.Helper()
		reqs := make([]SampleRequest, len(prompts))
		for i := range reqs {
			reqs[i] = SampleRequest{Prompt: prompts[i], MaxTokens: 5, Temperature: 1, Seed: uint64(i)}
		}
		res := generateBoth(t, what, m, reqs)
		if got := m.fromCache > 0; got != wantCached {
			t.Fatalf("%s: %d positions from the prefix cache, want some: %v", what, m.fromCache, wantCached)
		}
		for i := range prompts {
			prompts[i] = append(append(prompts[i], res[i].Tokens...), randTokens(r, 3, m.cfg.Vocab)...)
		}
	}
	call("first call", false)
	call("same weights", true)
	tr, err := NewTrainer(m, testOptim())
	if err != nil {
		t.Fatal(err)
	}
	trainSteps(t, tr, seqs, 1)
	call("after a trainer step", false)
	call("after a trainer step, again", true)
	if err := m.CopyWeightsFrom(other); err != nil {
		t.Fatal(err)
	}
	call("after CopyWeightsFrom", false)
	call("after CopyWeightsFrom, again", true)
}

// TestPrefixCacheBudget: the cache never holds more bytes than its budget,
// evicting the least recently used entries; an evicted sequence is
// prefilled again in full, a kept one is not; a budget below one cache
// keeps nothing and 0 empties it. Results stay those of an uncached model.
func TestPrefixCacheBudget(t *testing.T) {
	m := testModel(t, smallConfig(), 5, 5)
	size := kvBytes(newKV(m.cfg, m.ctx, true))
	m.SetPrefixCache(3 * size)
	r := rand.New(rand.NewPCG(3, 3))
	prompts := make([][]int32, 5)
	for i := range prompts {
		prompts[i] = append([]int32{int32(i)}, randTokens(r, 15, m.cfg.Vocab)...)
	}
	calls := 0
	gen := func(what string, idx ...int) []SampleResult {
		t.Helper()
		calls++
		var reqs []SampleRequest
		for _, i := range idx {
			reqs = append(reqs, SampleRequest{Prompt: prompts[i], MaxTokens: 4, Temperature: 1, Seed: uint64(100*calls + i)})
		}
		res := generateBoth(t, what, m, reqs)
		p := m.kv
		var sum int64
		for _, e := range p.entries {
			sum += e.bytes
		}
		if p.bytes != sum || p.bytes > p.budget || len(p.entries) > int(p.budget/size) {
			t.Fatalf("%s: %d entries, %d bytes (entries hold %d), budget %d", what, len(p.entries), p.bytes, sum, p.budget)
		}
		for k, i := range idx {
			prompts[i] = append(append(prompts[i], res[k].Tokens...), 7)
		}
		return res
	}
	gen("five rollouts", 0, 1, 2, 3, 4) // keeps the last three: 2, 3, 4
	gen("rollout 2", 2)                 // takes 2's entry, leaves its longer sequence: the newest
	if len(m.kv.entries) != 3 {
		t.Fatalf("%d entries, want 3", len(m.kv.entries))
	}
	p0 := slices.Clone(prompts[0])
	gen("rollout 0, evicted", 0) // evicts 3, the least recently used
	if m.fromCache != 0 {
		t.Fatalf("an evicted sequence gave %d positions", m.fromCache)
	}
	gen("rollout 3, evicted", 3)
	if m.fromCache != 0 {
		t.Fatalf("an evicted sequence gave %d positions", m.fromCache)
	}
	gen("rollout 2, kept", 2)
	if m.fromCache == 0 {
		t.Fatal("a kept sequence gave nothing")
	}
	// entries by use: 0, 3, 2. A resample (0's last prompt again) copies
	// part of 0's entry (which stays, now the most recently used) and adds
	// its own, evicting 3's rather than 0's.
	prompts[0] = p0
	gen("resample 0", 0)
	if m.fromCache != len(p0)-1 {
		t.Fatalf("a resample took %d positions, want %d", m.fromCache, len(p0)-1)
	}
	gen("rollout 3 after the resample", 3)
	if m.fromCache != 0 {
		t.Fatalf("3's entry gave %d positions: it should be the least recently used, evicted (was the resample's use of 0's entry not recorded, or 0's entry taken?)", m.fromCache)
	}
	m.SetPrefixCache(size - 1)
	if len(m.kv.entries) != 0 || m.kv.bytes != 0 {
		t.Fatalf("a budget below one cache holds %d entries, %d bytes", len(m.kv.entries), m.kv.bytes)
	}
	gen("no room", 4)
	if m.fromCache != 0 || len(m.kv.entries) != 0 {
		t.Fatalf("a budget below one cache: %d positions from %d entries", m.fromCache, len(m.kv.entries))
	}
}

// BenchmarkMultiTurn: 64 rollouts (8 groups of 8 sharing a 16-token task
// prompt) over 8 turns of the default model: each call samples 6 tokens,
// and the next prompt appends the completion and a 9-token observation.
// Calls go one group at a time (the RL loop's batches hold a few
// requests); each iteration is a fresh Clone (a new version: the cache
// starts empty). Reports CPU-ms and prefilled prompt tokens per turn (64
// calls), prefix cache on and off.
func BenchmarkMultiTurn(b *testing.B) {
	const groups, G, turns, obs = 8, 8, 8, 9
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%v", on), func(b *testing.B) {
			base, err := New(DefaultConfig(), 1)
			if err != nil {
				b.Fatal(err)
			}
			if !on {
				base.SetPrefixCache(0)
			}
			V := base.cfg.Vocab
			var cpu time.Duration
			prefilled, n := 0, 0
			b.ResetTimer()
			for it := range b.N {
				m := base.Clone()
				r := rand.New(rand.NewPCG(uint64(it), 1))
				prompts := make([][]int32, groups*G)
				for g := range groups {
					task := randTokens(r, 16, V)
					for k := range G {
						prompts[g*G+k] = task
					}
				}
				c0 := cputime.Process()
				for turn := range turns {
					for g := range groups {
						reqs := make([]SampleRequest, G)
						for k := range reqs {
							reqs[k] = SampleRequest{Prompt: prompts[g*G+k], MaxTokens: 6, Temperature: 1, Seed: uint64(1000*turn + g*G + k)}
						}
						res, err := m.Generate(context.Background(), reqs)
						if err != nil {
							b.Fatal(err)
						}
						prefilled += m.prefilled
						for k := range reqs {
							p := append(slices.Clone(prompts[g*G+k]), res[k].Tokens...)
							prompts[g*G+k] = append(p, randTokens(r, obs, V)...)
						}
					}
					n++
				}
				cpu += cputime.Process() - c0
			}
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(n), "cpu-ms/turn")
			b.ReportMetric(float64(prefilled)/float64(n), "prefill-tok/turn")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(n), "ms/turn")
		})
	}
}
