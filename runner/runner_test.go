package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/metrics"

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

// TestResumeOverDamagedMetrics: a line of garbage in the middle of
// metrics.jsonl (a view of the run, not its state) does not stop a
// resume: the file is set aside whole and rebuilt from its readable rows,
// and the resumed steps are written after them. On main the resume failed
// with "metrics.jsonl:2: not a JSON row".
func TestResumeOverDamagedMetrics(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if err := Train(ctx, tiny(t, "run.max_steps=2"), Options{RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, MetricsFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	damaged := first + "\n\x00\x13not a row\n" + rest
	if err := os.WriteFile(path, []byte(damaged), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Train(ctx, tiny(t, "run.max_steps=3"), Options{RunDir: dir, AllowChange: []string{"run.max_steps"}}); err != nil {
		t.Fatalf("resume over a damaged metrics.jsonl: %v", err)
	}
	steps, err := metrics.Read(path)
	if err != nil || len(steps) != 3 || steps[2].Step != 3 {
		t.Fatalf("metrics after the resume: %+v, %v; want steps 1-3", steps, err)
	}
	if aside, err := os.ReadFile(path + ".damaged"); err != nil || string(aside) != damaged {
		t.Fatalf("the damaged file was not kept aside: %v", err)
	}
}

// TestMetricsRowsRebuiltFromLog: a row lost from metrics.jsonl (its line
// damaged, or the file removed) is computed again from the run log at the
// next start: every figure the log determines equals the row the step
// first wrote; only the trainer's figures and the timings, which the log
// does not hold, are zero, and the row says so.
func TestMetricsRowsRebuiltFromLog(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	cfg := tiny(t, "run.max_steps=3")
	if err := Train(ctx, cfg, Options{RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, MetricsFile)
	orig, err := metrics.Read(path)
	if err != nil || len(orig) != 3 {
		t.Fatalf("metrics of the first run: %d rows, %v", len(orig), err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[1] = "{\"step\": 2, garbage\n" // step 2's row, damaged
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Train(ctx, cfg, Options{RunDir: dir}); err != nil {
		t.Fatalf("resume over a damaged row: %v", err)
	}
	got, err := metrics.Read(path)
	if err != nil || len(got) != 3 {
		t.Fatalf("metrics after the resume: %d rows, %v; want 3", len(got), err)
	}
	if got[0].Rebuilt || got[2].Rebuilt || !got[1].Rebuilt || got[1].Step != 2 {
		t.Fatalf("rows after the resume: %+v; want step 2 rebuilt, 1 and 3 as written", got)
	}
	// Figures only the trainer or the clock knew.
	notInLog := map[string]bool{"loss": true, "grad_norm": true, "lr": true, "clip_frac": true,
		"entropy": true, "kl_sampler": true, "kl_ref": true, "clip_low_frac": true, "clip_high_frac": true,
		"logprob_abs_diff": true, "ratio_p05": true, "ratio_p50": true, "ratio_p95": true, "ratio_max": true,
		"gen_s": true, "gen_cpu_s": true, "train_s": true, "step_s": true, "elapsed_s": true,
		"gen_tokens_per_s": true, "late_results": true, "regenerated": true, "rebuilt": true}
	want, have := asMap(t, orig[1]), asMap(t, got[1])
	same := 0
	for k, v := range want {
		switch {
		case notInLog[k]:
			if have[k] != nil && have[k] != float64(0) && have[k] != true {
				t.Errorf("rebuilt row: %s = %v; the log does not hold it, want zero", k, have[k])
			}
		case have[k] != v:
			t.Errorf("rebuilt row: %s = %v, the step wrote %v", k, have[k], v)
		default:
			same++
		}
	}
	if same < 10 {
		t.Fatalf("only %d fields of the rebuilt row compared equal: %v", same, have)
	}
	// The whole file removed: every row comes back.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Train(ctx, cfg, Options{RunDir: dir}); err != nil {
		t.Fatalf("resume without metrics.jsonl: %v", err)
	}
	if got, err := metrics.Read(path); err != nil || len(got) != 3 || got[0].RewardMean != orig[0].RewardMean || got[2].SuccessRate != orig[2].SuccessRate {
		t.Fatalf("metrics rebuilt from nothing: %+v, %v", got, err)
	}
}

func asMap(t *testing.T, s metrics.Step) map[string]any {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTrainTakesTheRunLock: Train holds the run directory's lock for the
// whole run (another Lock fails while it runs), and on a directory another
// holder locked it stops at once, naming the holder, before it writes
// anything. Fast and direct, where only a long crash test saw this.
func TestTrainTakesTheRunLock(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	held := false
	err := Train(ctx, tiny(t), Options{RunDir: dir, OnConfig: func(*config.Config) {
		_, err := Lock(nil, dir)
		held = errors.Is(err, ErrLocked)
	}})
	if err != nil || !held {
		t.Fatalf("Train: %v; lock held while it ran: %v", err, held)
	}
	l, err := Lock(nil, dir)
	if err != nil {
		t.Fatalf("lock after Train returned: %v", err)
	}
	defer l.Unlock()
	before, _ := os.ReadDir(filepath.Join(dir, "runlog"))
	err = Train(ctx, tiny(t, "run.max_steps=2"), Options{RunDir: dir, AllowChange: []string{"run.max_steps"}})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("Train on a locked run directory: %v; want ErrLocked naming this process", err)
	}
	if after, _ := os.ReadDir(filepath.Join(dir, "runlog")); len(after) != len(before) {
		t.Fatalf("Train on a locked run directory changed its log: %d entries, %d before", len(after), len(before))
	}
}
