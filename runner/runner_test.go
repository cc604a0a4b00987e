package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
)

func tiny(t *testing.T, overrides ...string) *config.Config {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", "ledger-tiny.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"run.max_steps=1", "warmstart.enabled=false", "rollout_checkpointing.enabled=false",
		"grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2", "model.layers=1"}
	if err := cfg.ApplyOverrides(append(base, overrides...)); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestBadInputThenFix: a first start that fails on bad input stores no
// config, so the same run directory starts with the fix; a real change to
// a started run is refused, naming the key, unless allowed.
func TestBadInputThenFix(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	bad := tiny(t, "data.source=jsonl", "data.path="+filepath.Join(dir, "missing.jsonl"))
	if err := Train(ctx, bad, Options{RunDir: dir}); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Fatalf("bad dataset: %v", err)
	}
	if err := Train(ctx, tiny(t), Options{RunDir: dir}); err != nil {
		t.Fatalf("the fixed config in the same directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, WeightsFile)); err != nil {
		t.Fatal(err)
	}
	err := Train(ctx, tiny(t, "optim.lr=0.01"), Options{RunDir: dir})
	if !errors.Is(err, config.ErrConfigChanged) || !strings.Contains(err.Error(), "optim.lr") {
		t.Fatalf("changed lr on resume: %v", err)
	}
	if err := Train(ctx, tiny(t, "run.max_steps=2"), Options{RunDir: dir, AllowChange: []string{"run.max_steps"}}); err != nil {
		t.Fatalf("extending with --allow-config-change: %v", err)
	}
}
