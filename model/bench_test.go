package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

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

// BenchmarkGenerate: steady-state decode at batch 1 and 16: each
// iteration times a call sampling warm+128 tokens per sequence and one
// sampling warm tokens (the same prompts and seeds, 16 warm-up tokens) and
// counts only the difference, so prefill and a call's set-up (KV caches,
// the decode copies) cancel out; reports the 128 decoded tokens per second
// (wall and CPU) and the cores used.
func BenchmarkGenerate(b *testing.B) {
	const warm, steps = 16, 128
	for _, name := range []string{"A_L2_d128_ctx256", "B_L4_d256_ctx512"} {
		cfg := benchConfigs()[name]
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/batch%d", name, batch), func(b *testing.B) {
				m, err := NewBuiltin(cfg, 1)
				if err != nil {
					b.Fatal(err)
				}
				r := rand.New(rand.NewPCG(1, 1))
				reqs := make([]SampleRequest, batch)
				for i := range reqs {
					reqs[i] = SampleRequest{Prompt: []int32{int32(r.IntN(256))}, Temperature: 1, Seed: uint64(i)}
				}
				run := func(n int) (time.Duration, time.Duration) {
					for i := range reqs {
						reqs[i].MaxTokens = n
					}
					t0, c0 := time.Now(), cputime.Process()
					if _, err := m.Generate(context.Background(), reqs); err != nil {
						b.Fatal(err)
					}
					return time.Since(t0), cputime.Process() - c0
				}
				run(warm + steps) // first call: caches and copies
				var wall, cpu time.Duration
				b.ResetTimer()
				for range b.N {
					lw, lc := run(warm + steps)
					sw, sc := run(warm)
					wall, cpu = wall+lw-sw, cpu+lc-sc
				}
				toks := float64(b.N * batch * steps)
				b.ReportMetric(toks/wall.Seconds(), "tok/s")
				b.ReportMetric(toks/cpu.Seconds(), "tok/cpu-s")
				b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
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
