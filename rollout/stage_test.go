package rollout_test

// Tests of staged call records (stage.go): with an env.InProcess
// environment a call's record is staged and the environment steps on it
// before it is durable; with any other environment the call is durable
// first. Every staged record is settled before the next append and before
// Run returns.

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/failure"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
)

// stagingRecorder is a rollout.Stager in memory with the run log's order:
// Stage queues events, Settle makes them durable, and Record makes what
// was queued durable before its own events (durability is a prefix).
type stagingRecorder struct {
	t               *testing.T
	mu              sync.Mutex
	durable, queued []runlog.Event
	unsettled       int // Stages since the last Settle
	stages          int
}

func (r *stagingRecorder) Record(ctx context.Context, evs ...runlog.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.durable = append(append(r.durable, r.queued...), evs...)
	r.queued = nil
	return nil
}

func (r *stagingRecorder) Stage(ctx context.Context, evs ...runlog.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queued = append(r.queued, evs...)
	r.unsettled++
	r.stages++
	return nil
}

func (r *stagingRecorder) Settle() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unsettled == 0 {
		r.t.Error("Settle without a Stage")
	}
	r.durable = append(r.durable, r.queued...)
	r.queued, r.unsettled = nil, 0
	return nil
}

func (r *stagingRecorder) durableCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return count[runlog.CallFinished](r.durable)
}

// checkedEnv calls before ahead of every step.
type checkedEnv struct {
	env.Environment
	before func()
}

func (e checkedEnv) Step(ctx context.Context, action string) (env.StepResult, error) {
	e.before()
	return e.Environment.Step(ctx, action)
}

// inProcessEnv is a checkedEnv that declares itself env.InProcess.
type inProcessEnv struct{ checkedEnv }

func (inProcessEnv) InProcess() {}

// countedGen counts calls and fails the one numbered failAt (1-based; 0:
// none).
type countedGen struct {
	inner  gen.Generator
	made   *atomic.Int32
	failAt int32
}

func (g countedGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	if g.made.Add(1) == g.failAt {
		return nil, errors.New("generation server gone")
	}
	return g.inner.Generate(ctx, reqs)
}

// stagedRun runs the ledger with the oracle over rec. local makes the
// environment env.InProcess; before each step it checks how many of the
// calls made so far are durable: not the one the step acts on
// (in-process), or all of them.
func stagedRun(t *testing.T, rec rollout.Recorder, local bool, failAt int32) (rollout.Result, error) {
	return stagedRunSeal(t, rec, local, failAt, false)
}

// stagedRunSeal is stagedRun with Spec.StageSeal set to stageSeal.
func stagedRunSeal(t *testing.T, rec rollout.Recorder, local bool, failAt int32, stageSeal bool) (rollout.Result, error) {
	var made atomic.Int32
	durable := func() int { return rec.(*stagingRecorder).durableCalls() }
	if _, ok := rec.(*stagingRecorder); !ok {
		durable = nil
	}
	spec := ledgerSpec(t, countedGen{scripted.LedgerOracle(""), &made, failAt}, rec, recency)
	spec.StageSeal = stageSeal
	spec.NewEnv = func(context.Context) (env.Environment, error) {
		e, err := reg.New("ledger", nil)
		c := checkedEnv{e, func() {
			if durable == nil {
				return
			}
			n, got := int(made.Load()), durable()
			if local && got >= n {
				t.Errorf("in-process environment step with all %d calls made durable: the call was not staged", n)
			}
			if !local && got != n {
				t.Errorf("environment step with %d of the %d calls made durable", got, n)
			}
		}}
		if local {
			return inProcessEnv{c}, err
		}
		return c, err
	}
	return rollout.Run(context.Background(), spec, nil)
}

