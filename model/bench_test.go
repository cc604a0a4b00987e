package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/longhaul-rl/longhaul/internal/cputime"
)

// Benchmark configs: A is the default model at ctx 256, B a larger one.
func benchConfigs() map[string]Config {
	a := DefaultConfig()
	a.MaxPos = 256
	b := DefaultConfig()
	b = builtinConfig(256, 4, 4, 704, 512)
	return map[string]Config{"A_L2_d128_ctx256": a, "B_L4_d256_ctx512": b}
}

// BenchmarkTrainStep: one optimizer step (forward, backward, AdamW) on
// B×T tokens, all trained with the PG loss; reports trained tokens/s.
func BenchmarkTrainStep(b *testing.B) {
	for _, name := range []string{"A_L2_d128_ctx256", "B_L4_d256_ctx512"} {
		cfg := benchConfigs()[name]
		for _, shape := range [][2]int{{8, 256}, {2, cfg.MaxPos}, {64, 48}} {
			b.Run(fmt.Sprintf("%s/%dx%d", name, shape[0], shape[1]), func(b *testing.B) {
				m, err := New(cfg, 1)
				if err != nil {
					b.Fatal(err)
				}
				lens := make([]int, shape[0])
				for i := range lens {
					lens[i] = shape[1]
				}
				seqs := testSeqs(b, m, lens, 2)
				for i := range seqs {
					for j := 1; j < len(seqs[i].Mask); j++ {
						seqs[i].Mask[j] = 1
					}
				}
				tr, err := NewTrainer(m, DefaultOptimConfig())
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				c0 := cputime.Process()
				for range b.N {
					if _, err := tr.Step(context.Background(), seqs, LossConfig{Kind: LossPG}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*shape[0]*shape[1])/b.Elapsed().Seconds(), "tok/s")
				b.ReportMetric(float64(b.N*shape[0]*shape[1])/(cputime.Process()-c0).Seconds(), "tok/cpu-s")
			})
		}
	}
}

// BenchmarkGenerate: batch 1 and 16, each sequence sampling 128 tokens
// after a 1-token prompt (temperature 1); reports generated tokens/s.
func BenchmarkGenerate(b *testing.B) {
	for _, name := range []string{"A_L2_d128_ctx256", "B_L4_d256_ctx512"} {
		cfg := benchConfigs()[name]
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/batch%d", name, batch), func(b *testing.B) {
				m, err := New(cfg, 1)
				if err != nil {
					b.Fatal(err)
				}
				r := rand.New(rand.NewPCG(1, 1))
				reqs := make([]SampleRequest, batch)
				for i := range reqs {
					reqs[i] = SampleRequest{Prompt: []int32{int32(r.IntN(256))}, MaxTokens: 128, Temperature: 1, Seed: uint64(i)}
				}
				b.ResetTimer()
				c0 := cputime.Process()
				toks := 0
				for range b.N {
					res, err := m.Generate(context.Background(), reqs)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range res {
						toks += len(r.Tokens)
					}
				}
				b.ReportMetric(float64(toks)/b.Elapsed().Seconds(), "tok/s")
				b.ReportMetric(float64(toks)/(cputime.Process()-c0).Seconds(), "tok/cpu-s")
				b.ReportMetric((cputime.Process()-c0).Seconds()/b.Elapsed().Seconds(), "cores")
			})
		}
	}
}

// BenchmarkGenerateTurn: an RL turn of the default run's shape: G = 8
// members of one group whose prompts share a 40-token prefix and go on
// with 30 tokens each, 6 new tokens per call (sampling.max_tokens_per_call).
// Reports prompt+new tokens per second and the cores kept busy (CPU
// seconds per wall second; on a shared machine other jobs lower it).
func BenchmarkGenerateTurn(b *testing.B) {
	cfg := DefaultConfig()
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	// every iteration sends the same prompts: without this the prefix
	// cache would serve them from the first (BenchmarkMultiTurn measures it)
	m.SetPrefixCache(0)
	r := rand.New(rand.NewPCG(2, 2))
	root := make([]int32, 40)
	for i := range root {
		root[i] = int32(r.IntN(256))
	}
	var reqs []SampleRequest
	for g := range 8 {
		p := append([]int32(nil), root...)
		for range 30 {
			p = append(p, int32(r.IntN(256)))
		}
		reqs = append(reqs, SampleRequest{Prompt: p, MaxTokens: 6, Temperature: 1, Seed: uint64(g)})
	}
	b.ResetTimer()
	c0 := cputime.Process()
	for range b.N {
		if _, err := m.Generate(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(reqs)*76)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric((cputime.Process()-c0).Seconds()/b.Elapsed().Seconds(), "cores")
}
