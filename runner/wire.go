package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/gen/openai"
	"github.com/longhaul-rl/longhaul/metrics/promtrain"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
	"github.com/longhaul-rl/longhaul/train/remote"
)

// parts are the generator and trainer a run drives, with how weights flow
// from one to the other.
type parts struct {
	gen       gen.Generator
	tr        train.Trainer
	publish   func(ctx context.Context, version int64) error
	warmStart func(ctx context.Context) error
	describe  func() string // what generation waits on, for the stall watchdog
	// describeTrainer says whether the run waits on a remote trainer.
	describeTrainer func() string
	fence           controller.Fencer // the generator's version fence (openai servers)
	boundsCalls     bool              // the generator bounds each request by call_timeout_s itself
	close           func()
	queues          map[string]func() float64 // queue depths for the Prometheus gauges
	served          *gembedded.Generator      // the byte model's in-process generator, when it generates
}

// wire builds the generator and trainer the config names. The controller
// sees only gen.Generator and train.Trainer; what differs is how a new
// version reaches generation:
//
//	embedded → embedded: a copy of the weights in memory
//	any trainer → openai servers: the trainer exports weights/model.safetensors
//	  (with the version beside it) and every server reloads it
//	remote trainer → embedded: export, then load in process
func wire(ctx context.Context, cfg *config.Config, dir string, reg *env.Registry, log *slog.Logger, opts Options) (*parts, error) {
	obs := opts.Observe
	p := &parts{close: func() {}, queues: map[string]func() float64{}}
	defer func() {
		if obs != nil && p.tr != nil {
			p.tr = timedTrainer{p.tr, obs.ObserveCheckpoint}
		}
	}()
	// model.path with a remote trainer and served generation: both hold the
	// model (a PyTorch trainer and `longhaul serve --model DIR` loaded from
	// the same directory), weights travel as HF exports, and the controller
	// keeps only the tokenizer; that is the generic path below.
	// model.path with the embedded trainer and served generation: the HF
	// trainer in process (wirehf.go), exports to the servers as below.
	if cfg.Model.Path != "" && cfg.Generator.Kind != "openai" {
		return wireHF(ctx, cfg, reg, log, opts, p)
	}
	var local *tembedded.Trainer
	switch cfg.Trainer.Kind {
	case "embedded":
		if cfg.Model.Path != "" {
			if err := wireHFTrainer(ctx, cfg, reg, log, opts, p); err != nil {
				return nil, err
			}
			break
		}
		m, err := InitModel(cfg)
		if err != nil {
			return nil, err
		}
		if local, err = tembedded.New(m, OptimConfig(cfg), LossConfig(cfg)); err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		local.SetFS(opts.FS) // checkpoint files through the run's storage seam
		p.tr = local
		p.warmStart = func(ctx context.Context) error {
			return WarmStartProgress(ctx, cfg, reg, local.Model(), log, opts.WarmStartProgress)
		}
	case "remote":
		// The trainer process initialises (and warm-starts) its own model
		// from the same config: `longhaul serve-trainer --config ...`.
		rc := remote.New(cfg.Trainer.URL, remote.Options{MaxOutage: time.Duration(cfg.RolloutFailure.MaxOutageS * float64(time.Second))})
		p.tr, p.describeTrainer = rc, rc.Describe
		if cfg.Model.Path != "" {
			// An HF model's trainer (the PyTorch one) starts from the
			// directory; the warm start goes through the protocol
			// (warmremote.go). The Go serve-trainer (byte model) warm-starts
			// itself from its config.
			p.warmStart = func(ctx context.Context) error {
				return warmStartRemote(ctx, cfg, reg, rc, log, opts.WarmStartProgress)
			}
		}
	default:
		return nil, fmt.Errorf("runner: trainer.kind %q", cfg.Trainer.Kind)
	}
	weights := filepath.Join(dir, WeightsFile)
	export := func(ctx context.Context, v int64) error {
		if err := p.tr.ExportWeights(ctx, weights); err != nil {
			return fmt.Errorf("runner: exporting version %d: %w", v, err)
		}
		b, _ := json.Marshal(map[string]int64{"version": v})
		return store.WriteAtomic(store.Or(opts.FS), filepath.Join(filepath.Dir(weights), tembedded.MetaFile), b)
	}
	switch cfg.Generator.Kind {
	case "embedded":
		var m *model.Model
		if local != nil {
			m = local.Model().Clone()
		} else {
			var err error
			if m, err = InitModel(cfg); err != nil {
				return nil, err
			}
		}
		m.SetPrefixCache(PrefixCacheBytes(cfg)) // shared with the trainer's model and every clone
		eg := gembedded.New(m, 0)
		p.served = eg
		bctx, stop := context.WithCancel(ctx)
		var inner gen.Generator = eg
		if obs != nil {
			inner = timedGen{eg, "embedded", obs.ObserveCall}
		}
		b := gen.NewBatcher(bctx, inner, 64, 2*time.Millisecond)
		p.gen = b
		p.queues["generate"] = func() float64 { return float64(b.Queued()) }
		p.close = stop
		if local != nil {
			p.publish = func(_ context.Context, v int64) error {
				eg.SetWeights(local.Model().Clone(), v)
				return nil
			}
		} else {
			p.publish = func(ctx context.Context, v int64) error {
				if err := export(ctx, v); err != nil {
					return err
				}
				m, err := loadServed(ctx, weights, DefaultMaxWeightsBytes, PrefixCacheBytes(cfg))
				if err != nil {
					return err
				}
				eg.SetWeights(m, v)
				return nil
			}
		}
	case "openai":
		oo := openai.Options{Model: cfg.Generator.Model,
			APIKey: cfg.Generator.APIKey, Logger: log, API: cfg.Generator.API, ReloadMethod: cfg.Generator.ReloadMethod,
			RequestTimeout: time.Duration(cfg.RolloutFailure.CallTimeoutS * float64(time.Second)),
			MaxOutage:      time.Duration(cfg.RolloutFailure.MaxOutageS * float64(time.Second))}
		if obs != nil {
			oo.OnCall = obs.ObserveCall
		}
		oc, err := openai.New(ctx, cfg.Generator.URLs, oo)
		if err != nil {
			return nil, err
		}
		if obs != nil {
			obs.Servers(func() []promtrain.ServerHealth {
				var out []promtrain.ServerHealth
				for _, s := range oc.Status() {
					out = append(out, promtrain.ServerHealth{URL: s.URL, Up: s.Up, InFlight: s.InFlight})
				}
				return out
			})
		}
		p.gen, p.close, p.fence = oc, oc.Close, oc
		p.boundsCalls = true // RequestTimeout above
		p.describe = oc.Describe
		p.publish = func(ctx context.Context, v int64) error {
			if err := export(ctx, v); err != nil {
				return err
			}
			abs, err := filepath.Abs(weights)
			if err != nil {
				return err
			}
			if cfg.Generator.API == openai.APIVLLM || cfg.Generator.API == openai.APISGLang {
				// vLLM and SGLang load an HF directory: the export's.
				abs = filepath.Dir(abs)
			}
			// Every server is brought to v and confirms it; one that cannot
			// be reached gets no calls until the client catches it up.
			return oc.Publish(ctx, abs, v)
		}
	default:
		return nil, fmt.Errorf("runner: generator.kind %q", cfg.Generator.Kind)
	}
	return p, nil
}

// describeAll joins what generation and a remote trainer wait on (nil
// when neither says anything).
func (p *parts) describeAll() func() string {
	g, t := p.describe, p.describeTrainer
	switch {
	case g == nil:
		return t
	case t == nil:
		return g
	}
	return func() string { return g() + "; " + t() }
}
