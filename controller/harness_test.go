package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/metrics"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
)

// This file is a small in-process harness for controller tests: the real
// run log, ledger environments and dataset, and a fake generator and
// trainer that cost nothing. A "crash" cancels the controller's context,
// closes the log and builds a new controller on the reopened log: nothing
// but what the log made durable survives.

// callKey names one model call of one rollout.
type callKey struct {
	id   runlog.RolloutID
	call uint32
}

func (k callKey) String() string { return fmt.Sprintf("%s/%d", k.id, k.call) }

// fakeGen answers every call with a fixed answer. It recovers (rollout,
// call) from the request's sampling seed, counts its invocations per call
// (so a test sees a logged call generated again), and lets a test fail or
// hold chosen calls.
type fakeGen struct {
	index  map[uint64]callKey
	answer []int32

	mu      sync.Mutex
	calls   map[callKey]int
	version func() int64
	// fail, when set, is asked before each call is answered; n counts
	// this process's invocations of the call, from 1.
	fail func(ctx context.Context, k callKey, n int) error
}

func newFakeGen(seed uint64, groups, size int, epochs uint32) *fakeGen {
	g := &fakeGen{index: map[uint64]callKey{}, calls: map[callKey]int{},
		answer: append(bytetok.Encode("7"), bytetok.End)}
	for e := range epochs {
		for cur := range uint64(groups) {
			gid := runlog.NewGroupID(seed, e, cur)
			for m := range size {
				for c := range uint32(64) {
					id := runlog.RolloutID{Group: gid, Member: uint16(m)}
					g.index[rollout.SampleSeed(seed, id, c)] = callKey{id, c}
				}
			}
		}
	}
	return g
}

func (g *fakeGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	out := make([]gen.Result, len(reqs))
	for i, r := range reqs {
		k, ok := g.index[r.Seed]
		if !ok {
			return nil, fmt.Errorf("fakeGen: unknown request seed %d", r.Seed)
		}
		g.mu.Lock()
		g.calls[k]++
		n := g.calls[k]
		fail := g.fail
		g.mu.Unlock()
		if fail != nil {
			if err := fail(ctx, k, n); err != nil {
				return nil, err
			}
		}
		var v int64
		if g.version != nil {
			v = g.version()
		}
		out[i] = gen.Result{Tokens: g.answer, Logprobs: make([]float32, len(g.answer)), Finish: runlog.FinishStop, Version: v}
	}
	return out, nil
}

// fakeTrainer counts steps and records what each trained.
type fakeTrainer struct {
	mu    sync.Mutex
	v     int64
	steps int
}

func (t *fakeTrainer) TrainStep(context.Context, train.Batch) (train.StepStats, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.v++
	t.steps++
	return train.StepStats{Step: t.v, Version: t.v}, nil
}
func (t *fakeTrainer) State(context.Context) (train.State, error) {
	return train.State{Step: t.v, Version: t.v}, nil
}
func (t *fakeTrainer) SaveCheckpoint(context.Context, string) error { return nil }
func (t *fakeTrainer) LoadCheckpoint(context.Context, string) error { return nil }
func (t *fakeTrainer) ExportWeights(context.Context, string) error  { return nil }

