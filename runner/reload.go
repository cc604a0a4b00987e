package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/longhaul-rl/longhaul/config"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/model"
)

// DefaultMaxWeightsBytes bounds a weights file a server reads on reload.
const DefaultMaxWeightsBytes = 16 << 30

// Prepare reads and decodes the weights at path without touching the
// served model (the server runs it outside its lock) and returns the swap.
// Only a regular file of at most r.max bytes is read: a device, a FIFO or
// an endless file is refused before a byte is read.
func (r *reloader) Prepare(ctx context.Context, path string) (func() int64, error) {
	file, v, err := ResolveWeights(path)
	if err != nil {
		return nil, err
	}
	m, err := loadServed(ctx, file, r.max, r.prefixCache)
	if err != nil {
		return nil, err
	}
	return func() int64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if v < 0 {
			_, cur := r.g.Model()
			v = cur + 1
		}
		r.g.SetWeights(m, v)
		return v
	}, nil
}

// Reload implements server.WeightLoader (Prepare then swap).
func (r *reloader) Reload(ctx context.Context, path string) (int64, error) {
	swap, err := r.Prepare(ctx, path)
	if err != nil {
		return 0, err
	}
	return swap(), nil
}

func newReloader(g *gembedded.Generator, max, prefixCache int64) *reloader {
	if max <= 0 {
		max = DefaultMaxWeightsBytes
	}
	return &reloader{g: g, max: max, prefixCache: prefixCache}
}

// loadServed loads a weights file (of at most max bytes) for the embedded
// generator with a prefix cache of prefixCache bytes: a loaded model has a
// pool of its own, so the configured budget is set on every one.
func loadServed(ctx context.Context, path string, max, prefixCache int64) (*model.Model, error) {
	m, err := loadLimited(ctx, path, max)
	if err != nil {
		return nil, err
	}
	m.SetPrefixCache(prefixCache)
	return m, nil
}

// PrefixCacheBytes is generator.prefix_cache_mib in bytes.
func PrefixCacheBytes(cfg *config.Config) int64 {
	return int64(cfg.Generator.PrefixCacheMiB) << 20
}

// loadLimited is model.Load for untrusted paths.
func loadLimited(ctx context.Context, path string, max int64) (*model.Model, error) {
	data, err := readLimited(path, max)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := readLimited(model.ConfigPath(path), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", model.ConfigPath(path), err)
	}
	var cfg model.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("model: load %s: %w", model.ConfigPath(path), err)
	}
	m, err := model.DecodeSafetensors(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", path, err)
	}
	return m, nil
}

// readLimited reads a regular file of at most max bytes.
func readLimited(path string, max int64) ([]byte, error) {
	// Stat first and open non-blocking: opening a FIFO for reading would
	// otherwise wait for a writer forever.
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d (--max-weights-bytes)", path, fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s grew past the limit of %d bytes while read", path, max)
	}
	return b, nil
}
