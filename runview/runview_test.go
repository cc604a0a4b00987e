package runview

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/runner"
)

func run(t *testing.T) string {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", "ledger-tiny.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.ApplyOverrides([]string{"run.max_steps=2", "warmstart.enabled=false", "rollout_checkpointing.enabled=false",
		"grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=3", "model.layers=1"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := runner.Train(context.Background(), cfg, runner.Options{RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestListRowsAndErrors(t *testing.T) {
	ctx := context.Background()
	dir := run(t)
	all, err := List(ctx, dir, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	step1, _ := List(ctx, dir, Filter{Step: 1})
	if len(step1) != 6 {
		t.Fatalf("step 1 has %d rollouts, want 2 prompts x 3", len(step1))
	}
	for _, r := range step1 {
		if r.Step != 1 || !r.Trained || r.Status != "sealed" {
			t.Fatalf("step filter let through %+v", r)
		}
	}
	comp, _ := List(ctx, dir, Filter{Compacted: true})
	n := 0
	for _, r := range all {
		if r.Compactions > 0 {
			n++
		}
	}
	if len(comp) != n || n == 0 {
		t.Fatalf("--compacted: %d rows, %d of %d have compactions", len(comp), n, len(all))
	}
	if failed, _ := List(ctx, dir, Filter{Failed: true}); len(failed) != 0 {
		t.Fatalf("--failed lists %d rollouts of a run without failures", len(failed))
	}
	if _, err := List(ctx, dir, Filter{Status: "done"}); err == nil || !strings.Contains(err.Error(), "sealed") {
		t.Fatalf("bad --status: %v", err)
	}

	// The rows of step 1's rollouts hold exactly the trainable tokens the
	// trainer was given (metrics.jsonl), and their logprobs are the
	// sampler's, call by call.
	steps, err := metrics.Read(filepath.Join(dir, runner.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	trainable := 0
	for _, r := range step1 {
		id, _ := runlog.ParseRolloutID(r.ID)
		rows, err := TrainingRows(ctx, dir, id, true)
		if err != nil {
			t.Fatal(err)
		}
		_, evs, _ := runlog.ReadRollouts(ctx, dir, func(x runlog.RolloutID) bool { return x == id })
		var want, got []float32
		for _, ev := range evs[id] {
			if c, ok := ev.(runlog.CallFinished); ok && c.Selected {
				want = append(want, c.Logprobs...)
			}
		}
		for _, s := range rows.Segments {
			trainable += s.Trainable
			for _, tk := range s.PerToken {
				if tk.Trainable {
					got = append(got, tk.Logprob)
					if float64(tk.Advantage) != float64(float32(rows.Advantage)) {
						t.Fatalf("%s: token advantage %v, rollout advantage %v", id, tk.Advantage, rows.Advantage)
					}
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: row logprobs differ from the calls' (%d vs %d)", id, len(got), len(want))
		}
	}
	if trainable != steps[0].TrainTokens {
		t.Fatalf("rows of step 1 hold %d trainable tokens, the trainer got %d", trainable, steps[0].TrainTokens)
	}

	id, _ := runlog.ParseRolloutID(step1[0].ID)
	bad := id
	bad.Member = 7
	if err := Check(ctx, dir, bad); err == nil || !strings.Contains(err.Error(), "members 0 to 2") {
		t.Fatalf("unknown member: %v", err)
	}
	bad.Group++
	if err := Check(ctx, dir, bad); err == nil || !strings.Contains(err.Error(), "no group") {
		t.Fatalf("unknown group: %v", err)
	}
	if _, err := TrainingRows(ctx, dir, bad, false); err == nil || !strings.Contains(err.Error(), "no group") {
		t.Fatalf("rows of an unknown rollout: %v", err)
	}
	if err := Check(ctx, t.TempDir(), id); err == nil || !strings.Contains(err.Error(), "not a run directory") {
		t.Fatalf("not a run dir: %v", err)
	}
}

func TestFilterMatch(t *testing.T) {
	sealed := &runlog.Rollout{Status: runlog.StatusSealed}
	compacted := &runlog.Rollout{Status: runlog.StatusSealed, Compactions: 2}
	retried := &runlog.Rollout{Status: runlog.StatusRunning, Failures: 1}
	for _, c := range []struct {
		f    Filter
		m    *runlog.Rollout
		step int64
		want bool
	}{
		{Filter{}, sealed, 3, true},
		{Filter{Step: 3}, sealed, 3, true},
		{Filter{Step: 4}, sealed, 3, false},
		{Filter{Status: "sealed"}, sealed, 1, true},
		{Filter{Status: "running"}, sealed, 1, false},
		{Filter{Status: "running"}, retried, 1, true},
		{Filter{Compacted: true}, sealed, 1, false},
		{Filter{Compacted: true}, compacted, 1, true},
		{Filter{Failed: true}, compacted, 1, false},
		{Filter{Failed: true}, retried, 1, true},
		{Filter{Failed: true, Status: "sealed"}, retried, 1, false},
	} {
		if got := c.f.match(c.m, c.step); got != c.want {
			t.Errorf("%+v on %+v (step %d) = %v", c.f, *c.m, c.step, got)
		}
	}
}