// TestStagedCalls: an in-process environment steps on a staged call, any
// other on a durable one; the staged run logs exactly the events, in the
// same order, as a run whose recorder cannot stage, and Run returns with
// every staged call settled.
func TestStagedCalls(t *testing.T) {
	plain := &batchRecorder{}
	want, err := stagedRun(t, plain, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wantEvs []runlog.Event
	for _, b := range plain.batches {
		wantEvs = append(wantEvs, b...)
	}
	for _, local := range []bool{true, false} {
		rec := &stagingRecorder{t: t}
		res, err := stagedRun(t, rec, local, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != want.Outcome || res.Calls != want.Calls || res.Calls < 4 {
			t.Fatalf("in-process %v: result %+v, the unstaged run %+v", local, res, want)
		}
		calls := count[runlog.CallFinished](rec.durable)
		switch {
		case rec.unsettled != 0:
			t.Fatalf("in-process %v: Run returned with %d staged calls unsettled", local, rec.unsettled)
		case local && rec.stages != calls:
			t.Fatalf("in-process: %d of %d calls staged", rec.stages, calls)
		case !local && rec.stages != 0:
			t.Fatalf("an environment that is not InProcess got %d staged calls", rec.stages)
		}
		if !reflect.DeepEqual(rec.durable, wantEvs) {
			t.Fatalf("in-process %v: the staged run logged %d events, the unstaged one %d, or in another order", local, len(rec.durable), len(wantEvs))
		}
	}
}

// TestStagedCallSettledOnFailure: a call that fails after staged ones
// ends the attempt with its failure logged after every staged call, and
// no staged call unsettled.
func TestStagedCallSettledOnFailure(t *testing.T) {
	rec := &stagingRecorder{t: t}
	_, err := stagedRun(t, rec, true, 4)
	var f *failure.Failure
	if !errors.As(err, &f) {
		t.Fatalf("Run: %v, want a *failure.Failure", err)
	}
	if rec.unsettled != 0 || rec.stages != 3 {
		t.Fatalf("after the failed call: %d stages, %d unsettled; want 3 staged calls, all settled", rec.stages, rec.unsettled)
	}
	last := rec.durable[len(rec.durable)-1]
	if _, ok := last.(runlog.RolloutFailed); !ok || count[runlog.CallFinished](rec.durable) != 3 {
		t.Fatalf("log ends with %T after %d calls, want RolloutFailed after 3", last, count[runlog.CallFinished](rec.durable))
	}
}

// TestStagedSeal: with Spec.StageSeal an in-process rollout returns with
// its seal staged and not durable, for the caller to settle, and then the
// log holds the same events as an unstaged run's; with any other
// environment, or when the attempt fails, Run still returns with
// everything settled.
func TestStagedSeal(t *testing.T) {
	plain := &batchRecorder{}
	if _, err := stagedRun(t, plain, true, 0); err != nil {
		t.Fatal(err)
	}
	var want []runlog.Event
	for _, b := range plain.batches {
		want = append(want, b...)
	}
	rec := &stagingRecorder{t: t}
	if _, err := stagedRunSeal(t, rec, true, 0, true); err != nil {
		t.Fatal(err)
	}
	if rec.unsettled == 0 || count[runlog.RolloutSealed](rec.durable) != 0 {
		t.Fatalf("Run returned with %d stages unsettled and %d durable seals; want the seal staged only",
			rec.unsettled, count[runlog.RolloutSealed](rec.durable))
	}
	if _, ok := rec.queued[len(rec.queued)-1].(runlog.RolloutSealed); !ok {
		t.Fatalf("the last staged event is %T, not the seal", rec.queued[len(rec.queued)-1])
	}
	if err := rec.Settle(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.durable, want) {
		t.Fatalf("settled after Run: %d events, the unstaged run %d, or in another order", len(rec.durable), len(want))
	}

	remote := &stagingRecorder{t: t}
	if _, err := stagedRunSeal(t, remote, false, 0, true); err != nil {
		t.Fatal(err)
	}
	failed := &stagingRecorder{t: t}
	if _, err := stagedRunSeal(t, failed, true, 3, true); err == nil {
		t.Fatal("the third call failed, Run did not")
	}
	for name, r := range map[string]*stagingRecorder{"not InProcess": remote, "failed attempt": failed} {
		if r.unsettled != 0 || len(r.queued) != 0 {
			t.Fatalf("%s: Run returned with %d stages unsettled", name, r.unsettled)
		}
	}
	if count[runlog.RolloutSealed](remote.durable) != 1 {
		t.Fatal("not InProcess: the seal is not durable when Run returns")
	}
}
