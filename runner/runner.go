// Package runner wires a run from its config: run directory, run log,
// dataset, environments, the embedded model's generator and trainer, the
// warm start, and the controller. `longhaul train`, the end-to-end tests
// and `longhaul bench crash` all start runs through it.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/metrics/promtrain"
	"github.com/longhaul-rl/longhaul/metrics/tb"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
)

// Files in a run directory besides the run log.
const (
	ConfigFile  = "config.yaml"
	MetricsFile = "metrics.jsonl"
	CurveFile   = "learning_curve.png"
	WeightsFile = "weights/model.safetensors"
)

// Options adjust a run.
type Options struct {
	// RunDir is the run directory: a local path, or s3://BUCKET/PREFIX
	// (kept in the bucket, cached in store.cache_dir).
	RunDir string
	Logger *slog.Logger
	// AllowChange names the config keys that may differ from the run
	// directory's config on resume (e.g. run.max_steps).
	AllowChange []string
	Crash       func(point string)
	Progress    func(controller.Progress)
	// Metrics, when set, also receives every step's row (the Prometheus
	// endpoint of `longhaul train --metrics-addr`).
	Metrics metrics.Sink
	// Observe, when set, is the Prometheus exporter of the run: it gets
	// every step's row, live in-flight and queue gauges, server health,
	// call, log-append and checkpoint latencies.
	Observe *promtrain.Exporter
	// Live, when set, is given the running controller's live in-flight
	// count once the run starts (the progress display polls it).
	Live func(inFlight func() int64)
	// WarmStartProgress, when set, is told after every warm-start step how
	// many of how many are done (the warm start's own progress bar).
	WarmStartProgress func(done, total int)
	// WrapGenerator, when set, wraps the generator the controller calls
	// (crash tests count its invocations).
	WrapGenerator func(gen.Generator) gen.Generator
	// FromRun says no config file was given: a resume uses the run's own
	// config (the one the log's digest names) with Overrides applied, and
	// cfg is used only for a new run.
	FromRun   bool
	Overrides []string
	// OnConfig, when set, is told the config the run goes on with.
	OnConfig func(*config.Config)
	// Envs replaces the built-in environment registry.
	Envs *env.Registry
	// FS is the storage seam the run's files go through: the log,
	// checkpoints (and the embedded trainer's files in them), the stored
	// configs, metrics and the run lock. nil is the OS; tests inject
	// faults. An s3:// RunDir replaces it with the bucket's mirror.
	FS store.FS
}

// ErrConfigMismatch is returned when a resumed run's config differs from the
// one it started with in keys not allowed to change.
var ErrConfigMismatch = config.ErrConfigChanged

