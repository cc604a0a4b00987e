package model

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// TestFamiliesGenerateMatchTraining: the sampler's logprobs equal the
// training forward's (Logprobs on prompt+completion) bit for bit, for every
// family, in a batch mixing greedy, temperature, top-k and top-p; a request
// gives the same tokens alone as in the batch.
func TestFamiliesGenerateMatchTraining(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range tinyConfigs() {
		t.Run(name, func(t *testing.T) {
			m := testModel(t, cfg, 11, 4)
			r := rand.New(rand.NewPCG(1, 2))
			reqs := []SampleRequest{
				{Prompt: randTokens(r, 5, cfg.Vocab), MaxTokens: 45, Temperature: 1, Seed: 1},
				{Prompt: randTokens(r, 1, cfg.Vocab), MaxTokens: 20, Temperature: 0.7, TopK: 5, Seed: 2},
				{Prompt: randTokens(r, 33, cfg.Vocab), MaxTokens: 0, Temperature: 1.3, TopP: 0.8, Seed: 3},
				{Prompt: randTokens(r, 3, cfg.Vocab), MaxTokens: 10, Temperature: 0, Seed: 4},
			}
			res, err := m.Generate(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, q := range reqs {
				got := res[i]
				if len(got.Tokens) == 0 {
					t.Fatalf("request %d: no tokens", i)
				}
				full := append(slices.Clone(q.Prompt), got.Tokens...)
				lps, err := m.Logprobs(ctx, [][]int32{full})
				if err != nil {
					t.Fatal(err)
				}
				for j, lp := range got.Logprobs {
					want := lps[0][len(q.Prompt)+j]
					if math.Float32bits(lp) != math.Float32bits(want) {
						t.Fatalf("request %d token %d: sampler logprob %v != trainer %v", i, j, lp, want)
					}
				}
				if q.MaxTokens == 0 && len(full) != m.Context() {
					t.Errorf("request %d: stopped at %d tokens, context %d", i, len(full), m.Context())
				}
				alone, err := m.Generate(ctx, []SampleRequest{q})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(alone[0].Tokens, got.Tokens) || !slices.Equal(alone[0].Logprobs, got.Logprobs) {
					t.Errorf("request %d: alone %v, in a batch %v", i, alone[0].Tokens, got.Tokens)
				}
			}
		})
	}
}

func TestFamiliesGenerateStops(t *testing.T) {
	ctx := context.Background()
	m := testModel(t, tinyConfigs()["qwen3"], 1, 4)
	greedy, err := m.Generate(ctx, []SampleRequest{{Prompt: []int32{1, 2}, MaxTokens: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if len(greedy[0].Tokens) != 8 || greedy[0].Finish != FinishLength {
		t.Fatalf("greedy: %+v", greedy[0])
	}
	stop := greedy[0].Tokens[3]
	res, err := m.Generate(ctx, []SampleRequest{{Prompt: []int32{1, 2}, MaxTokens: 8, Stop: []int32{stop}}})
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Index(greedy[0].Tokens, stop)
	if res[0].Finish != FinishStop || len(res[0].Tokens) != first+1 {
		t.Fatalf("stop %d: %+v", stop, res[0])
	}
	for _, bad := range [][]int32{{}, {int32(m.cfg.Vocab)}, {-1}, make([]int32, m.Context()+1)} {
		if _, err := m.Generate(ctx, []SampleRequest{{Prompt: bad}}); err == nil {
			t.Errorf("prompt %v accepted", bad)
		}
	}
}

// TestFamiliesTrainDeterministic: four steps give bit-identical weights and stats
// with GOMAXPROCS 1 and 2.
func TestFamiliesTrainDeterministic(t *testing.T) {
	run := func(procs int) ([32]byte, []Stats) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		m := testModel(t, tinyConfigs()["qwen3"], 5, 2)
		tr, err := NewTrainer(m, DefaultOptimConfig())
		if err != nil {
			t.Fatal(err)
		}
		var sts []Stats
		for s := range 4 {
			seqs := testSeqs(t, m, []int{20, 9, 33, 5}, uint64(s))
			st, err := tr.Step(context.Background(), seqs, LossConfig{Kind: LossPG})
			if err != nil {
				t.Fatal(err)
			}
			sts = append(sts, st)
		}
		return m.Digest(), sts
	}
	d1, s1 := run(1)
	d2, s2 := run(2)
	if d1 != d2 || !slices.Equal(s1, s2) {
		t.Fatalf("GOMAXPROCS 1 vs 2 differ: %x %x\n%v\n%v", d1, d2, s1, s2)
	}
}

func TestFamiliesTrainLearns(t *testing.T) {
	m := testModel(t, tinyConfigs()["llama"], 5, 1)
	oc := DefaultOptimConfig()
	oc.WarmupSteps, oc.LR = 0, 1e-2
	tr, err := NewTrainer(m, oc)
	if err != nil {
		t.Fatal(err)
	}
	seqs := testSeqs(t, m, []int{16, 16}, 9)
	var first, last float64
	for s := range 15 {
		st, err := tr.Step(context.Background(), seqs, LossConfig{Kind: LossSFT})
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			first = st.Loss
		}
		last = st.Loss
	}
	if !(last < 0.7*first) {
		t.Fatalf("SFT loss %v -> %v: did not fall by 30%%", first, last)
	}
}
