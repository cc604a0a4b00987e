package metrics

import (
	"math"

	"github.com/longhaul-rl/longhaul/batch"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

// StepAgg accumulates one step's rollout metrics as the controller reads
// its groups back: AddRollout per member, EndGroup after each group's
// members, then Step. It holds the computation so the controller only
// hands over what it already has.
type StepAgg struct {
	n, success, compacted        int
	reward, reward2              float64
	segs, compactions, turns     int
	calls, genTokens, promptTok  int
	segTokens                    int
	promptLen, complLen, rollLen lenStat
	groups, zeroVar              int
	recoveredGroups, recovered   int
	// the open group
	gRewards   []float64
	gRecovered bool
}

type lenStat struct {
	sum, max int
}

func (l *lenStat) add(v int) {
	l.sum += v
	l.max = max(l.max, v)
}

// AddRollout adds one sealed member: its state, its calls (all of them,
// rejected resamples too) and its segments.
func (a *StepAgg) AddRollout(m *runlog.Rollout, calls []runlog.CallFinished, segs []segment.Segment) {
	a.n++
	a.reward += m.Reward
	a.reward2 += m.Reward * m.Reward
	a.gRewards = append(a.gRewards, m.Reward)
	if m.Success {
		a.success++
	}
	if m.Compactions > 0 {
		a.compacted++
	}
	if m.Failures > 0 {
		a.recovered++
		a.gRecovered = true
	}
	a.segs += len(segs)
	a.compactions += int(m.Compactions)
	a.turns += int(m.EnvSteps)
	a.calls += len(calls)
	gen := 0
	for _, cl := range calls {
		gen += len(cl.Sampled)
		a.promptTok += int(cl.PromptPrefix) + len(cl.PromptSuffix)
	}
	a.genTokens += gen
	a.complLen.add(gen)
	if len(calls) > 0 {
		a.promptLen.add(int(calls[0].PromptPrefix) + len(calls[0].PromptSuffix))
	}
	roll := 0
	for i := range segs {
		roll += len(segs[i].Tokens)
	}
	a.segTokens += roll
	a.rollLen.add(roll)
}

// EndGroup closes the group whose members were just added.
func (a *StepAgg) EndGroup() {
	if len(a.gRewards) == 0 {
		return
	}
	a.groups++
	same := true
	for _, r := range a.gRewards[1:] {
		same = same && r == a.gRewards[0]
	}
	if same {
		a.zeroVar++
	}
	if a.gRecovered {
		a.recoveredGroups++
	}
	a.gRewards, a.gRecovered = a.gRewards[:0], false
}

// Step returns the step's row from what was added and the batch counts.
func (a *StepAgg) Step(k int64, counts batch.Counts) Step {
	a.EndGroup()
	n := float64(max(a.n, 1))
	mean := a.reward / n
	return Step{
		Step: k, RewardMean: mean, RewardStd: math.Sqrt(math.Max(0, a.reward2/n-mean*mean)),
		SuccessRate: float64(a.success) / n, Groups: counts.Groups, Rollouts: counts.Rollouts,
		SegmentsPerRollout: float64(a.segs) / n, CompactionsPerRollout: float64(a.compactions) / n,
		CompactedFraction: float64(a.compacted) / n, TurnsPerRollout: float64(a.turns) / n,
		Rows: counts.Rows, TrainTokens: counts.Trainable, PaddingTokens: counts.Padding,
		GeneratedTokens: a.genTokens, PromptTokens: a.promptTok, Calls: a.calls,
		PromptLenMean: float64(a.promptLen.sum) / n, PromptLenMax: a.promptLen.max,
		CompletionLenMean: float64(a.complLen.sum) / n, CompletionLenMax: a.complLen.max,
		RolloutLenMean: float64(a.rollLen.sum) / n, RolloutLenMax: a.rollLen.max,
		TokensPerSegment: float64(a.segTokens) / float64(max(a.segs, 1)),
		ZeroVarGroupFrac: float64(a.zeroVar) / float64(max(a.groups, 1)),
		RecoveredGroups:  a.recoveredGroups, RecoveredRollouts: a.recovered,
	}
}

// SetTrain copies what the trainer reported for the step.
func (s *Step) SetTrain(st train.StepStats) {
	s.Version = st.Version
	s.Loss, s.GradNorm, s.LR, s.ClipFrac = st.Loss, st.GradNorm, st.LR, st.ClipFrac
	d := st.Diag
	s.Entropy, s.KLSampler, s.KLRef = d.Entropy, d.KLSampler, d.KLRef
	s.ClipLowFrac, s.ClipHighFrac, s.LogprobAbsDiff = d.ClipLowFrac, d.ClipHighFrac, d.LogprobAbsDiff
	s.RatioP05, s.RatioP50, s.RatioP95, s.RatioMax = d.RatioP05, d.RatioP50, d.RatioP95, d.RatioMax
}
