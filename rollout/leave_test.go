package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
)

// TestRolloutLeavesAtSeal: a rollout whose calls are a gen.Caller's goes
// through a batcher and leaves it when it seals, so no batch waits for a
// rollout that has ended (the controller leaves after Run too; this is
// the rollout's own leave, before its seal is durable).
func TestRolloutLeavesAtSeal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := gen.NewBatcher(ctx, scripted.LedgerOracle(""), 64, time.Second)
	spec := ledgerSpec(t, b, &batchRecorder{}, recency)
	res, err := rollout.Run(gen.WithCaller(ctx, &gen.Caller{}), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls < 2 {
		t.Fatalf("%d calls: the rollout was never away between turns", res.Calls)
	}
	if n := b.Away(); n != 0 {
		t.Fatalf("the batcher counts %d caller away after the rollout sealed", n)
	}
}
