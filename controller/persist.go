package controller

// This file holds restore (resume from the newest durable checkpoint) and
// checkpoint writing.

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train/ckpt"
)

func (c *Controller) ckptDir() string {
	d := c.cfg.Checkpointing.Dir
	if !filepath.IsAbs(d) {
		d = filepath.Join(c.o.RunDir, d)
	}
	return d
}

// restore brings the trainer to the newest durable checkpoint the log
// covers and returns the version it publishes. Steps the log recorded
// after it are rewound: their groups go back to committed-not-trained and
// are trained again from the same data.
func (c *Controller) restore(ctx context.Context) (int64, error) {
	logged := c.view().step
	var from int64
	found := false
	if c.cfg.Checkpointing.Enabled {
		e, m, rejected, ok, err := ckpt.LatestFS(c.o.FS, c.ckptDir(), logged)
		if err != nil {
			return 0, err
		}
		for _, r := range rejected {
			c.log.Warn("checkpoint rejected, using an older one", "path", r.Entry.Path, "err", r.Err)
		}
		if ok {
			if err := c.o.Trainer.LoadCheckpoint(ctx, e.Path); err != nil {
				return 0, fmt.Errorf("controller: loading checkpoint %s: %w", e.Path, err)
			}
			from, found = m.Step, true
			c.log.Info("resumed from checkpoint", "path", e.Path, "step", m.Step)
		}
	}
	if !found {
		if c.o.WarmStart != nil {
			if err := c.o.WarmStart(ctx); err != nil {
				return 0, fmt.Errorf("controller: warm start: %w", err)
			}
		}
	}
	if err := c.syncTrainer(ctx, from); err != nil {
		return 0, err
	}
	if from < logged {
		c.log.Info("rewinding trained steps the newest checkpoint does not cover", "from", logged, "to", from)
		if _, err := c.o.Log.Append(ctx, runlog.Rewound{Step: from, Version: from}); err != nil {
			return 0, err
		}
	}
	if err := c.o.Publish(ctx, from); err != nil {
		return 0, err
	}
	c.fence(from)
	if !found && c.cfg.Checkpointing.Enabled {
		// The initial policy (after a warm start) is checkpoint 0, so a
		// resume before the first periodic checkpoint skips the warm start.
		if err := c.checkpoint(ctx, 0, nil); err != nil {
			return 0, err
		}
	}
	return from, nil
}

// checkpoint writes the trainer's state as checkpoint k, records it, and
// applies retention.
func (c *Controller) checkpoint(ctx context.Context, k int64, metric *float64) error {
	cp := c.cfg.Checkpointing
	path, digest, err := ckpt.WriteFS(c.o.FS, c.ckptDir(), ckpt.Manifest{Step: k, Version: k, Metric: metric}, func(dir string) error {
		if err := c.o.Trainer.SaveCheckpoint(ctx, dir); err != nil {
			return err
		}
		c.o.Crash("checkpoint.write")
		return nil
	})
	if err != nil {
		return fmt.Errorf("controller: checkpoint of step %d (the previous checkpoint stays valid): %w", k, err)
	}
	rel, _ := filepath.Rel(c.o.RunDir, path)
	if _, err := c.o.Log.Append(ctx, runlog.CheckpointDurable{Step: k, Version: k, Path: rel, ManifestDigest: digest}); err != nil {
		return err
	}
	if cp.KeepLastK > 0 {
		if _, err := ckpt.RetainFS(c.o.FS, c.ckptDir(), cp.KeepLastK, cp.KeepTopK, cp.HigherIsBetter); err != nil {
			c.log.Warn("checkpoint retention", "err", err)
		}
	}
	return nil
}

func metricValue(ms metrics.Step, name string) *float64 {
	var v float64
	switch name {
	case "success_rate":
		v = ms.SuccessRate
	case "reward_mean":
		v = ms.RewardMean
	case "loss":
		v = ms.Loss
	default:
		return nil
	}
	return &v
}
