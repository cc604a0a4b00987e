package controller

// This file holds the training step: reading committed groups back,
// building segments, advantages and batches, training, publishing and
// writing the step's metrics.

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/longhaul-rl/longhaul/advantage"
	"github.com/longhaul-rl/longhaul/batch"
	"github.com/longhaul-rl/longhaul/internal/metrics"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/segment"
	"github.com/longhaul-rl/longhaul/train"
)

// checkStaleness (throughput mode) guards the bounded-staleness rule: a
// group of step k is trained only if all its calls were generated within
// lag versions of k-1. The producer starts step k only once version
// k-1-lag is published and versions only grow, so a group it admitted is
// never stale (nothing needs generating again); a violation is a bug and
// stops the run rather than training on it.
func (c *Controller) checkStaleness(k, lag int64) error {
	// Generation of step k starts only once version k-1-lag is published
	// and versions only grow, so a group admitted by this controller is
	// never stale; groups resumed from a rewound log can be newer, never
	// older. The check stays as the guard the schedule promises.
	groups, _ := c.groupsFor(k)
	for _, g := range groups {
		for _, m := range g.Members {
			for _, call := range episode(m) {
				if k-1-call.Version > lag {
					return fmt.Errorf("controller: group %s of step %d has a call of version %d, more than %d behind version %d", g.ID, k, call.Version, lag, k-1)
				}
			}
		}
	}
	return nil
}

