package runner

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
)

// crashyEnv is the ledger, except that it crashes on some tasks: the
// environment of a real run that fails on a few seeds.
type crashyEnv struct {
	env.Environment
	crash bool
}

var errCrash = errors.New("crashy: environment process died")

func (e *crashyEnv) Reset(ctx context.Context, t env.Task, seed uint64) (string, error) {
	h := fnv.New32a()
	h.Write([]byte(t.ID))
	e.crash = h.Sum32()%4 == 0
	return e.Environment.Reset(ctx, t, seed)
}

func (e *crashyEnv) Step(ctx context.Context, a string) (env.StepResult, error) {
	if e.crash {
		return env.StepResult{}, errCrash
	}
	return e.Environment.Step(ctx, a)
}

func crashyRegistry(t *testing.T) *env.Registry {
	reg := env.Builtin()
	ledger, _ := reg.Lookup("ledger")
	if err := reg.Register(env.Definition{Name: "crashy",
		New: func(p json.RawMessage) (env.Environment, error) {
			e, err := ledger.New(p)
			return &crashyEnv{Environment: e}, err
		},
		Task: ledger.Task}); err != nil {
		t.Fatal(err)
	}
	return reg
}

// accounting checks that every admitted group is trained, dropped or
// still waiting (open or committed for a later step), and none twice.
func accounting(t *testing.T, dir string) *runlog.Report {
	t.Helper()
	rep, err := runlog.Inspect(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	admitted := int(rep.Counts["PromptAdmitted"])
	trained := map[string]bool{}
	for _, st := range rep.Trained {
		for _, g := range st.GroupIDs {
			if trained[g] {
				t.Fatalf("group %s trained twice", g)
			}
			trained[g] = true
		}
	}
	waiting := rep.Groups["open"] + rep.Groups["committed"]
	if admitted != len(trained)+rep.Dropped+waiting || rep.Groups["trained"] != len(trained) {
		t.Fatalf("accounting: admitted %d != trained %d + dropped %d + waiting %d", admitted, len(trained), rep.Dropped, waiting)
	}
	return rep
}

// TestCrashingEnvironmentDropsPrompts: an environment that crashes on some
// tasks fails those rollouts (data), which are retried within
// max_data_attempts and then dropped; the run finishes, and the books
// balance. With on_dropped_prompt: replace every step trains a full batch.
func TestCrashingEnvironmentDropsPrompts(t *testing.T) {
	for _, mode := range []string{"shrink", "replace", "retry"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := tiny(t, "env.name=crashy", "run.max_steps=6", "grpo.num_prompts_per_step=4",
				"rollout_failure.max_skipped_prompts=100", "rollout_failure.max_consecutive_dropped_prompts=100",
				"rollout_failure.min_step_batch_fraction=0.25", "rollout_failure.on_dropped_prompt="+mode)
			if err := Train(context.Background(), cfg, Options{RunDir: dir, Envs: crashyRegistry(t)}); err != nil {
				t.Fatal(err)
			}
			rep := accounting(t, dir)
			if rep.Dropped == 0 || rep.Step != 6 {
				t.Fatalf("step %d, %d dropped; want 6 steps with some drops", rep.Step, rep.Dropped)
			}
			if got := rep.Counts["GroupDropped"]; int(got) != rep.Dropped {
				t.Fatalf("%d GroupDropped events for %d dropped groups", got, rep.Dropped)
			}
			steps, err := metrics.Read(filepath.Join(dir, MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			dropped := 0
			for _, s := range steps {
				dropped += s.Dropped
				if mode == "replace" && s.Groups != 4 {
					t.Fatalf("replace mode: step %d trained %d groups, want 4", s.Step, s.Groups)
				}
			}
			if mode == "replace" && rep.Counts["PromptAdmitted"] <= 4*7 {
				t.Fatalf("replace mode admitted no spares: %d admissions", rep.Counts["PromptAdmitted"])
			}
			if mode == "shrink" && dropped == 0 {
				t.Fatal("shrink mode: no step reports a dropped group")
			}
			if mode == "retry" {
				// The crashy environment fails the same tasks every time, so
				// each such group is retried max_group_retries times and
				// then dropped: the log holds both.
				if rep.Counts["GroupRequeued"] == 0 {
					t.Fatal("retry mode: no group was requeued")
				}
			}
		})
	}
}

// TestDropCapStopsTheRun: beyond max_skipped_prompts the run stops with an
// error naming the cap, and what was durable stays readable.
func TestDropCapStopsTheRun(t *testing.T) {
	dir := t.TempDir()
	cfg := tiny(t, "env.name=crashy", "run.max_steps=20", "grpo.num_prompts_per_step=4",
		"rollout_failure.max_skipped_prompts=1", "rollout_failure.min_step_batch_fraction=0.25",
		"rollout_failure.on_dropped_prompt=shrink")
	err := Train(context.Background(), cfg, Options{RunDir: dir, Envs: crashyRegistry(t)})
	if !errors.Is(err, controller.ErrTooManyDropped) || !strings.Contains(err.Error(), "rollout_failure.max_skipped_prompts (1)") {
		t.Fatalf("err = %v", err)
	}
	// Groups of a step run concurrently, so the cap is checked when they
	// have all finished: it is passed, by as many as one step's groups.
	if rep := accounting(t, dir); rep.Dropped < 2 || rep.Dropped > 1+4 {
		t.Fatalf("%d dropped, want past the cap of 1 by at most a step's groups", rep.Dropped)
	}
}

// hangEnv never answers a step until its context ends: a stuck
// environment service.
type hangEnv struct{ env.Environment }

func (hangEnv) Step(ctx context.Context, _ string) (env.StepResult, error) {
	<-ctx.Done()
	return env.StepResult{}, ctx.Err()
}

func hangRegistry(t *testing.T) *env.Registry {
	reg := env.Builtin()
	ledger, _ := reg.Lookup("ledger")
	if err := reg.Register(env.Definition{Name: "hang",
		New: func(p json.RawMessage) (env.Environment, error) {
			e, err := ledger.New(p)
			return hangEnv{e}, err
		},
		Task: ledger.Task}); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestRolloutDeadline: an attempt that runs past rollout_timeout_s fails as
// infra (recorded), is retried, and its group is dropped at the budget;
// the run then stops at the drop cap.
func TestRolloutDeadline(t *testing.T) {
	dir := t.TempDir()
	cfg := tiny(t, "env.name=hang", "rollout_failure.rollout_timeout_s=0.2", "rollout_failure.call_timeout_s=0.1",
		"rollout_failure.max_infra_attempts=2", "rollout_failure.backoff_base_s=0.01", "rollout_failure.backoff_cap_s=0.02",
		"rollout_failure.max_consecutive_dropped_prompts=0", "rollout_failure.on_dropped_prompt=shrink")
	err := Train(context.Background(), cfg, Options{RunDir: dir, Envs: hangRegistry(t)})
	if !errors.Is(err, controller.ErrTooManyDropped) {
		t.Fatalf("err = %v", err)
	}
	l, err := runlog.Open(context.Background(), dir, runlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	infra := 0
	l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
		if f, ok := ev.(runlog.RolloutFailed); ok && f.Class == failure.Infra && strings.Contains(f.Reason, "rollout_timeout_s") {
			infra++
		}
		return nil
	})
	if infra == 0 {
		t.Fatal("no attempt failed on its deadline")
	}
}

// TestStallWatchdogAborts: with stall_action abort, a run that makes no
// progress stops with an error naming what is stuck.
func TestStallWatchdogAborts(t *testing.T) {
	dir := t.TempDir()
	cfg := tiny(t, "env.name=hang", "rollout_failure.stall_timeout_s=0.3", "rollout_failure.stall_action=abort")
	err := Train(context.Background(), cfg, Options{RunDir: dir, Envs: hangRegistry(t)})
	if !errors.Is(err, controller.ErrStalled) || !strings.Contains(err.Error(), "open groups: g") || !strings.Contains(err.Error(), "rollouts running") {
		t.Fatalf("err = %v", err)
	}
}