// testConfig is a tiny ledger run: short episodes, no checkpoints or
// snapshots, near-zero backoff.
func testConfig(t testing.TB, overrides ...string) *config.Config {
	t.Helper()
	cfg := config.Default()
	base := []string{"env.params.stop_on_error=false", "checkpointing.enabled=false",
		"rollout_checkpointing.enabled=false", "warmstart.enabled=false", "rollout.max_turns=3",
		"grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2", "data.num_prompts=6",
		"rollout_failure.backoff_base_s=0.001", "rollout_failure.backoff_cap_s=0.002",
		"rollout_failure.stall_timeout_s=0", "run.max_steps=2", "optim.schedule=constant"}
	if err := cfg.ApplyOverrides(append(base, overrides...)); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ctl maps a run config to the controller's typed config, as the runner
// does (config.Controller).
func ctl(t testing.TB, cfg *config.Config) *Config {
	t.Helper()
	c, err := cfg.Controller()
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// harness holds what survives a crash: the run directory, the generator's
// counters and the trainer (which stands for the checkpointed weights;
// checkpoints are off, so a resume rewinds to 0 and retrains).
type harness struct {
	t   testing.TB
	cfg *config.Config
	dir string
	gen *fakeGen
	tr  *fakeTrainer
	reg *env.Registry
	ds  data.Dataset
	// published is the version the fake generator serves (and stamps on
	// its results), as Publish set it.
	published atomic.Int64
	// final is the run's FinalWeights (empty: none exported).
	final string
	// wrap, when set, is put around the fake generator.
	wrap func(gen.Generator) gen.Generator
	// fs, when set, is the run log's file system in run.
	fs store.FS
}

func newHarness(t testing.TB, cfg *config.Config) *harness {
	reg := env.Builtin()
	params, _ := cfg.EnvParamsJSON()
	seed := rng.Derive(cfg.Run.Seed, "dataset")
	ds := data.NewGenerated(cfg.Data.NumPrompts, func(i int) (data.Prompt, error) {
		tk, err := reg.Task(cfg.Env.Name, params, seed, i)
		if err != nil {
			return data.Prompt{}, err
		}
		raw, err := json.Marshal(tk)
		return data.Prompt{ID: tk.ID, Task: raw}, err
	})
	h := &harness{t: t, cfg: cfg, dir: t.TempDir(), reg: reg, ds: ds, tr: &fakeTrainer{},
		gen: newFakeGen(cfg.Run.Seed, cfg.Data.NumPrompts, cfg.GRPO.NumGenerationsPerPrompt, 8)}
	h.gen.version = h.published.Load
	return h
}

// run builds a controller on the reopened log and runs it until it ends or
// crash (a context cause) stops it. It returns Run's error.
func (h *harness) run(ctx context.Context) error { return h.runWith(ctx, h.tr) }

// runWith is run with tr in place of the harness's trainer (which it
// must wrap: the harness resets h.tr to the initial policy).
func (h *harness) runWith(ctx context.Context, tr train.Trainer) error {
	l, err := runlog.Open(context.Background(), h.dir, runlog.Options{FS: h.fs})
	if err != nil {
		h.t.Fatal(err)
	}
	defer l.Close()
	h.tr.v = 0 // no checkpoint: the weights restart from the warm start
	mw, err := metrics.Create(filepath.Join(h.dir, "metrics.jsonl"))
	if err != nil {
		h.t.Fatal(err)
	}
	defer mw.Close()
	var g gen.Generator = h.gen
	if h.wrap != nil {
		g = h.wrap(g)
	}
	c, err := New(Options{Config: *ctl(h.t, h.cfg), RunDir: h.dir, Log: l, Dataset: h.ds, Envs: h.reg, Generator: g,
		Trainer: tr, Publish: func(_ context.Context, v int64) error { h.published.Store(v); return nil }, Metrics: mw,
		FinalWeights: h.final})
	if err != nil {
		h.t.Fatal(err)
	}
	// Every step's training data read from the event cache is checked
	// against the log (cache.go).
	c.cache.verify = true
	return c.Run(ctx)
}

// state reads the folded state of the closed log.
func (h *harness) state() *runlog.State {
	l, err := runlog.Open(context.Background(), h.dir, runlog.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer l.Close()
	var s *runlog.State
	l.View(func(st *runlog.State) { s = st.Clone() })
	return s
}

// snapshot writes a snapshot of the closed log at its end, so the next
// run resumes from it (with nothing to replay), and returns the state the
// snapshot holds, as a reopened log loads it.
func (h *harness) snapshot() *runlog.State {
	l, err := runlog.Open(context.Background(), h.dir, runlog.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := l.Snapshot(context.Background())
	l.Close()
	if err != nil {
		h.t.Fatal(err)
	}
	s := h.state()
	if s.LastSnapshot.Offset != uint64(info.Offset) {
		h.t.Fatalf("the log's newest snapshot is at %d, want the one written at %d", s.LastSnapshot.Offset, info.Offset)
	}
	return s
}

// events returns every event of the closed log.
func (h *harness) events() []runlog.Event {
	l, err := runlog.Open(context.Background(), h.dir, runlog.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	defer l.Close()
	var out []runlog.Event
	if err := l.Events(context.Background(), func(_ runlog.Offset, ev runlog.Event) error {
		out = append(out, ev)
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return out
}

var errCrash = errors.New("test crash")

// injected is an infra failure of the fake generator.
func injected(k callKey) error {
	return failure.NewInfra("generate", fmt.Errorf("injected failure of %s", k))
}

// metrics reads the run's metrics.jsonl (the last line of each step).
func (h *harness) metrics() []metrics.Step {
	ms, err := metrics.Read(filepath.Join(h.dir, "metrics.jsonl"))
	if err != nil {
		h.t.Fatal(err)
	}
	return ms
}

// count returns how many times the generator was invoked for k.
func (g *fakeGen) count(k callKey) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[k]
}
