package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	gembedded "github.com/longhaul-rl/longhaul/gen/embedded"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/server"
)

// HFBackend serves a Hugging Face model directory (Llama/Qwen) by token
// ids: the server has no tokenizer for it yet (server.TokenIDs). The
// default stop ids are config.json's eos_token_id. Weight reloads take an
// HF directory (or its model.safetensors).
func HFBackend(ctx context.Context, dir string) (server.Backend, error) {
	m, err := model.LoadDir(dir)
	if err != nil {
		return server.Backend{}, fmt.Errorf("serve: %w", err)
	}
	eg := gembedded.New(m, max(versionBeside(filepath.Join(dir, llamaWeights)), 0))
	var stop []int32
	if eos := m.Config().EOS; eos != nil {
		stop = append(stop, int32(*eos))
	}
	return server.Backend{
		Gen:         gen.NewBatcher(ctx, eg, 64, 2*time.Millisecond),
		Loader:      &hfReloader{g: eg},
		Scorer:      eg,
		Model:       filepath.Base(filepath.Clean(dir)),
		Version:     func() int64 { _, v := eg.Model(); return v },
		MaxModelLen: m.Context(),
		TokenIDs:    &server.TokenIDs{Vocab: m.Config().Vocab, Stop: stop},
	}, nil
}

const llamaWeights = "model.safetensors"

type hfReloader struct {
	mu sync.Mutex
	g  *gembedded.Generator
}

// Reload loads an HF directory; its version is the one recorded beside the
// weights (trainer.json), else the served version plus one.
func (r *hfReloader) Reload(_ context.Context, path string) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		path = filepath.Dir(path)
	}
	m, err := model.LoadDir(path)
	if err != nil {
		return 0, err
	}
	v := versionBeside(filepath.Join(path, llamaWeights))
	if v < 0 {
		_, cur := r.g.Model()
		v = cur + 1
	}
	r.g.SetWeights(m, v)
	return v, nil
}
