package embedded

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/cputime"
	"github.com/longhaul-rl/longhaul/model"
)

// BenchmarkBatchedTurns: the RL loop's generation phase in small: 8 groups
// of 8 rollouts through a gen.Batcher (max 64, window 2 ms, as the runner
// builds it) to the embedded default model. A group's members make their
// first call together (one unit sharing a 40-token prompt); after that each
// rollout calls alone (6 new tokens after its growing prompt) and spends
// ~100 µs on its "env turn" between calls, for 2 to 8 turns (drawn per
// rollout, as episodes end at different turns). lanes=2 lets the batcher
// run a call on each core at once (gen.Laned); lanes=1 hides the lanes, so
// every batch is one whole-model call over both cores. callers=known makes
// each rollout a gen.Caller (as the controller does), so a batch closes
// when the rollouts it answered are back, not after a quiet gap. Reports
// wall time and CPU time per step and the cores kept busy.
func BenchmarkBatchedTurns(b *testing.B) {
	for _, lanes := range []int{1, 2} {
		b.Run(fmt.Sprintf("lanes=%d", lanes), func(b *testing.B) { benchTurns(b, lanes, false) })
	}
	b.Run("lanes=2/callers=known", func(b *testing.B) { benchTurns(b, 2, true) })
}

// wholeCalls hides a generator's lanes from the batcher.
type wholeCalls struct{ gen.Generator }

func benchTurns(b *testing.B, lanes int, known bool) {
	m, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	var g gen.Generator = New(m, 0)
	if lanes == 1 {
		g = wholeCalls{g}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bt := gen.NewBatcher(ctx, g, 64, 2*time.Millisecond)
	r := rand.New(rand.NewPCG(4, 4))
	const groups, members = 8, 8
	prompts := make([][]int32, groups)
	for i := range prompts {
		prompts[i] = make([]int32, 40)
		for j := range prompts[i] {
			prompts[i][j] = int32(r.IntN(256))
		}
	}
	turns := make([]int, groups*members)
	for i := range turns {
		turns[i] = 2 + r.IntN(7)
	}
	// as returns ctx carrying a fresh Caller when callers are known.
	as := func() (context.Context, func()) {
		if !known {
			return ctx, func() {}
		}
		c := &gen.Caller{}
		return gen.WithCaller(ctx, c), c.Leave
	}
	envTurn := func() {
		t0 := time.Now()
		for time.Since(t0) < 100*time.Microsecond {
		}
	}
	c0 := cputime.Process()
	b.ResetTimer()
	for it := range b.N {
		var wg sync.WaitGroup
		for gi := range groups {
			wg.Go(func() {
				first := make([]gen.Request, members)
				for k := range first {
					first[k] = gen.Request{Prompt: prompts[gi], MaxTokens: 6, Temperature: 1, Seed: uint64(it*100000 + gi*1000 + k)}
				}
				gctx, leave := as()
				res, err := bt.Generate(gctx, first)
				leave() // the members call from here on
				if err != nil {
					b.Error(err)
					return
				}
				var inner sync.WaitGroup
				for k := range members {
					inner.Go(func() {
						mctx, leave := as()
						defer leave()
						p := append(slices.Clone(prompts[gi]), res[k].Tokens...)
						for turn := 1; turn < turns[gi*members+k]; turn++ {
							envTurn()
							p = append(p, int32(10+turn), int32(11+k))
							out, err := bt.Generate(mctx, []gen.Request{{Prompt: p, MaxTokens: 6, Temperature: 1,
								Seed: uint64(it*100000 + gi*1000 + k*10 + turn)}})
							if err != nil {
								b.Error(err)
								return
							}
							p = append(p, out[0].Tokens...)
						}
					})
				}
				inner.Wait()
			})
		}
		wg.Wait()
	}
	cpu := (cputime.Process() - c0).Seconds()
	b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/step")
	b.ReportMetric(cpu*1e3/float64(b.N), "cpu-ms/step")
	b.ReportMetric(cpu/b.Elapsed().Seconds(), "cores")
}
