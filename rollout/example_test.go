package rollout_test

import (
	"context"
	"fmt"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/batch"
	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

// Example wires one group the way the controller does: run every member,
// build segments from the logged events, compute advantages, pack a batch.
func Example() {
	ctx := context.Background()
	const seed = 1
	reg := env.Builtin()
	task, _ := reg.Task("ledger", nil, seed, 0)
	group := runlog.GroupID(7)
	log := &scripted.Recorder{} // the controller's durable run log

	var members []advantage.Rollout
	for m := range uint16(4) {
		id := runlog.RolloutID{Group: group, Member: m}
		spec := rollout.Spec{
			Seed: seed, Rollout: id, Attempt: 1, Task: task,
			EnvSeed:   rng.Derive(seed, "env", uint64(group)),
			NewEnv:    func(context.Context) (env.Environment, error) { return reg.New(task.Env, nil) },
			Generator: scripted.LedgerOracle(""),
			Recorder:  log,
			Limits: rollout.Limits{MaxTurns: 32, MaxTokensPerCall: env.LedgerMaxTokensPerCall,
				ContextBudget: env.LedgerContextBudget},
			Compaction: compaction.Config{Policy: compaction.PolicyRecency, KeepTurns: env.LedgerKeepTurns,
				Threshold: env.LedgerCompactThreshold},
		}
		if m == 3 {
			spec.Compaction = compaction.Config{} // this member overflows its context
		}
		res, err := rollout.Run(ctx, spec, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		calls, bounds := rollout.Trace(log.Events(), id)
		segs, _, err := segment.Build(calls, bounds, segment.Config{})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("member %d: %s reward %.2f, %d segments\n", m, res.Outcome, res.Reward, len(segs))
		members = append(members, advantage.Rollout{ID: id, Reward: res.Reward, Segments: segs})
	}
	g, _ := advantage.Compute(advantage.Config{Estimator: advantage.DrGRPO}, members)
	b, counts, _ := batch.Pack(train.LossPG, []advantage.Group{g}, 128)
	fmt.Printf("advantages %.3f %.3f\n", g.Rollouts[0].Advantage, g.Rollouts[3].Advantage)
	fmt.Printf("rollouts %d rows %d microbatches %d trainable %d\n", counts.Rollouts, len(b.Rows), counts.Microbatches, counts.Trainable)
	// Output:
	// member 0: completed reward 1.00, 6 segments
	// member 1: completed reward 1.00, 6 segments
	// member 2: completed reward 1.00, 6 segments
	// member 3: max_tokens reward 0.42, 1 segments
	// advantages 0.146 -0.438
	// rollouts 4 rows 19 microbatches 7 trainable 246
}
