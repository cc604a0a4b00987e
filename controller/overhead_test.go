package controller_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/controller"
	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/examples"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/cputime"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/store"
	"github.com/longhaul-rl/longhaul/train"
)

// overheadGen answers every request at once with the same six tokens:
// one result, built once and shared (a caller reads results, never writes
// them), so the generator costs nothing per call, allocations included.
type overheadGen struct{ one []gen.Result }

func newOverheadGen(toks []int32) overheadGen {
	return overheadGen{one: []gen.Result{{Tokens: toks, Logprobs: make([]float32, len(toks)), Finish: runlog.FinishStop}}}
}

func (g overheadGen) Generate(_ context.Context, reqs []gen.Request) ([]gen.Result, error) {
	if len(reqs) == 1 {
		return g.one[:1:1], nil
	}
	out := make([]gen.Result, len(reqs))
	for i := range out {
		out[i] = g.one[0]
	}
	return out, nil
}

// overheadTrainer takes a step without computing anything.
type overheadTrainer struct{ v int64 }

func (t *overheadTrainer) TrainStep(context.Context, train.Batch) (train.StepStats, error) {
	t.v++
	return train.StepStats{Step: t.v, Version: t.v}, nil
}
func (t *overheadTrainer) State(context.Context) (train.State, error) {
	return train.State{Step: t.v, Version: t.v}, nil
}
func (t *overheadTrainer) SaveCheckpoint(context.Context, string) error { return nil }
func (t *overheadTrainer) LoadCheckpoint(context.Context, string) error { return nil }
func (t *overheadTrainer) ExportWeights(context.Context, string) error  { return nil }

// BenchmarkControllerPerCall is the controller's own cost per model call:
// a generator and a trainer that cost nothing, the real run log (durable
// group-committed appends), environments, compaction, segment building,
// advantages and batching. Each iteration is one step of 8 groups × 8
// rollouts × 12 calls; the figure to read is ns/call and allocs/call.
func BenchmarkControllerPerCall(b *testing.B) {
	cfg, err := config.Parse(examples.DefaultName, examples.Default)
	if err != nil {
		b.Fatal(err)
	}
	if err := cfg.ApplyOverrides([]string{"env.params.stop_on_error=false", "checkpointing.enabled=false",
		"rollout_checkpointing.enabled=false", "warmstart.enabled=false", "run.max_lag=0",
		"run.max_steps=" + itoa(b.N)}); err != nil {
		b.Fatal(err)
	}
	reg := env.Builtin()
	seed := rng.Derive(cfg.Run.Seed, "dataset")
	ds := data.NewGenerated(cfg.Data.NumPrompts, func(i int) (data.Prompt, error) {
		t, err := reg.Task("ledger", nil, seed, i)
		if err != nil {
			return data.Prompt{}, err
		}
		raw, _ := json.Marshal(t)
		return data.Prompt{ID: t.ID, Task: raw}, nil
	})
	dir := b.TempDir()
	fs := &syncCounter{FS: store.OS}
	l, err := runlog.Open(context.Background(), dir, runlog.Options{FS: fs})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	g := newOverheadGen(append(bytetok.Encode("1+2=3"), bytetok.End))
	ccfg, err := cfg.Controller()
	if err != nil {
		b.Fatal(err)
	}
	c, err := controller.New(controller.Options{Config: ccfg, RunDir: dir, Log: l, Dataset: ds, Envs: reg,
		Generator: g, Trainer: &overheadTrainer{},
		Publish: func(context.Context, int64) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cputime.Process()
	fs.syncs.Store(0)
	fs.packSyncs.Store(0)
	b.ResetTimer()
	if err := c.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cputime.Process() - cpu0
	var calls uint64
	l.View(func(s *runlog.State) { calls = s.Counts[runlog.KindCallFinished] })
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(calls), "ns/call")
	b.ReportMetric(float64(calls)/float64(b.N), "calls/step")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(calls), "cpu-ns/call")
	b.ReportMetric(float64(fs.syncs.Load())/float64(b.N), "fsyncs/step")
	b.ReportMetric(float64(fs.packSyncs.Load())/float64(b.N), "pack-fsyncs/step")
}

// syncCounter counts the fsyncs of the files the log writes: group commit
// is what makes a call cheap, and each fsync costs ~100-200 µs of kernel
// CPU on the project's VM.
type syncCounter struct {
	store.FS
	syncs     atomic.Int64
	packSyncs atomic.Int64 // of blob packs, counted in syncs too
}

func (c *syncCounter) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	var pack *atomic.Int64
	if filepath.Ext(name) == ".pack" {
		pack = &c.packSyncs
	}
	return countedFile{f, &c.syncs, pack}, nil
}

type countedFile struct {
	store.File
	n, pack *atomic.Int64
}

func (f countedFile) Sync() error {
	f.n.Add(1)
	if f.pack != nil {
		f.pack.Add(1)
	}
	return f.File.Sync()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
