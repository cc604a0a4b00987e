package controller

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"

	"github.com/longhaul-rl/longhaul/config"
	"github.com/longhaul-rl/longhaul/data"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/internal/rng"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/runlog"
	"github.com/longhaul-rl/longhaul/train"
)

// Resume benchmark (issue 6): time from process start to the first new
// generator call of a run resumed with 1,000 rollouts in flight.
//
// The run log is made by the real controller: generateStep admits 125
// groups of 8 ledger rollouts, a scripted generator answers the first
// resumeLogged calls of every rollout instantly and holds the next one;
// once all 1,000 rollouts are held the context is cancelled (an in-process
// kill: nothing after the last durable append is kept, no rollout sealed).
// Each measured resume then opens the log (recovery, snapshot, tail
// replay), builds the dataset, environments and controller, and runs
// generateStep, whose rollouts replay their logged events through
// rollout.Run until each reaches its first new call.
//
//	GOEXPERIMENT=simd go test ./controller -run '^$' -bench Resume -benchtime 1x

const (
	resumeGroups = 125
	resumeSize   = 8
	resumeLogged = 10 // calls (and env steps) logged per rollout before the kill
)

func resumeConfig() *config.Config {
	cfg := config.Default()
	cfg.GRPO.NumPromptsPerStep = resumeGroups
	cfg.GRPO.NumGenerationsPerPrompt = resumeSize
	// The scripted agent answers "7" every turn; without stop_on_error a
	// wrong answer does not end the episode, so every rollout stays in
	// flight for its 12 turns.
	cfg.Env.Params = map[string]any{"stop_on_error": false}
	return cfg
}

// resumeDataset is runner.Dataset for the builtin source (runner imports
// controller, so the test cannot import runner).
func resumeDataset(cfg *config.Config, reg *env.Registry) (data.Dataset, error) {
	params, err := cfg.EnvParamsJSON()
	if err != nil {
		return nil, err
	}
	seed := rng.Derive(cfg.Run.Seed, "dataset")
	return data.NewGenerated(cfg.Data.NumPrompts, func(i int) (data.Prompt, error) {
		t, err := reg.Task(cfg.Env.Name, params, seed, i)
		if err != nil {
			return data.Prompt{}, err
		}
		b, err := json.Marshal(t)
		return data.Prompt{ID: t.ID, Task: b}, err
	}), nil
}

// noTrainer satisfies train.Trainer; generateStep never calls it.
type noTrainer struct{}

var errNoTrainer = errors.New("bench: no trainer")

func (noTrainer) TrainStep(context.Context, train.Batch) (train.StepStats, error) {
	return train.StepStats{}, errNoTrainer
}
func (noTrainer) State(context.Context) (train.State, error)   { return train.State{}, nil }
func (noTrainer) SaveCheckpoint(context.Context, string) error { return errNoTrainer }
func (noTrainer) LoadCheckpoint(context.Context, string) error { return errNoTrainer }
func (noTrainer) ExportWeights(context.Context, string) error  { return errNoTrainer }
func noPublish(context.Context, int64) error                   { return nil }

var _ train.Trainer = noTrainer{}

// scriptGen answers calls below hold instantly with "7" and holds every
// later call until ctx is done, recording when each held call arrived.
// The call index is recovered from the request's sampling seed.
type scriptGen struct {
	hold   uint32
	calls  map[uint64]uint32 // SampleSeed -> call index
	answer []int32

	start    time.Time
	first    atomic.Int64 // ns after start of the first held call
	held     atomic.Int64
	want     int64
	all      chan struct{}
	allAt    atomic.Int64
	wrongIdx atomic.Int64 // held calls whose index is not hold
	once     sync.Once
}

func newScriptGen(seed uint64, hold uint32) *scriptGen {
	g := &scriptGen{hold: hold, calls: map[uint64]uint32{}, want: resumeGroups * resumeSize, all: make(chan struct{}),
		answer: append(bytetok.Encode("7"), bytetok.End)}
	for gi := range resumeGroups {
		// Groups are admitted at cursors 0..124 of epoch 0.
		gid := runlog.NewGroupID(seed, 0, uint64(gi))
		for m := range resumeSize {
			for c := range uint32(16) {
				g.calls[rollout.SampleSeed(seed, runlog.RolloutID{Group: gid, Member: uint16(m)}, c)] = c
			}
		}
	}
	return g
}

