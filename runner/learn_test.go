package runner

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/examples"
	"github.com/longhaul-rl/longhaul/internal/race"
	"github.com/longhaul-rl/longhaul/metrics"
)

func mean(steps []metrics.Step, get func(metrics.Step) float64) float64 {
	var s float64
	for _, st := range steps {
		s += get(st)
	}
	return s / float64(len(steps))
}

// TestLearnsLedgerWithCompaction is the shortened default run: the shipped
// config (warm start, then GRPO) for 60 steps instead of 200. RL must lift
// the success rate and the reward clearly above where the warm start left
// them, with compaction firing in most rollouts by the end.
func TestLearnsLedgerWithCompaction(t *testing.T) {
	if testing.Short() || race.Enabled {
		t.Skip("trains for about two minutes: run without -race and -short (a step of its own in .ci/run)")
	}
	cfg, err := config.Parse(examples.DefaultName, examples.Default)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.ApplyOverrides([]string{"run.max_steps=60", "checkpointing.enabled=false", "rollout_checkpointing.enabled=false"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := Train(context.Background(), cfg, Options{RunDir: dir, Logger: log}); err != nil {
		t.Fatal(err)
	}
	steps, err := metrics.Read(filepath.Join(dir, MetricsFile))
	if err != nil || len(steps) != 60 {
		t.Fatalf("metrics: %d steps, %v", len(steps), err)
	}
	first, last := steps[:5], steps[len(steps)-10:]
	succ := func(s metrics.Step) float64 { return s.SuccessRate }
	rew := func(s metrics.Step) float64 { return s.RewardMean }
	comp := func(s metrics.Step) float64 { return s.CompactedFraction }
	t.Logf("success %.3f -> %.3f, reward %.3f -> %.3f, compacted %.2f -> %.2f",
		mean(first, succ), mean(last, succ), mean(first, rew), mean(last, rew), mean(first, comp), mean(last, comp))
	if mean(last, succ)-mean(first, succ) < 0.15 || mean(last, rew)-mean(first, rew) < 0.15 {
		t.Fatal("RL did not improve clearly beyond the warm start")
	}
	if mean(last, comp) < 0.5 {
		t.Fatal("compaction fired in fewer than half of the rollouts at the end")
	}
	if _, err := os.Stat(filepath.Join(dir, CurveFile)); err != nil {
		t.Fatalf("learning curve: %v", err)
	}
}