// trainStep trains step k on its committed groups and publishes version k.
func (c *Controller) trainStep(ctx context.Context, k int64) error {
	t0 := c.now()
	all, _ := c.groupsFor(k)
	var groups, dropList []*runlog.Group
	dropped, replaced, fresh := 0, 0, 0
	for _, g := range all {
		if g.AdmittedFor == k {
			fresh++
		}
		switch {
		case g.Status == runlog.GroupStatusDropped:
			dropped++
			dropList = append(dropList, g)
			continue
		case g.Replaces != 0:
			replaced++
		}
		groups = append(groups, g)
	}
	P := c.cfg.GRPO.NumPromptsPerStep
	// A step that holds only retried groups (its own prompts ran out at
	// run.max_epochs) trains what it has.
	if need := int(math.Ceil(c.cfg.RolloutFailure.MinStepBatchFraction * float64(P))); len(groups) < max(1, need) && (fresh > 0 || len(groups) == 0) {
		return fmt.Errorf("controller: step %d has %d of %d groups left after %d were dropped, fewer than rollout_failure.min_step_batch_fraction (%g) allows%s",
			k, len(groups), P, dropped, c.cfg.RolloutFailure.MinStepBatchFraction, c.shrinkHint(k, len(groups), all))
	}
	acfg, scfg := c.cfg.AdvantageConfig(), c.cfg.SegmentConfig()
	var (
		ags   []advantage.Group
		ids   []runlog.GroupID
		agg   metrics.StepAgg
		stale []int64
	)
	for _, g := range groups {
		if g.Status != runlog.GroupStatusCommitted {
			return fmt.Errorf("controller: step %d: group %s is %s, not committed", k, g.ID, g.Status)
		}
		members := make([]advantage.Rollout, 0, len(g.Members))
		for _, m := range g.Members {
			evs, err := c.rolloutEvents(m.ID)
			if err != nil {
				return err
			}
			calls, bounds := rollout.Trace(evs, m.ID)
			segs, _, err := segment.Build(calls, bounds, scfg)
			if err != nil {
				return fmt.Errorf("controller: step %d: rollout %s: %w", k, m.ID, err)
			}
			members = append(members, advantage.Rollout{ID: m.ID, Reward: m.Reward, Segments: segs})
			agg.AddRollout(m, calls, segs)
			for _, cl := range episode(m) {
				stale = append(stale, k-1-cl.Version)
			}
		}
		agg.EndGroup()
		ag, err := advantage.Compute(acfg, members)
		if err != nil {
			return fmt.Errorf("controller: step %d: group %s: %w", k, g.ID, err)
		}
		ags = append(ags, ag)
		ids = append(ids, g.ID)
	}
	b, counts, err := batch.Pack(train.LossPG, ags, c.cfg.GRPO.MicrobatchTokens)
	if err != nil {
		return fmt.Errorf("controller: step %d: %w", k, err)
	}
	c.o.Crash("train.before")
	tt := c.now()
	stats, err := c.o.Trainer.TrainStep(ctx, b)
	if err != nil {
		return fmt.Errorf("controller: step %d: %w", k, err)
	}
	trainDur := c.now().Sub(tt)
	c.o.Crash("train.after")
	if stats.Version != k {
		return fmt.Errorf("controller: step %d: trainer published version %d (trainer and run log disagree): %w", k, stats.Version, train.ErrStateLost)
	}
	if _, err := c.o.Log.Append(ctx, runlog.StepTrained{Step: k, Groups: ids, Version: stats.Version}); err != nil {
		return err
	}
	c.evMu.Lock()
	for _, g := range groups {
		for _, m := range g.Members {
			delete(c.events, m.ID)
		}
	}
	c.evMu.Unlock()
	if err := c.o.Publish(ctx, stats.Version); err != nil {
		return err
	}
	c.setVersion(stats.Version)

	ms := agg.Step(k, counts)
	ms.SetTrain(stats)
	ms.Dropped, ms.Replaced = dropped, replaced
	ms.LateResults = int(c.lateResults.Swap(0))
	ms.Regenerated = int(c.regenerated.Swap(0))
	rs := stepRetryStats(groups, dropList)
	ms.Recovered, ms.RecoveredTokensMean, ms.FreshTokensMean, ms.DroppedTokensMean = rs.recovered, rs.recoveredTok, rs.freshTok, rs.drTok
	if rs.recovered > 0 || dropped > 0 {
		c.log.Info("retried and dropped groups", "step", k, "recovered", rs.recovered, "dropped", dropped,
			"recovered_tokens_per_rollout", round(rs.recoveredTok), "fresh_tokens_per_rollout", round(rs.freshTok),
			"dropped_tokens_per_rollout", round(rs.drTok))
	}
	if len(stale) > 0 {
		var sum float64
		for _, v := range stale {
			sum += float64(v)
			ms.StalenessMax = max(ms.StalenessMax, v)
		}
		ms.StalenessMean = sum / float64(len(stale))
	}
	genDur := time.Duration(c.genTime.Swap(0))
	ms.GenSeconds = genDur.Seconds()
	ms.TrainSeconds = trainDur.Seconds()
	ms.StepSeconds = c.now().Sub(t0).Seconds() + ms.GenSeconds
	ms.ElapsedSeconds = c.now().Sub(c.start).Seconds()
	if genDur > 0 {
		ms.GenTokensPerSecond = float64(c.genTokens.Swap(0)) / genDur.Seconds()
	}
	if c.o.Metrics != nil {
		if err := c.o.Metrics.Write(ms); err != nil {
			return err
		}
	}
	if k%int64(c.cfg.Run.LogEvery) == 0 || k == int64(c.cfg.Run.MaxSteps) {
		c.log.Info("step", "step", k, "reward", round(ms.RewardMean), "success", round(ms.SuccessRate),
			"compactions/rollout", round(ms.CompactionsPerRollout), "loss", round(ms.Loss),
			"gen_s", round(ms.GenSeconds), "train_s", round(ms.TrainSeconds))
	}
	if c.o.Progress != nil {
		c.o.Progress(Progress{Step: k, MaxSteps: int64(c.cfg.Run.MaxSteps), Metrics: ms, InFlight: int(c.inFlight.Load())})
	}
	cp := c.cfg.Checkpointing
	if cp.Enabled && (k%int64(cp.SavePeriod) == 0 || k == int64(c.cfg.Run.MaxSteps)) {
		metric := metricValue(ms, cp.Metric)
		if err := c.checkpoint(ctx, k, metric); err != nil {
			return err
		}
	}
	return nil
}

// rolloutEvents returns a rollout's events: from the cache when this
// process logged all of them, else from the log.
func (c *Controller) rolloutEvents(id runlog.RolloutID) ([]runlog.Event, error) {
	c.evMu.Lock()
	evs, ok := c.events[id]
	c.evMu.Unlock()
	if ok {
		return evs, nil
	}
	return c.o.Log.RolloutEvents(id)
}

// seconds converts a config duration; 0 or less means none (a day).
func seconds(s float64) time.Duration {
	if s <= 0 {
		return 24 * time.Hour
	}
	return time.Duration(s * float64(time.Second))
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }
