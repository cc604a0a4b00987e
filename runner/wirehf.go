package runner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/model"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
)

// LoadHF loads model.path and fits it to model.context.
func LoadHF(cfg *config.Config) (*model.Model, error) {
	m, err := model.LoadDir(cfg.Model.Path)
	if err != nil {
		return nil, fmt.Errorf("model.path: %w", err)
	}
	if err := m.SetContext(cfg.Model.Context); err != nil {
		return nil, fmt.Errorf("model.context: %w", err)
	}
	return m, nil
}

// wireHF is wire for model.path with in-process generation: the
// checkpoint's model, trained in process (train/embedded) and sampled in
// process (gen/embedded, a copy of the weights per version). The
// warm start renders its demonstrations through the directory's chat
// template (warmhf.go).
func wireHF(ctx context.Context, cfg *config.Config, reg *env.Registry, log *slog.Logger, opts Options, p *parts) (*parts, error) {
	if cfg.Trainer.Kind != "embedded" || cfg.Generator.Kind != "embedded" {
		return nil, fmt.Errorf("runner: model.path needs trainer.kind embedded with generator.kind embedded or openai, or remote and openai (have %s, %s)", cfg.Trainer.Kind, cfg.Generator.Kind)
	}
	if err := wireHFTrainer(ctx, cfg, reg, log, opts, p); err != nil {
		return nil, err
	}
	tr := p.tr.(*tembedded.Trainer)
	eg := gembedded.New(tr.Model().Clone(), 0)
	bctx, stop := context.WithCancel(ctx)
	var inner gen.Generator = eg
	if opts.Observe != nil {
		inner = timedGen{eg, "embedded", opts.Observe.ObserveCall}
	}
	b := gen.NewBatcher(bctx, inner, 64, 2*time.Millisecond)
	p.gen, p.close = b, stop
	p.queues["generate"] = func() float64 { return float64(b.Queued()) }
	p.publish = func(_ context.Context, v int64) error {
		eg.SetWeights(tr.Model().Clone(), v)
		return nil
	}
	return p, nil
}

// wireHFTrainer sets p.tr to the HF trainer of model.path and p.warmStart
// to its warm start. With generator.kind openai (wire.go) the trainer's
// exports are HF directories that `longhaul serve --model DIR` reloads.
func wireHFTrainer(_ context.Context, cfg *config.Config, reg *env.Registry, log *slog.Logger, opts Options, p *parts) error {
	m, err := LoadHF(cfg)
	if err != nil {
		return err
	}
	tr, err := tembedded.New(m, OptimConfig(cfg), LossConfig(cfg))
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	tr.SetFS(opts.FS)
	p.tr = tr
	p.warmStart = func(ctx context.Context) error {
		return warmStartHF(ctx, cfg, reg, tr.Model(), log, opts.WarmStartProgress)
	}
	return nil
}
