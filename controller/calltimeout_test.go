package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/runlog"
)

// TestCallTimeoutFailsTheAttempt: a model call that hangs past
// rollout_failure.call_timeout_s fails its attempt as infra, recorded in
// the log with the key's name, and the retried attempt resumes from the
// log (the hung call is the only one generated twice); the run trains.
func TestCallTimeoutFailsTheAttempt(t *testing.T) {
	cfg := testConfig(t, "rollout_failure.call_timeout_s=0.05", "run.max_steps=1")
	h := newHarness(t, cfg)
	victim := runlog.RolloutID{Group: runlog.NewGroupID(cfg.Run.Seed, 0, 0), Member: 1}
	hung := callKey{victim, 1}
	h.gen.fail = func(ctx context.Context, k callKey, n int) error {
		if k == hung && n == 1 {
			<-ctx.Done() // hangs until the call timeout cancels it
			return ctx.Err()
		}
		return nil
	}
	if err := h.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, ev := range h.events() {
		if f, ok := ev.(runlog.RolloutFailed); ok {
			if f.Rollout != victim || f.Class != failure.Infra {
				t.Fatalf("unexpected failure %+v", f)
			}
			reasons = append(reasons, f.Reason)
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "call_timeout_s") {
		t.Fatalf("failures %q, want one naming rollout_failure.call_timeout_s", reasons)
	}
	if n := h.gen.count(hung); n != 2 {
		t.Fatalf("the hung call was generated %d times, want 2", n)
	}
	if n := h.gen.count(callKey{victim, 0}); n != 1 {
		t.Fatalf("the logged call before it was generated %d times, want 1", n)
	}
	if st := h.state(); st.Step != 1 {
		t.Fatalf("step %d, want 1", st.Step)
	}
}
