package controller

// This file holds the pure half of a training step: which groups step k
// trains and the batch they make (stepBatch). The effect that trains it is
// trainStep (step.go).

import (
	"fmt"
	"math"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/batch"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

// stepPlan is what stepBatch picks for a step.
type stepPlan struct {
	step     int64
	batch    train.Batch
	counts   batch.Counts
	ids      []runlog.GroupID // the trained groups, in admission order (StepTrained.Groups)
	trained  []*runlog.Group
	dropList []*runlog.Group // groups dropped for good while scheduled for the step
	replaced int             // trained groups that stand in for dropped ones
	agg      metrics.StepAgg
	// staleness of the trained calls: versions behind k-1.
	staleMean float64
	staleMax  int64
}

// stepBatch picks step k's batch from the groups scheduled for it (in
// admission order) and their members' events (as the log holds them). It
// is pure. It refuses a step that shrank below
// rollout_failure.min_step_batch_fraction, a group that is not committed,
// and (the bounded-staleness rule) a call generated more than run.max_lag
// versions before k-1: generation of step k starts only once version
// k-1-lag is served and stale members of retried groups are regenerated,
// so that is a bug, and training on it is refused.
func stepBatch(k int64, events map[runlog.RolloutID][]runlog.Event, groups []*runlog.Group, cfg *Config) (stepPlan, error) {
	sp := stepPlan{step: k}
	fresh := 0
	for _, g := range groups {
		if g.AdmittedFor == k {
			fresh++
		}
		switch {
		case g.Status == runlog.GroupStatusDropped:
			sp.dropList = append(sp.dropList, g)
			continue
		case g.Replaces != 0:
			sp.replaced++
		}
		sp.trained = append(sp.trained, g)
	}
	P := cfg.GRPO.NumPromptsPerStep
	// A step that holds only retried groups (its own prompts ran out at
	// run.max_epochs) trains what it has.
	if need := int(math.Ceil(cfg.RolloutFailure.MinStepBatchFraction * float64(P))); len(sp.trained) < max(1, need) && (fresh > 0 || len(sp.trained) == 0) {
		return stepPlan{}, &shrunkError{step: k, left: len(sp.trained), of: P, dropped: len(sp.dropList), frac: cfg.RolloutFailure.MinStepBatchFraction}
	}
	lag := int64(cfg.Run.MaxLag)
	ags := make([]advantage.Group, 0, len(sp.trained))
	var staleSum float64
	var staleN int
	for _, g := range sp.trained {
		if g.Status != runlog.GroupStatusCommitted {
			return stepPlan{}, fmt.Errorf("controller: step %d: group %s is %s, not committed", k, g.ID, g.Status)
		}
		members := make([]advantage.Rollout, 0, len(g.Members))
		for _, m := range g.Members {
			calls, bounds := rollout.Trace(events[m.ID], m.ID)
			segs, _, err := segment.Build(calls, bounds, cfg.Segment)
			if err != nil {
				return stepPlan{}, fmt.Errorf("controller: step %d: rollout %s: %w", k, m.ID, err)
			}
			members = append(members, advantage.Rollout{ID: m.ID, Reward: m.Reward, Segments: segs})
			sp.agg.AddRollout(m, calls, segs)
			for _, cl := range episode(m) {
				behind := k - 1 - cl.Version
				if cfg.Run.Throughput() && behind > lag {
					return stepPlan{}, fmt.Errorf("controller: group %s of step %d has a call of version %d, more than %d behind version %d", g.ID, k, cl.Version, lag, k-1)
				}
				staleSum += float64(behind)
				staleN++
				sp.staleMax = max(sp.staleMax, behind)
			}
		}
		sp.agg.EndGroup()
		ag, err := advantage.Compute(cfg.Advantage, members)
		if err != nil {
			return stepPlan{}, fmt.Errorf("controller: step %d: group %s: %w", k, g.ID, err)
		}
		ags = append(ags, ag)
		sp.ids = append(sp.ids, g.ID)
	}
	if staleN > 0 {
		sp.staleMean = staleSum / float64(staleN)
	}
	b, counts, err := batch.Pack(train.LossPG, ags, cfg.GRPO.MicrobatchTokens)
	if err != nil {
		return stepPlan{}, fmt.Errorf("controller: step %d: %w", k, err)
	}
	sp.batch, sp.counts = b, counts
	return sp, nil
}

// shrunkError is stepBatch's refusal of a step that shrank below
// rollout_failure.min_step_batch_fraction; trainStep adds how to go on
// (shrinkHint), which names the run directory.
type shrunkError struct {
	step              int64
	left, of, dropped int
	frac              float64
}

func (e *shrunkError) Error() string {
	return fmt.Sprintf("controller: step %d has %d of %d groups left after %d were dropped, fewer than rollout_failure.min_step_batch_fraction (%g) allows",
		e.step, e.left, e.of, e.dropped, e.frac)
}
