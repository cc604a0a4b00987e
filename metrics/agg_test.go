package metrics

import (
	"testing"

	"github.com/longhaul-rl/longhaul/batch"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

func call(prefix uint32, suffix, sampled int) runlog.CallFinished {
	return runlog.CallFinished{PromptPrefix: prefix, PromptSuffix: make([]int32, suffix), Sampled: make([]int32, sampled)}
}

func segs(lens ...int) []segment.Segment {
	out := make([]segment.Segment, len(lens))
	for i, n := range lens {
		out[i].Tokens = make([]int32, n)
	}
	return out
}

func TestStepAggDiagnostics(t *testing.T) {
	var a StepAgg
	// group 1: equal rewards (no learning signal)
	a.AddRollout(&runlog.Rollout{Reward: 1, Success: true}, []runlog.CallFinished{call(0, 10, 5), call(15, 3, 4)}, segs(22))
	a.AddRollout(&runlog.Rollout{Reward: 1, Success: true}, []runlog.CallFinished{call(0, 12, 6)}, segs(18))
	a.EndGroup()
	// group 2: one member failed once and was retried; one compaction
	a.AddRollout(&runlog.Rollout{Reward: 0, Failures: 1, Compactions: 1}, []runlog.CallFinished{call(0, 8, 2), call(0, 20, 7)}, segs(10, 27))
	a.AddRollout(&runlog.Rollout{Reward: 0.5}, []runlog.CallFinished{call(0, 8, 1)}, segs(9))
	s := a.Step(3, batch.Counts{Groups: 2, Rollouts: 4})
	s.SetTrain(train.StepStats{Version: 3, Loss: 0.5, Diag: train.Diagnostics{Entropy: 2, RatioP95: 1.1}})
	checks := []struct {
		name      string
		got, want float64
	}{
		{"prompt len mean", s.PromptLenMean, (10 + 12 + 8 + 8) / 4.0},
		{"prompt len max", float64(s.PromptLenMax), 12},
		{"completion len mean", s.CompletionLenMean, (9 + 6 + 9 + 1) / 4.0},
		{"completion len max", float64(s.CompletionLenMax), 9},
		{"rollout len mean", s.RolloutLenMean, (22 + 18 + 37 + 9) / 4.0},
		{"rollout len max", float64(s.RolloutLenMax), 37},
		{"tokens/segment", s.TokensPerSegment, 86 / 5.0},
		{"segments/rollout", s.SegmentsPerRollout, 5 / 4.0},
		{"zero-variance groups", s.ZeroVarGroupFrac, 0.5},
		{"recovered groups", float64(s.RecoveredGroups), 1},
		{"recovered rollouts", float64(s.RecoveredRollouts), 1},
		{"success", s.SuccessRate, 0.5},
		{"entropy", s.Entropy, 2},
		{"ratio p95", s.RatioP95, 1.1},
		{"version", float64(s.Version), 3},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}
