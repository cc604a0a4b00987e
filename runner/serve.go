package runner

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/server"
	"github.com/longhaul-rl/longhaul/train/ckpt"
	tembedded "github.com/longhaul-rl/longhaul/train/embedded"
)

// ResolveWeights finds the weights file a path names: a safetensors file;
// a checkpoint directory (model.safetensors); or a run directory (its
// final weights, else its newest valid checkpoint). It also returns the
// version recorded beside the weights, or -1.
func ResolveWeights(path string) (file string, version int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", -1, err
	}
	if !fi.IsDir() {
		return path, versionBeside(path), nil
	}
	for _, cand := range []string{filepath.Join(path, tembedded.WeightsFile), filepath.Join(path, WeightsFile)} {
		if _, err := os.Stat(cand); err == nil {
			return cand, versionBeside(cand), nil
		}
	}
	e, _, _, ok, err := ckpt.Latest(filepath.Join(path, "checkpoints"), -1)
	if err != nil {
		return "", -1, err
	}
	if ok {
		f := filepath.Join(e.Path, tembedded.WeightsFile)
		return f, versionBeside(f), nil
	}
	return "", -1, fmt.Errorf("%s: no weights file, checkpoint or run weights found", path)
}

func versionBeside(weights string) int64 {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(weights), tembedded.MetaFile))
	if err != nil {
		return -1
	}
	var m struct {
		Version int64 `json:"version"`
	}
	if json.Unmarshal(b, &m) != nil {
		return -1
	}
	return m.Version
}

// EmbeddedBackend serves the embedded model: the weights at weights (see
// ResolveWeights), or with none the model the config initialises. Requests
// from concurrent HTTP clients share batches through a gen.Batcher.
func EmbeddedBackend(ctx context.Context, cfg *config.Config, weights string) (server.Backend, error) {
	return EmbeddedBackendLimited(ctx, cfg, weights, DefaultMaxWeightsBytes)
}

// EmbeddedBackendLimited is EmbeddedBackend whose reloads read weights
// files of at most maxWeights bytes.
func EmbeddedBackendLimited(ctx context.Context, cfg *config.Config, weights string, maxWeights int64) (server.Backend, error) {
	var m *model.Model
	version := int64(0)
	var err error
	if weights == "" {
		m, err = InitModel(cfg)
	} else {
		var file string
		if file, version, err = ResolveWeights(weights); err == nil {
			m, err = model.Load(file)
		}
		version = max(version, 0)
	}
	if err != nil {
		return server.Backend{}, fmt.Errorf("serve: %w", err)
	}
	m.SetPrefixCache(PrefixCacheBytes(cfg))
	eg := gembedded.New(m, version)
	txt := server.ByteText()
	return server.Backend{
		Text:        &txt,
		Gen:         gen.NewBatcher(ctx, eg, 64, 2*time.Millisecond),
		Loader:      newReloader(eg, maxWeights, PrefixCacheBytes(cfg)),
		Scorer:      eg,
		Model:       "longhaul",
		Version:     func() int64 { _, v := eg.Model(); return v },
		MaxModelLen: m.Context(),
	}, nil
}

type reloader struct {
	mu          sync.Mutex
	g           *gembedded.Generator
	max         int64
	prefixCache int64 // bytes, for every model a reload loads
}

// EmbeddedTrainer is the trainer `longhaul serve-trainer` serves: the
// config's model and optimizer, resumed from checkpoint when given, else
// initialised and warm-started exactly as an in-process run would be.
func EmbeddedTrainer(ctx context.Context, cfg *config.Config, checkpoint string, log *slog.Logger) (*tembedded.Trainer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := InitModel(cfg)
	if err != nil {
		return nil, err
	}
	t, err := tembedded.New(m, OptimConfig(cfg), LossConfig(cfg))
	if err != nil {
		return nil, err
	}
	if checkpoint != "" {
		return t, t.LoadCheckpoint(ctx, checkpoint)
	}
	// The environments of the config (a served one too); a trainer process
	// has no run directory, so the warm start's keys name the config.
	reg, err := Environments(cfg, env.Builtin())
	if err != nil {
		return nil, err
	}
	d := config.Digest(cfg)
	ctx = env.WithRun(ctx, "cfg"+hex.EncodeToString(d[:8]))
	if err := WarmStart(ctx, cfg, reg, t.Model(), log); err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	return t, nil
}