func (g *scriptGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	out := make([]gen.Result, 0, len(reqs))
	for _, r := range reqs {
		idx, ok := g.calls[r.Seed]
		if !ok {
			return nil, errors.New("bench: unknown sampling seed")
		}
		if idx < g.hold {
			out = append(out, gen.Result{Tokens: slices.Clone(g.answer), Logprobs: make([]float32, len(g.answer)), Finish: runlog.FinishStop})
			continue
		}
		now := int64(time.Since(g.start))
		g.first.CompareAndSwap(0, now)
		if idx != g.hold {
			g.wrongIdx.Add(1)
		}
		if g.held.Add(1) == g.want {
			g.allAt.Store(now)
			g.once.Do(func() { close(g.all) })
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return out, nil
}

type resumeRun struct {
	open, build, first, all time.Duration
	wrong                   int64
	events, compactions     uint64
}

// runToHold opens the run log in dir, builds the controller and runs
// generateStep(1) until every rollout is held at call hold, then cancels
// and closes. With snapshot it writes a run-state snapshot before closing.
func runToHold(tb testing.TB, dir string, hold uint32, snapshot bool) resumeRun {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := resumeConfig()
	g := newScriptGen(cfg.Run.Seed, hold)
	var rr resumeRun
	g.start = time.Now() // "process start"
	rl, err := runlog.Open(ctx, dir, runlog.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	rr.open = time.Since(g.start)
	reg := env.Builtin()
	ds, err := resumeDataset(cfg, reg)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := New(Options{Config: *ctl(tb, cfg), RunDir: dir, Log: rl, Dataset: ds, Envs: reg, Generator: g,
		Trainer: noTrainer{}, Publish: noPublish})
	if err != nil {
		tb.Fatal(err)
	}
	if !c.view().started {
		if _, err := rl.Append(ctx, runlog.RunStarted{ConfigDigest: config.Digest(cfg), Seed: cfg.Run.Seed, Mode: cfg.Run.Mode}); err != nil {
			tb.Fatal(err)
		}
	}
	rr.build = time.Since(g.start)
	done := make(chan error, 1)
	go func() { done <- c.loop(ctx, Input{}) }()
	select {
	case <-g.all:
	case err := <-done:
		tb.Fatalf("the loop ended before every rollout reached call %d: %v", hold, err)
	case <-time.After(50 * time.Second):
		tb.Fatalf("timeout: %d of %d rollouts reached call %d", g.held.Load(), g.want, hold)
	}
	rr.first, rr.all = time.Duration(g.first.Load()), time.Duration(g.allAt.Load())
	rr.wrong = g.wrongIdx.Load()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		tb.Fatalf("loop: %v", err)
	}
	rl.View(func(s *runlog.State) { rr.events, rr.compactions = s.Applied, s.Counts[runlog.KindCompaction] })
	if snapshot {
		if _, err := rl.Snapshot(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
	if err := rl.Close(); err != nil {
		tb.Fatal(err)
	}
	return rr
}

func copyTree(tb testing.TB, src, dst string) {
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func dirSize(dir string) (n int64) {
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// BenchmarkResume1000: each op resumes the same log twice, without and
// with a snapshot; metrics are the best over the ops (run with
// -benchtime Nx for N resumes of each).
func BenchmarkResume1000(b *testing.B) {
	root := b.TempDir()
	plain, snap := filepath.Join(root, "nosnap"), filepath.Join(root, "snap")
	t0 := time.Now()
	made := runToHold(b, plain, resumeLogged, false)
	b.Logf("made the log: %d events (%d compactions), %d bytes, in %v", made.events, made.compactions, dirSize(plain), time.Since(t0).Round(time.Millisecond))
	copyTree(b, plain, snap)
	// The snapshot variant: a snapshot covering the whole log.
	{
		rl, err := runlog.Open(context.Background(), snap, runlog.Options{})
		if err != nil {
			b.Fatal(err)
		}
		info, err := rl.Snapshot(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("snapshot: %d bytes, base %v, %v", info.Bytes, info.Base, info.Duration.Round(time.Microsecond))
		rl.Close()
	}
	best := map[string]resumeRun{}
	b.ResetTimer()
	for range b.N {
		for _, v := range []struct {
			name string
			dir  string
		}{{"nosnap", plain}, {"snap", snap}} {
			r := runToHold(b, v.dir, resumeLogged, false)
			if r.wrong != 0 {
				b.Fatalf("%s: %d rollouts generated a call other than %d (a logged call generated again?)", v.name, r.wrong, resumeLogged)
			}
			want := made.events
			if v.name == "snap" {
				want++ // SnapshotWritten
			}
			if r.events != want {
				b.Fatalf("%s: resume changed the log: %d events, want %d", v.name, r.events, want)
			}
			b.Logf("%s: open %v, controller built %v, first new call %v, all 1000 at their first new call %v",
				v.name, r.open.Round(time.Microsecond), r.build.Round(time.Microsecond), r.first.Round(time.Microsecond), r.all.Round(time.Microsecond))
			p, ok := best[v.name]
			if !ok || r.first < p.first {
				p.first, p.open, p.build = r.first, r.open, r.build
			}
			if !ok || r.all < p.all {
				p.all = r.all
			}
			best[v.name] = p
		}
	}
	b.StopTimer()
	for _, name := range []string{"nosnap", "snap"} {
		p := best[name]
		b.ReportMetric(float64(p.open.Microseconds())/1000, name+"-open-ms")
		b.ReportMetric(float64(p.first.Microseconds())/1000, name+"-first-call-ms")
		b.ReportMetric(float64(p.all.Microseconds())/1000, name+"-all-1000-ms")
	}
	b.ReportMetric(float64(made.events), "events")
}
