package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/train"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
	"github.com/longhaul-rl/longhaul/train/remote"
)

// The warm start through a remote trainer (docs/protocols.md, "Trainer
// protocol: the warm start"). The controller makes the same demonstration
// rows as the in-process warm start (the same oracle episodes rendered
// through the model directory's chat template) and sends them as
// /v1/warm_step batches; the trainer steps its weights with a warm-start
// AdamW of its own. A warm start cut short resumes: the trainer's warm
// step count says where (a restarted trainer has 0 and is taken through
// from the start again, a live one continues), so it ends in the weights
// an uninterrupted one does.

// warmOptim is the warm start's optimizer: the run's, at warmstart.lr,
// constant after at most ten warmup steps.
func warmOptim(cfg *config.Config) model.OptimConfig {
	ws := cfg.Warmstart
	oc := OptimConfig(cfg)
	oc.LR, oc.MinLR, oc.Schedule, oc.WarmupSteps, oc.TotalSteps = ws.LR, ws.LR, "constant", min(10, ws.Steps), ws.Steps
	return oc
}

// maxWarmResyncs bounds how often one warm start picks up after the
// trainer's fence refused a step (a trainer restarting again and again).
const maxWarmResyncs = 16

// warmStartRemote warm-starts the trainer behind rc with the demonstrations
// rendered through model.path's chat template.
func warmStartRemote(ctx context.Context, cfg *config.Config, reg *env.Registry, rc *remote.Client, log *slog.Logger, progress func(done, total int)) error {
	ws := cfg.Warmstart
	if !ws.Enabled || ws.Steps == 0 {
		return nil
	}
	t0 := time.Now()
	c, parser, err := BuildChat(cfg)
	if err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("warmstart: model.path %s has no chat template", cfg.Model.Path)
	}
	rows, err := demos(ctx, cfg, reg, ws.Steps*ws.BatchSize, &demoChat{chat: c, parser: parser})
	if err != nil {
		return err
	}
	oc := warmOptim(cfg)
	spec := remote.WarmSpec{Steps: ws.Steps, WarmupSteps: oc.WarmupSteps, LR: oc.LR}
	from, step, err := rc.WarmState(ctx)
	if err != nil {
		return fmt.Errorf("warmstart: %w", err)
	}
	if step != 0 {
		return fmt.Errorf("warmstart: the trainer is at RL step %d but the run has no checkpoint: restart the trainer from its model directory", step)
	}
	if from > ws.Steps {
		return fmt.Errorf("warmstart: the trainer has taken %d warm-start steps, the config has %d: restart the trainer", from, ws.Steps)
	}
	if from > 0 {
		log.Info("warm start resumed on the trainer", "from", from, "of", ws.Steps)
	}
	var last remote.WarmStats
	resyncs := 0
	for i := from; i < ws.Steps; {
		spec.Index = i
		b := train.Batch{Loss: train.LossSFT, Rows: rows[i*ws.BatchSize : (i+1)*ws.BatchSize]}
		last, err = rc.WarmStep(ctx, spec, b)
		if resyncable(err) && resyncs < maxWarmResyncs {
			// The step was applied before a lost answer, or the trainer
			// restarted and lost the warm start: it says where it is.
			// (Warm steps are fenced by their index, so picking up from
			// the trainer's count never applies one twice.)
			resyncs++
			var step int64
			if i, step, err = rc.WarmState(ctx); err != nil {
				return fmt.Errorf("warmstart: %w", err)
			}
			if step != 0 || i > ws.Steps {
				return fmt.Errorf("warmstart: the trainer moved to RL step %d, warm step %d during the warm start", step, i)
			}
			log.Warn("warm start picks up where the trainer is", "warm_step", i, "of", ws.Steps)
			continue
		}
		if err != nil {
			return fmt.Errorf("warmstart step %d: %w", i+1, err)
		}
		i++
		if progress != nil {
			progress(i, ws.Steps)
		}
		if i%100 == 0 {
			log.Info("warm start", "step", i, "of", ws.Steps, "loss", round3(last.Loss))
		}
	}
	log.Info("warm start done (remote trainer)", "steps", ws.Steps, "loss", last.Loss, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// resyncable: a refused warm step (the fence), or one whose answer was
// lost (the trainer unreachable past the client's own retries, or killed
// while answering: a cut body), after which the trainer's count says
// where to go on.
func resyncable(err error) bool {
	return errors.Is(err, remote.ErrWarmConflict) || errors.Is(err, io.ErrUnexpectedEOF) ||
		(failure.ClassOf(err) == failure.Infra && !errors.Is(err, context.Canceled))
}

// WarmTrainer is the Go trainer `longhaul serve-trainer` serves, with
// /v1/warm_step: a warm step trains the same weights with a second
// model.Trainer (the warm start's AdamW), as the in-process warm start
// does, and leaves the RL trainer's step and moments alone.
type WarmTrainer struct {
	*tembedded.Trainer
	base model.OptimConfig
	warm *model.Trainer // nil outside a warm start
	done int
}

var _ remote.Warmer = (*WarmTrainer)(nil)

// NewWarmTrainer wraps t; base is the run's optimizer (OptimConfig), whose
// betas, eps, weight decay and gradient clip the warm start shares.
func NewWarmTrainer(t *tembedded.Trainer, base model.OptimConfig) *WarmTrainer {
	return &WarmTrainer{Trainer: t, base: base}
}

// WarmDone implements remote.Warmer.
func (w *WarmTrainer) WarmDone() int { return w.done }

// WarmStep implements remote.Warmer (the handler has checked the fence).
func (w *WarmTrainer) WarmStep(ctx context.Context, s remote.WarmSpec, b train.Batch) (remote.WarmStats, error) {
	if s.Index == 0 || w.warm == nil {
		oc := w.base
		oc.LR, oc.MinLR, oc.Schedule, oc.WarmupSteps, oc.TotalSteps = s.LR, s.LR, "constant", s.WarmupSteps, s.Steps
		t, err := model.NewTrainer(w.Model(), oc)
		if err != nil {
			return remote.WarmStats{}, fmt.Errorf("%w: warm start optimizer: %w", remote.ErrInvalid, err)
		}
		w.warm = t
	}
	seqs := make([]model.Sequence, len(b.Rows))
	for i, r := range b.Rows {
		seqs[i] = model.Sequence{Tokens: r.Tokens, Mask: r.Mask}
	}
	st, err := w.warm.Step(ctx, seqs, model.LossConfig{Kind: model.LossSFT, Norm: model.NormTokenMean})
	if err != nil {
		return remote.WarmStats{}, err
	}
	w.done = s.Index + 1
	if w.done >= s.Steps {
		w.warm = nil // the warm start is over: its optimizer goes
	}
	return remote.WarmStats{WarmStep: w.done, Loss: st.Loss, GradNorm: st.GradNorm, LR: st.LR, Tokens: st.Tokens}, nil
}

// LoadCheckpoint ends any warm start in progress (checkpoints are taken
// after it).
func (w *WarmTrainer) LoadCheckpoint(ctx context.Context, dir string) error {
	w.warm, w.done = nil, 0
	return w.Trainer.LoadCheckpoint(ctx, dir)
}
