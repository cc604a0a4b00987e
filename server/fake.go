package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
)

// Fake is a deterministic generator and weight loader for tests, benchmarks
// and `longhaul serve --fake-backend`. It samples lowercase letters from a
// stream derived from (request seed, version), ends a sample on a stop
// token with probability 1/8 per step when End is among the stops, and
// gives token t at step i the logprob -(1 + (t-'a'))/32 - i/1024, so a
// caller can check values without a model.
type Fake struct {
	// PerToken is a busy-wait per sampled token (the fake's "compute");
	// the benchmark sets it to model a generator's cost.
	PerToken time.Duration

	version atomic.Int64
	calls   atomic.Int64

	mu      sync.Mutex
	batches []int // batch sizes of every Generate call
	// weightsA and weightsB are written non-atomically by Reload and must
	// always be equal when Generate reads them: with -race, a reload that
	// overlapped a generation is caught.
	weightsA, weightsB int64
	reloadErr          error
}

// NewFake returns a Fake serving version v.
func NewFake(v int64) *Fake {
	f := &Fake{}
	f.version.Store(v)
	f.weightsA, f.weightsB = v, v
	return f
}

// Backend returns a Backend over f, speaking the byte tokenizer.
func (f *Fake) Backend(model string) Backend {
	txt := ByteText()
	return Backend{Gen: f, Loader: f, Model: model, Version: f.Version, MaxModelLen: 4096, Text: &txt}
}

// Version is the loaded version.
func (f *Fake) Version() int64 { return f.version.Load() }

// Calls counts Generate calls.
func (f *Fake) Calls() int64 { return f.calls.Load() }

// Batches returns the batch size of every Generate call so far.
func (f *Fake) Batches() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

// FailReload makes the next reloads fail with err (nil to clear).
func (f *Fake) FailReload(err error) {
	f.mu.Lock()
	f.reloadErr = err
	f.mu.Unlock()
}

// Reload bumps the version. It writes the fake weights without the Fake's
// own lock on purpose: the server's lock must be what keeps it apart from
// Generate.
func (f *Fake) Reload(ctx context.Context, path string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("fake reload: %w", err)
	}
	f.mu.Lock()
	err := f.reloadErr
	f.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("fake reload %s: %w", path, err)
	}
	v := f.version.Load() + 1
	f.weightsA = v
	time.Sleep(100 * time.Microsecond) // widen the window a torn swap would show in
	f.weightsB = v
	f.version.Store(v)
	return v, nil
}

// Generate samples every request; see Fake.
func (f *Fake) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	f.calls.Add(1)
	f.mu.Lock()
	f.batches = append(f.batches, len(reqs))
	f.mu.Unlock()
	a := f.weightsA
	b := f.weightsB
	if a != b {
		return nil, errors.New("fake: generation saw half-swapped weights")
	}
	v := f.version.Load()
	out := make([]gen.Result, len(reqs))
	for i, r := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fake generate: %w", err)
		}
		if len(r.Prompt) == 0 {
			return nil, errors.New("fake generate: empty prompt")
		}
		s := rng.Stream(r.Seed, "fake", uint64(v))
		endable := slices.Contains(r.Stop, byteEnd)
		res := gen.Result{Finish: "length", Version: v}
		for step := range r.MaxTokens {
			busy(f.PerToken)
			t := int32('a' + s.IntN(26))
			if endable && s.IntN(8) == 0 {
				t = byteEnd
			}
			res.Tokens = append(res.Tokens, t)
			res.Logprobs = append(res.Logprobs, FakeLogprob(t, step))
			if slices.Contains(r.Stop, t) {
				res.Finish = "stop"
				break
			}
		}
		out[i] = res
	}
	return out, nil
}

// FakeLogprob is the logprob Fake gives token t at step i.
func FakeLogprob(t int32, i int) float32 {
	if t == byteEnd {
		return -0.5 - float32(i)/1024
	}
	return -(1+float32(t-'a'))/32 - float32(i)/1024
}

// busy spins for d: a sleep would let the benchmark's HTTP overhead hide in
// idle CPU, a spin costs CPU like a real forward pass.
func busy(d time.Duration) {
	if d <= 0 {
		return
	}
	for start := time.Now(); time.Since(start) < d; {
	}
}
