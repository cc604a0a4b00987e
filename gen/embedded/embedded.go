// Package embedded is the in-process Generator over the embedded models:
// the built-in byte model (model) and the Llama/Qwen family (model/llama).
package embedded

import (
	"context"
	"fmt"
	"sync"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/model/llama"
)

// Sampler is what a served model does: both embedded networks generate
// model.SampleRequests.
type Sampler interface {
	Generate(ctx context.Context, reqs []model.SampleRequest) ([]model.SampleResult, error)
	Logits(toks []int32) ([]float32, error)
}

// Served samples from an embedded model. Weights are swapped whole by
// SetWeights between batches, so no request sees a half-updated model.
// Generate calls are serialised: the model parallelises inside a batch, and
// a gen.Batcher in front gathers concurrent rollouts into one batch.
type Served[M Sampler] struct {
	mu      sync.Mutex // serialises Generate: the model's workspaces are not shared
	wmu     sync.RWMutex
	m       M
	version int64
}

// Generator serves the built-in model; HFGenerator a Llama/Qwen model.
type (
	Generator   = Served[*model.Model]
	HFGenerator = Served[*llama.Model]
)

// New returns a generator serving m as version.
func New(m *model.Model, version int64) *Generator { return &Generator{m: m, version: version} }

// NewHF returns a generator serving m as version.
func NewHF(m *llama.Model, version int64) *HFGenerator { return &HFGenerator{m: m, version: version} }

// SetWeights makes m (which the caller no longer mutates) the served model.
func (g *Served[M]) SetWeights(m M, version int64) {
	g.wmu.Lock()
	g.m, g.version = m, version
	g.wmu.Unlock()
}

// Model returns the served model and its version.
func (g *Served[M]) Model() (M, int64) {
	g.wmu.RLock()
	defer g.wmu.RUnlock()
	return g.m, g.version
}

// Generate implements gen.Generator.
func (g *Served[M]) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, version := g.Model()
	in := make([]model.SampleRequest, len(reqs))
	for i, r := range reqs {
		in[i] = model.SampleRequest{Prompt: r.Prompt, MaxTokens: r.MaxTokens, Temperature: r.Temperature,
			TopP: r.TopP, TopK: r.TopK, Stop: r.Stop, Seed: r.Seed}
	}
	out, err := m.Generate(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("embedded generator: %w", err)
	}
	res := make([]gen.Result, len(out))
	for i, o := range out {
		res[i] = gen.Result{Tokens: o.Tokens, Logprobs: o.Logprobs, Finish: o.Finish, Version: version}
	}
	return res, nil
}

// Logits returns the served model's raw next-token logits for every
// position of toks, (len(toks), V) row-major, under the weights Generate
// would use now: the server's top_logprobs and prompt_logprobs come from
// it. It shares Generate's lock (the two use the same workspaces).
func (g *Served[M]) Logits(ctx context.Context, toks []int32) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embedded generator: logits: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m, _ := g.Model()
	out, err := m.Logits(toks)
	if err != nil {
		return nil, fmt.Errorf("embedded generator: logits: %w", err)
	}
	return out, nil
}
