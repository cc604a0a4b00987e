package embedded

import (
	"context"
	"fmt"
	"sync"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model"
	"github.com/longhaul-rl/longhaul/model/llama"
)

// HFGenerator samples from a Llama/Qwen model (model/llama), like
// Generator does from the built-in one: weights swap whole between batches,
// Generate calls are serialised.
type HFGenerator struct {
	mu      sync.Mutex
	wmu     sync.RWMutex
	m       *llama.Model
	version int64
}

// NewHF returns a generator serving m as version.
func NewHF(m *llama.Model, version int64) *HFGenerator { return &HFGenerator{m: m, version: version} }

// SetWeights makes m (which the caller no longer mutates) the served model.
func (g *HFGenerator) SetWeights(m *llama.Model, version int64) {
	g.wmu.Lock()
	g.m, g.version = m, version
	g.wmu.Unlock()
}

// Model returns the served model and its version.
func (g *HFGenerator) Model() (*llama.Model, int64) {
	g.wmu.RLock()
	defer g.wmu.RUnlock()
	return g.m, g.version
}

// Generate implements gen.Generator.
func (g *HFGenerator) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
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

// Logits is Generator.Logits for the HF model.
func (g *HFGenerator) Logits(ctx context.Context, toks []int32) ([]float32, error) {
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
