package rollout_test

// Tests of the held environment step and compaction (rollout.go, hold):
// they join the append of the call or seal that follows them, and a step
// is durable before the next environment step and with the next call's
// record.

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/longhaul-rl/longhaul/compaction"
	"github.com/longhaul-rl/longhaul/env"
	"github.com/longhaul-rl/longhaul/gen"
	"github.com/longhaul-rl/longhaul/rollout"
	"github.com/longhaul-rl/longhaul/rollout/scripted"
	"github.com/longhaul-rl/longhaul/runlog"
)

// batchRecorder keeps each Record call's events as one batch and, like
// runlog.Log.Append, refuses a call whose context is already done. With
// taken set it checks that an append holding a call's record also makes
// every environment step taken so far durable (a call never is in the log
// without the step its prompt read).
type batchRecorder struct {
	mu      sync.Mutex
	batches [][]runlog.Event
	t       *testing.T
	taken   *int
}

func (r *batchRecorder) Record(ctx context.Context, evs ...runlog.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, append([]runlog.Event(nil), evs...))
	if r.taken != nil && count[runlog.CallFinished](evs) > 0 {
		n := 0
		for _, b := range r.batches {
			n += count[runlog.EnvStep](b)
		}
		if n != *r.taken {
			r.t.Errorf("a call recorded with %d of the %d environment steps taken", n, *r.taken)
		}
	}
	return nil
}

// steps is the number of EnvStep events recorded.
func (r *batchRecorder) steps() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.batches {
		n += count[runlog.EnvStep](b)
	}
	return n
}

// watchedEnv counts the ledger's steps and, before each, checks that
// every earlier step is recorded; cancel, when set, is called inside the
// step numbered cancelAt (the step itself succeeds).
type watchedEnv struct {
	env.Environment
	t        *testing.T
	rec      *batchRecorder
	taken    *int
	cancelAt int
	cancel   context.CancelFunc
}

func (e watchedEnv) Step(ctx context.Context, action string) (env.StepResult, error) {
	if got := e.rec.steps(); got != *e.taken {
		e.t.Errorf("environment step %d taken with %d of the %d earlier steps recorded", *e.taken, got, *e.taken)
	}
	res, err := e.Environment.Step(ctx, action)
	if *e.taken == e.cancelAt && e.cancel != nil {
		e.cancel()
	}
	*e.taken++
	return res, err
}

func (e watchedEnv) Snapshot(ctx context.Context) ([]byte, error) {
	return e.Environment.(env.Snapshotter).Snapshot(ctx)
}

func (e watchedEnv) Restore(ctx context.Context, state []byte) error {
	return e.Environment.(env.Snapshotter).Restore(ctx, state)
}

// watchedGen checks, before every model call, that every environment
// step taken but the last is recorded (the last goes out with the call's
// record).
type watchedGen struct {
	inner gen.Generator
	t     *testing.T
	rec   *batchRecorder
	taken *int
}

func (g watchedGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	if got := g.rec.steps(); got < *g.taken-1 {
		g.t.Errorf("model call made with %d of the %d environment steps taken recorded", got, *g.taken)
	}
	return g.inner.Generate(ctx, reqs)
}

func watchedSpec(t *testing.T, cc compaction.Config, rec *batchRecorder, taken *int) rollout.Spec {
	rec.t, rec.taken = t, taken
	s := ledgerSpec(t, watchedGen{scripted.LedgerOracle(compaction.DefaultSummaryRequest), t, rec, taken}, rec, cc)
	s.NewEnv = func(context.Context) (env.Environment, error) {
		e, err := reg.New("ledger", nil)
		return watchedEnv{Environment: e, t: t, rec: rec, taken: taken, cancelAt: -1}, err
	}
	return s
}

