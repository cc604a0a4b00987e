package controller

import (
	"testing"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
)

func TestNextAttempt(t *testing.T) {
	rf := ctl(t, config.Default()).RolloutFailure // 4 infra, 2 data attempts
	failed := func(infra, data uint32, class, reason string) runlog.Rollout {
		return runlog.Rollout{Status: runlog.StatusFailed, Attempt: infra + data, InfraFailures: infra, DataFailures: data,
			Failures: infra + data, LastFailure: runlog.Failure{Class: class, Reason: reason}}
	}
	diverged := func(r runlog.Rollout) runlog.Rollout {
		r.LastFailure.Cause = runlog.CauseDiverged
		return r
	}
	for _, tc := range []struct {
		name string
		r    runlog.Rollout
		want attemptPlan
	}{
		{"sealed", runlog.Rollout{Status: runlog.StatusSealed}, attemptPlan{done: true}},
		{"running resumes", runlog.Rollout{Status: runlog.StatusRunning, Attempt: 3}, attemptPlan{}},
		{"pending starts", runlog.Rollout{Status: runlog.StatusPending}, attemptPlan{start: true}},
		{"regenerated restarts", runlog.Rollout{Status: runlog.StatusPending, Regenerate: true}, attemptPlan{start: true, restart: true}},
		{"data failure retries", failed(0, 1, failure.Data, "bad"), attemptPlan{start: true}},
		{"diverged restarts", diverged(failed(0, 1, failure.Data, "resume failed")), attemptPlan{start: true, restart: true}},
		// The decision reads the typed cause, never the reason's text.
		{"a reason naming divergence does not restart", failed(0, 1, failure.Data, "data failure: resume: "+rollout.ErrDiverged.Error()),
			attemptPlan{start: true}},
		{"data budget used", failed(1, 2, failure.Data, "bad"), attemptPlan{exhausted: true}},
		{"infra budget used", failed(4, 0, failure.Infra, "timeout"), attemptPlan{exhausted: true}},
		// Failures of the previous budget round (Failures) do not count.
		{"new round after a requeue", runlog.Rollout{Status: runlog.StatusFailed, Failures: 9, LastFailure: runlog.Failure{Class: failure.Data}},
			attemptPlan{start: true}},
	} {
		got := nextAttempt(&tc.r, rf, 1)
		got.backoff = 0
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// Infra failures back off, growing with the count, capped.
	r := failed(1, 0, failure.Infra, "timeout")
	d1 := nextAttempt(&r, rf, 1).backoff
	r = failed(3, 0, failure.Infra, "timeout")
	d3 := nextAttempt(&r, rf, 1).backoff
	if d1 <= 0 || d3 <= d1 || d3.Seconds() > rf.BackoffCapS {
		t.Fatalf("backoff after 1 infra failure %v, after 3 %v (cap %gs)", d1, d3, rf.BackoffCapS)
	}
	if again := nextAttempt(&r, rf, 1).backoff; again != d3 {
		t.Fatalf("backoff is not a function of the state: %v then %v", d3, again)
	}
}
