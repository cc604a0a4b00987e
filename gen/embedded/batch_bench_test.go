package embedded

import (
	"context"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBatchedTurns: the RL loop's generation phase in small: 8 groups
// of 8 rollouts, each group a goroutine that sends its members' next call
// (6 new tokens after a growing prompt) through a gen.Batcher (max 64,
// window 2 ms, as the runner builds it) to the embedded default model, then
// spends ~100 µs on its "env turn", for 4 turns. Reports wall time per step
// and the cores kept busy (process CPU-seconds per wall second).
func BenchmarkBatchedTurns(b *testing.B) {
	m, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	g := New(m, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bt := gen.NewBatcher(ctx, g, 64, 2*time.Millisecond)
	r := rand.New(rand.NewPCG(4, 4))
	const groups, members, turns = 8, 8, 4
	prompts := make([][]int32, groups)
	for i := range prompts {
		prompts[i] = make([]int32, 40)
		for j := range prompts[i] {
			prompts[i][j] = int32(r.IntN(256))
		}
	}
	c0 := cpuTime()
	b.ResetTimer()
	for it := range b.N {
		var wg sync.WaitGroup
		for gi := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := prompts[gi]
				for turn := range turns {
					reqs := make([]gen.Request, members)
					for k := range reqs {
						reqs[k] = gen.Request{Prompt: p, MaxTokens: 6, Temperature: 1, Seed: uint64(it*1000 + gi*100 + turn*10 + k)}
					}
					res, err := bt.Generate(ctx, reqs)
					if err != nil {
						b.Error(err)
						return
					}
					p = append(append([]int32(nil), p...), res[0].Tokens...)
					t0 := time.Now()
					for time.Since(t0) < 100*time.Microsecond {
					}
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric((cpuTime()-c0).Seconds()/b.Elapsed().Seconds(), "cores")
}
