package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/gen/openai"
	"github.com/longhaul-rl/longhaul/internal/config"
	"github.com/longhaul-rl/longhaul/internal/promtrain"
	"github.com/longhaul-rl/longhaul/model"
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
	close     func()
	queues    map[string]func() float64 // queue depths for the Prometheus gauges
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
	if cfg.Model.Path != "" {
		return wireHF(ctx, cfg, dir, log, opts, p)
	}
	var local *tembedded.Trainer
	switch cfg.Trainer.Kind {
	case "embedded":
		m, err := InitModel(cfg)
		if err != nil {
			return nil, err
		}
		if local, err = tembedded.New(m, OptimConfig(cfg), LossConfig(cfg)); err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		p.tr = local
		p.warmStart = func(ctx context.Context) error {
			return WarmStartProgress(ctx, cfg, reg, local.Model(), log, opts.WarmStartProgress)
		}
	case "remote":
		// The trainer process initialises (and warm-starts) its own model
		// from the same config: `longhaul serve-trainer --config ...`.
		p.tr = remote.New(cfg.Trainer.URL, remote.Options{})
	default:
		return nil, fmt.Errorf("runner: trainer.kind %q", cfg.Trainer.Kind)
	}
	weights := filepath.Join(dir, WeightsFile)
	export := func(ctx context.Context, v int64) error {
		if err := p.tr.ExportWeights(ctx, weights); err != nil {
			return fmt.Errorf("runner: exporting version %d: %w", v, err)
		}
		b, _ := json.Marshal(map[string]int64{"version": v})
		return writeAtomic(filepath.Join(filepath.Dir(weights), tembedded.MetaFile), b)
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
		eg := gembedded.New(m, 0)
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
				m, err := model.Load(weights)
				if err != nil {
					return err
				}
				eg.SetWeights(m, v)
				return nil
			}
		}
	case "openai":
		oo := openai.Options{Model: cfg.Generator.Model,
			APIKey: cfg.Generator.APIKey, Logger: log,
			RequestTimeout: time.Duration(cfg.RolloutFailure.CallTimeoutS * float64(time.Second))}
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
		p.gen, p.close = oc, oc.Close
		p.describe = func() string { return fmt.Sprintf("servers %+v", oc.Status()) }
		p.publish = func(ctx context.Context, v int64) error {
			if err := export(ctx, v); err != nil {
				return err
			}
			abs, err := filepath.Abs(weights)
			if err != nil {
				return err
			}
			for _, u := range cfg.Generator.URLs {
				if err := reloadServer(ctx, u, cfg.Generator.APIKey, abs, v); err != nil {
					return err
				}
			}
			return nil
		}
	default:
		return nil, fmt.Errorf("runner: generator.kind %q", cfg.Generator.Kind)
	}
	return p, nil
}

// reloadServer asks one server to load new weights (SGLang's
// /update_weights_from_disk shape) and checks it now serves version v. A
// server that is down is skipped with its error logged by the generator's
// health probes; it loads the newest weights when it comes back.
func reloadServer(ctx context.Context, base, apiKey, path string, v int64) error {
	root := strings.TrimSuffix(strings.TrimSuffix(base, "/"), "/v1")
	body, _ := json.Marshal(map[string]string{"model_path": path})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, root+"/update_weights_from_disk", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		slog.Default().Warn("weight reload: server unreachable; it loads the newest weights when it restarts", "server", base, "err", err)
		return nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
		Version *int64 `json:"version"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || !out.Success {
		return fmt.Errorf("runner: %s: weight reload: HTTP %d: %s", base, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	if out.Version != nil && *out.Version != v {
		return fmt.Errorf("runner: %s: reloaded weights report version %d, want %d", base, *out.Version, v)
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