// Train runs (or resumes) the run in opts.RunDir to cfg.Run.MaxSteps.
func Train(ctx context.Context, cfg *config.Config, opts Options) (err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := config.CheckAllowed(opts.AllowChange); err != nil {
		return err
	}
	ctx, rd, err := openRunDir(ctx, cfg, opts, log)
	if err != nil {
		return err
	}
	defer func() {
		if cause := context.Cause(ctx); err != nil && cause != nil && cause != ctx.Err() {
			err = cause // the run was taken over: say so, not "canceled"
		}
		err = errors.Join(err, rd.close(ctx, err))
	}()
	dir, fs := rd.dir, rd.fs
	// The config is stored only once the run can start, so a first attempt
	// that fails on bad input (a missing dataset, say) can be retried with
	// the fix in the same run directory.
	lo := rd.logOptions(runlog.Options{Logger: log, Hook: opts.Crash, FS: fs})
	if opts.Observe != nil {
		lo.OnAppend = opts.Observe.ObserveLogAppend
	}
	rl, err := runlog.Open(ctx, dir, lo)
	if err != nil {
		return withRecoveryChoices(err, dir)
	}
	defer func() { err = errors.Join(err, rl.Close()) }()
	rd.started(rl)
	if rec := rl.Recovery(); rec.Truncated {
		log.Warn("run log tail was torn; cut back to the last whole record", "file", rec.File,
			"bytes", rec.Bytes, "records", rec.Records, "detail", rec.Message)
	}
	cfg, changes, err := resumeConfig(fs, rl, dir, cfg, opts)
	if err != nil {
		return err
	}
	if opts.OnConfig != nil {
		opts.OnConfig(cfg)
	}
	reg := opts.Envs
	if reg == nil {
		reg = env.Builtin()
	}
	if reg, err = Environments(cfg, reg); err != nil {
		return err
	}
	runID, err := RunID(fs, dir)
	if err != nil {
		return err
	}
	ctx = env.WithRun(ctx, runID)
	ds, err := Dataset(cfg, reg)
	if err != nil {
		return err
	}
	parts, err := wire(ctx, cfg, dir, reg, log, opts)
	if err != nil {
		return err
	}
	defer parts.close()
	mw, err := metrics.CreateFS(fs, filepath.Join(dir, MetricsFile))
	if err != nil {
		return err
	}
	defer mw.Close()
	if mw.Repaired > 0 {
		log.Warn("metrics.jsonl tail was torn; cut back to the last whole row", "bytes", mw.Repaired)
	}
	if mw.SetAside != "" {
		log.Warn("metrics.jsonl had lines that are not rows; the file is set aside and rebuilt from its readable rows (steps the run trains again after its checkpoint are rewritten)",
			"lines", mw.Dropped, "set_aside", mw.SetAside)
	}
	tw, err := tb.OpenFS(fs, filepath.Join(dir, TBDir), nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tw.Close()) }()
	if tw.Repaired > 0 {
		log.Warn("TensorBoard event file tail was torn; cut back to the last whole record", "bytes", tw.Repaired)
	}
	sinks := metrics.Sinks{mw, tbSink{tw}}
	if opts.Metrics != nil {
		sinks = append(sinks, opts.Metrics)
	}
	if opts.Observe != nil {
		sinks = append(sinks, opts.Observe)
	}
	g := parts.gen
	if opts.WrapGenerator != nil {
		g = opts.WrapGenerator(g)
	}
	chat, parser, err := BuildChat(cfg)
	if err != nil {
		return err
	}
	ccfg, err := cfg.Controller()
	if err != nil {
		return err
	}
	c, err := controller.New(controller.Options{
		Chat: chat, ToolParser: parser,
		Config: ccfg, RunDir: dir, Log: rl, Dataset: ds, Envs: reg, Generator: g, Trainer: parts.tr,
		Publish: parts.publish, WarmStart: parts.warmStart, Describe: parts.describeAll(),
		Fence: parts.fence, GenBoundsCalls: parts.boundsCalls,
		Metrics: sinks, Logger: log, Crash: opts.Crash, Progress: opts.Progress, FS: fs,
		FinalWeights: filepath.Join(dir, WeightsFile),
	})
	if err != nil {
		return err
	}
	if err := recordConfig(ctx, fs, rl, dir, cfg, changes, log); err != nil {
		return err
	}
	if err := fillMetrics(c, mw, log); err != nil {
		return err
	}
	if opts.Observe != nil {
		opts.Observe.Live(func() float64 { return float64(c.InFlight()) }, parts.queues)
	}
	if opts.Live != nil {
		opts.Live(c.InFlight)
	}
	if err := c.Run(ctx); err != nil {
		return err
	}
	// The log's pass over its older chunks (runlog/scrub.go) reports and
	// logs damage as it goes; a run that ends before it does waits for it,
	// so what it finds is in the log before the directory is left alone.
	if _, err := rl.Scrubbed(ctx); err != nil {
		log.Warn("run log scrub pass did not finish; the next resume repeats it", "err", err)
	}
	return PlotRun(dir)
}

// PlotRun draws the run directory's learning curve from metrics.jsonl.
func PlotRun(dir string) error {
	steps, err := metrics.Read(filepath.Join(dir, MetricsFile))
	if err != nil {
		return err
	}
	if len(steps) == 0 {
		return nil
	}
	return metrics.Plot(steps, "longhaul: "+filepath.Base(dir), filepath.Join(dir, CurveFile))
}

// storeConfig writes cfg as the run directory's readable config.yaml
// (the copy under configs/ is the one a resume trusts).
func storeConfig(fs store.FS, cfg *config.Config, dir string) error {
	path := filepath.Join(dir, ConfigFile)
	b, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := store.PutFile(fs, tmp, b); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return fs.Rename(tmp, path)
}

// Dataset returns the prompts the config names.
func Dataset(cfg *config.Config, reg *env.Registry) (data.Dataset, error) {
	switch cfg.Data.Source {
	case "jsonl":
		return data.ReadJSONL(cfg.Data.Path)
	case "builtin":
		params, err := cfg.EnvParamsJSON()
		if err != nil {
			return nil, err
		}
		seed := rng.Derive(cfg.Run.Seed, "dataset")
		if _, err := reg.Task(cfg.Env.Name, params, seed, 0); err != nil {
			return nil, fmt.Errorf("runner: env %q: %w", cfg.Env.Name, err)
		}
		return data.NewGenerated(cfg.Data.NumPrompts, func(i int) (data.Prompt, error) {
			t, err := reg.Task(cfg.Env.Name, params, seed, i)
			if err != nil {
				return data.Prompt{}, err
			}
			b, err := json.Marshal(t)
			return data.Prompt{ID: t.ID, Task: b}, err
		}), nil
	}
	return nil, fmt.Errorf("runner: data.source %q", cfg.Data.Source)
}

