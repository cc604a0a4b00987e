// Package embedded is the in-process Generator over the embedded model
// (model: the built-in configuration or a Llama/Qwen checkpoint).
package embedded

import (
	"context"
	"fmt"
	"sync"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/model"
)

// Generator samples from an embedded model. Weights are swapped whole by
// SetWeights between batches, so no request sees a half-updated model. A
// Generate call holds every lane: the model parallelises inside a batch,
// and a gen.Batcher in front gathers concurrent rollouts into one batch.
// GenerateOn calls on different lanes (one per core) run at once.
type Generator struct {
	lanes   []sync.Mutex // a call holds its lane's, Generate and Logits all of them
	wmu     sync.RWMutex
	m       *model.Model
	version int64
}

// New returns a generator serving m as version.
func New(m *model.Model, version int64) *Generator {
	return &Generator{m: m, version: version, lanes: make([]sync.Mutex, m.Lanes())}
}

// Lanes is how many GenerateOn calls may run at once (1: only whole calls).
func (g *Generator) Lanes() int { return len(g.lanes) }

func (g *Generator) lockAll() {
	for i := range g.lanes {
		g.lanes[i].Lock()
	}
}

func (g *Generator) unlockAll() {
	for i := range g.lanes {
		g.lanes[i].Unlock()
	}
}

// SetWeights makes m (which the caller no longer mutates) the served model.
func (g *Generator) SetWeights(m *model.Model, version int64) {
	g.wmu.Lock()
	g.m, g.version = m, version
	g.wmu.Unlock()
}

// Model returns the served model and its version.
func (g *Generator) Model() (*model.Model, int64) {
	g.wmu.RLock()
	defer g.wmu.RUnlock()
	return g.m, g.version
}

// Generate implements gen.Generator.
func (g *Generator) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	g.lockAll()
	defer g.unlockAll()
	m, version := g.Model()
	out, err := m.Generate(ctx, sampleRequests(reqs))
	return results(out, version, err)
}

// GenerateOn implements gen.Laned: the call runs on lane alone, beside
// calls on the other lanes.
func (g *Generator) GenerateOn(ctx context.Context, lane int, reqs []gen.Request) ([]gen.Result, error) {
	if lane < 0 || lane >= len(g.lanes) {
		return nil, fmt.Errorf("embedded generator: lane %d outside [0,%d)", lane, len(g.lanes))
	}
	g.lanes[lane].Lock()
	defer g.lanes[lane].Unlock()
	m, version := g.Model()
	out, err := m.GenerateOn(ctx, lane, sampleRequests(reqs))
	return results(out, version, err)
}

func sampleRequests(reqs []gen.Request) []model.SampleRequest {
	in := make([]model.SampleRequest, len(reqs))
	for i, r := range reqs {
		in[i] = model.SampleRequest{Prompt: r.Prompt, MaxTokens: r.MaxTokens, Temperature: r.Temperature,
			TopP: r.TopP, TopK: r.TopK, Stop: r.Stop, Seed: r.Seed}
	}
	return in
}

func results(out []model.SampleResult, version int64, err error) ([]gen.Result, error) {
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
func (g *Generator) Logits(ctx context.Context, toks []int32) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embedded generator: logits: %w", err)
	}
	g.lockAll()
	defer g.unlockAll()
	m, _ := g.Model()
	out, err := m.Logits(toks)
	if err != nil {
		return nil, fmt.Errorf("embedded generator: logits: %w", err)
	}
	return out, nil
}
