package runner

import (
	"context"
	"fmt"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/config"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/rollouttest"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

// oracles are the scripted agents that write warm-start demonstrations.
var oracles = map[string]func(summaryRequest string) gen.Generator{
	"ledger": func(s string) gen.Generator { return rollouttest.LedgerOracle(s) },
}

// Demos returns n supervised rows: oracle episodes of the configured
// environment, played through the same rollout loop, compaction and
// segment builder as RL, so the warm start teaches exactly the token
// layout RL trains on. Tasks are drawn from their own seed stream, apart
// from the RL dataset.
func Demos(ctx context.Context, cfg *config.Config, reg *env.Registry, n int) ([]train.Row, error) {
	// The warm start's episodes are not the run's: their environment keys
	// get a run id of their own.
	ctx = env.WithRun(ctx, env.RunOf(ctx)+"-warmstart")
	if cfg.Warmstart.Data != "" {
		return fileDemos(ctx, cfg, reg, n)
	}
	mk, ok := oracles[cfg.Env.Name]
	if !ok {
		return nil, fmt.Errorf("warmstart: environment %q has no demonstration oracle; set warmstart.data to a demonstrations file or warmstart.enabled: false", cfg.Env.Name)
	}
	params, err := cfg.EnvParamsJSON()
	if err != nil {
		return nil, err
	}
	ccfg, err := cfg.Controller()
	if err != nil {
		return nil, err
	}
	cc := cfg.CompactionConfig()
	policy, err := cc.New()
	if err != nil {
		return nil, err
	}
	summary := ""
	if s, ok := policy.(compaction.Summarizer); ok {
		summary = s.SummaryRequest()
	}
	oracle := mk(summary)
	seed := rng.Derive(cfg.Run.Seed, "warmstart")
	var rows []train.Row
	for i := 0; len(rows) < n; i++ {
		task, err := reg.Task(cfg.Env.Name, params, seed, i)
		if err != nil {
			return nil, err
		}
		rec := &rollouttest.Recorder{}
		id := runlog.RolloutID{Group: runlog.GroupID(i)}
		spec := controller.RolloutSpec(&ccfg, reg, task, id, 1, rng.Derive(seed, "env", uint64(i)), oracle, rec)
		if _, err := rollout.Run(ctx, spec, nil); err != nil {
			return nil, fmt.Errorf("warmstart: demonstration %d: %w", i, err)
		}
		calls, bounds := rollout.Trace(rec.Events(), id)
		segs, _, err := segment.Build(calls, bounds, cfg.SegmentConfig())
		if err != nil {
			return nil, fmt.Errorf("warmstart: demonstration %d: %w", i, err)
		}
		for j := range segs {
			rows = append(rows, segs[j].Row(1))
		}
	}
	return rows[:n], nil
}
