package controller

// This file holds the training effect: reading a step's groups back from
// the log, training the batch stepBatch picks, publishing and writing the
// step's metrics.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train"
)

// trainStep is the effect that trains step k: it reads the step's groups
// and their members' events, picks the batch (stepBatch), trains it,
// appends StepTrained, publishes version k (its wake-up tells the loop,
// which serves it to the planner) and writes the step's metrics row, which
// it returns (the checkpoint's metric). With a release channel
// (run.overlap) it waits between training and StepTrained until the loop
// closes it (Ready.Commit).
func (c *Controller) trainStep(ctx context.Context, k int64, release <-chan struct{}) (metrics.Step, error) {
	all, _ := c.groupsFor(k)
	events := make(map[runlog.RolloutID][]runlog.Event, len(all)*c.cfg.GRPO.NumGenerationsPerPrompt)
	for _, g := range all {
		if g.Status != runlog.GroupStatusCommitted {
			continue
		}
		for _, m := range g.Members {
			evs, err := c.rolloutEvents(m.ID)
			if err != nil {
				return metrics.Step{}, err
			}
			events[m.ID] = evs
		}
	}
	sp, err := stepBatch(k, events, all, c.cfg)
	if se := (*shrunkError)(nil); errors.As(err, &se) {
		// Say which key to change and how to resume with it (hints.go).
		return metrics.Step{}, fmt.Errorf("%w%s", err, c.shrinkHint(k, se.left, all))
	}
	if err != nil {
		return metrics.Step{}, err
	}
	c.o.Crash("train.before")
	tt := c.now()
	stats, err := c.o.Trainer.TrainStep(ctx, sp.batch)
	if err != nil {
		return metrics.Step{}, fmt.Errorf("controller: step %d: %w", k, err)
	}
	trainDur := c.now().Sub(tt)
	c.o.Crash("train.after")
	if stats.Version != k {
		return metrics.Step{}, fmt.Errorf("controller: step %d: trainer published version %d (trainer and run log disagree): %w", k, stats.Version, train.ErrStateLost)
	}
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return metrics.Step{}, context.Cause(ctx)
		}
	}
	if _, err := c.o.Log.Append(ctx, runlog.StepTrained{Step: k, Groups: sp.ids, Version: stats.Version}); err != nil {
		return metrics.Step{}, err
	}
	c.cache.drop(sp.trained)
	if err := c.o.Publish(ctx, stats.Version); err != nil {
		return metrics.Step{}, err
	}
	c.fence(stats.Version)

	ms := sp.loggedRow()
	ms.SetTrain(stats)
	ms.LateResults = int(c.figures.lateResults.Swap(0))
	ms.Regenerated = int(c.figures.regenerated.Swap(0))
	if ms.Recovered > 0 || ms.Dropped > 0 {
		c.log.Info("retried and dropped groups", "step", k, "recovered", ms.Recovered, "dropped", ms.Dropped,
			"recovered_tokens_per_rollout", round(ms.RecoveredTokensMean), "fresh_tokens_per_rollout", round(ms.FreshTokensMean),
			"dropped_tokens_per_rollout", round(ms.DroppedTokensMean))
	}
	genDur := time.Duration(c.figures.genTime.Swap(0))
	ms.GenSeconds = genDur.Seconds()
	ms.GenCPUSeconds = time.Duration(c.figures.genCPU.Swap(0)).Seconds()
	ms.TrainSeconds = trainDur.Seconds()
	now := c.now()
	ms.StepSeconds = now.Sub(c.lastRow).Seconds()
	c.lastRow = now
	ms.ElapsedSeconds = c.now().Sub(c.start).Seconds()
	if genDur > 0 {
		ms.GenTokensPerSecond = float64(c.figures.genTokens.Swap(0)) / genDur.Seconds()
	}
	if c.o.Metrics != nil {
		if err := c.o.Metrics.Write(ms); err != nil {
			return metrics.Step{}, err
		}
	}
	if k%int64(max(1, c.cfg.Run.LogEvery)) == 0 || k == int64(c.cfg.Run.MaxSteps) {
		c.log.Info("step", "step", k, "reward", round(ms.RewardMean), "success", round(ms.SuccessRate),
			"compactions/rollout", round(ms.CompactionsPerRollout), "loss", round(ms.Loss),
			"gen_s", round(ms.GenSeconds), "train_s", round(ms.TrainSeconds))
	}
	if c.o.Progress != nil {
		c.o.Progress(Progress{Step: k, MaxSteps: int64(c.cfg.Run.MaxSteps), Metrics: ms, InFlight: int(c.inFlight.Load())})
	}
	return ms, nil
}

// loggedRow is the part of step k's metrics row that the log determines:
// what the batch holds, the drops, retries and staleness (RebuildRows
// computes the same from the log alone).
func (sp stepPlan) loggedRow() metrics.Step {
	ms := sp.agg.Step(sp.step, sp.counts)
	ms.Dropped, ms.Replaced = len(sp.dropList), sp.replaced
	rs := stepRetryStats(sp.trained, sp.dropList)
	ms.Recovered, ms.RecoveredTokensMean, ms.FreshTokensMean, ms.DroppedTokensMean = rs.recovered, rs.recoveredTok, rs.freshTok, rs.drTok
	ms.StalenessMean, ms.StalenessMax = sp.staleMean, sp.staleMax
	return ms
}

// seconds converts a config duration; 0 or less means none (a day).
func seconds(s float64) time.Duration {
	if s <= 0 {
		return 24 * time.Hour
	}
	return time.Duration(s * float64(time.Second))
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }
