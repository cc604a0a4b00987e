package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/runlog"
)

// TestResumeConfigFromLog: the digest in the log is the truth. With
// config.yaml deleted (or edited), a resume with changed keys is refused,
// naming them; without --config the run's own config is used (not the
// built-in default); an allowed change is logged and shown by inspect; an
// unknown key in --allow-config-change is an error.
func TestResumeConfigFromLog(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if err := Train(ctx, tiny(t), Options{RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ConfigFile)); err != nil {
		t.Fatal(err)
	}
	err := Train(ctx, tiny(t, "optim.lr=0.01", "compaction.trigger_tokens=50"), Options{RunDir: dir})
	if !errors.Is(err, config.ErrConfigChanged) || !strings.Contains(err.Error(), "optim.lr") || !strings.Contains(err.Error(), "compaction.trigger_tokens") {
		t.Fatalf("changed keys with config.yaml deleted: %v", err)
	}
	// An edited config.yaml is not the truth either.
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("optim:\n  lr: 0.01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Train(ctx, tiny(t, "optim.lr=0.01"), Options{RunDir: dir}); !errors.Is(err, config.ErrConfigChanged) {
		t.Fatalf("changed lr with config.yaml edited to match: %v", err)
	}
	// Without --config: the run's own config, whatever the default (here a
	// config that differs in many keys) says.
	other := tiny(t, "model.dim=48", "optim.lr=0.05")
	if err := Train(ctx, other, Options{RunDir: dir, FromRun: true}); err != nil {
		t.Fatalf("resume without --config: %v", err)
	}
	// A typo in --allow-config-change is an error, not an empty allowance.
	err = Train(ctx, other, Options{RunDir: dir, FromRun: true, Overrides: []string{"run.max_steps=2"}, AllowChange: []string{"run.max_step"}})
	if !errors.Is(err, config.ErrUnknownKey) || !strings.Contains(err.Error(), "run.max_step") {
		t.Fatalf("unknown allowed key: %v", err)
	}
	err = Train(ctx, other, Options{RunDir: dir, FromRun: true, Overrides: []string{"run.max_steps=2"}})
	if !errors.Is(err, config.ErrConfigChanged) || !strings.Contains(err.Error(), "run.max_steps") {
		t.Fatalf("override without allowance: %v", err)
	}
	var got *config.Config
	if err := Train(ctx, other, Options{RunDir: dir, FromRun: true, Overrides: []string{"run.max_steps=2"},
		AllowChange: []string{"run.max_steps"}, OnConfig: func(c *config.Config) { got = c }}); err != nil {
		t.Fatalf("allowed override: %v", err)
	}
	if got.Model.Dim != tiny(t).Model.Dim || got.Run.MaxSteps != 2 {
		t.Fatalf("resumed with dim %d max_steps %d; want the run's dim %d and 2", got.Model.Dim, got.Run.MaxSteps, tiny(t).Model.Dim)
	}
	rep, err := runlog.Inspect(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ConfigChanges) != 1 || len(rep.ConfigChanges[0].Changes) != 1 || rep.ConfigChanges[0].Changes[0] != "run.max_steps: 1 -> 2" {
		t.Fatalf("inspect's config changes: %+v", rep.ConfigChanges)
	}
	var sb strings.Builder
	if err := rep.WriteText(&sb); err != nil || !strings.Contains(sb.String(), "run.max_steps: 1 -> 2") {
		t.Fatalf("inspect text lacks the change (%v):\n%s", err, sb.String())
	}
	// The changed config is now the run's: resuming with it again is no
	// change, with config.yaml gone.
	os.Remove(filepath.Join(dir, ConfigFile))
	if err := Train(ctx, tiny(t, "run.max_steps=2"), Options{RunDir: dir}); err != nil {
		t.Fatalf("resume with the run's current config: %v", err)
	}
	if err := Train(ctx, tiny(t), Options{RunDir: dir}); !errors.Is(err, config.ErrConfigChanged) {
		t.Fatalf("resume with the run's first config after a change: %v", err)
	}
}
