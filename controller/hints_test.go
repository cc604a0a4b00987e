package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/runlog"
)

// failGroups makes every call of the groups at the given cursors (epoch
// 0) fail as infra, until cleared.
func failGroups(h *harness, cursors ...uint64) {
	bad := map[runlog.GroupID]bool{}
	for _, c := range cursors {
		bad[runlog.NewGroupID(h.cfg.Run.Seed, 0, c)] = true
	}
	h.gen.fail = func(_ context.Context, k callKey, _ int) error {
		if bad[k.id.Group] {
			return injected(k)
		}
		return nil
	}
}

// TestShrunkStepSaysHowToGoOn: a step left with fewer groups than
// rollout_failure.min_step_batch_fraction allows stops the run with the
// key to change and the resume command; resumed with exactly that
// change, the run goes on and trains the step.
func TestShrunkStepSaysHowToGoOn(t *testing.T) {
	cfg := testConfig(t, "rollout_failure.max_infra_attempts=1", "rollout_failure.on_dropped_prompt=shrink",
		"rollout_failure.min_step_batch_fraction=1", "run.max_steps=1", "grpo.num_prompts_per_step=4")
	h := newHarness(t, cfg)
	failGroups(h, 0)
	err := h.run(context.Background())
	want := "--allow-config-change rollout_failure.min_step_batch_fraction rollout_failure.min_step_batch_fraction=0.75`"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant it to say %q", err, want)
	}
	h.gen.fail = nil
	h.cfg = testConfig(t, "rollout_failure.max_infra_attempts=1", "rollout_failure.on_dropped_prompt=shrink",
		"rollout_failure.min_step_batch_fraction=0.75", "run.max_steps=1", "grpo.num_prompts_per_step=4")
	if err := h.run(context.Background()); err != nil {
		t.Fatalf("resumed with the change the error named: %v", err)
	}
	if st := h.state(); st.Step != 1 || len(st.Trained[0].Groups) != 3 {
		t.Fatalf("step %d, trained %v; want step 1 trained on the 3 groups left", st.Step, st.Trained)
	}
}

// TestEmptyStepSaysHowToGoOn: with every group of a step dropped no
// fraction lets it train; the error names on_dropped_prompt: replace,
// and a resume with it admits spares and trains the step.
func TestEmptyStepSaysHowToGoOn(t *testing.T) {
	over := []string{"rollout_failure.max_infra_attempts=1", "rollout_failure.on_dropped_prompt=shrink",
		"rollout_failure.min_step_batch_fraction=0.5", "run.max_steps=1", "grpo.num_prompts_per_step=2"}
	h := newHarness(t, testConfig(t, over...))
	failGroups(h, 0, 1)
	err := h.run(context.Background())
	want := "--allow-config-change rollout_failure.on_dropped_prompt rollout_failure.on_dropped_prompt=replace`"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "min_step_batch_fraction=") {
		t.Fatalf("err = %v\nwant it to say %q and suggest no fraction", err, want)
	}
	h.gen.fail = nil
	h.cfg = testConfig(t, append(over, "rollout_failure.on_dropped_prompt=replace")...)
	if err := h.run(context.Background()); err != nil {
		t.Fatalf("resumed with the change the error named: %v", err)
	}
	if st := h.state(); st.Step != 1 || len(st.Trained[0].Groups) != 2 {
		t.Fatalf("step %d, trained %v; want step 1 trained on 2 spares", st.Step, st.Trained)
	}
}

// TestDropCapSaysHowToGoOn: a run stopped by
// max_consecutive_dropped_prompts names the key and the resume command.
func TestDropCapSaysHowToGoOn(t *testing.T) {
	h := newHarness(t, testConfig(t, "rollout_failure.max_infra_attempts=1", "rollout_failure.on_dropped_prompt=shrink",
		"rollout_failure.max_consecutive_dropped_prompts=1", "run.max_steps=1"))
	failGroups(h, 0, 1, 2, 3)
	err := h.run(context.Background())
	want := "to go on, resume with a larger cap: `longhaul train --run-dir " + h.dir +
		" --allow-config-change rollout_failure.max_consecutive_dropped_prompts rollout_failure.max_consecutive_dropped_prompts="
	if !errors.Is(err, ErrTooManyDropped) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant it to say %q", err, want)
	}
}