// ModelConfig is the built-in model architecture the config names: a
// Llama configuration (tied embeddings, one kv head per head) over the
// byte tokenizer.
func ModelConfig(cfg *config.Config) model.Config {
	mc := model.DefaultConfig()
	mc.Vocab = rollout.DefaultChat.Tokenizer().VocabSize()
	m := cfg.Model
	mc.Layers, mc.Dim, mc.Heads, mc.KVHeads, mc.Hidden, mc.MaxPos = m.Layers, m.Dim, m.Heads, m.Heads, m.Hidden, m.Context
	mc.HeadDim = m.Dim / max(m.Heads, 1)
	return mc
}

// InitModel initialises the embedded model from its seed, or loads model.weights.
func InitModel(cfg *config.Config) (*model.Model, error) {
	if cfg.Model.Path != "" {
		// Only `longhaul train` wires the HF family (wirehf.go); the
		// server and serve-trainer paths build the built-in model.
		return nil, fmt.Errorf("model.path: only `longhaul train` supports it so far (for serving use `longhaul serve --model DIR`)")
	}
	if cfg.Model.Weights != "" {
		m, err := model.Load(cfg.Model.Weights)
		if err != nil {
			return nil, fmt.Errorf("model.weights: %w", err)
		}
		return m, nil
	}
	seed := cfg.Model.InitSeed
	if seed == 0 {
		seed = rng.Derive(cfg.Run.Seed, "init")
	}
	m, err := model.NewBuiltin(ModelConfig(cfg), seed)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return m, nil
}

// OptimConfig maps the optim section.
func OptimConfig(cfg *config.Config) model.OptimConfig {
	o := cfg.Optim
	return model.OptimConfig{LR: o.LR, MinLR: o.MinLR, WarmupSteps: o.WarmupSteps, TotalSteps: cfg.Run.MaxSteps,
		Schedule: o.Schedule, WeightDecay: o.WeightDecay, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, GradClip: o.GradClip}
}

// LossConfig maps the loss section.
func LossConfig(cfg *config.Config) model.LossConfig {
	return model.LossConfig{Kind: model.LossPG, ClipLow: float32(cfg.Loss.ClipLow), ClipHigh: float32(cfg.Loss.ClipHigh),
		KLCoef: float32(cfg.Loss.KLCoef), Norm: cfg.Loss.Norm}
}

// WarmStart trains m on oracle demonstrations with the SFT loss
// (warmstart.*). It is deterministic, so a resume without a checkpoint
// repeats it exactly.
func WarmStart(ctx context.Context, cfg *config.Config, reg *env.Registry, m *model.Model, log *slog.Logger) error {
	return WarmStartProgress(ctx, cfg, reg, m, log, nil)
}

// WarmStartProgress is WarmStart telling progress (may be nil) after each
// step.
func WarmStartProgress(ctx context.Context, cfg *config.Config, reg *env.Registry, m *model.Model, log *slog.Logger, progress func(done, total int)) error {
	return warmStart(ctx, cfg, reg, nil, log, progress, func(oc model.OptimConfig) (stepper, error) {
		return model.NewTrainer(m, oc)
	})
}

// stepper is a trainer the warm start drives (the engine's, model.Trainer).
type stepper interface {
	Step(ctx context.Context, seqs []model.Sequence, lc model.LossConfig) (model.Stats, error)
}

// warmStart trains with the SFT loss on demonstrations rendered through ch
// (nil: the byte template), on the trainer newTrainer makes.
func warmStart(ctx context.Context, cfg *config.Config, reg *env.Registry, ch *demoChat, log *slog.Logger,
	progress func(done, total int), newTrainer func(model.OptimConfig) (stepper, error)) error {
	ws := cfg.Warmstart
	if !ws.Enabled || ws.Steps == 0 {
		return nil
	}
	t0 := time.Now()
	rows, err := demos(ctx, cfg, reg, ws.Steps*ws.BatchSize, ch)
	if err != nil {
		return err
	}
	t, err := newTrainer(warmOptim(cfg)) // warmremote.go: the same for a remote trainer
	if err != nil {
		return err
	}
	lc := model.LossConfig{Kind: model.LossSFT, Norm: model.NormTokenMean}
	var last model.Stats
	for i := 0; i < ws.Steps; i++ {
		seqs := make([]model.Sequence, ws.BatchSize)
		for j := range seqs {
			r := rows[i*ws.BatchSize+j]
			seqs[j] = model.Sequence{Tokens: r.Tokens, Mask: r.Mask}
		}
		if last, err = t.Step(ctx, seqs, lc); err != nil {
			return fmt.Errorf("warmstart step %d: %w", i+1, err)
		}
		if progress != nil {
			progress(i+1, ws.Steps)
		}
		if (i+1)%100 == 0 {
			log.Info("warm start", "step", i+1, "of", ws.Steps, "loss", round3(last.Loss))
		}
	}
	log.Info("warm start done", "steps", ws.Steps, "loss", last.Loss, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

var _ train.Trainer = (*tembedded.Trainer)(nil)