// TestHeldStepJoinsTheNextAppend: environment steps and compactions are
// held and go out with the record that follows them (the next call's or
// the seal): every append is held events (steps, compactions) ended by one
// call or seal, or that one event alone; every step and every compaction
// is in such an append; no environment step runs before every earlier
// step is recorded (watchedEnv), no call is recorded without the steps
// before it (batchRecorder), and no model call runs with more than the
// last step unrecorded (watchedGen). With recency an append holds a step,
// its compaction and the next call; with summarize the summary call joins
// the step, and its compaction joins the call after it.
func TestHeldStepJoinsTheNextAppend(t *testing.T) {
	for _, tc := range []struct {
		name string
		cc   compaction.Config
	}{{"recency", recency}, {"summarize", summarizeCC}} {
		t.Run(tc.name, func(t *testing.T) {
			rec, taken := &batchRecorder{}, 0
			res, err := rollout.Run(context.Background(), watchedSpec(t, tc.cc, rec, &taken), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != runlog.OutcomeCompleted || res.Compactions == 0 {
				t.Fatalf("want a completed rollout with compactions: %+v", res)
			}
			steps, comps, events := 0, 0, 0
			for i, b := range rec.batches {
				events += len(b)
				last := b[len(b)-1]
				if !isKind[runlog.CallFinished](last) && !isKind[runlog.RolloutSealed](last) && !(len(b) == 1 && isKind[runlog.AttemptStarted](last)) {
					t.Fatalf("append %d ends with %T: %s", i, last, kinds(b))
				}
				for _, ev := range b[:len(b)-1] {
					switch ev.(type) {
					case runlog.EnvStep:
						steps++
					case runlog.Compaction:
						comps++
					default:
						t.Fatalf("append %d holds %s", i, kinds(b))
					}
				}
			}
			if steps != res.Turns || comps != res.Compactions {
				t.Fatalf("%d steps and %d compactions held into a later record, want %d and %d", steps, comps, res.Turns, res.Compactions)
			}
			if taken != res.Turns || rec.steps() != taken {
				t.Fatalf("%d steps taken, %d recorded, %d turns", taken, rec.steps(), res.Turns)
			}
			if want := res.Calls + res.Turns + res.Compactions + 1; events != want {
				t.Fatalf("%d events recorded, want %d", events, want)
			}
		})
	}
}

// TestHeldStepLoggedWhenCancelled: an attempt cancelled while an
// environment step runs still logs that step (it was taken), and the
// compaction declared after it if one was, whatever the loop does next: the
// next call's joint append is refused and the held events go alone. Nothing
// after them is logged, and Run returns the context's error.
func TestHeldStepLoggedWhenCancelled(t *testing.T) {
	// The oracle's rollout with recency: find a step followed by a
	// compaction and one followed by a call.
	rec, taken := &batchRecorder{}, 0
	if _, err := rollout.Run(context.Background(), watchedSpec(t, recency, rec, &taken), nil); err != nil {
		t.Fatal(err)
	}
	beforeCompaction, beforeCall, step := -1, -1, 0
	for _, b := range rec.batches {
		if !isKind[runlog.EnvStep](b[0]) {
			continue
		}
		if len(b) == 3 && isKind[runlog.Compaction](b[1]) && beforeCompaction < 0 {
			beforeCompaction = step
		} else if len(b) == 2 && isKind[runlog.CallFinished](b[1]) && beforeCall < 0 {
			beforeCall = step
		}
		step++
	}
	if beforeCompaction < 0 || beforeCall < 0 {
		t.Fatalf("no step before a compaction (%d) or before a call (%d)", beforeCompaction, beforeCall)
	}
	for _, tc := range []struct {
		at   int
		held int // events the cancelled append held: the step, and its compaction
	}{{beforeCompaction, 2}, {beforeCall, 1}} {
		t.Run(fmt.Sprint("step", tc.at), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec, taken := &batchRecorder{}, 0
			s := watchedSpec(t, recency, rec, &taken)
			s.NewEnv = func(context.Context) (env.Environment, error) {
				e, err := reg.New("ledger", nil)
				return watchedEnv{Environment: e, t: t, rec: rec, taken: &taken, cancelAt: tc.at, cancel: cancel}, err
			}
			s.Generator = scripted.LedgerOracle("") // the cancelled call must not be checked
			_, err := rollout.Run(ctx, s, nil)
			if err != context.Canceled {
				t.Fatalf("Run: %v, want context.Canceled", err)
			}
			last := rec.batches[len(rec.batches)-1]
			if rec.steps() != tc.at+1 || len(last) != tc.held || !isKind[runlog.EnvStep](last[0]) ||
				(tc.held == 2 && !isKind[runlog.Compaction](last[1])) {
				t.Fatalf("after a cancel in step %d: %d steps recorded, last append %s", tc.at, rec.steps(), kinds(last))
			}
		})
	}
}

// cancellingGen cancels the attempt's context in its call number at,
// after answering it: the generator was done when the attempt was
// cancelled, so the loop goes on to record the call.
type cancellingGen struct {
	inner  gen.Generator
	calls  *int
	at     int
	cancel context.CancelFunc
}

func (g cancellingGen) Generate(ctx context.Context, reqs []gen.Request) ([]gen.Result, error) {
	res, err := g.inner.Generate(ctx, reqs)
	if *g.calls == g.at {
		g.cancel() // after the answer: the loop goes on to record it
	}
	*g.calls++
	return res, err
}

// TestHeldStepLoggedWhenCancelledInCall: an attempt cancelled while the
// model call after a step runs still logs that step: the call's joint
// append is refused for the cancel, and the held step is appended alone
// (record's retry); the call itself is not logged.
func TestHeldStepLoggedWhenCancelledInCall(t *testing.T) {
	for _, at := range []int{1, 2, 5} { // calls after the first, second and fifth step
		t.Run(fmt.Sprint("call", at), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec, taken, calls := &batchRecorder{}, 0, 0
			s := watchedSpec(t, recency, rec, &taken)
			s.Generator = cancellingGen{inner: scripted.LedgerOracle(""), calls: &calls, at: at, cancel: cancel}
			if _, err := rollout.Run(ctx, s, nil); err == nil {
				t.Fatal("Run: no error after the cancel")
			}
			last := rec.batches[len(rec.batches)-1]
			if rec.steps() != taken || taken == 0 || count[runlog.CallFinished](last) != 0 || !isKind[runlog.EnvStep](last[0]) {
				t.Fatalf("cancelled in call %d: %d steps taken, %d recorded, last append %s", at, taken, rec.steps(), kinds(last))
			}
		})
	}
}

func isKind[T runlog.Event](ev runlog.Event) bool {
	_, ok := ev.(T)
	return ok
}

func kinds(evs []runlog.Event) string {
	s := ""
	for _, ev := range evs {
		s += fmt.Sprintf("%T ", ev)
	}
	return s
}
