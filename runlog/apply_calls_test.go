package runlog

import (
	"errors"
	"testing"
)

// TestApplyModelCallKinds: a model call's kinds (CallFinished, its decoded
// form *callRecord, EnvStep) are refused before RunStarted and for a stale
// attempt, and fold into their rollout: calls, env steps, reward and done.
// No other test checked an env step's reward or done in the state.
func TestApplyModelCallKinds(t *testing.T) {
	for _, ev := range []Event{CallFinished{}, &callRecord{}, EnvStep{}} {
		if err := Apply(NewState(), ev); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("%T before RunStarted: %v, want ErrInvalidEvent", ev, err)
		}
	}
	s, g := started(t)
	r0 := RolloutID{g, 0}
	events := len(s.Rollout(r0).Events) // its attempts' starts
	for _, ev := range []Event{
		CallFinished{Rollout: r0, Attempt: 2, Call: 0, PromptSuffix: []int32{1, 2, 3}, Sampled: []int32{4, 5},
			Logprobs: []float32{-1, -2}, Finish: "stop", Selected: true},
		EnvStep{Rollout: r0, Attempt: 2, Turn: 0, Reward: 0.25},
		&callRecord{CallFinished: CallFinished{Rollout: r0, Attempt: 2, Call: 1, Finish: "stop", Selected: true},
			nSuffix: 1, nSampled: 1, nLogprobs: 1},
		EnvStep{Rollout: r0, Attempt: 2, Turn: 1, Reward: 0.5, Done: true},
	} {
		if err := Apply(s, ev); err != nil {
			t.Fatalf("%T: %v", ev, err)
		}
	}
	r := s.Rollout(r0)
	if len(r.Calls) != 2 || r.EnvSteps != 2 || r.EnvReward != 0.75 || !r.EnvDone || len(r.Events) != events+4 {
		t.Fatalf("calls %d, env steps %d, reward %g, done %v, events %d; want 2, 2, 0.75, true, %d",
			len(r.Calls), r.EnvSteps, r.EnvReward, r.EnvDone, len(r.Events), events+4)
	}
	for _, ev := range []Event{
		CallFinished{Rollout: r0, Attempt: 1, Call: 2, Finish: "stop"},
		EnvStep{Rollout: r0, Attempt: 1, Turn: 2},
	} {
		if err := Apply(s, ev); !errors.Is(err, ErrStaleAttempt) {
			t.Errorf("%T of attempt 1: %v, want ErrStaleAttempt", ev, err)
		}
	}
}
